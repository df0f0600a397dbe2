"""The C++ converter (collectors/native) against the Python one, on real torch.profiler results.

Both turn one recorded cycle into the same raw tables; the C++ one is what `profile()` uses when it
can be built (CI builds it: this machine has a compiler), the Python one is the fallback. These
tests require the C++ one (NEURON_EXPLORER_NATIVE=require): a build failure fails them rather than
letting them pass on the fallback.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
import torch
from torch import nn

import neuron_explorer as nx
from neuron_explorer.collectors import _live_convert, native

from .conftest import cli

pytestmark = pytest.mark.slow  # tier: records real torch runs and compiles the native reader


@pytest.fixture(scope="module")
def native_module():
    old = os.environ.get("NEURON_EXPLORER_NATIVE")
    os.environ["NEURON_EXPLORER_NATIVE"] = "require"
    try:
        yield native.load()
    finally:
        if old is None:
            os.environ.pop("NEURON_EXPLORER_NATIVE", None)
        else:
            os.environ["NEURON_EXPLORER_NATIVE"] = old


def _train_step(model, opt, x):
    with torch.profiler.record_function("my_annotation"):
        y = model(x)
    loss = y.pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


@pytest.fixture(scope="module")
def recorded():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 32)
    _train_step(model, opt, x)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True, record_shapes=True,
                                profile_memory=True, with_flops=True) as prof:
        for _ in range(90):  # enough events for the C++ reader's several ranges (8192 events each)
            _train_step(model, opt, x)
            prof.step()
    return prof.profiler.kineto_results


def _plain(table: pa.Table) -> pa.Table:
    return pa.Table.from_arrays([c.cast(c.type.value_type) if pa.types.is_dictionary(c.type) else c for c in table.columns],
                                names=table.column_names)


def test_native_and_python_converters_give_the_same_tables(native_module, recorded):
    frames_py, frames_native = _live_convert.FrameTable(), _live_convert.FrameTable()
    py = _live_convert.convert_cycle(recorded, frames_py, pid=123)
    cc = _live_convert.convert_cycle(recorded, frames_native, pid=123, native=native_module)
    for name in ("events", "memory", "flows"):
        a, b = _plain(getattr(py, name)), _plain(getattr(cc, name))
        assert a.schema == b.schema, name
        for col in a.column_names:
            assert a[col].equals(b[col]), f"{name}.{col} differs"
    assert frames_py.table().equals(frames_native.table())
    # the recording holds what the comparison is meant to cover
    assert len(recorded.events()) > 3 * 8192
    ev = py.events.to_pydict()
    cats = set(_plain(py.events)["category"].to_pylist())
    assert {"cpu_op", "user_annotation", "python_function"} <= cats
    assert py.memory.num_rows > 0 and py.flows.num_rows > 0
    assert any(f >= 0 for f in ev["frame_index"]) and any(m for m in ev["module_path"])
    assert any(frames_py.is_user)


def test_the_same_frame_table_serves_both_converters_across_cycles(native_module, recorded):
    """Cycles of one recording share the frame table: a second cycle read by either converter
    finds the frames the first one made instead of adding them again."""
    frames = _live_convert.FrameTable()
    _live_convert.convert_cycle(recorded, frames, pid=1, native=native_module)
    n = len(frames.file)
    again = _live_convert.convert_cycle(recorded, frames, pid=1)
    assert len(frames.file) == n
    assert max(again.events["frame_index"].to_pylist()) < n


def test_a_thread_waiting_while_recording_gives_both_converters_the_same_tables(native_module):
    """A prefetch thread blocked in queue.get() while the main thread trains: with_stack records
    that thread's waiting Python calls under the thread id 2**64 - 1, which the profiler uses for
    a thread it has no id of. The Python converter used to fail on that id (an OverflowError that
    lost the recording); both converters now write it as -1."""
    import queue
    import threading

    jobs: queue.Queue = queue.Queue()

    def prefetch():
        while jobs.get() is not None:
            pass

    thread = threading.Thread(target=prefetch, daemon=True)
    thread.start()
    model = nn.Linear(8, 8)
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True) as prof:
            for _ in range(3):
                model(torch.randn(4, 8)).sum().backward()
    finally:
        jobs.put(None)
        thread.join()
    results = prof.profiler.kineto_results
    py = _live_convert.convert_cycle(results, _live_convert.FrameTable(), pid=7)
    cc = _live_convert.convert_cycle(results, _live_convert.FrameTable(), pid=7, native=native_module)
    for col in py.events.column_names:
        assert _plain(py.events)[col].equals(_plain(cc.events)[col]), f"events.{col} differs"
    waiting = [name for name, tid in zip(_plain(py.events)["name"].to_pylist(), py.events["tid"].to_pylist()) if tid == -1]
    assert any("prefetch" in name for name in waiting), waiting


def test_profile_uses_the_native_converter_and_says_so(native_module, tmp_path):
    model = nn.Linear(8, 8)
    with nx.profile(tmp_path / "run", activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(2):
            model(torch.randn(4, 8)).sum().backward()
            prof.step()
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["converter"] == "native"
    shown = cli("info", tmp_path / "run")
    assert shown.returncode == 0 and "live (native converter)" in shown.stdout.splitlines()[0]
    with nx.open_run(tmp_path / "run") as run:
        n, linked = run.sql("SELECT count(*), count(frame_id) FROM events WHERE kind = 'cpu_op'").fetchone()
    assert n > 0 and linked == n


SCRIPT = """\
import torch
x = torch.randn(64, 64, requires_grad=True)
for _ in range(3):
    y = (x @ x).relu().sum()
    y.backward()
