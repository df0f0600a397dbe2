"""Identical metadata events are kept once in the manifest, with their count (issue #37 item 9): a
trace that repeats the same metadata event 100,000 times writes a small manifest."""

from __future__ import annotations

import json
from pathlib import Path

from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.store import MANIFEST, read_manifest

REPEATS = 100_000


def _trace(path: Path) -> Path:
    events = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "ts": i, "args": {"name": "python3"}} for i in range(REPEATS)]
    events += [{"ph": "M", "name": "thread_name", "pid": 1, "tid": t, "args": {"name": f"thread {t}"}} for t in (1, 2)]
    events += [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10 + 10 * i, "dur": 5, "args": {}}
               for i in range(3)]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_identical_metadata_events_are_kept_once_with_their_count(tmp_path: Path):
    run = import_traces(_trace(tmp_path / "meta.json"), tmp_path / "run").run_dir
    events = read_manifest(run)["ranks"][0]["metadata_events"]
    by_name = {(m["name"], m["tid"]): m for m in events}
    assert len(events) == 3  # the 100,000 process_name events once, each thread's name once
    assert by_name["process_name", 0]["count"] == REPEATS
    assert by_name["process_name", 0]["args"] == {"name": "python3"}
    assert by_name["thread_name", 1]["count"] == 1 and by_name["thread_name", 2]["args"] == {"name": "thread 2"}
    assert (run / MANIFEST).stat().st_size < 20_000  # 100,000 entries took 11 MB


def test_thread_names_of_a_real_trace_survive_deduplication(tmp_path: Path):
    from .conftest import TRACES

    run = import_traces(TRACES / "mtia_inference.json.gz", tmp_path / "run").run_dir
    events = read_manifest(run)["ranks"][0]["metadata_events"]
    # 176 metadata events in the trace, 152 distinct apart from their ts (counted with python's json on the file)
    assert len(events) == 152 and sum(m["count"] for m in events) == 176
    assert max(m["count"] for m in events) > 1
