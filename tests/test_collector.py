"""The live collector, `neuron_explorer.profile()`, on small CPU training loops.

Scripts are written to a temporary directory and run as a user runs them, so that the line
numbers a run should link to are known: each line of interest carries a `# @name` marker.
"""

from __future__ import annotations

import json
import runpy
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import neuron_explorer as nx
from neuron_explorer import open_run
from neuron_explorer.errors import InputError, RunExistsError, UsageError

pytestmark = pytest.mark.slow  # tier: records real torch runs

SEQUENTIAL = """
import torch
from torch import nn
import neuron_explorer as nx

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
x = torch.randn(4, 8)
with nx.profile(RUN_DIR, **PROFILE_KWARGS) as prof:
    for i in range(STEPS):
        y = model(x)  # @model
        loss = y.pow(2).mean()  # @loss
        loss.backward()  # @backward
        prof.step()
"""

CUSTOM_MODULE = """
import torch
from torch import nn
import neuron_explorer as nx


class TinyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        h = self.encoder(x)  # @encoder
        return self.head(h)  # @head


model = TinyNet()
x = torch.randn(4, 8)
with nx.profile(RUN_DIR, **PROFILE_KWARGS) as prof:
    y = model(x)  # @model
    loss = y.pow(2).mean()  # @loss
"""


def lines_of(source: str) -> dict[str, int]:
    return {line.split("# @")[1].strip(): i for i, line in enumerate(source.splitlines(), 1) if "# @" in line}


def run_script(tmp_path: Path, source: str, run_dir: Path, steps: int = 3, **profile_kwargs) -> tuple[Path, dict[str, int]]:
    script = tmp_path / "train_script.py"
    script.write_text(source)
    runpy.run_path(str(script), init_globals={"RUN_DIR": str(run_dir), "PROFILE_KWARGS": profile_kwargs, "STEPS": steps},
                   run_name="__main__")
    return script, lines_of(source)


@pytest.fixture(scope="module")
def seq_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("seq")
    before = time.time_ns()
    script, lines = run_script(tmp, SEQUENTIAL, tmp / "run", steps=3)
    after = time.time_ns()
    return tmp / "run", script, lines, before, after


def op_lines(run_dir: Path, names: tuple[str, ...]) -> dict[str, set]:
    with open_run(run_dir) as run:
        rows = run.sql(
            "SELECT e.name, f.file, f.line, f.is_user FROM events e JOIN frames f USING (frame_id) "
            "JOIN events t ON e.top_op_id = t.event_id "  # forward only: backward ops link to loss.backward()
            "WHERE e.kind = 'cpu_op' AND e.name IN (SELECT unnest(?)) AND t.name NOT LIKE 'autograd::engine%'",
            [list(names)]).fetchall()
    out: dict[str, set] = {}
    for name, file, line, is_user in rows:
        out.setdefault(name, set()).add((file, line, is_user))
    return out


def test_operators_link_to_the_calling_statement(seq_run):
    run_dir, script, lines, *_ = seq_run
    got = op_lines(run_dir, ("aten::linear", "aten::addmm", "aten::pow", "aten::mean"))
    f = str(script)
    assert got["aten::linear"] == {(f, lines["model"], True)}
    assert got["aten::addmm"] == {(f, lines["model"], True)}
    assert got["aten::pow"] == {(f, lines["loss"], True)}
    assert got["aten::mean"] == {(f, lines["loss"], True)}


def test_every_operator_has_a_frame_and_backward_links_to_its_line(seq_run):
    run_dir, script, lines, *_ = seq_run
    with open_run(run_dir) as run:
        no_frame = run.sql("SELECT count(*) FROM events WHERE kind = 'cpu_op' AND frame_id IS NULL").fetchone()[0]
        bwd = run.sql("SELECT DISTINCT f.line FROM events e JOIN frames f USING (frame_id) "
                      "WHERE e.kind = 'cpu_op' AND e.name LIKE 'autograd::engine::evaluate_function: AddmmBackward%'").fetchall()
        kinds = run.sql("SELECT DISTINCT line_kind FROM frames").fetchall()
    assert no_frame == 0
    assert bwd == [(lines["backward"],)]
    assert kinds == [("call",)]


