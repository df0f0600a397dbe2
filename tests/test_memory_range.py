"""Memory in a time range (analyzers/memory_range.py, `/api/memory_range`, the Memory tab's tables)
on a hand-built trace whose answers are known, and on the V100 trace recorded with memory.

    host pid 1 / tid 1, µs after the trace's start; device 0 (CUDA) allocations, address in brackets:
    0 ................................................................................ 100  ProfilerStep#1
     1 ............................................................................... 99   train.py(5): step
       5 ............ 40 train.py(10): build          45 ............................ 90   train.py(20): work
         9 .. 13 aten::zeros  19 .. 23 aten::zeros      50 . 52 aten::add   70 . 72 aten::mul
          10 . 12 aten::empty  20 . 22 aten::empty
       30 . 33 cudaMalloc
    memory: +4096 [A] at 11 (total 4096)   +1024 [B] at 21 (5120)   +2048 [C] at 51 (7168: the peak)
            -4096 [A] at 60 (3072)          +512 [A] at 71 (3584)    -1024 [B] at 80 (2560)

Known answers, whole run: 4 allocations, 7,680 bytes; 2 frees, 5,120 bytes; peak 7,168 at 51 µs,
made of A 4,096 + B 1,024 + C 2,048 (the second A, at 71, comes after it). Lines: train.py:10
allocated 5,120 (2), all of it at the peak and freed in the run; train.py:20 2,560 (2), 2,048 at
the peak. Range [15, 65): starts at 4,096 (A, allocated before it); B and C allocated (3,072),
A freed (4,096); peak 7,168 at 51, of which the range's allocations are 3,072; B alive at its end.
"""

from __future__ import annotations

import pytest

from neuron_explorer.analyzers.memory_range import memory_range
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.dashboard import api, queries
from neuron_explorer.dashboard.runs import RunSet
from neuron_explorer.dashboard.ui import memory as memory_ui
from neuron_explorer.dashboard.views.memory import NO_MEMORY
from neuron_explorer.store import open_run

from .conftest import TRACES, X, write_trace

US = 1000
A, B, C = 0x7F0000001000, 0x7F0000002000, 0x7F0000003000


def MEM(ts, nbytes, total, addr):
    return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts, "s": "t",
            "args": {"Device Type": 1, "Device Id": 0, "Addr": addr, "Bytes": nbytes, "Total Allocated": total, "Total Reserved": 8192}}


EVENTS = [
    X("ProfilerStep#1", "user_annotation", 0, 100),
    X("train.py(5): step", "python_function", 1, 98),
    X("train.py(10): build", "python_function", 5, 35),
    X("aten::zeros", "cpu_op", 9, 4), X("aten::empty", "cpu_op", 10, 2),
    X("aten::zeros", "cpu_op", 19, 4), X("aten::empty", "cpu_op", 20, 2),
    X("cudaMalloc", "cuda_runtime", 30, 3, correlation=7),
    X("train.py(20): work", "python_function", 45, 45),
    X("aten::add", "cpu_op", 50, 2), X("aten::mul", "cpu_op", 70, 2),
    MEM(11, 4096, 4096, A), MEM(21, 1024, 5120, B), MEM(51, 2048, 7168, C),
    MEM(60, -4096, 3072, A), MEM(71, 512, 3584, A), MEM(80, -1024, 2560, B),
]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("memrange")
    return import_traces(write_trace(tmp / "t.json", EVENTS), tmp / "run").run_dir


@pytest.fixture(scope="module")
def rs(run_dir):
    s = RunSet([run_dir])
    yield s
    s.close()


def _start(rs) -> int:
    return rs.get(0).span()[0]