"""


def _record(tmp_path, env_extra: dict) -> tuple[subprocess.CompletedProcess, dict]:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    env = {**os.environ, **env_extra}
    proc = subprocess.run([sys.executable, "-m", "neuron_explorer", "record", "-o", str(tmp_path / "run"), str(script)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text()) if (tmp_path / "run" / "manifest.json").exists() else {}
    return proc, manifest


def test_without_a_compiler_the_run_is_written_by_the_python_converter(tmp_path):
    """A machine with no C++ compiler still records: one warning, the same run, and the failed
    build is remembered so that the next run does not try again."""
    env = {"CXX": "/bin/false", "NEURON_EXPLORER_NATIVE_DIR": str(tmp_path / "native"), "NEURON_EXPLORER_NATIVE": "auto"}
    proc, manifest = _record(tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    assert "native converter is not available" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert manifest["converter"] == "python"
    assert manifest["ranks"][0]["events"] > 0
    assert list((tmp_path / "native").glob("*/build-failed.txt"))
    (tmp_path / "run2").mkdir()
    proc2 = subprocess.run([sys.executable, "-m", "neuron_explorer", "record", "-o", str(tmp_path / "run2" / "r"), str(tmp_path / "job.py")],
                           capture_output=True, text=True, env={**os.environ, **env}, cwd=tmp_path, timeout=300)
    assert proc2.returncode == 0 and "build failed before" in proc2.stderr and "compiling" not in proc2.stderr


def test_native_can_be_switched_off(tmp_path):
    proc, manifest = _record(tmp_path, {"NEURON_EXPLORER_NATIVE": "0"})
    assert proc.returncode == 0, proc.stderr
    assert manifest["converter"] == "python"
    assert "native converter" not in proc.stderr


def test_a_required_native_converter_that_cannot_be_built_is_a_one_line_error(tmp_path):
    env = {"CXX": "/bin/false", "NEURON_EXPLORER_NATIVE_DIR": str(tmp_path / "native"), "NEURON_EXPLORER_NATIVE": "require"}
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, "-m", "neuron_explorer", "record", "-o", str(tmp_path / "run"), str(script)],
                          capture_output=True, text=True, env={**os.environ, **env}, cwd=tmp_path, timeout=300)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    last = [line for line in proc.stderr.splitlines() if line.strip()][-1]
    assert "native converter could not be built" in last
    assert not (tmp_path / "run").exists()


def test_a_build_lock_left_by_a_killed_build_does_not_hang_the_next_run(tmp_path, native_module):
    """torch's build lock file stays behind when a build is killed outright; a later run must
    not wait on it forever (one older than any build is removed). The module itself is there (a
    copy of the one built for this session, so that no compile is timed here): while the lock
    stands, a run takes it for a build in progress and waits on torch's build instead."""
    native_dir = tmp_path / "native"
    folder = native_dir / native.module_name()
    folder.mkdir(parents=True)
    built = Path(native_module.__file__)
    assert built.parent.name == native.module_name()
    shutil.copy2(built, folder / built.name)
    (folder / "lock").write_text("")
    old = 1_000_000_000  # 2001: long before any build now running
    os.utime(folder / "lock", (old, old))
    proc, manifest = _record(tmp_path, {"NEURON_EXPLORER_NATIVE_DIR": str(native_dir), "NEURON_EXPLORER_NATIVE": "require"})
    assert proc.returncode == 0, proc.stderr
    assert manifest["converter"] == "native"
    assert not (folder / "lock").exists()


