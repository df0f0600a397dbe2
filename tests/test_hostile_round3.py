"""Hostile input, round 3 (issues 40 and 41): sources that vanish or change during an import, memory
bombs, duplicate keys and odd times, signals during `record`. Each case is written from its
description: one line naming the file, exit 2, nothing half-written; or a run every command reads.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from neuron_explorer.collectors import chrome_trace
from neuron_explorer.errors import InputError

from .conftest import TRACES, workload_env

TRACE = TRACES / "cuda_simple_add.json.gz"


def _decode_then(monkeypatch, action):
    """decode_rank that runs `action(path)` before (deleting) or after (rewriting) the real decode."""
    real = chrome_trace.decode_rank

    def decode(path, *a, **kw):
        when, fn = action
        if when == "before":
            fn(path)
        out = real(path, *a, **kw)
        if when == "after":
            fn(path)
        return out

    monkeypatch.setattr(chrome_trace, "decode_rank", decode)


@pytest.mark.parametrize("action, says", [
    (("before", lambda p: p.unlink()), "No such file or directory"),
    (("after", lambda p: p.unlink()), "disappeared while it was being imported"),
    (("after", lambda p: p.write_bytes(p.read_bytes() + b" ")), "changed while it was being imported"),
    (("after", lambda p: shutil.copy(p, p.with_suffix(".new")) and p.with_suffix(".new").replace(p)), "changed while it was being imported"),
])
def test_a_trace_that_vanishes_or_changes_during_its_import_is_one_error_and_no_run(tmp_path: Path, monkeypatch, action, says):
    src = tmp_path / "trace.json.gz"
    shutil.copy(TRACE, src)
    _decode_then(monkeypatch, action)
    with pytest.raises(InputError) as e:
        chrome_trace.import_traces(src, tmp_path / "run")
    assert says in str(e.value) and str(src) in str(e.value)
    assert not (tmp_path / "run").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left behind


# --- the output: what appears at -o while an import or a recording runs is never replaced ----------------


def _while_decoding(monkeypatch, fn):
    real = chrome_trace.decode_rank

    def decode(path, *a, **kw):
        out = real(path, *a, **kw)
        fn()
        return out

    monkeypatch.setattr(chrome_trace, "decode_rank", decode)


def test_a_run_imported_into_the_same_output_meanwhile_is_not_replaced(tmp_path: Path, monkeypatch):
    out = tmp_path / "run"
    other = TRACES / "rocm_mi250_train.json.gz"
    # a second import into the same -o finishes while this one decodes
    _while_decoding(monkeypatch, lambda: monkeypatch.undo() or chrome_trace.import_traces(other, out))
    with pytest.raises(InputError, match="a run was written here while this one was being made"):
        chrome_trace.import_traces(TRACE, out)
    from neuron_explorer.store import read_manifest

    assert [s["path"] for s in read_manifest(out)["sources"]] == [str(other)]  # the other import's run, intact


@pytest.mark.parametrize("force", [False, True])
def test_a_directory_that_is_not_a_run_appearing_at_the_output_is_never_deleted(tmp_path: Path, monkeypatch, force):
    out = tmp_path / "run"

    def make_dir():
        out.mkdir()
        (out / "notes.txt").write_text("mine")

    _while_decoding(monkeypatch, make_dir)
    with pytest.raises(InputError, match="not a run"):
        chrome_trace.import_traces(TRACE, out, force=force)
    assert (out / "notes.txt").read_text() == "mine" and sorted(p.name for p in out.iterdir()) == ["notes.txt"]


# --- record: scripts that fork, change directory, or get signals during the stop --------------------------

RECORD_FORK = """\
import os, sys
import torch
x = torch.ones(64, 64)
for _ in range(5):
    x = x @ x / 64
pid = os.fork()
if pid == 0:
    y = x + 1  # the child works, then ends normally: it unwinds through the profiler it inherited
    sys.exit(0)
_, status = os.waitpid(pid, 0)
open("child_status.txt", "w").write(str(status))
print("parent done", os.getpid(), flush=True)
"""

RECORD_CHDIR = """\
import os
import torch
os.makedirs("outputs/2026-12-03", exist_ok=True)
os.chdir("outputs/2026-12-03")  # as Hydra does by default
torch.ones(8, 8) @ torch.ones(8, 8)
"""

# SIGINT first (Ctrl-C), then three more 0.1 s apart: those land while the profiler stops and the run is written
RECORD_CTRL_C_TWICE = """\
import os, signal, threading, time
import torch
x = torch.ones(32, 32)
for _ in range(3000):
    x = torch.relu(x @ x / 32)