def test_the_whole_run(run_dir):
    run = open_run(run_dir)
    start = run.sql("SELECT min(ts_ns) FROM events").fetchone()[0]
    m = memory_range(run, start, start + 100 * US)
    assert m["totals"] == {"allocations": 4, "allocated_bytes": 7680, "frees": 2, "freed_bytes": 5120, "rows_without_addr": 0}
    assert m["has_addresses"] and not m["truncated"]
    (dev,) = m["devices"]
    assert (dev["peak_bytes"], dev["peak_ts_ns"] - start, dev["start_bytes"], dev["peak_contribution_bytes"]) == (7168, 51 * US, None, 7168)
    got = [(a["bytes"], a["addr"], a["ts_ns"] - start, None if a["freed_ts_ns"] is None else a["freed_ts_ns"] - start,
            a["peak_contribution_bytes"], a["operator"], a["top_operator"], a["source"]) for a in m["allocations"]]
    assert got == [(4096, A, 11 * US, 60 * US, 4096, "aten::empty", "aten::zeros", "train.py:10"),
                   (2048, C, 51 * US, None, 2048, "aten::add", "aten::add", "train.py:20"),
                   (1024, B, 21 * US, 80 * US, 1024, "aten::empty", "aten::zeros", "train.py:10"),
                   (512, A, 71 * US, None, 0, "aten::mul", "aten::mul", "train.py:20")]
    assert [(x["source"], x["allocations"], x["allocated_bytes"], x["freed_in_range_bytes"], x["peak_contribution_bytes"])
            for x in m["by_line"]] == [("train.py:10", 2, 5120, 5120, 5120), ("train.py:20", 2, 2560, 0, 2048)]
    assert [(x["operator"], x["allocated_bytes"]) for x in m["by_operator"]] == [("aten::zeros", 5120), ("aten::add", 2048), ("aten::mul", 512)]
    assert m["allocator_calls"] == {"calls": 1, "frees": 0, "dur_ns": 3 * US}
    # what the peak is made of never exceeds it
    assert sum(x["peak_contribution_bytes"] or 0 for x in m["by_line"]) <= dev["peak_bytes"]
    run.close()


def test_one_query_gives_what_each_part_gives(run_dir):
    """memory_range_of reads every figure in one statement (the range's CTEs built once); each part
    equals what its own published query (totals_sql, peaks_sql, ...) returns, cut at `limit`."""
    from neuron_explorer.analyzers import memory_range as mr
    run = open_run(run_dir)
    start = run.sql("SELECT min(ts_ns) FROM events").fetchone()[0]

    def records(sql):
        cur = run.sql(sql)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]

    for a, b, limit in ((0, 100, 200), (15, 65, 200), (0, 100, 1), (55, 100, 1), (101, 102, 200)):
        t0, t1 = start + a * US, start + b * US
        asked = []
        m = mr.memory_range_of(lambda sql, asked=asked: asked.append(sql) or records(sql), t0, t1, None, limit)
        assert len(asked) == 1
        assert m["totals"] == records(mr.totals_sql(t0, t1))[0]
        assert m["devices"] == records(mr.peaks_sql(t0, t1))
        assert m["allocations"] == records(mr.allocations_sql(t0, t1, None, limit))
        lines = [x for x in records(mr.lines_sql(t0, t1, None, limit + 1)) if x["key"] is not None][:limit]
        assert [x["source"] for x in m["by_line"]] == [x["key"] for x in lines]
        assert [x["operator"] for x in m["by_operator"]] == [x["key"] for x in records(mr.operators_sql(t0, t1, None, limit))]
        assert m["allocator_calls"] == records(mr.allocator_calls_sql(t0, t1))[0]
        assert m["truncated"] == (limit == 1 and m["totals"]["allocations"] > 1)
    run.close()