def test_module_path_of_operators(seq_run):
    run_dir, *_ = seq_run
    with open_run(run_dir) as run:
        paths = dict(run.sql("SELECT name, list(DISTINCT module_path ORDER BY module_path) FROM events "
                             "WHERE kind = 'cpu_op' AND name IN ('aten::addmm', 'aten::relu', 'aten::pow') GROUP BY name").fetchall())
    assert paths["aten::addmm"] == ["Sequential_0.Linear_0", "Sequential_0.Linear_1"]
    assert paths["aten::relu"] == ["Sequential_0.ReLU_0"]
    assert paths["aten::pow"] == [None]  # outside any module


def test_steps_timestamps_and_categories(seq_run):
    run_dir, _, _, before, after = seq_run
    with open_run(run_dir) as run:
        steps = [r[0] for r in run.sql("SELECT step FROM steps ORDER BY step").fetchall()]
        lo, hi = run.sql("SELECT min(ts_ns), max(ts_ns + dur_ns) FROM events").fetchone()
        cats = dict(run.sql("SELECT category, any_value(kind) FROM events GROUP BY 1").fetchall())
        stepless = run.sql("SELECT count(*) FROM events WHERE kind = 'cpu_op' AND step IS NULL").fetchone()[0]
    # without a schedule, the time after the last step() until the block ends is one more step
    assert steps == [0, 1, 2, 3]
    assert before <= lo < hi <= after  # int64 ns on the Unix-epoch clock
    assert cats["cpu_op"] == "cpu_op" and cats["python_function"] == "python" and cats["user_annotation"] == "step"
    assert stepless == 0


def test_memory_rows_link_to_operators_and_lines(seq_run):
    run_dir, script, lines, *_ = seq_run
    with open_run(run_dir) as run:
        n, with_op, allocs = run.sql("SELECT count(*), count(op_id), count(*) FILTER (WHERE bytes > 0) FROM memory").fetchone()
        addmm_lines = run.sql("SELECT DISTINCT f.line FROM memory m JOIN events o ON m.op_id = o.event_id "
                              "JOIN frames f ON m.frame_id = f.frame_id WHERE o.name = 'aten::addmm'").fetchall()
    assert n > 0 and allocs > 0 and with_op > 0
    assert addmm_lines == [(lines["model"],)]


def test_manifest_describes_the_job(seq_run):
    run_dir, script, *_ = seq_run
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["source"] == "live"
    assert m["torch_version"] == torch.__version__
    assert m["host"] and m["started"] and m["command"][0] == str(script)
    assert m["profiler"]["activities"][0] == "CPU" and m["profiler"]["with_stack"] is True
    assert m["ranks"][0]["rank"] == 0 and m["ranks"][0]["steps"][0]["step"] == 0
    info = subprocess.run([sys.executable, "-m", "neuron_explorer", "info", str(run_dir), "--json"], capture_output=True, text=True)
    assert info.returncode == 0, info.stderr
    assert json.loads(info.stdout)["ranks"][0]["steps"] == 4


def test_custom_module_links_to_forward_lines_and_the_call_chain(tmp_path):
    _, lines = run_script(tmp_path, CUSTOM_MODULE, tmp_path / "run")
    with open_run(tmp_path / "run") as run:
        rows = run.sql(
            "SELECT e.module_path, f.line, p.line FROM events e JOIN frames f USING (frame_id) "
            "JOIN frames p ON f.parent_frame_id = p.frame_id WHERE e.name = 'aten::addmm' ORDER BY e.ts_ns").fetchall()
    # innermost user line: the line in forward(); its caller: the statement y = model(x)
    assert rows == [("TinyNet_0.Sequential_0.Linear_0", lines["encoder"], lines["model"]),
                    ("TinyNet_0.Linear_1", lines["head"], lines["model"])]  # the profiler numbers modules per class


def test_schedule_records_every_active_cycle(tmp_path):
    run_script(tmp_path, SEQUENTIAL, tmp_path / "run", steps=10, schedule=nx.schedule(wait=1, warmup=1, active=2, repeat=2))
    with open_run(tmp_path / "run") as run:
        steps = [r[0] for r in run.sql("SELECT step FROM steps ORDER BY step").fetchall()]
        m = run.manifest
    assert steps == [2, 3, 6, 7]
    assert {k: m["profiler"]["schedule"][k] for k in ("wait", "warmup", "active", "repeat")} == {"wait": 1, "warmup": 1, "active": 2, "repeat": 2}
    assert m["ranks"][0]["cycles"] == 2