class _Passing(torch.Tensor):  # a tensor subclass of the user's, its hook handing each call on to torch
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


class _Direct(torch.Tensor):  # another, calling the function itself
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


HOOK_LINES: dict[str, int] = {}


def _through_hooks(a, b):
    import sys

    HOOK_LINES["mm"] = sys._getframe().f_lineno + 1
    y = torch.mm(a, a)
    HOOK_LINES["add"] = sys._getframe().f_lineno + 1
    return (y + b).sum()


def _hook_statements(frames: _live_convert.FrameTable, events: dict) -> dict[str, set]:
    """Each aten::mm / aten::add's innermost user statement (file, line)."""
    out: dict[str, set] = {}
    for name, f in zip(events["name"], events["frame_index"]):
        if name in ("aten::mm", "aten::add") and f is not None and f >= 0:
            while f >= 0 and not frames.is_user[f]:
                f = frames.parent[f]
            out.setdefault(name, set()).add((frames.file[f], frames.line[f]) if f >= 0 else None)
    return out


@pytest.mark.parametrize("subclass", [_Passing, _Direct], ids=["super", "direct"])
def test_an_operator_called_through_a_user_subclass_hook_is_its_callers_statements(native_module, tmp_path, subclass):
    """A tensor subclass in the user's own file hooks every torch call (`__torch_function__`): each
    operator was charged to the hook's line. Its statement is the line that called the torch
    function, by both converters (the same tables) and in a run nx.profile writes."""
    a, b = torch.randn(32, 32).as_subclass(subclass), torch.randn(32, 32).as_subclass(subclass)
    _through_hooks(a, b)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True) as prof:
        for _ in range(3):
            _through_hooks(a, b)
    want = {"aten::mm": {(__file__, HOOK_LINES["mm"])}, "aten::add": {(__file__, HOOK_LINES["add"])}}
    for converter in (None, native_module):
        frames = _live_convert.FrameTable()
        cc = _live_convert.convert_cycle(prof.profiler.kineto_results, frames, pid=1, native=converter)
        assert _hook_statements(frames, _plain(cc.events).to_pydict()) == want, converter
        assert not any(u for u, fn in zip(frames.is_user, frames.function) if fn == "__torch_function__")
    with nx.profile(tmp_path / "run", activities=[torch.profiler.ProfilerActivity.CPU]) as p:
        for _ in range(3):
            _through_hooks(a, b)
    assert _hook_statements(p.recording.frames, p.recording.cycles[0].events.to_pydict()) == want
