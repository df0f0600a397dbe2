"""The accelerator (PrivateUse1) path, recorded for real on the test backend of tests/neuron_backend.py.

The backend runs every operator on the CPU and reports it through a Kineto plugin in one of three
shapes (see native_fixture/neuron_backend.cpp); it keeps its own record of kernel time, which the
device busy figure must equal. Each test records a small training loop with `nx.profile` (three
steps: forward, backward; 7 device operators a step after the first) and checks what the run links:

    full         kernel -> neuronLaunchKernel (correlation id + ac2g flow) -> operator -> step, statement
    kernel_only  kernel (only the operator's External id)  -> operator -> step, statement; no launch
    driver       neuron::<op> (privateuse1_runtime, on the host) + nrt_execute (privateuse1_driver)

The same run exported as a Kineto JSON (on_trace_ready passes through nx.profile) and imported must
link the same.

The backend is compiled once per source and torch version into the native build folder (about a
minute the first time); every recording runs in a child process (see _RECORDER). Skipped only where
there is no C++ compiler.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuron_explorer import open_run
from neuron_explorer.collectors.kineto_names import C10_PRIVATEUSE1

from . import neuron_backend

pytestmark = [pytest.mark.slow,  # tier: compiles a torch C++ extension and records real runs
              pytest.mark.skipif(neuron_backend.compiler() is None, reason="no C++ compiler to build the PrivateUse1 test backend")]


# Each recording runs in its own process: the backend must be registered before the process first runs
# autograd (torch sizes the autograd engine's device queues then), and renaming PrivateUse1 would change
# the default activities of every later test in this process.
_RECORDER = """\
import json, sys
from pathlib import Path
import torch
from tests import neuron_backend
import neuron_explorer as nx

shape, clock_us, out = sys.argv[1], sys.argv[2] == "us", Path(sys.argv[3])
backend = neuron_backend.load()
backend.set_mode(shape, clock_us)
model = torch.nn.Linear(4, 3).to("neuron")
x = torch.randn(8, 4).to("neuron")
trace = out / f"{shape}.json"
backend.reset_stats()
before = backend.stats()
with nx.profile(out / "run", on_trace_ready=lambda p: p.export_chrome_trace(str(trace))) as prof:
    for _ in range(3):
        loss = model(x).relu().sum()  # the statement device work of the forward and backward links to
        loss.backward()
        prof.step()
after = backend.stats()
stats = {"kernels": after["kernels"], "kernel_ns": after["kernel_ns"], "allocated": after["allocated"] - before["allocated"]}
print(json.dumps({"run_dir": str(prof.run_dir), "trace": str(trace), "stats": stats, "options": prof.recording.options}))
"""


def _env() -> dict:
    import os

    from .conftest import REPO, workload_env

    return {**workload_env(), "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}


@pytest.fixture(scope="module")
def backend():
    """Builds the backend once (in a child process, like every use of it here)."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-c", "from tests import neuron_backend; neuron_backend.load()"], capture_output=True,
                         text=True, timeout=900, env=_env())
    assert res.returncode == 0, res.stderr[-4000:]