def test_a_range_inside_the_run(run_dir):
    run = open_run(run_dir)
    start = run.sql("SELECT min(ts_ns) FROM events").fetchone()[0]
    m = memory_range(run, start + 15 * US, start + 65 * US)
    assert m["totals"] == {"allocations": 2, "allocated_bytes": 3072, "frees": 1, "freed_bytes": 4096, "rows_without_addr": 0}
    (dev,) = m["devices"]
    assert (dev["start_bytes"], dev["peak_bytes"], dev["peak_ts_ns"] - start, dev["peak_contribution_bytes"]) == (4096, 7168, 51 * US, 3072)
    assert [(a["bytes"], a["freed_ts_ns"], a["peak_contribution_bytes"]) for a in m["allocations"]] == [(2048, None, 2048), (1024, None, 1024)]
    assert m["allocator_calls"]["calls"] == 1
    # after the peak: the value in force at the range's start is its peak, which no allocation of the range is part of
    late = memory_range(run, start + 55 * US, start + 100 * US)
    assert late["devices"][0]["peak_bytes"] == 7168 and late["devices"][0]["peak_ts_ns"] == start + 55 * US
    assert [(a["bytes"], a["peak_contribution_bytes"]) for a in late["allocations"]] == [(512, 0)]
    assert [x["source"] for x in late["by_line"]] == ["train.py:20"] and late["totals"]["freed_bytes"] == 5120
    assert late["allocator_calls"]["calls"] == 0
    run.close()


def test_the_api_answers_the_same_figures(rs):
    start = _start(rs)
    env, status = api.call_view(rs, "memory_range", {"run": "0", "t0": str(start + 15 * US), "t1": str(start + 65 * US)})
    assert status == 200 and env["ok"], env
    d = env["data"]
    assert d["totals"]["allocated_bytes"] == 3072 and [a["bytes"] for a in d["allocations"]] == [2048, 1024]
    assert d["t0_ms"] == 0.015 and d["t1_ms"] == 0.065
    assert [a["ms"] for a in d["allocations"]] == [0.051, 0.021]
    (s,) = d["series"]
    assert s["x_ms"][0] == 0.015 and s["bytes"][0] == 4096 and s["x_ms"][-1] == 0.065 and max(s["bytes"]) == 7168
    assert "FROM memory" in d["sql"]  # the query anyone can run on the run
    bad, status = api.call_view(rs, "memory_range", {"run": "0", "t0": "x"})
    assert status == 400 and not bad["ok"]


def test_the_tab_rows_and_click(rs):
    start = _start(rs)
    note, style, fig, head, allocs, group_head, cols, lines = memory_ui.tab_contents(
        rs, {"run": 0, "t0": start, "t1": start + 100 * US}, 0, "all", 1200)
    assert note == "" and style == {"display": "block"}
    assert fig["layout"]["xaxis"]["range"] == [0.0, 0.1]
    assert head.startswith("range 100.00 µs from +0.000 ms: 4 allocations, 7.5 KiB allocated; 2 frees, 5.0 KiB freed · "
                           "device 0 peak 7.0 KiB at +0.051 ms · driver allocator calls: 1 (0 frees, 3.00 µs)"), head
    assert [a["source"] for a in allocs] == ["train.py:10", "train.py:20", "train.py:10", "train.py:20"]
    assert allocs[0]["state"] == "freed at +0.060 ms" and allocs[1]["state"] == "alive at the range's end"
    assert cols[0]["headerName"] == "source line" and lines[0]["key"] == "train.py:10" and lines[0]["allocations"] == 2
    # a click on an allocation selects its operator (aten::empty at 10 µs)
    eid = memory_ui.clicked_operator({"rowId": allocs[0]["id"]})
    ev = queries.event(rs, run=0, event_id=eid)
    assert ev["name"] == "aten::empty" and ev["ts_ns"] - start == 10 * US


def test_the_range_follows_the_timeline(rs):
    start = _start(rs)
    view = {"run": 0, "rank": None, "t0": start + 5, "t1": start + 9}
    assert memory_ui.range_of(rs, "view", view, None, 0, "all") == {"run": 0, "rank": "all", "t0": start + 5, "t1": start + 9}
    area = {"x0": 0.065, "x1": 0.015, "y0": 0, "y1": 3}  # ms from the run's first event, either way round
    assert memory_ui.range_of(rs, "area", view, area, 0, "all") == {"run": 0, "rank": "all", "t0": start + 15 * US, "t1": start + 65 * US}