def test_profile_keeps_torch_profiler_semantics(tmp_path):
    x = torch.randn(16, 16)
    with nx.profile(tmp_path / "run") as prof:
        torch.mm(x, x)
    assert isinstance(prof, torch.profiler.profile)
    assert "aten::mm" in {e.key for e in prof.key_averages()}
    assert prof.run_dir == tmp_path / "run"


def test_decorator_records_the_call(tmp_path):
    x = torch.ones(4, 4)

    @nx.profile(tmp_path / "run")
    def work(a):
        return a.mm(a)

    assert work(x)[0, 0] == 4.0
    with open_run(tmp_path / "run") as run:
        assert run.sql("SELECT count(*) FROM events WHERE name = 'aten::mm'").fetchone()[0] == 1


def test_trace_handler_on_a_users_own_profiler(tmp_path):
    x = torch.randn(8, 8)
    with torch.profiler.profile(schedule=torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=2),
                                on_trace_ready=nx.trace_handler(tmp_path / "run"), with_stack=True) as prof:
        for _ in range(5):
            torch.mm(x, x)
            prof.step()
    with open_run(tmp_path / "run") as run:
        steps = [r[0] for r in run.sql("SELECT step FROM steps ORDER BY step").fetchall()]
        mm = run.sql("SELECT count(*), count(frame_id) FROM events WHERE name = 'aten::mm'").fetchone()
    assert steps == [1, 3]
    assert mm == (2, 2)


def test_an_exception_still_writes_the_run_with_a_warning(tmp_path):
    x = torch.ones(4, 4)
    with pytest.raises(ZeroDivisionError):
        with nx.profile(tmp_path / "run"):
            x.mm(x)
            _ = 1 / 0
    with open_run(tmp_path / "run") as run:
        assert run.sql("SELECT count(*) FROM events WHERE name = 'aten::mm'").fetchone()[0] == 1
        assert any("raised ZeroDivisionError" in w for w in run.manifest["warnings"])


def test_no_stack_gives_operators_without_frames(tmp_path):
    x = torch.ones(4, 4)
    with nx.profile(tmp_path / "run", with_stack=False):
        x.mm(x)
    with open_run(tmp_path / "run") as run:
        assert run.sql("SELECT count(*), count(frame_id) FROM events WHERE name = 'aten::mm'").fetchone() == (1, 0)


# --- activities ---------------------------------------------------------------------------


def test_default_activities_are_the_cpu_and_available_accelerators():
    from neuron_explorer.collectors.torch_profiler import default_activities

    acts = default_activities()
    assert acts[0] == torch.profiler.ProfilerActivity.CPU
    assert (torch.profiler.ProfilerActivity.CUDA in acts) == torch.cuda.is_available()


def test_privateuse1_backend_is_profiled_under_its_name(monkeypatch):
    from neuron_explorer.collectors import torch_profiler as tpm

    class FakeBackend:
        @staticmethod
        def is_available():
            return True

    monkeypatch.setattr(torch._C, "_get_privateuse1_backend_name", lambda: "neuron")
    monkeypatch.setattr(torch, "neuron", FakeBackend, raising=False)
    acts = tpm.default_activities()
    assert torch.profiler.ProfilerActivity.PrivateUse1 in acts
    assert "neuron" in tpm.activity_names(acts)


# --- bad use, caught before any work -------------------------------------------------------


def test_existing_run_is_refused_unless_overwrite(tmp_path):
    with nx.profile(tmp_path / "run"):
        torch.ones(1)
    with pytest.raises(RunExistsError):
        nx.profile(tmp_path / "run")
    x = torch.ones(4, 4)
    with nx.profile(tmp_path / "run", overwrite=True):
        x.mm(x)
    with open_run(tmp_path / "run") as run:
        assert run.sql("SELECT count(*) FROM events WHERE name = 'aten::mm'").fetchone()[0] == 1