def _record(backend, tmp_path: Path, shape: str, clock_us: bool = False) -> tuple[Path, Path, dict, dict]:
    """(run dir, exported trace, the backend's own record over the profiled region, the manifest options)."""
    import subprocess
    import sys

    script = tmp_path / "record_neuron.py"
    script.write_text(_RECORDER)
    res = subprocess.run([sys.executable, str(script), shape, "us" if clock_us else "ns", str(tmp_path)], capture_output=True,
                         text=True, timeout=600, env=_env(), cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-4000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    return Path(out["run_dir"]), Path(out["trace"]), out["stats"], out["options"]


def _links(run_dir: Path, kind: str) -> tuple[int, int, int, int, int]:
    """(events of the kind, with a launch, an operator, a step, a statement)."""
    with open_run(run_dir) as run:
        return run.sql("SELECT count(*), count(launch_id), count(op_id), count(step), count(source_frame_id) FROM events WHERE kind = ?",
                       [kind]).fetchone()


def _imported(trace: Path, tmp_path: Path) -> Path:
    from neuron_explorer.collectors.chrome_trace import import_traces

    return import_traces(trace, tmp_path / "imported").run_dir


def _summary(run_dir: Path) -> dict:
    from neuron_explorer.analyzers import analyze

    return analyze(run_dir).summary["ranks"][0]


def test_full_shape_links_every_kernel_live_and_imported(backend, tmp_path):
    run_dir, trace, stats, options = _record(backend, tmp_path, "full")
    n = stats["kernels"]
    assert n >= 21  # 7 device operators a step, 3 steps (plus first-step extras)
    assert options["activities"] == ["CPU", "neuron"]
    assert _links(run_dir, "kernel") == (n, n, n, n, n)
    # imported: the launch by correlation id and flow, the operator and step; statements need the live frames
    k, launch, op, step, _ = _links(_imported(trace, tmp_path), "kernel")
    assert (k, launch, op, step) == (n, n, n, n)
    # the device busy figure is the backend's own kernel time, to the nanosecond
    (device,) = _summary(run_dir)["devices"]
    assert (device["device"], device["busy_ns"], device["kernel_ns"]) == (0, stats["kernel_ns"], stats["kernel_ns"])


def test_kernels_with_only_an_external_id_join_their_operator(backend, tmp_path):
    run_dir, trace, stats, _ = _record(backend, tmp_path, "kernel_only")
    n = stats["kernels"]
    events = json.loads(trace.read_text())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert len(kernels) == n and all("correlation" not in e["args"] and "External id" in e["args"] for e in kernels)
    assert _links(run_dir, "kernel") == (n, 0, n, n, n)
    assert _links(_imported(trace, tmp_path), "kernel")[:4] == (n, 0, n, n)
    with open_run(run_dir) as run:
        # each kernel's operator is the one whose External id it carries, and no "no launch" warning remains
        wrong = run.sql("SELECT count(*) FROM events k JOIN events o ON o.event_id = k.op_id "
                        "WHERE k.kind = 'kernel' AND o.external_id <> k.external_id").fetchone()[0]
        quality = run.manifest["ranks"][0]["data_quality"]
    assert wrong == 0
    assert (quality["device_linked_by_external_id"], quality["device_events_without_launch"]) == (n, 0)
    assert _summary(run_dir)["devices"][0]["busy_ns"] == stats["kernel_ns"]


def test_backward_kernels_go_to_the_forward_statement(backend, tmp_path):
    run_dir, _, _, _ = _record(backend, tmp_path, "full")
    with open_run(run_dir) as run:
        rows = run.sql("SELECT e.pass, f.file, f.line, count(*) FROM events e JOIN frames f ON f.frame_id = e.source_frame_id "
                       "WHERE e.kind = 'kernel' GROUP BY ALL ORDER BY 1, 2, 3").fetchall()
    line = next(i for i, t in enumerate(_RECORDER.splitlines(), 1) if "loss = model(x).relu().sum()" in t)
    script = str(tmp_path / "record_neuron.py")
    assert {(p, f, ln) for p, f, ln, _ in rows} >= {("forward", script, line), ("backward", script, line)}


def test_device_memory_lands_in_the_memory_table_as_the_device(backend, tmp_path):
    run_dir, _, stats, _ = _record(backend, tmp_path, "full")
    with open_run(run_dir) as run:
        rows = run.sql("SELECT device_type, device, count(*), sum(bytes) FROM memory WHERE device_type = ? GROUP BY ALL",
                       [C10_PRIVATEUSE1]).fetchall()
    assert len(rows) == 1
    device_type, device, count, net = rows[0]
    assert (device_type, device) == (C10_PRIVATEUSE1, 0) and count > 0
    assert net == stats["allocated"]  # what the allocator holds at the end less at the start


def test_critical_path_of_a_synchronous_device_is_the_host(backend, tmp_path):
    """The backend's kernels run inside their host operator, so every step is host-bound: the path
    charges each step's whole duration to host work (and launch overhead), none to the device."""
    from neuron_explorer.analyzers.critical_path import rank_path

    run_dir, _, _, _ = _record(backend, tmp_path, "full")
    with open_run(run_dir) as run:
        steps = dict(run.sql("SELECT step, dur_ns FROM steps").fetchall())
        rows = rank_path(run, 0)
    charged: dict[int, int] = {}
    for r in rows:
        charged[r["step"]] = charged.get(r["step"], 0) + r["charged_ns"]
    assert charged == steps
    assert {r["category"] for r in rows} <= {"host_compute", "launch_overhead"}


def test_a_plugin_clock_in_microseconds_is_scaled_live(backend, tmp_path):
    """The plugin's events in µs: the live run scales them back (to µs precision) and says so; the
    exported JSON has lost them (torch clamps times before its base), so its import is refused."""
    from neuron_explorer.errors import InputError

    run_dir, trace, stats, _ = _record(backend, tmp_path, "full", clock_us=True)
    n = stats["kernels"]
    assert _links(run_dir, "kernel") == (n, n, n, n, n)
    with open_run(run_dir) as run:
        warnings = run.manifest["warnings"]
        before_launch = run.manifest["ranks"][0]["data_quality"]["device_before_launch"]
    assert sum("timestamps were in µs, not ns" in w for w in warnings) == 2  # device events, runtime calls
    assert before_launch == 0
    busy = _summary(run_dir)["devices"][0]["busy_ns"]
    assert abs(busy - stats["kernel_ns"]) <= 1000 * n  # each kernel's start and end rounded to the µs
    with pytest.raises(InputError, match="baseTimeNanoseconds"):
        _imported(trace, tmp_path)


def test_driver_shape_counts_device_interaction_as_device_work(backend, tmp_path):
    """TorchNeuron's shape: nrt_execute (privateuse1_driver) on device 0 / stream 7 is device work,
    live and imported alike; live it also finds its dispatch call by correlation id."""
    run_dir, trace, stats, _ = _record(backend, tmp_path, "driver")
    n = stats["kernels"]
    assert _links(run_dir, "kernel") == (n, n, n, n, n)
    with open_run(run_dir) as run:
        assert run.sql("SELECT DISTINCT name, device, stream FROM events WHERE kind = 'kernel'").fetchall() == [("nrt_execute", 0, 7)]
        # each dispatch call (neuron::<op>, privateuse1_runtime) runs inside its operator
        assert run.sql("SELECT count(*), count(op_id) FROM events WHERE kind = 'runtime'").fetchone() == (n, n)
    (device,) = _summary(run_dir)["devices"]
    assert device["busy_ns"] == stats["kernel_ns"]
    # imported: the JSON has no correlation on the dispatch calls; the External id joins the operator
    imported = _imported(trace, tmp_path)
    assert _links(imported, "kernel")[:4] == (n, 0, n, n)
    assert abs(_summary(imported)["devices"][0]["busy_ns"] - stats["kernel_ns"]) <= n  # (the JSON's µs keep 3 decimals)


_SCRIPT = """\
import torch
from tests import neuron_backend
neuron_backend.load().set_mode("full", False)
model = torch.nn.Linear(4, 3).to("neuron")
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 4).to("neuron")
for _ in range(4):
    loss = model(x).relu().sum()
    loss.backward()
    opt.step()
    opt.zero_grad()
"""


def _record_cli(backend, tmp_path: Path, *options: str):
    """`record` of a script that registers the backend itself, as a user's script imports its vendor's package."""
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(_SCRIPT)
    res = subprocess.run([sys.executable, "-m", "neuron_explorer", "record", "-o", str(tmp_path / "run"), *options, str(script)],
                         capture_output=True, text=True, timeout=600, env=_env(), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    return tmp_path / "run", res.stderr


@pytest.mark.parametrize("activities", [(), ("--activities", "cpu,neuron")])
def test_record_sees_a_backend_the_script_registers_when_a_cycle_starts(backend, tmp_path, activities):
    run_dir, _ = _record_cli(backend, tmp_path, "--wait", "1", "--active", "2", *activities)
    with open_run(run_dir) as run:
        assert run.manifest["profiler"]["activities"] == ["CPU", "neuron"]
        assert [d["type"] for d in run.manifest["devices"]] == ["neuron"]
        steps = run.sql("SELECT count(*) FROM steps").fetchone()[0]
    k = _links(run_dir, "kernel")
    assert steps >= 2 and k[0] >= 2 * 7 and k == (k[0],) * 5  # every kernel of the active steps, linked through to its statement


def test_record_says_when_the_backend_came_after_profiling_started(backend, tmp_path):
    run_dir, stderr = _record_cli(backend, tmp_path)
    line = "the PrivateUse1 backend 'neuron' was registered after profiling started"
    assert line in stderr
    with open_run(run_dir) as run:
        assert any(line in w for w in run.manifest["warnings"])
        assert run.manifest["profiler"]["activities"] == ["CPU"]