def test_a_run_without_memory_says_why_in_one_line(tmp_path):
    run_dir = import_traces(write_trace(tmp_path / "t.json", EVENTS[:4]), tmp_path / "run").run_dir
    rs = RunSet([run_dir])
    try:
        note, style, fig, *_ = memory_ui.tab_contents(rs, None, 0, "all", 1200)
        assert note == NO_MEMORY and "\n" not in note and style == {"display": "none"} and fig["data"] == []
    finally:
        rs.close()


def test_the_v100_trace_recorded_with_memory():
    """tests/data/traces/v100_resnet50_torch19_memory.json.gz (torch 1.9: no addresses, no stacks),
    step #17: DuckDB over the run gives the same sums (`SELECT sum(bytes) FILTER (WHERE bytes > 0) ...`)."""
    rs = RunSet([TRACES / "v100_resnet50_torch19_memory.json.gz"])
    try:
        r = rs.get(0)
        (t0, t1), = r.query("SELECT ts_ns, ts_ns + dur_ns FROM events WHERE name = 'ProfilerStep#17'")[1]
        m = memory_range(r.run, t0, t1)
        assert not m["has_addresses"] and all(a["peak_contribution_bytes"] is None for a in m["allocations"])
        head = memory_ui.headline(queries.memory_range(rs, run=0, t0=t0, t1=t1))
        assert head.endswith("the trace records no block addresses: which blocks were freed is not known · the 200 largest listed"), head
        (n, total), = r.query(f"SELECT count(*), sum(bytes) FROM memory WHERE bytes > 0 AND ts_ns >= {t0} AND ts_ns < {t1}")[1]
        assert (m["totals"]["allocations"], m["totals"]["allocated_bytes"]) == (n, total) == (EXPECTED_STEP17[0], EXPECTED_STEP17[1])
        top = m["by_operator"][0]
        assert (top["operator"], top["allocations"], top["allocated_bytes"]) == EXPECTED_STEP17[2]
        assert m["by_line"] == []  # recorded without stacks
    finally:
        rs.close()


EXPECTED_STEP17 = (1069, 10_677_540_740, ("CudnnConvolutionBackward", 154, 3_561_406_464))
"""Step #17 (159.574 to 308.620 ms from the run's start): allocations and bytes (CPU and device 0),
and the top-level operator that allocated most (by a plain DuckDB query over the run's Parquet)."""


def test_sizes_are_written_in_the_unit_that_fits():
    from neuron_explorer.fmt import size

    assert [size(b) for b in (None, 0, 512, 1023, 1024, 7680, 2**20, 3 * 2**20 // 2, 2**28 - 1, 2**28, 5 * 2**30, -4096)] == [
        "-", "0 B", "512 B", "1023 B", "1.0 KiB", "7.5 KiB", "1.0 MiB", "1.5 MiB", "256.0 MiB", "0.25 GiB", "5.00 GiB", "-4.0 KiB"]


def test_the_agent_tool_answers_what_the_dashboard_shows(run_dir, rs):
    from neuron_explorer.agent.tools import AgentRuns

    start = _start(rs)
    agent = AgentRuns([run_dir])
    try:
        got = agent.memory_range(t0_ns=start + 15 * US, t1_ns=start + 65 * US, k=1)
        assert got["ok"], got
        assert got["totals"]["allocated_bytes"] == 3072 and got["devices"][0]["peak_bytes"] == 7168
        assert [a["bytes"] for a in got["allocations"]] == [2048] and got["truncated"]  # k = 1 of 2
        whole = agent.memory_range()
        dash = queries.memory_range(rs, run=0)
        assert whole["totals"] == dash["totals"] and whole["by_line"] == dash["by_line"]
        assert [a["bytes"] for a in whole["allocations"]] == [a["bytes"] for a in dash["allocations"]] == [4096, 2048, 1024, 512]
        assert not agent.memory_range(t0_ns=5, t1_ns=5)["ok"]
    finally:
        agent.close()
