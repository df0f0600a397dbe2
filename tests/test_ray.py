"""Per-rank import and analysis as Ray tasks (the optional `ray` extra): the same run and the same
report as on one machine; without Ray, `--ray` is a one-line error naming the extra.

The test extra installs Ray, so every test here runs (`--ray` without Ray is simulated by a `ray`
package that cannot be imported).
They reuse the hand-built 4-rank run of test_many_ranks.py.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from neuron_explorer.analyzers.engine import analyze
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.errors import InputError

from .conftest import cli, workload_env
from .test_many_ranks import RANKS, _copy_traces, _inodes, _plain, _tables, many  # noqa: F401  (many: the fixture)

pytestmark = pytest.mark.slow  # tier: starts a Ray cluster


def _have_ray() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def test_without_ray_the_option_is_one_line_naming_the_extra(monkeypatch):
    from neuron_explorer import ray_tasks

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails as when it is not installed
    with pytest.raises(InputError, match=r'pip install "neuron-explorer\[ray\]"'):
        ray_tasks.require_ray()


@pytest.mark.parametrize("address, said", [("local", "starting a local Ray cluster for --ray local (10-40 s; 40 s measured on 2 cores) ..."),
                                            ("10.0.0.1:6379", "connecting to the Ray cluster at 10.0.0.1:6379 ...")])
def test_says_so_on_stderr_before_ray_starts(monkeypatch, capsys, address, said):
    """ray.init prints nothing while it starts its processes (about 40 s for a local cluster on 2 cores)."""
    import types

    from neuron_explorer import ray_tasks

    calls = []
    fake = types.SimpleNamespace(is_initialized=lambda: False,
                                 init=lambda **kw: calls.append((capsys.readouterr().err, kw["address"])))
    monkeypatch.setitem(sys.modules, "ray", fake)
    assert ray_tasks.connect(address) is fake
    [(err_before_init, passed)] = calls
    assert passed == address and err_before_init == f"neuron-explorer: {said}\n"


def test_cli_without_ray_is_one_line(many, tmp_path):  # noqa: F811
    shim = tmp_path / "no-ray" / "ray"  # a `ray` that cannot be imported, as on a machine without the extra
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError(\"No module named 'ray'\")\n")
    env = {**workload_env(), "PYTHONPATH": os.pathsep.join([str(shim.parent), workload_env().get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "neuron_explorer", "import", str(many[0].parent / "traces"), "-o", str(tmp_path / "run"),
                        "--ray", "auto"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "neuron-explorer[ray]" in r.stderr
    assert not (tmp_path / "run").exists()


def _manifest(run_dir) -> dict:
    return {k: v for k, v in json.loads((run_dir / "manifest.json").read_text()).items() if k not in ("created", "command")}


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    # address="local": a new cluster for this test, whatever `ray start` left behind on the machine
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield "local"
    ray.shutdown()


def test_ray_tasks_write_the_same_run_and_report(many, local_ray, tmp_path):  # noqa: F811
    traces = many[0].parent / "traces"
    on_ray = import_traces(traces, tmp_path / "ray", ray=local_ray).run_dir
    here = import_traces(traces, tmp_path / "here", workers=1).run_dir
    assert _manifest(on_ray) == _manifest(here)
    a, b = _tables(on_ray), _tables(here)
    assert sorted(a) == sorted(b) and all(a[k].equals(b[k]) for k in a)
    got, want = _plain(analyze(on_ray, write=False, ray=local_ray)), _plain(analyze(on_ray, write=False, workers=1))
    assert got["summary"] == want["summary"] and got["findings"] == want["findings"]
    assert got["not_applicable"] == want["not_applicable"] and got["warnings"] == want["warnings"]
    assert {f["location"]["rank"] for f in got["findings"]} == set(RANKS)


def test_local_starts_a_cluster_of_its_own_whatever_the_environment_names(many, tmp_path):  # noqa: F811
    """`--ray local` is a new cluster in the importing process: not the one RAY_ADDRESS names (nor the
    last one `ray start` recorded), which may be gone; joining that one waited on it for good."""
    gone = f"127.0.0.1:{_free_port()}"
    env = {**workload_env(), "RAY_USAGE_STATS_ENABLED": "0", "RAY_ADDRESS": gone}
    r = subprocess.run([sys.executable, "-m", "neuron_explorer", "import", str(many[0].parent / "traces"), "-o", str(tmp_path / "run"),
                        "--ray", "local"], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert _manifest(tmp_path / "run") == _manifest(many[0]) | {"sources": _manifest(tmp_path / "run")["sources"]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_on_ray_a_dying_worker_and_a_failing_trace_are_reported_and_the_rest_kept(many, local_ray, tmp_path):  # noqa: F811
    from neuron_explorer.ray_tasks import map_settled

    def die_on_two(i):
        if i == 2:
            os._exit(9)  # the worker process dies, as when the kernel kills it
        return i * 10

    got = sorted(map_settled(local_ray, die_on_two, [(i,) for i in range(4)]), key=lambda g: g[0])
    assert [g[:2] for g in got] == [(0, True), (1, True), (2, False), (3, True)]
    assert [g[2] for g in got if g[1]] == [0, 10, 30] and "worker died" in got[2][2]

    traces = _copy_traces(many, tmp_path / "traces")
    good = (traces / "rank3.json").read_bytes()
    (traces / "rank3.json").write_bytes(good[: len(good) // 2])
    with pytest.raises(InputError, match=r"1 of 4 traces failed \(rank3.json: .*the 3 imported are kept"):
        import_traces(traces, tmp_path / "run", ray=local_ray)
    before = _inodes(tmp_path / ".run.kept")
    assert len(before) == 3 * 5
    (traces / "rank3.json").write_bytes(good)
    run_dir = import_traces(traces, tmp_path / "run", ray=local_ray).run_dir
    assert before <= _inodes(run_dir)  # the kept ranks moved in, only rank 3 imported
    a, b = _tables(run_dir), _tables(many[0])
    assert sorted(a) == sorted(b) and all(a[k].equals(b[k]) for k in a)

    # analyze --ray of a run whose rank 1 memory file is not Parquet: the run's check names the file
    # in one line when the run is opened, before any Ray task starts (run_check.py)
    (run_dir / "rank=1" / "memory.parquet").write_bytes(b"not parquet")
    with pytest.raises(InputError, match=r"rank=1/memory.parquet: not a readable Parquet file"):
        analyze(run_dir, write=False, ray=local_ray)


@pytest.mark.skipif(not _have_ray(), reason="ray is not installed (pip install -e '.[ray]')")
def test_cli_against_a_ray_head_started_here(many, tmp_path):  # noqa: F811
    port = _free_port()
    env = {**workload_env(), "RAY_USAGE_STATS_ENABLED": "0"}
    head = subprocess.Popen([sys.executable, "-c", "from ray.scripts.scripts import main; main()", "start", "--head", "--block",
                             f"--port={port}", "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    address = f"127.0.0.1:{port}"  # this head, not whatever cluster the machine last started
    try:
        deadline = time.monotonic() + 120
        while True:  # the head is up when a client connects
            probe = subprocess.run([sys.executable, "-c", f"import ray; ray.init(address={address!r}); ray.shutdown()"],
                                   capture_output=True, env=env, timeout=120)
            if probe.returncode == 0:
                break
            assert time.monotonic() < deadline and head.poll() is None, probe.stderr[-2000:]
            time.sleep(2)
        imported = cli("import", many[0].parent / "traces", "-o", tmp_path / "run", "--ray", address)
        assert imported.returncode == 0, imported.stderr[-2000:]
        assert _manifest(tmp_path / "run") == _manifest(many[0]) | {"sources": _manifest(tmp_path / "run")["sources"]}
        report = cli("analyze", tmp_path / "run", "--json", "--ray", address)
        assert report.returncode == 0, report.stderr[-2000:]
        got = json.loads(report.stdout)
        want = _plain(analyze(tmp_path / "run", write=False, workers=1))
        assert [f["rule_id"] for f in got["findings"]] == [f["rule_id"] for f in want["findings"]]
        assert [f["impact_ns"] for f in got["findings"]] == [f["impact_ns"] for f in want["findings"]]
    finally:
        os.killpg(head.pid, 15)  # the head and the raylets it started, in their own session
        head.wait(timeout=60)
        current = Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster"  # `ray start` names its head here
        if current.is_file() and current.read_text().strip().endswith(f":{port}"):
            current.unlink()  # gone with the head: later `--ray auto` must not look for it