def test_unwritable_target_is_refused(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(InputError, match="is a file"):
        nx.profile(blocker / "run")


def test_profile_inside_another_profiler_is_refused_before_it_starts(tmp_path):
    inner = nx.profile(tmp_path / "run")
    with torch.profiler.profile():
        with pytest.raises(UsageError, match="another profiler is already active"):
            inner.start()
    assert not (tmp_path / "run").exists()


def test_cli_record_refuses_a_missing_script(tmp_path):
    r = subprocess.run([sys.executable, "-m", "neuron_explorer", "record", "-o", str(tmp_path / "run"), str(tmp_path / "nope.py")],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1] == f"error: {tmp_path / 'nope.py'}: no such script"
    assert "Traceback" not in r.stderr



def test_a_schedule_that_never_records_still_leaves_a_whole_run(tmp_path):
    x = torch.ones(4, 4)
    with nx.profile(tmp_path / "run", schedule=nx.schedule(wait=5, warmup=1, active=1)) as prof:
        x.mm(x)
        prof.step()
    with open_run(tmp_path / "run") as run:
        assert run.sql("SELECT count(*) FROM events").fetchone()[0] == 0
        assert any("no active profiler cycle" in w for w in run.manifest["warnings"])
        assert run.manifest["ranks"][0]["cycles"] == 0


def test_a_decorated_function_called_twice_keeps_both_calls(tmp_path):
    x = torch.ones(4, 4)

    @nx.profile(tmp_path / "run")
    def work(a):
        return a.mm(a)

    work(x)
    work(x)
    with open_run(tmp_path / "run") as run:
        assert run.sql("SELECT count(*) FROM events WHERE name = 'aten::mm'").fetchone()[0] == 2
        assert run.manifest["ranks"][0]["cycles"] == 2


def test_profile_starts_without_pyarrow(tmp_path):
    """nx.profile's start does not import pyarrow (the converter's, imported when the first cycle
    ends); torch's own Inductor import at the start stays before the recording, not inside it; the
    run it writes is whole (issue 38)."""
    code = f"""
import sys, torch
import neuron_explorer as nx
prof = nx.profile({str(tmp_path / 'run')!r}, activities=[torch.profiler.ProfilerActivity.CPU])
prof.start()
started = sorted(m for m in ("pyarrow",) if m in sys.modules)
y = torch.ones(8, 8) @ torch.ones(8, 8)
prof.step()
prof.stop()
print("STARTED", *started)
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    out = dict(line.split(" ", 1) if " " in line else (line, "") for line in res.stdout.splitlines() if line.startswith("STARTED"))
    assert out["STARTED"] == ""  # not loaded by the start
    with open_run(tmp_path / "run") as run:
        assert run.sql("SELECT count(*) FROM events WHERE kind = 'cpu_op' AND name = 'aten::mm'").fetchone()[0] == 1



def test_writing_a_run_leaves_pandas_unimported_and_pyarrow_still_takes_pandas_objects(tmp_path):
    """The first stop in a process does not import pandas (pyarrow would, at its first conversion:
    0.3-0.5 s; _live_convert.without_pandas), and a job that imports pandas afterwards gets pyarrow's
    pandas handling as before: a Series' NaN is a null, as pyarrow makes it for pandas objects only."""
    code = f"""
import sys, torch
import neuron_explorer as nx
with nx.profile({str(tmp_path / 'run')!r}, activities=[torch.profiler.ProfilerActivity.CPU]):
    y = torch.ones(8, 8) @ torch.ones(8, 8)
print("PANDAS_AFTER_WRITE", "pandas" in sys.modules)
import pyarrow as pa
print("NULLS_FROM_LIST", pa.array([1.0, float("nan")]).null_count)
import pandas as pd
print("NULLS_FROM_SERIES", pa.array(pd.Series([1.0, float("nan")])).null_count)
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    out = dict(line.split(" ", 1) for line in res.stdout.splitlines() if " " in line)
    assert out["PANDAS_AFTER_WRITE"] == "False"
    assert out["NULLS_FROM_LIST"] == "0" and out["NULLS_FROM_SERIES"] == "1"
    with open_run(tmp_path / "run") as run:
        assert run.sql("SELECT count(*) FROM events WHERE kind = 'cpu_op' AND name = 'aten::mm'").fetchone()[0] == 1
