"""Ranks analysed in batches: the figures grouped by rank over a batch's views equal each rank's alone.

A generated 5-rank run (times in us), rank r = 0..4, three 100 us steps each:

    step s at t0 = 100 s:
      host   aten::linear [t0+2, t0+32) > cudaLaunchKernel [t0+4, t0+8)   -> gemm      [t0+10, t0+40) stream 7
             aten::add    [t0+40, t0+45) > cudaLaunchKernel [t0+41, t0+44) -> add_k    [t0+46, t0+48) stream 7
             c10d::allreduce_ [t0+50, t0+55) > cudaLaunchKernel            -> ncclKernel_AllReduce [t0+55, t0+55+10+5r) stream 9
                                                                              scale_k  [t0+60, t0+62) stream 7 (overlaps it)

The collective runs alone except for scale_k's 2 us, so its exposed communication is (10 + 5r - 2) us
a step. The collectives end together once aligned (rank r's clock 5(r - 2) us ahead), so rank 0
arrives last and rank r waits its first 5r us [t0+55, t0+55+5r): exposed but for scale_k's 2 us
(r >= 2); rank 4's collectives, in steps numbered apart, match no other rank's. With the job,
comm-exposed leaves that wait to collective-wait: ranks 1 and 2 keep the rest (8 and 10 us a step),
rank 3 (waiting 13 of its 23 us) leaves it whole. Rank 4 records its three steps as 40 short steps instead (more windows than a grouped
top-kernels query takes), so both ways of `device_time._top_kernels_many` run.
"""

from __future__ import annotations

import json

import pytest

from neuron_explorer.analyzers import device_time, engine, summary
from neuron_explorer.analyzers.contents import finding_contents, findings_contents
from neuron_explorer.analyzers.engine import analyze
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.store import open_run

from .conftest import X, write_trace

BASE = 1_700_000_000_000_000_000
RANKS = 5
CROSS_RANK = ("rank-skew", "collective-wait", "load-imbalance")


def K(name, ts, dur, corr, stream=7):
    return X(name, "kernel", ts, dur, pid=0, tid=stream, device=0, stream=stream, correlation=corr)


def _rank(r: int) -> list[dict]:
    ev, corr = [], 0
    for s in range(3):
        t0 = 100 * s
        if r == 4:  # many short steps over the same span
            ev += [X(f"ProfilerStep#{s * 40 + i + 1}", "user_annotation", t0 + i * 2.5, 2.5) for i in range(40)]
        else:
            ev.append(X(f"ProfilerStep#{s + 1}", "user_annotation", t0, 100))
        for name, start, dur, kname, kstart, kdur, stream in (
                ("aten::linear", 2, 30, "gemm", 10, 30, 7), ("aten::add", 40, 5, "add_k", 46, 2, 7),
                ("c10d::allreduce_", 50, 5, "ncclKernel_AllReduce_RING", 55, 10 + 5 * r, 9)):
            corr += 1
            ev += [X(name, "cpu_op", t0 + start, dur, **{"External id": corr}),
                   X("cudaLaunchKernel", "cuda_runtime", t0 + start + 1, 3, correlation=corr, **{"External id": corr}),
                   K(kname, t0 + kstart, kdur, corr, stream)]
        corr += 1
        ev += [X("cudaLaunchKernel", "cuda_runtime", t0 + 56, 2, correlation=corr), K("scale_k", t0 + 60, 2, corr)]
    return ev


def _write(dir_, ranks) -> None:
    for r in ranks:
        write_trace(dir_ / f"rank{r}.json", _rank(r), baseTimeNanoseconds=BASE, distributedInfo={"rank": r, "world_size": RANKS})