def more():
    for _ in range(3):
        time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=more, daemon=True).start()
os.kill(os.getpid(), signal.SIGINT)
time.sleep(5)
"""

RECORD_SIGNAL = """\
import os, signal, sys
import torch
torch.ones(8, 8) @ torch.ones(8, 8)
os.kill(os.getpid(), getattr(signal, sys.argv[1]))
import time; time.sleep(5)
"""


def _record(tmp_path: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "train.py").write_text(script)
    return subprocess.run([sys.executable, "-m", "neuron_explorer", "record", "-o", "run", "train.py", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600, env=workload_env(),
                          preexec_fn=_default_signals)


def _default_signals() -> None:
    """The child starts with the signals the tests send at their defaults, whatever it inherits: a
    suite run under `nohup` passes SIGHUP ignored, and `record` (rightly) leaves an ignored signal
    ignored."""
    for s in (signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
        signal.signal(s, signal.SIG_DFL)


def _run_events(run_dir: Path) -> int:
    from neuron_explorer import open_run

    with open_run(run_dir) as run:
        return run.sql("SELECT count(*) FROM events").fetchone()[0]


@pytest.mark.slow  # records a real torch script
def test_record_of_a_script_that_forks_writes_the_parents_run(tmp_path: Path):
    r = _record(tmp_path, RECORD_FORK)
    assert r.returncode == 0, r.stderr
    assert "terminate called" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert (tmp_path / "child_status.txt").read_text() == "0"  # the child ended with its own code, 0
    parent = int(r.stdout.split("parent done")[1].split()[0])
    from neuron_explorer.store import read_manifest

    m = read_manifest(tmp_path / "run")
    assert m["ranks"][0]["pid"] == parent  # the parent's run, not the child's
    assert r.stderr.count("wrote run") == 1 and _run_events(tmp_path / "run") > 0


@pytest.mark.slow  # records a real torch script
def test_record_of_a_script_that_changes_directory_writes_where_it_was_asked(tmp_path: Path):
    r = _record(tmp_path, RECORD_CHDIR)
    assert r.returncode == 0, r.stderr
    assert "wrote run" in r.stderr
    assert (tmp_path / "run" / "manifest.json").is_file()
    assert not (tmp_path / "outputs" / "2026-12-03" / "run").exists()


@pytest.mark.slow  # records a real torch script and signals it
def test_ctrl_c_again_while_the_profiler_stops_still_leaves_the_run(tmp_path: Path):
    r = _record(tmp_path, RECORD_CTRL_C_TWICE)
    assert r.returncode == 130, r.stderr
    assert "_disable_profiler" not in r.stderr and "neuron_explorer" not in r.stderr.split("KeyboardInterrupt")[0][-2000:], r.stderr
    assert _run_events(tmp_path / "run") > 3000


@pytest.mark.slow  # records a real torch script and signals it
@pytest.mark.parametrize("sig, code", [("SIGHUP", 129), ("SIGUSR1", 138)])
def test_sighup_and_sigusr1_end_the_script_like_sigterm(tmp_path: Path, sig: str, code: int):
    r = _record(tmp_path, RECORD_SIGNAL, sig)
    assert r.returncode == code, r.stderr
    assert f"terminated ({sig}); the run holds what was recorded" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert _run_events(tmp_path / "run") > 0


# --- duplicate keys --------------------------------------------------------------------------------------

SLICE = '{"ph": "X", "cat": "cpu_op", "name": "%s", "pid": 1, "tid": 1, "ts": 10, "dur": 5}'


@pytest.mark.parametrize("size", ["small", "streamed"])
def test_a_second_top_level_trace_events_is_refused_not_guessed(tmp_path: Path, size: str):
    pad = "" if size == "small" else ",".join([SLICE % "pad"] * 200_000)  # large enough to be read in pieces
    first = "[" + SLICE % "first" + ("," + pad if pad else "") + "]"
    src = tmp_path / "dup.json"
    src.write_text('{"traceEvents": %s, "displayTimeUnit": "ns", "traceEvents": [%s]}' % (first, SLICE % "last"))
    with pytest.raises(InputError, match="'traceEvents' appears twice"):
        chrome_trace.import_traces(src, tmp_path / "run")
    assert not (tmp_path / "run").exists()
    # a key that merely contains the word, or a nested traceEvents, is no duplicate
    ok = tmp_path / "ok.json"
    ok.write_text('{"traceEvents": [%s], "meta": {"traceEvents": []}, "note": "\\"traceEvents\\""}' % (SLICE % "only"))
    assert chrome_trace.import_traces(ok, tmp_path / "ok").manifest["ranks"][0]["events"] >= 1


# --- memory bombs: text beyond the limit -------------------------------------------------------------------


def test_names_and_args_beyond_the_limit_are_cut_with_a_warning_counting_them(tmp_path: Path):
    import json

    from neuron_explorer import open_run
    from neuron_explorer.collectors.trace_rank import MAX_TEXT_CHARS

    long_name = "k" * (MAX_TEXT_CHARS + 10)
    events = [
        {"ph": "X", "cat": "cpu_op", "name": long_name, "pid": 1, "tid": 1, "ts": 10, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": long_name + "2", "pid": 1, "tid": 1, "ts": 20, "dur": 5,
         "args": {"blob": "x" * (MAX_TEXT_CHARS + 1)}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 30, "dur": 5, "args": {"Input Dims": [[2, 2]]}},
    ]
    src = tmp_path / "t.json"
    src.write_text(json.dumps({"traceEvents": events}))
    result = chrome_trace.import_traces(src, tmp_path / "run")
    warnings = " ".join(result.manifest["warnings"])
    assert "2 names longer than 65,536 characters cut to that length" in warnings, warnings
    assert "1 event's args longer than 65,536 characters dropped" in warnings, warnings
    with open_run(tmp_path / "run") as run:
        rows = run.sql("SELECT name, length(name), args FROM events ORDER BY ts_ns").fetchall()
    assert [r[1] for r in rows] == [MAX_TEXT_CHARS, MAX_TEXT_CHARS, len("aten::mm")]
    assert rows[1][2] is None and "Input Dims" in rows[2][2]  # the long args dropped, the short ones kept


# --- times that are not numbers ---------------------------------------------------------------------------


@pytest.mark.parametrize("native", [True, False], ids=["C++ reader", "Python decoder"])
def test_non_numeric_times_are_one_counted_warning_and_never_zero(tmp_path: Path, monkeypatch, native: bool):
    """`"ts": "100"` is read as 100 µs, `"ts": null` (or missing, or "soon", or true) gives the event no
    time: it is dropped, not placed at 0; an 'X' event's dur likewise. One warning counts them, the
    same whichever reader reads the file."""
    import json

    from neuron_explorer import open_run
    from neuron_explorer.collectors import _json_native

    monkeypatch.delenv("NEURON_EXPLORER_NATIVE", raising=False)
    if not native:
        monkeypatch.setattr(_json_native, "read", lambda *a, **kw: None)
    ok = {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1}
    events = [
        {**ok, "name": "text ts", "ts": "100", "dur": 5},  # read: 100 µs
        {**ok, "name": "text dur", "ts": 200, "dur": "7.5"},  # read: 7.5 µs
        {**ok, "name": "null ts", "ts": None, "dur": 5},
        {**ok, "name": "no ts", "dur": 5},
        {**ok, "name": "word ts", "ts": "soon", "dur": 5},
        {**ok, "name": "null dur", "ts": 300, "dur": None},
        {**ok, "name": "plain", "ts": 400, "dur": 5},
        {"ph": "i", "cat": "cpu_op", "name": "true ts", "pid": 1, "tid": 1, "ts": True},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 3, "pid": 1, "tid": 1, "ts": None},
        {"ph": "C", "name": "util", "pid": 1, "ts": "500", "args": {"v": 1}},  # read: 500 µs
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": None, "args": {"Bytes": 64, "Addr": 1}},
    ]
    src = tmp_path / "t.json"
    src.write_text(json.dumps({"traceEvents": events}))
    result = chrome_trace.import_traces(src, tmp_path / "run")
    said = [w for w in result.manifest["warnings"] if "non-numeric" in w]
    assert said == ['t.json: 10 events with a non-numeric ts/dur: 7 with null, missing or non-numeric text dropped; '
                    '3 with a number written as text ("100") read as that number'], result.manifest["warnings"]
    with open_run(tmp_path / "run") as run:
        assert run.sql("SELECT name, ts_ns, dur_ns FROM events ORDER BY ts_ns").fetchall() == [
            ("text ts", 100_000, 5_000), ("text dur", 200_000, 7_500), ("plain", 400_000, 5_000)]
        assert run.sql("SELECT ts_ns, value FROM counters").fetchall() == [(500_000, 1.0)]
        assert run.sql("SELECT count(*) FROM flows").fetchone()[0] == 0
        assert run.sql("SELECT count(*) FROM memory").fetchone()[0] == 0


def test_numeric_times_give_no_warning(tmp_path: Path):
    result = chrome_trace.import_traces(TRACE, tmp_path / "run")
    assert not [w for w in result.manifest["warnings"] if "non-numeric" in w]
