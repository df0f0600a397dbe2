"""Large traces are cut into pieces decoded several at a time: the result must not depend on it.

The real traces are small, so the size thresholds are lowered here to force many pieces through
both paths: byte ranges (plain JSON; read by the C++ reader on threads, and those it leaves to the
Python decoder in worker processes) and streamed pieces (gzip, in worker processes).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from neuron_explorer import open_run
from neuron_explorer.collectors import _kineto_json
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import TRACES

COLUMNS = "event_id, kind, category, name, ts_ns, dur_ns, pid, tid, parent_id, op_id, launch_id, step, args"


def _rows(run_dir: Path) -> dict:
    with open_run(run_dir) as run:
        return {
            "events": run.sql(f"SELECT {COLUMNS} FROM events ORDER BY event_id").fetchall(),
            "flows": run.sql("SELECT * FROM flows ORDER BY ts_ns, flow_id, phase").fetchall(),
            "manifest": {k: v for k, v in run.manifest["ranks"][0].items() if k not in ("source",)},
        }


@pytest.mark.parametrize("name", ["cuda_nccl_rank0_of_2.json.gz", "mtia_inference.json.gz", "cpu_only_rank34_of_300.json.gz"])
@pytest.mark.parametrize("encoding", ["plain", "gzip"])
def test_many_pieces_in_workers_give_the_same_run(tmp_path: Path, monkeypatch, name: str, encoding: str):
    src = tmp_path / ("trace.json" if encoding == "plain" else "trace.json.gz")
    data = gzip.decompress((TRACES / name).read_bytes())
    src.write_bytes(data if encoding == "plain" else gzip.compress(data))
    whole = import_traces(src, tmp_path / "whole").run_dir
    monkeypatch.setattr(_kineto_json, "CHUNK_BYTES", 96 << 10)
    monkeypatch.setattr(_kineto_json, "PARALLEL_MIN_BYTES", 0)
    if len(data) > 300 << 10:
        if encoding == "plain":
            plan = _kineto_json._plan_ranges(str(src), len(data))
            assert plan is not None and len(plan.ranges) > 2, "the plain file must be cut into several byte ranges"
        else:
            assert len(_kineto_json.decode_trace(str(src)).chunks) > 2, "the gzip stream must be cut into several pieces"
    pieces = import_traces(src, tmp_path / "pieces").run_dir
    assert _rows(pieces) == _rows(whole)


def test_ranges_left_to_the_python_decoder_are_decoded_in_order_with_the_rest(tmp_path: Path, monkeypatch):
    """Some ranges hold events the C++ reader leaves to the Python decoder (an escaped name): those
    are decoded by worker processes after the threads, and the run equals the one-piece import.
    The array closes in an early range and a large array follows it, so ranges after the end (one
    of them read by threads as well) are dropped."""
    events = [{"ph": "X", "cat": "cpu_op", "name": f'op{i} "quoted"' if i % 700 == 5 else f"op{i}", "pid": 1, "tid": 1,
               "ts": 1700000000000000.125 + i, "dur": 0.5, "args": {"External id": i}} for i in range(4000)]
    after = [{"id": i, "name": f"GPU {i}", "pad": "x" * 100} for i in range(2000)]
    src = tmp_path / "t.json"
    src.write_text(json.dumps({"traceEvents": events, "deviceProperties": after}))
    assert r'op5 \"quoted\"' in src.read_text()
    whole = import_traces(src, tmp_path / "whole").run_dir
    monkeypatch.setattr(_kineto_json, "CHUNK_BYTES", 32 << 10)
    monkeypatch.setattr(_kineto_json, "PARALLEL_MIN_BYTES", 0)
    outcomes = []
    native_range = _kineto_json._native_range
    monkeypatch.setattr(_kineto_json, "_native_range", lambda *a: outcomes.append(native_range(*a)) or outcomes[-1])
    pieces = import_traces(src, tmp_path / "pieces").run_dir
    assert _rows(pieces) == _rows(whole)
    assert len(_rows(pieces)["events"]) == 4000
    assert outcomes.count(None) >= 5, "ranges with an escaped name are left to the Python decoder"
    assert sum(o is not None for o in outcomes) >= 5, "the other ranges are read by the C++ reader"
    calls = []  # the progress bar's bytes only go forward, to the whole file
    _kineto_json.decode_trace(str(src), progress=lambda done, total: calls.append((done, total)))
    assert len(calls) > 5 and calls == sorted(calls) and calls[-1] == (src.stat().st_size,) * 2


def test_cuts_beyond_the_first_look_and_a_late_events_array_are_found(tmp_path: Path, monkeypatch):
    """A byte range's cut is looked for in the first bytes of its window, then in the whole window:
    with events of ~40 KB (no cut in the first look) and a header of ~100 KB before traceEvents (not
    in the first bytes read), the ranges are those the whole window gives, and the run is the one-piece import."""
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 1700000000000000 + i, "dur": 1,
               "args": {"External id": i, "Input Dims": [[i % 7] * (20000 if i % 3 == 0 else 1)]}} for i in range(120)]
    src = tmp_path / "t.json"
    src.write_text(json.dumps({"deviceProperties": [{"id": 0, "pad": "x" * 100_000}], "traceEvents": events}))
    whole = import_traces(src, tmp_path / "whole").run_dir
    monkeypatch.setattr(_kineto_json, "CHUNK_BYTES", 256 << 10)
    monkeypatch.setattr(_kineto_json, "PARALLEL_MIN_BYTES", 0)
    size = src.stat().st_size
    plan = _kineto_json._plan_ranges(str(src), size)
    monkeypatch.setattr(_kineto_json, "_FIRST_LOOK", _kineto_json._WINDOW)  # the whole window at once
    assert plan == _kineto_json._plan_ranges(str(src), size)
    monkeypatch.undo()
    monkeypatch.setattr(_kineto_json, "CHUNK_BYTES", 256 << 10)
    monkeypatch.setattr(_kineto_json, "PARALLEL_MIN_BYTES", 0)
    assert len(plan.ranges) > 3 and plan.prefix.endswith(b'"traceEvents": [') and len(plan.prefix) > 100_000
    pieces = import_traces(src, tmp_path / "pieces").run_dir
    assert _rows(pieces) == _rows(whole)
    assert len(_rows(pieces)["events"]) == 120


def test_streamed_pieces_with_events_longer_than_a_block_and_escaped_names(tmp_path: Path, monkeypatch):
    """A gzip trace is cut as it is decompressed, a cut near each block's end. An event longer than
    a block (no cut in it) is carried on to the next; pieces with escaped names are decoded by the
    Python decoder on their thread. The run equals the one-piece import."""
    events = [{"ph": "X", "cat": "cpu_op", "name": f'op{i} "quoted"' if i % 300 == 7 else f"op{i}", "pid": 1, "tid": 1,
               "ts": 1700000000000000.125 + i, "dur": 0.5,
               "args": {"External id": i, "Input Dims": [[i % 7] * (6000 if i in (100, 101, 2000) else 1)]}}
              for i in range(3000)]
    src = tmp_path / "t.json.gz"
    src.write_bytes(gzip.compress(json.dumps({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "GPU"}]}).encode()))
    whole = import_traces(src, tmp_path / "whole").run_dir
    monkeypatch.setattr(_kineto_json, "CHUNK_BYTES", 8 << 10)  # the long events' args are ~18 KB
    chunks = _kineto_json.decode_trace(str(src)).chunks
    assert len(chunks) > 20
    pieces = import_traces(src, tmp_path / "pieces").run_dir
    assert _rows(pieces) == _rows(whole)
    assert len(_rows(pieces)["events"]) == 3000


@pytest.mark.parametrize("encoding", ["plain", "gzip"])
def test_without_the_cpp_reader_pieces_go_to_worker_processes(tmp_path: Path, monkeypatch, encoding: str):
    """No C++ reader (no compiler): every piece is decoded by the Python decoder in worker
    processes, byte ranges and streamed pieces alike, and the run is the same."""
    from neuron_explorer.collectors import _json_native

    src = tmp_path / ("trace.json" if encoding == "plain" else "trace.json.gz")
    data = gzip.decompress((TRACES / "cuda_nccl_rank0_of_2.json.gz").read_bytes())
    src.write_bytes(data if encoding == "plain" else gzip.compress(data))
    whole = import_traces(src, tmp_path / "whole").run_dir
    monkeypatch.setattr(_json_native, "load", lambda: None)  # (inherited by the forked workers)
    monkeypatch.setattr(_kineto_json, "CHUNK_BYTES", 96 << 10)
    monkeypatch.setattr(_kineto_json, "PARALLEL_MIN_BYTES", 0)
    started = []
    pool = _kineto_json.ProcessPoolExecutor
    monkeypatch.setattr(_kineto_json, "ProcessPoolExecutor", lambda *a, **k: started.append(1) or pool(*a, **k))
    assert len(_kineto_json.decode_trace(str(src)).chunks) > 2
    pieces = import_traces(src, tmp_path / "pieces").run_dir
    assert started, "the pieces were decoded in worker processes"
    assert _rows(pieces) == _rows(whole)