@pytest.fixture(scope="module")
def five(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rank_batching")
    _write(tmp / "traces", range(RANKS))
    run_dir = import_traces(tmp / "traces", tmp / "run").run_dir
    alone = {}
    for r in range(RANKS):  # each rank on its own, with its rank number (the same event ids)
        _write(tmp / f"traces_{r}", [r])
        alone[r] = import_traces(tmp / f"traces_{r}", tmp / f"run_{r}").run_dir
    return run_dir, alone


def _less_the_wait(f: dict) -> dict | None:
    """A finding as far as the job leaves it alone: comm-exposed's impact and title lose the rank's
    wait for the last rank (checked against the figures above; ranks 0 and 4 have none), or the finding
    goes (rank 3)."""
    if f["rule_id"] != "comm-exposed":
        return f
    r = f["location"]["rank"]
    if r == 3:
        return None
    if r in (0, 4):
        return f
    drop = ("title", "impact_ns", "impact_share", "severity", "saving_bound_ns")
    return {k: v for k, v in f.items() if k not in drop} | {
        "evidence": {**f["evidence"], "values": {k: v for k, v in f["evidence"]["values"].items() if k != "waiting_ns"}}}


def _plain(report) -> dict:
    text = json.dumps(report.to_dict(), default=str, sort_keys=True)
    return json.loads(text.replace(json.dumps(str(report.run))[1:-1], "RUN"))


def test_device_time_of_many_ranks_equals_each_rank_alone(five, monkeypatch):
    run_dir, _ = five
    with open_run(run_dir) as run:
        ranks = list(range(RANKS))
        together = device_time.breakdowns(run, ranks)
        assert together == {r: device_time.breakdown(run, r) for r in ranks}
        monkeypatch.setattr(device_time, "GROUPED_WINDOWS_MAX", 1)  # every rank's top kernels by a query of its own
        assert device_time.breakdowns(run, ranks) == together
    for r in ranks:
        (dev,) = together[r]
        assert dev["communication_ns"] == 3 * (10 + 5 * r - 2) * 1000, r  # the collective, less scale_k's 2 us
        assert dev["compute_ns"] == 3 * (30 + 2 + 2) * 1000
        (coll,) = dev["exposed_communication"]
        assert coll["op"] == "c10d::allreduce_" and coll["ns"] == dev["communication_ns"] and coll["kernels"] == 3
    assert len(together[4][0]["steps"]) == 120 and len(together[0][0]["steps"]) == 3


def test_contents_of_many_findings_equal_each_finding_alone(five):
    run_dir, _ = five
    report = analyze(run_dir, write=False)
    found = [f.to_dict() for f in report.findings]
    with open_run(run_dir) as run:
        together = findings_contents(run, found)
        alone = [finding_contents(run, f) for f in found]
    assert together == alone
    # not trivial: findings of every rank have contents, chosen by an operator and by sample events
    assert {f["location"]["rank"] for f, c in zip(found, together) if c} == set(range(RANKS))
    whats = {c["roots"]["what"].split(" ")[0] for c in together if c}
    assert {"every", "its"} <= whats


@pytest.mark.parametrize("batch,workers", [(2, 1), (128, 2)])
def test_report_of_many_ranks_equals_each_rank_alone(five, monkeypatch, batch, workers):
    run_dir, alone = five
    monkeypatch.setattr(engine, "RANK_BATCH", batch)  # batch 2: ranks 0-1, 2-3, 4
    together = _plain(analyze(run_dir, write=False, workers=workers))
    assert together["findings"], "the run has findings"
    for r, single_dir in alone.items():
        single = _plain(analyze(single_dir, write=False))
        mine = [f for f in together["findings"] if f["location"]["rank"] == r and f["rule_id"] not in CROSS_RANK]
        # a rank alone has no job to leave its wait for a late rank to (engine.leave_to_the_job)
        assert {"collective-wait"} <= {g["rule_id"] for g in together["findings"]}
        key = lambda f: json.dumps(f, sort_keys=True)  # noqa: E731 - a smaller impact may take a finding down the ranking
        assert sorted(map(_less_the_wait, mine), key=key) == sorted(filter(None, map(_less_the_wait, single["findings"])), key=key), r
        if r in (1, 2):
            (comm,) = [f for f in mine if f["rule_id"] == "comm-exposed"]
            waiting = 3 * (5 * r - (2 if r >= 2 else 0)) * 1000
            assert comm["evidence"]["values"]["waiting_ns"] == waiting
            assert comm["impact_ns"] == 3 * (10 + 5 * r - 2) * 1000 - waiting == comm["saving_bound_ns"]
            assert f"{waiting / 1e6:.2f} ms of it waiting for the last rank to arrive" in comm["title"]
        else:
            assert bool([f for f in mine if f["rule_id"] == "comm-exposed"]) == (r != 3), r
        assert [f for f in mine if f.get("contents")], r  # with what is inside them
        (summary,) = [s for s in together["summary"]["ranks"] if s["rank"] == r]
        assert summary == single["summary"]["ranks"][0], r
        assert [n for n in together["not_applicable"] if n["rank"] == r] == [n | {"rank": r} for n in single["not_applicable"]
                                                                           if n["rank"] is not None], r


def test_contents_of_a_real_two_rank_trace_equal_each_finding_alone():
    report = analyze("tests/data/traces/multirank_128", write=False)
    found = [f.to_dict() for f in report.findings]
    with open_run("tests/data/traces/multirank_128") as run:
        assert findings_contents(run, found) == [finding_contents(run, f) for f in found]
    assert sum(1 for f in found if f.get("contents")) >= 2


def _rank_queries():
    from neuron_explorer.analyzers import summary

    return list(summary.RANK_QUERIES) + [q for rule in engine.all_rules() for q in getattr(rule, "RANK_QUERIES", ())]


def _same_rows(a, b) -> bool:
    if hasattr(a, "table"):  # a critical path (critical_path.PATHS)
        return a.table().equals(b.table()) and a.causes == b.causes
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(list(a[k]) == list(b[k]) for k in a)
    return a == b


@pytest.mark.parametrize("where", ["generated", "multirank_128", "v100_resnet50_torch19_memory.json.gz", "h100_timesformer_inference.json.gz"])
def test_rows_of_a_batch_equal_each_rank_alone(five, where):
    """Every per-rank query the engine runs once per batch (rank_rows.RankQuery, declared by the
    summary's figures and the rules) gives each rank the rows its one-rank query gives."""
    from neuron_explorer.analyzers import rank_rows

    run_dir = five[0] if where == "generated" else f"tests/data/traces/{where}"
    queries = _rank_queries()
    assert {"device_busy", "work_ops", "work_kernels", "device_idle_gaps", "device_idle_host", "hotspot_kernel"} <= {q.name for q in queries}
    with open_run(run_dir) as run:
        ranks = run.ranks
        # the paths take the index's rows as they are walked: the index's rows compared from a batch without them
        batch = rank_rows.prepare(run, [q for q in queries if q.name != "critical_paths"], ranks)
        batch["critical_paths"] = rank_rows.prepare(run, queries, ranks)["critical_paths"]
        nonempty = set()
        for q in queries:
            if q.name not in batch:  # a query no rank of the batch can need (its `when`)
                assert q.when is not None and not q.when(run, ranks), q.name
                continue
            for r in ranks:
                one = rank_rows.arrays(run, q, r) if q.arrays else rank_rows.rows(run, q, r)
                assert _same_rows(batch[q.name][r], one), (q.name, r)
                nonempty |= {q.name} if len(one) and (not isinstance(one, dict) or len(next(iter(one.values())))) else set()
    if where.startswith("v100"):  # one rank with a tensor-core device, typed inputs and float32 convolutions
        assert {"precision_typed", "precision_fp32", "critical_paths", "path_index"} <= nonempty
        return
    if where.startswith("h100"):  # recorded with_stack=True: user frames and their figures
        assert {"user_frames", "frame_times", "critical_paths", "path_index"} <= nonempty
        return
    # not trivial: the queries found rows (the generated ranks have kernels, gaps and host work in them)
    assert {"devices", "steps", "device_busy", "work_kernels", "device_idle_gaps", "device_idle_host", "hotspot_kernel",
            "path_index", "critical_paths"} <= nonempty


def test_a_batch_runs_no_per_rank_query_of_its_own(five, monkeypatch):
    """With more than one rank in a batch, no rank runs a declared query's one-rank form: each reads
    its rows of the batch's grouped query."""
    from neuron_explorer import store

    run_dir, _ = five
    ones = {q.one for q in _rank_queries()}
    seen = []
    real = store.Run.sql

    def sql(self, query, params=None):
        seen.append(query)
        return real(self, query, params)

    monkeypatch.setattr(store.Run, "sql", sql)
    analyze(run_dir, write=False, workers=1)
    assert not [q for q in seen if q in ones]
    assert any("GROUP BY rank" in q or "ORDER BY rank" in q for q in seen)


def test_views_re_pointed_rank_after_rank_read_what_fresh_views_read(five, tmp_path):
    """store.create_views on one connection, rank after rank (the macro re-pointed, the views made
    again only when a table's SELECT list changes), reads what views made afresh for those ranks
    read: every view, also where a rank lacks a table the others have."""
    import shutil

    from neuron_explorer import schema
    from neuron_explorer.store import Run, create_views, new_connection

    run_dir, _ = five
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    import pyarrow.parquet as pq

    gone = next(t for t in (*schema.RANK_TABLES[1:], schema.RANK_TABLES[0]) if (copy / "rank=3" / t.file).is_file()
                and pq.read_metadata(copy / "rank=3" / t.file).num_rows)  # another table than events if one has rows
    (copy / "rank=3" / gone.file).unlink()  # rank 3 has none of this table
    views = [t.name for t in schema.RANK_TABLES] + ["steps", "ranks", "devices"]

    def rows(run):
        return {v: run.sql(f"SELECT * FROM {v} ORDER BY ALL").fetchall() for v in views}

    with open_run(copy) as whole:
        run = Run(copy, whole.manifest, new_connection())
        seen = {}
        for ranks in ([0], [3], [1, 2], [3], [4], None, [2]):
            create_views(run, ranks)
            with open_run(copy, ranks=ranks) as fresh:
                assert rows(run) == rows(fresh), ranks
            seen[str(ranks)] = rows(run) | {"event_ranks": run.sql("SELECT DISTINCT rank FROM events ORDER BY 1").fetchall()}
        run.close()
    # not trivial: each rank's views read its own rows, and rank 3's lacking table reads empty
    assert not seen["[3]"][gone.name] and seen["[0]"][gone.name] and seen["[4]"][gone.name]
    assert seen["[1, 2]"]["event_ranks"] == [(1,), (2,)] and [r[0] for r in seen["[4]"]["ranks"]] == [4], gone.name
    assert seen["None"]["event_ranks"] == [(r,) for r in range(RANKS) if r != 3 or gone.name != "events"]


@pytest.mark.parametrize("where", ["generated", "multirank_128", "v100_resnet50_torch19_memory.json.gz", "cuda_event_sync_multistream.json.gz",
                                   "h100_timesformer_inference.json.gz"])
def test_device_idle_gaps_read_from_the_busy_unions_equal_their_sql(five, where):
    """device-idle's gaps are read from the devices' busy unions the summary reads anyway (no union of
    their own), what the host ran in them from those gaps, how each gap's heaviest call compares
    with the other calls of its name and inputs, and how long the host waited on the device in each
    gap, from those: each rank's rows equal the SQL that
    computes them from the events alone (`one`), and a batch's equal `many`."""
    from neuron_explorer.analyzers import rank_rows
    from neuron_explorer.analyzers.rules import device_idle

    run_dir = five[0] if where == "generated" else f"tests/data/traces/{where}"
    with open_run(run_dir) as run:
        queries = (device_idle.GAPS, device_idle.HOST, device_idle.REPEATS, device_idle.WAITS)
        batch = rank_rows.prepare(run, [*summary.RANK_QUERIES, *queries], run.ranks)
        found = 0
        for q in queries:
            many: dict[int, list] = {r: [] for r in run.ranks}
            for row in run.sql(q.many).fetchall():
                many[row[0]].append(tuple(row[1:]))
            for r in run.ranks:
                one = [tuple(x) for x in run.sql(q.one, [r]).fetchall()]
                assert rank_rows.rows(run, q, r) == one == many[r] == batch[q.name][r], (q.name, r)
                found += len(one)
        assert found  # gaps and host work in them


@pytest.mark.parametrize("where", ["generated", "multirank_128"])
def test_device_unions_of_a_batch_equal_each_rank_alone(five, where):
    """The device work the summary merges once per batch (metrics.DEVICE_WORK, grouped by rank) gives
    each rank the rows of its one-rank query, and the summary's device figures from those unions
    (busy, window, idle, communication) equal each device's own evidence queries."""
    from neuron_explorer.analyzers import metrics, rank_rows

    run_dir = five[0] if where == "generated" else f"tests/data/traces/{where}"
    with open_run(run_dir) as run:
        ranks = run.ranks
        batch = rank_rows.prepare(run, [metrics.DEVICE_WORK], ranks)[metrics.DEVICE_WORK.name]
        for r in ranks:
            assert _same_rows(batch[r], rank_rows.arrays(run, metrics.DEVICE_WORK, r)), r
        got = summary.rank_summaries(run, ranks, per_rank=False)
        assert sum(len(s["devices"]) for s in got.values()) >= len(ranks)
        for r in ranks[:8]:  # each device's three queries: a few ranks are enough
            for d in got[r]["devices"]:
                assert d == metrics.device_summary(run, r, d["device"]), (r, d["device"])



def _windows_asked(run_dir, monkeypatch):
    """The run analysed with workers=1: its report, the ranks each call of device_time.windows_many
    asked for, and the queries run on views re-pointed at one rank (`alone`) and on the batch's."""
    from neuron_explorer import store

    alone, grouped = [], []
    real_sql, real_cursor = store.Run.sql, store.Run.query_cursor

    def seen(run, query):
        (alone if run.view_ranks is not None and len(run.view_ranks) == 1 else grouped).append(" ".join(query.split()))

    monkeypatch.setattr(store.Run, "sql", lambda self, query, params=None: (seen(self, query), real_sql(self, query, params))[1])
    monkeypatch.setattr(store.Run, "query_cursor", lambda self, query: (seen(self, query), real_cursor(self, query))[1])
    calls = []
    real_windows = device_time.windows_many
    monkeypatch.setattr(device_time, "windows_many", lambda run, ranks: calls.append(ranks) or real_windows(run, ranks))
    return analyze(run_dir, write=False, workers=1), calls, alone, grouped


def test_the_analysed_windows_of_a_batch_come_from_the_steps_it_read(five, monkeypatch):
    """The analysed windows (each rank's steps: device_time.windows_many) that device-idle and the
    exposed communication read for a rank of a batch of several are the steps' rows the batch read
    once: no query on views re-pointed at one rank reads the steps (each such query re-points the
    views and pays DuckDB's fixed cost: ~3 ms a rank, 256 ranks 0.8 s, when they were asked rank by rank)."""
    run_dir, _ = five
    report, calls, alone, grouped = _windows_asked(run_dir, monkeypatch)
    assert {f["location"]["rank"] for f in report.to_dict()["findings"] if f["rule_id"] == "device-idle"} == set(range(RANKS))
    assert {r for ranks in calls if len(ranks) == 1 for r in ranks} == set(range(RANKS))  # asked rank by rank
    assert any("FROM steps" in q for q in grouped)  # read once, for the batch
    assert not [q for q in alone if "FROM steps" in q]


def test_the_analysed_windows_of_ranks_without_steps_come_from_the_spans_the_batch_read(tmp_path, monkeypatch):
    """Ranks recorded without profiler steps are analysed over their span: that window too is the row
    the batch's summary read for every rank (metrics.SPANS), not a query of each rank's own."""
    for r in range(RANKS):
        write_trace(tmp_path / "traces" / f"rank{r}.json", [e for e in _rank(r) if not e["name"].startswith("ProfilerStep")],
                    baseTimeNanoseconds=BASE, distributedInfo={"rank": r, "world_size": RANKS})
    run_dir = import_traces(tmp_path / "traces", tmp_path / "run").run_dir
    report, calls, alone, _ = _windows_asked(run_dir, monkeypatch)
    idle = [f for f in report.to_dict()["findings"] if f["rule_id"] == "device-idle"]
    assert {f["location"]["rank"] for f in idle} == set(range(RANKS))
    assert {r for ranks in calls if len(ranks) == 1 for r in ranks} == set(range(RANKS))  # asked rank by rank
    assert not [q for q in alone if "min(ts_ns), max(ts_ns + dur_ns)" in q]
