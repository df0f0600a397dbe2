"""Many ranks: per-rank analysis reads only its own partition and the report stays the same.

A hand-built 4-rank run, each rank a different workload (times in us):
    rank 0  3 steps of 100 us; kernels leave device 0 idle most of its window; a host sync
    rank 1  CPU only: 3 steps of 4200 us, 300 tiny aten::add then a 2000 us aten::mm each
    rank 2  one 1000 us step: 120 aten::add launching 2 us kernels, a float32 mm (A100 properties)
    rank 3  like rank 0, with its collectives 30 us later
Every rank calls c10d::allreduce_ once per step, so rank-skew matches them across ranks. Step 1 is
the one step all ranks share; its collective starts at 60 (rank 0), 4150 (rank 1), 995 (rank 2)
and 90 us (rank 3): rank 1 arrives last, the straggler.
"""

from __future__ import annotations

import contextvars
import json
from pathlib import Path

import pytest

from neuron_explorer import schema, store
from neuron_explorer.analyzers import metrics, rank_rows
from neuron_explorer.analyzers import summary as summary_mod
from neuron_explorer.analyzers.engine import (
    Context,
    NotApplicable,
    _quality_notes,
    all_rules,
    analyze,
    analyze_run,
    leave_to_owners,
    leave_to_the_job,
)
from neuron_explorer.analyzers.ranks import summary as cross_rank_summary
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.errors import InputError
from neuron_explorer.store import open_run

from .conftest import X, cli, write_trace

pytestmark = pytest.mark.slow  # tier: a CLI process per test over many-rank runs (~60 s alone)

BASE = 1_700_000_000_000_000_000
PROPS = [{"id": 0, "name": "NVIDIA A100", "computeMajor": 8, "computeMinor": 0, "totalGlobalMem": 42297524224}]


def K(name, ts, dur, stream=7, cat="kernel", **args):
    return X(name, cat, ts, dur, pid=0, tid=stream, device=0, stream=stream, **args)


def _device_rank(late: int) -> list[dict]:
    ev = []
    for s in range(3):
        t0 = s * 100
        ev += [X(f"ProfilerStep#{s + 1}", "user_annotation", t0, 100),
               X("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation", t0 + 1, 20),
               X("aten::slow_host", "cpu_op", t0 + 25, 30), X("cudaStreamSynchronize", "cuda_runtime", t0 + 56, 10),
               X("c10d::allreduce_", "cpu_op", t0 + 60 + late, 5),
               K("k1", t0 + 10, 5), K("ncclKernel_AllReduce_RING", t0 + 70 + late, 10, stream=9)]
    return ev


def _cpu_rank() -> list[dict]:
    ev = []
    for s in range(3):
        t0 = s * 4200
        ev.append(X(f"ProfilerStep#{s + 1}", "user_annotation", t0, 4200))
        ev += [X("aten::add", "cpu_op", t0 + 10 + i * 7, 5) for i in range(300)]
        ev += [X("aten::mm", "cpu_op", t0 + 2200, 1900), X("c10d::allreduce_", "cpu_op", t0 + 4150, 20)]
    return ev


def _launch_rank() -> list[dict]:
    ev = [X("ProfilerStep#1", "user_annotation", 0, 1000)]
    for i in range(120):
        t = 10 + i * 6
        ev += [X("aten::add", "cpu_op", t, 5, **{"External id": i}),
               X("cudaLaunchKernel", "cuda_runtime", t + 1, 4, correlation=i, **{"External id": i}),
               K("add_kernel", t + 6, 2, correlation=i)]
    ev += [X("aten::mm", "cpu_op", 740, 20, **{"External id": 999, "Input type": ["float", "float"]}),
           X("cudaLaunchKernel", "cuda_runtime", 741, 4, correlation=9999, **{"External id": 999}),
           K("sgemm", 750, 240, correlation=9999), K("Memcpy HtoD (Pageable -> Device)", 10, 60, stream=8, cat="gpu_memcpy"),
           X("c10d::allreduce_", "cpu_op", 995, 3)]
    return ev


RANKS = {0: (_device_rank(0), {}), 1: (_cpu_rank(), {}), 2: (_launch_rank(), {"deviceProperties": PROPS}), 3: (_device_rank(30), {})}


def _write(dir_, ranks) -> None:
    for r in ranks:
        events, extra = RANKS[r]
        write_trace(dir_ / f"rank{r}.json", events, baseTimeNanoseconds=BASE, distributedInfo={"rank": r, "world_size": 4}, **extra)


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("many_ranks")
    _write(tmp / "traces", RANKS)
    run_dir = import_traces(tmp / "traces", tmp / "run").run_dir
    alone = {}
    for r in RANKS:  # each rank imported on its own, with its rank number (so event ids are the same)
        _write(tmp / f"traces_{r}", [r])
        alone[r] = import_traces(tmp / f"traces_{r}", tmp / f"run_{r}").run_dir
    return run_dir, alone


def _plain(report) -> dict:
    """The report as JSON data, its run directory written RUN (evidence SQL may name files in it)."""
    text = json.dumps(report.to_dict(), default=str, sort_keys=True)
    doc = json.loads(text.replace(json.dumps(str(report.run))[1:-1], "RUN"))
    doc.pop("created", None)
    return doc


def _whole_run_reference(run_dir) -> dict:
    """What the engine computed before per-rank views: every number and rule of every rank on
    views over the whole run (the rank picked by each query's `rank = N`), rules in order, ranks
    inside each rule."""
    from neuron_explorer.analyzers import critical_path
    from neuron_explorer.analyzers.advice import attach as attach_contents

    critical_path._CACHE.clear()  # computed afresh here, not taken from the analysis under test
    with open_run(run_dir) as run:
        summaries = {r: summary_mod.rank_summary(run, r) for r in metrics.ranks(run)}
        quality = _quality_notes(run)
        findings, not_applicable = [], []
        per_rank: dict = {}  # rank -> {rule id: ("findings", found)}: one cause, one finding (engine.leave_to_owners)
        for rule in all_rules():
            for rank in [None] if rule.SCOPE == "run" else sorted(summaries):
                try:
                    found = rule.check(Context(run, rank, summaries, quality, rule))
                    attach_contents(run, found)  # what is inside each finding, read from the whole run's views
                    per_rank.setdefault(rank, {})[rule.RULE_ID] = ("findings", found)
                except NotApplicable as e:
                    not_applicable.append({"rule_id": rule.RULE_ID, "rank": rank, "reason": str(e)})
        for rank, results in per_rank.items():
            if rank is not None:
                leave_to_owners([r for r in all_rules() if r.SCOPE != "run"], results)
        for rule in all_rules():  # in the engine's order: rules, then ranks
            for rank in [None] if rule.SCOPE == "run" else sorted(summaries):
                findings += per_rank.get(rank, {}).get(rule.RULE_ID, (None, []))[1]
    with open_run(run_dir) as run:  # and across ranks: a rank's finding whose cause is the job's
        findings = leave_to_the_job(run, [r for r in all_rules() if r.SCOPE != "run"], findings, cross_rank_summary(run),
                                    {r: s["analysed_ns"] for r, s in summaries.items()})
    findings.sort(key=lambda f: (-f.impact_ns, ["high", "medium", "low", "info"].index(f.severity), f.rule_id))
    return {"summary": {"ranks": list(summaries.values())}, "findings": [f.to_dict() for f in findings],
            "not_applicable": not_applicable}


@pytest.mark.parametrize("workers", [1, 3])
def test_report_equals_every_rule_run_on_the_whole_run(many, workers):
    run_dir, _ = many
    got = _plain(analyze(run_dir, write=False, workers=workers))
    want = json.loads(json.dumps(_whole_run_reference(run_dir), default=str, sort_keys=True).replace(str(run_dir), "RUN"))
    assert got["summary"]["ranks"] == want["summary"]["ranks"]
    assert got["findings"] == want["findings"]
    assert got["not_applicable"] == want["not_applicable"]
    # the run is not trivial: several rules fire, on several ranks, and the cross-rank rule names rank 3
    assert {f["rule_id"] for f in got["findings"]} >= {"device-idle", "tiny-ops", "launch-overhead", "rank-skew"}
    assert {f["location"]["rank"] for f in got["findings"]} == {0, 1, 2, 3}
    (skew,) = [f for f in got["findings"] if f["rule_id"] == "rank-skew"]
    # ranks 1 and 2 are CPU only: their collective is the operator, matched between them (ranks 0 and 3
    # have NCCL kernels, which end together once aligned): rank 1 arrives 4150 - 995 us after rank 2
    assert skew["location"]["rank"] == 1 and skew["impact_ns"] == (4150 - 995) * 1000


def test_screening_skips_ranks_with_nothing_to_report_and_the_report_stays_the_same(many, monkeypatch):
    from neuron_explorer.analyzers import engine
    from neuron_explorer.analyzers.rules import tiny_ops

    run_dir, _ = many
    monkeypatch.setattr(engine, "RANK_BATCH", 3)  # two batches: ranks 0-2, then rank 3
    checked = []

    def check(ctx):
        checked.append(ctx.rank)
        return real(ctx)

    real = tiny_ops.check
    monkeypatch.setattr(tiny_ops, "check", check)
    got = _plain(analyze(run_dir, write=False, workers=1))
    monkeypatch.setattr(tiny_ops, "check", real)
    want = json.loads(json.dumps(_whole_run_reference(run_dir), default=str, sort_keys=True).replace(str(run_dir), "RUN"))
    assert got["summary"]["ranks"] == want["summary"]["ranks"]
    assert got["findings"] == want["findings"]
    assert got["not_applicable"] == want["not_applicable"]
    # only rank 1 has 200 tiny operators per step (300); rank 2's 120 in its one step are too few
    assert checked == [1]
    assert [f["location"]["rank"] for f in got["findings"] if f["rule_id"] == "tiny-ops"] == [1]


def test_ranks_are_batched_by_count_and_by_events(many, monkeypatch):
    from neuron_explorer.analyzers import engine

    run_dir, _ = many
    with open_run(run_dir) as run:
        sizes = [e["events"] for e in run.manifest["ranks"]]
        assert engine.rank_batches(run, [0, 1, 2, 3]) == [[0, 1, 2, 3]]
        monkeypatch.setattr(engine, "RANK_BATCH", 3)
        assert engine.rank_batches(run, [0, 1, 2, 3]) == [[0, 1, 2], [3]]
        monkeypatch.setattr(engine, "BATCH_EVENTS", sizes[0] + sizes[1])  # ranks 0 and 1 fill a batch
        assert engine.rank_batches(run, [0, 1, 2, 3])[0] == [0, 1]


def _shared(monkeypatch, run_dir, **env) -> tuple[dict, dict]:
    """The run analysed with its 4 ranks in 4 batches shared out to 2 processes (this one and a
    child), as a run of 400k events or more is; with the written outputs' rows. `env`: set in the
    environment the child inherits."""
    import os

    import pyarrow.parquet as pq

    from neuron_explorer.analyzers import engine

    monkeypatch.setattr(engine, "RANK_BATCH", 1)
    monkeypatch.setattr(engine, "PROCESS_EVENTS", 0)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    report = analyze(run_dir, write=True, workers=2)
    tables = {name: pq.read_table(run_dir / "analysis" / f"{name}.parquet") for name in ("critical_path", "work")}
    return _plain(report), {name: (t.num_rows, sorted(set(t.column("rank").to_pylist()))) for name, t in tables.items()}


def test_batches_shared_out_to_processes_report_what_one_process_does(many, monkeypatch):
    """A child process analyses half the batches: the report, and the rows of every rank in the
    Parquet outputs, are what the whole-run reference and one process give. Meanwhile this process
    prepares the run-wide rules' queries; one that fails there is asked again by its check."""
    import os

    from neuron_explorer.analyzers import batch_processes
    from neuron_explorer.analyzers.rules import collective_wait, load_imbalance

    prepared = []
    monkeypatch.setattr(collective_wait, "prepare", lambda run, real=collective_wait.prepare: prepared.append(run) or real(run))
    monkeypatch.setattr(load_imbalance, "prepare", lambda run: prepared.append(run) or 1 / 0)
    run_dir, _ = many
    got, outputs = _shared(monkeypatch, run_dir)
    assert len(prepared) == 2
    by = {}
    for rank, pid in batch_processes.last_share.items():
        by.setdefault(pid, []).append(rank)
    # two processes: this one and a child, dealt the batches by their events (rank 1 holds most)
    assert len(by) == 2 and os.getpid() in by and sorted(sorted(v) for v in by.values()) == [[0, 2, 3], [1]]
    want = json.loads(json.dumps(_whole_run_reference(run_dir), default=str, sort_keys=True).replace(str(run_dir), "RUN"))
    assert got["summary"]["ranks"] == want["summary"]["ranks"]
    assert got["findings"] == want["findings"]
    assert got["not_applicable"] == want["not_applicable"]
    assert outputs["critical_path"][1] == [0, 1, 2, 3]  # every rank's path rows, the child's ranks' too
    batch_processes.last_share.clear()
    monkeypatch.setenv("NEURON_EXPLORER_ANALYZE_PROCESSES", "1")  # one process: the same report and outputs
    _, alone = _shared(monkeypatch, run_dir)
    assert not batch_processes.last_share
    assert alone == outputs


def test_batches_are_dealt_to_the_process_with_the_fewest_events():
    from neuron_explorer.analyzers.batch_processes import share

    events = {0: 10, 1: 100, 2: 10, 3: 10, 4: 30, 5: 30}
    assert share([[0], [1], [2], [3]], events, 2) == [[[1]], [[0], [2], [3]]]
    assert share([[0, 1], [2, 3], [4, 5]], events, 2) == [[[0, 1]], [[2, 3], [4, 5]]]
    assert share([[0], [2]], events, 3) == [[[0]], [[2]], []]  # a process with nothing: no child is started


def test_a_failed_child_leaves_its_batches_to_this_process(many, monkeypatch, caplog):
    """A child that cannot run (here: its program is missing) costs nothing but its time: this
    process analyses its batches and the report is the same; the log says which ranks and why."""
    import os

    from neuron_explorer.analyzers import batch_processes

    run_dir, _ = many
    monkeypatch.setattr(batch_processes, "CHILD_MODULE", "neuron_explorer.no_such_module")
    with caplog.at_level("WARNING", logger=batch_processes.__name__):
        got, _ = _shared(monkeypatch, run_dir)
    assert set(batch_processes.last_share.values()) == {os.getpid()} and sorted(batch_processes.last_share) == [0, 1, 2, 3]
    (msg,) = [r.getMessage() for r in caplog.records]
    assert "failed (exit status 1: " in msg and "No module named neuron_explorer.no_such_module" in msg
    want = json.loads(json.dumps(_whole_run_reference(run_dir), default=str, sort_keys=True).replace(str(run_dir), "RUN"))
    assert got["findings"] == want["findings"] and got["summary"]["ranks"] == want["summary"]["ranks"]


class _ScreenFails:
    """A rule whose screening fails: its check runs on every rank instead."""
    RULE_ID, TITLE, CATEGORY, SCOPE, THRESHOLDS = "screen-fails", "Screen fails", "hotspot", "rank", {}

    @staticmethod
    def screen(run, summaries):
        raise RuntimeError("no such column")

    @staticmethod
    def check(ctx):
        raise NotApplicable(f"checked rank {ctx.rank}")


def test_a_failing_screen_checks_every_rank(many):
    run_dir, _ = many
    with open_run(run_dir) as run:
        report = analyze_run(run, [_ScreenFails], workers=1)
    assert [(n["rank"], n["reason"]) for n in report.not_applicable] == [(r, f"checked rank {r}") for r in sorted(RANKS)]


def test_summaries_of_many_ranks_in_one_query_equal_each_rank_alone(many):
    run_dir, _ = many
    with open_run(run_dir) as run:
        together = summary_mod.rank_summaries(run, metrics.ranks(run))
        assert together == {r: summary_mod.rank_summary(run, r) for r in metrics.ranks(run)}
    assert together[0]["devices"][0]["comm_ns"] == 30_000 and together[1]["comm_cpu_intervals"] == 3


def test_each_rank_reports_what_it_reports_alone(many):
    run_dir, alone = many
    together = _plain(analyze(run_dir, write=False))
    for r, single_dir in alone.items():
        single = _plain(analyze(single_dir, write=False))
        mine = [f for f in together["findings"] if f["location"]["rank"] == r
                and f["rule_id"] not in ("rank-skew", "collective-wait", "load-imbalance")]  # the cross-rank rules
        assert mine == single["findings"], r
        (summary,) = [s for s in together["summary"]["ranks"] if s["rank"] == r]
        assert summary == single["summary"]["ranks"][0]


def test_evidence_sql_reproduces_findings_on_the_whole_run(many):
    run_dir, _ = many
    report = analyze(run_dir)  # written: evidence may read RUN/analysis/
    with open_run(run_dir) as run:
        for f in report.findings:
            rel = run.sql(f.evidence.sql)
            row = dict(zip([d[0] for d in rel.description], rel.fetchone()))
            shared = [k for k in f.evidence.values if k in row]
            assert shared, f.rule_id
            assert {k: row[k] for k in shared} == {k: f.evidence.values[k] for k in shared}, f.rule_id


def test_held_events_answer_as_the_rank_files_do(many):
    """A batch of small ranks holds its events in memory (store.hold_events): every query that
    reads no args gets the rows and types the Parquet views give, and a query naming args still
    reads the files."""
    from neuron_explorer.store import hold_events, release_events

    cols = ", ".join(c for c in schema.EVENTS.column_names if c != "args")
    every = f"SELECT {cols} FROM events ORDER BY rank, event_id"
    kernels = "SELECT rank, name, count(*), sum(dur_ns) FROM events WHERE kind = 'kernel' GROUP BY ALL ORDER BY ALL"
    with_args = "SELECT rank, count(args) FROM events GROUP BY rank ORDER BY rank"
    with open_run(many[0], ranks=[0, 1, 2, 3]) as run:
        before = {q: run.sql(q).fetchall() for q in (every, kernels, with_args)}
        types = run.sql(f"DESCRIBE {every}").fetchall()
        assert run.file_events() == "events"
        few_before = run.sql("SELECT e.rank, count(o.args) FROM events e JOIN events o USING (event_id) WHERE e.kind = 'cpu_op' "
                             "GROUP BY ALL ORDER BY ALL").fetchall()
        events = sum(e["events"] for e in run.manifest["ranks"])
        assert len(before[every]) == events and before[kernels]
        assert events <= 4 * store.HOLD_RANK_EVENTS and hold_events(run, events)
        assert "ARROW" in _plan(run, kernels) and "ARROW" not in _plan(run, with_args)
        assert {q: run.sql(q).fetchall() for q in before} == before
        # the args of a few events read from the files, the rest from the held events (the findings' contents)
        few = (f"SELECT e.rank, count(o.args) FROM events e JOIN {run.file_events()} o USING (event_id) "
               "WHERE e.kind = 'cpu_op' GROUP BY ALL ORDER BY ALL")
        assert "ARROW" in _plan(run, few) and run.sql(few).fetchall() == few_before and any(n for _, n in few_before)
        assert run.sql(f"DESCRIBE {every}").fetchall() == types
        assert rank_rows.arrow_of(run, kernels, []).to_pylist() == [dict(zip(("rank", "name", "count_star()", "sum(dur_ns)"), r))
                                                                     for r in before[kernels]]
        release_events(run)
        assert run.held is None and "ARROW" not in _plan(run, kernels)
        # one rank's file, more events than it may hold, or large ranks: the views read the files
        assert not hold_events(run, store.HOLD_EVENTS + 1) and not hold_events(run, 4 * store.HOLD_RANK_EVENTS + 1)
        assert run.held is None
    with open_run(many[0], ranks=[2]) as run:
        assert not hold_events(run, 10) and run.held is None


def test_contents_of_a_held_batch_come_from_the_grouped_query(many, monkeypatch):
    """The findings' contents over held events are the grouped query's (the operators' args read
    from the files by `Run.file_events()`), not the one-finding-at-a-time fallback that a failing
    grouped query leaves (150 ms a finding on a batch of 128 ranks)."""
    from neuron_explorer.analyzers import advice

    alone = []
    monkeypatch.setattr(advice, "finding_contents", lambda *a, **k: alone.append(a) or {})
    with open_run(many[0]) as run:
        report = analyze_run(run, workers=1)
    assert report.findings and not alone
    assert any(f.contents.get("roots") for f in report.findings if f.location.rank is not None)


def _plan(run, query: str) -> str:
    return " ".join(str(v) for row in run.sql(f"EXPLAIN {query}").fetchall() for v in row).upper()


def test_open_run_with_ranks_reads_only_those_partitions(many):
    run_dir, _ = many
    with open_run(run_dir, ranks=[2]) as run:
        assert run.sql("SELECT DISTINCT rank FROM events").fetchall() == [(2,)]
        assert run.sql("SELECT DISTINCT rank FROM frames").fetchall() in ([], [(2,)])
        assert run.sql("SELECT rank FROM ranks").fetchall() == [(2,)]
        assert run.sql("SELECT DISTINCT rank FROM devices").fetchall() == [(2,)]
        assert run.sql("SELECT count(*) FROM events").fetchone()[0] == run.manifest["ranks"][2]["events"]
        whole = run.with_ranks([0, 3])
        try:
            assert whole.sql("SELECT DISTINCT rank FROM events ORDER BY 1").fetchall() == [(0,), (3,)]
        finally:
            whole.close()
        # the original connection's views are untouched by with_ranks on another connection
        assert run.sql("SELECT DISTINCT rank FROM events").fetchall() == [(2,)]


_SETTING: contextvars.ContextVar[str] = contextvars.ContextVar("test_many_ranks_setting", default="unset")


class _ReadsSetting:
    """A rule that reports the context variable it sees (as rules read settings like device peaks)."""
    RULE_ID, TITLE, CATEGORY, SCOPE, THRESHOLDS = "reads-setting", "Reads a setting", "hotspot", "rank", {}

    @staticmethod
    def check(ctx):
        raise NotApplicable(_SETTING.get())


@pytest.mark.parametrize("workers", [1, 3])
def test_rules_on_every_rank_see_the_callers_context(many, workers):
    run_dir, _ = many
    token = _SETTING.set("set by the caller")
    try:
        with open_run(run_dir) as run:
            report = analyze_run(run, [_ReadsSetting], workers=workers)
    finally:
        _SETTING.reset(token)
    assert [(n["rank"], n["reason"]) for n in report.not_applicable] == [(r, "set by the caller") for r in sorted(RANKS)]


# ---- import of many rank files -----------------------------------------------------------------

def _tables(run_dir) -> dict:
    import pyarrow.parquet as pq

    return {str(p.relative_to(run_dir)): pq.read_table(p) for p in sorted(run_dir.glob("rank=*/*.parquet"))}


def test_parallel_import_writes_the_same_run_as_one_process(many, tmp_path):
    run_dir, _ = many
    traces = run_dir.parent / "traces"
    calls = []
    parallel = import_traces(traces, tmp_path / "parallel", workers=3, progress=lambda *a: calls.append(a)).run_dir
    serial = import_traces(traces, tmp_path / "serial", workers=1).run_dir
    drop = ("created", "command")
    m_par, m_ser = (({k: v for k, v in json.loads((d / "manifest.json").read_text()).items() if k not in drop}) for d in (parallel, serial))
    assert m_par == m_ser
    assert [e["rank"] for e in m_par["ranks"]] == sorted(RANKS)
    a, b = _tables(parallel), _tables(serial)
    assert sorted(a) == sorted(b) and len(a) == 5 * len(RANKS)
    for name in a:
        assert a[name].equals(b[name]), name
    assert not list(tmp_path.glob(".*"))  # no temporary directory left beside the runs
    # progress: files and bytes done, from none to all
    sizes = sum(p.stat().st_size for p in traces.glob("*.json"))
    assert calls[0] == (0, len(RANKS), 0, sizes) and calls[-1] == (len(RANKS), len(RANKS), sizes, sizes)
    assert [c[0] for c in calls] == list(range(len(RANKS) + 1))


def test_a_rank_claimed_twice_fails_in_parallel_and_leaves_nothing(many, tmp_path):
    run_dir, _ = many
    traces = tmp_path / "traces"
    traces.mkdir()
    for p in (run_dir.parent / "traces").glob("*.json"):
        (traces / p.name).write_bytes(p.read_bytes())
    (traces / "rank9.json").write_bytes((traces / "rank2.json").read_bytes())  # says rank 2 inside
    with pytest.raises(InputError, match="rank 2 is also claimed by"):
        import_traces(traces, tmp_path / "run", workers=3)
    assert not (tmp_path / "run").exists() and not list(tmp_path.glob(".run*"))


def _copy_traces(many, dest):
    dest.mkdir()
    for p in (many[0].parent / "traces").glob("*.json"):
        (dest / p.name).write_bytes(p.read_bytes())
    return dest


def _inodes(d) -> set[int]:
    return {p.stat().st_ino for p in d.rglob("*.parquet")}


def test_a_failing_trace_is_named_the_others_are_kept_and_a_rerun_imports_only_it(many, tmp_path):
    traces = _copy_traces(many, tmp_path / "traces")
    good = (traces / "rank3.json").read_bytes()
    (traces / "rank3.json").write_bytes(good[: len(good) // 2])  # cut short, as by a full disk
    r = cli("import", traces, "-o", tmp_path / "run", "--workers", "2")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "1 of 4 traces failed (rank3.json: " in r.stderr and "the 3 imported are kept" in r.stderr
    assert not (tmp_path / "run").exists()
    kept = tmp_path / ".run.kept"
    assert len(json.loads((kept / "kept.json").read_text())) == 3
    before = _inodes(kept)
    assert len(before) == 3 * 5  # five tables per rank
    (traces / "rank3.json").write_bytes(good)
    calls = []
    run_dir = import_traces(traces, tmp_path / "run", workers=2, progress=lambda *a: calls.append(a)).run_dir
    # the three kept ranks are moved in, not imported again: the same files
    assert before <= _inodes(run_dir) and not kept.exists()
    a, b = _tables(run_dir), _tables(many[0])
    assert sorted(a) == sorted(b) and all(a[k].equals(b[k]) for k in a)
    assert calls[-1][:2] == (4, 4)


def _dying_import_rank(index, path, *args):
    """_import_rank, in a worker process that dies on rank2.json (as when the kernel kills it)."""
    import os

    from neuron_explorer.collectors import chrome_trace

    if path.name == "rank2.json":
        os._exit(9)
    return chrome_trace._real_import_rank(index, path, *args)


def test_a_worker_that_dies_is_reported_and_the_rerun_finishes_the_run(many, tmp_path, monkeypatch):
    from neuron_explorer.collectors import chrome_trace

    traces = _copy_traces(many, tmp_path / "traces")
    monkeypatch.setattr(chrome_trace, "_real_import_rank", chrome_trace._import_rank, raising=False)
    monkeypatch.setattr(chrome_trace, "_import_rank", _dying_import_rank)
    with pytest.raises(InputError, match="rank2.json: its worker process died") as e:
        import_traces(traces, tmp_path / "run", workers=2)
    # the others in flight when it died went round again: only rank2.json failed, the others are kept
    assert [Path(p).name for p in e.value.failed] == ["rank2.json"] and str(e.value).count("died") == 1
    monkeypatch.undo()
    kept = json.loads((tmp_path / ".run.kept" / "kept.json").read_text())
    assert sorted(k["rank"] for k in kept.values()) == [0, 1, 3]
    run_dir = import_traces(traces, tmp_path / "run", workers=2).run_dir
    a, b = _tables(run_dir), _tables(many[0])
    assert sorted(a) == sorted(b) and all(a[k].equals(b[k]) for k in a)


def _collecting_import_rank(index, path, *args):
    """_import_rank, in a worker whose collector makes a full pass first (as a long decode's do)."""
    import gc

    from neuron_explorer.collectors import chrome_trace

    gc.collect()
    return chrome_trace._real_import_rank(index, path, *args)


def test_workers_forked_from_a_process_with_duckdb_garbage_import(many, tmp_path, monkeypatch):
    """A notebook (or a test run) that analysed before it imports holds DuckDB connections in
    reference cycles, not yet collected, whose threads the forked workers do not have: a worker
    that collected one joined a thread that is not there and died in pthread_join, and every trace
    it held was reported as "its worker process died"."""
    import gc

    import duckdb

    from neuron_explorer.collectors import chrome_trace

    traces = _copy_traces(many, tmp_path / "traces")
    monkeypatch.setattr(chrome_trace, "_real_import_rank", chrome_trace._import_rank, raising=False)
    monkeypatch.setattr(chrome_trace, "_import_rank", _collecting_import_rank)
    was_enabled = gc.isenabled()
    gc.disable()  # the garbage is left for the workers' collectors, not this process's
    try:
        for _ in range(2):
            cycle: dict = {"con": duckdb.connect()}
            cycle["self"] = cycle
            cycle["con"].execute("SET threads = 2")
            assert cycle["con"].execute("SELECT sum(i) FROM range(2000000) t(i)").fetchone()[0] > 0
            del cycle
        run_dir = import_traces(traces, tmp_path / "run", workers=2).run_dir
    finally:
        if was_enabled:
            gc.enable()
        gc.collect()
    a, b = _tables(run_dir), _tables(many[0])
    assert sorted(a) == sorted(b) and all(a[k].equals(b[k]) for k in a)


def test_import_workers_are_bounded_by_cores_files_and_memory(many, monkeypatch):
    from neuron_explorer.collectors import chrome_trace

    files = sorted((many[0].parent / "traces").glob("*.json"))
    monkeypatch.setattr(chrome_trace.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(chrome_trace, "_available_memory", lambda: 64 << 30)
    assert chrome_trace.import_workers(files) == 4  # one per file
    assert chrome_trace.import_workers(files, 2) == 2
    monkeypatch.setattr(chrome_trace.os, "cpu_count", lambda: 3)
    assert chrome_trace.import_workers(files, 16) == 3  # one per core
    need = chrome_trace.WORKER_BASE_BYTES + chrome_trace.WORKER_BYTES_PER_JSON_BYTE * max(f.stat().st_size for f in files)
    monkeypatch.setattr(chrome_trace, "_available_memory", lambda: int(2.6 * need / 0.8))
    assert chrome_trace.import_workers(files) == 2  # two fit in memory
    monkeypatch.setattr(chrome_trace, "_available_memory", lambda: 1 << 20)
    assert chrome_trace.import_workers(files) == 1


# ---- views of many ranks -----------------------------------------------------------------------

STEP_US = {r: 100 + 10 * r for r in range(10)} | {7: 400}  # rank 7 is the slowest, rank 0 the fastest


@pytest.fixture(scope="module")
def ten(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ten_ranks")
    for r, step in STEP_US.items():
        ev = []
        for s in range(3):
            t0 = s * step
            ev += [X(f"ProfilerStep#{s + 1}", "user_annotation", t0, step), X("aten::mm", "cpu_op", t0 + 1, step - 10)]
        write_trace(tmp / "traces" / f"rank{r}.json", ev, baseTimeNanoseconds=BASE, distributedInfo={"rank": r, "world_size": 10})
    return import_traces(tmp / "traces", tmp / "run").run_dir


def test_info_of_many_ranks_is_a_summary_and_json_keeps_every_rank(ten):
    from neuron_explorer.info import render_info, run_info

    info = run_info(ten)
    assert [r["rank"] for r in info["ranks"]] == list(range(10))  # --json: every rank
    text = render_info(info)
    assert "10 ranks (0-9) of 10" in text
    assert not any(line.startswith("rank ") for line in text.splitlines())  # no block per rank
    slow = next(line for line in text.splitlines() if "slowest ranks" in line)
    fast = next(line for line in text.splitlines() if "fastest ranks" in line)
    assert slow.split(": ", 1)[1].startswith("rank 7 400.00 µs, rank 9 190.00 µs")
    assert fast.split(": ", 1)[1].startswith("rank 0 100.00 µs, rank 1 110.00 µs")
    assert "step time per rank (its median step): min 100.00 µs (rank 0)" in text and "max 400.00 µs (rank 7)" in text
    assert "steps: 3 (#1..#3) on 10 ranks (0-9)" in text and "CPU only on 10 ranks (0-9)" in text


def test_text_report_of_many_ranks_summarises_them(ten):
    from neuron_explorer.analyzers.render import markdown, text

    report = analyze(ten, write=False)
    assert [r["rank"] for r in report.summary["ranks"]] == list(range(10))
    out = text(report, width=200)
    assert "10 ranks (0-9)" in out
    assert not any(line.startswith("rank ") for line in out.splitlines())
    slow = next(line for line in out.splitlines() if "slowest ranks" in line)
    assert slow.split(": ", 1)[1].startswith("rank 7 400.00 µs, rank 9 190.00 µs")
    assert "min 100.00 µs (rank 0)" in out and "max 400.00 µs (rank 7)" in out
    assert "slowest ranks: rank 7" in markdown(report)


def test_the_same_finding_on_many_ranks_is_one_row(ten, tmp_path):
    from neuron_explorer.analyzers.render import text

    for r in range(9):  # nine copies of rank 0's trace
        doc = json.loads((ten.parent / "traces" / "rank0.json").read_text())
        doc["distributedInfo"]["rank"] = r
        (tmp_path / "traces").mkdir(exist_ok=True)
        (tmp_path / "traces" / f"rank{r}.json").write_text(json.dumps(doc))
    report = analyze(import_traces(tmp_path / "traces", tmp_path / "run").run_dir, write=False)
    hot = [f for f in report.findings if f.rule_id == "hotspot"]
    assert len(hot) == 9 and len({f.title for f in hot}) == 1
    out = text(report, width=250)
    assert len([line for line in out.splitlines() if "│ hotspot" in line]) == 1
    (head,) = [line for line in out.splitlines() if line.split(". ", 1)[-1].startswith(hot[0].title)]
    assert head.endswith(f"{hot[0].title} — on 9 ranks (0-8)")
    assert "   where: ranks 0-8 · aten::mm" in out


def test_critical_path_table_of_many_ranks_equals_the_whole_run_one(many):
    import pyarrow.parquet as pq

    from neuron_explorer.analyzers import critical_path as cp
    from neuron_explorer.analyzers.critical_path import path_table

    run_dir, _ = many
    analyze(run_dir)
    written = pq.read_table(run_dir / "analysis" / "critical_path.parquet")
    cp._CACHE.clear()  # computed afresh on views over the whole run
    with open_run(run_dir) as run:
        whole = path_table(run)
    assert written.num_rows > 0 and sorted(set(written["rank"].to_pylist())) == [0, 1, 2, 3]
    assert written.equals(whole)


def test_cli_import_with_workers_and_progress(many, tmp_path):
    from .conftest import cli

    traces = many[0].parent / "traces"
    quiet = cli("import", traces, "-o", tmp_path / "quiet", "--workers", "2")
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""  # no bar unless stderr is a terminal or --progress asks
    assert [e["rank"] for e in json.loads((tmp_path / "quiet" / "manifest.json").read_text())["ranks"]] == sorted(RANKS)
    shown = cli("import", traces, "-o", tmp_path / "shown", "--workers", "2", "--progress")
    assert shown.returncode == 0, shown.stderr
    assert f"importing {len(RANKS)}/{len(RANKS)} files" in shown.stderr
    bad = cli("import", traces, "-o", tmp_path / "bad", "--workers", "0")
    assert bad.returncode != 0 and not (tmp_path / "bad").exists()


def test_real_two_rank_trace_report_equals_every_rule_run_on_the_whole_run(tmp_path):
    from .conftest import TRACES

    run_dir = import_traces(TRACES / "multirank_128", tmp_path / "run").run_dir
    got = _plain(analyze(run_dir, write=False))
    want = json.loads(json.dumps(_whole_run_reference(run_dir), default=str, sort_keys=True).replace(str(run_dir), "RUN"))
    assert [r["rank"] for r in got["summary"]["ranks"]] == [0, 1]
    assert got["summary"]["ranks"] == want["summary"]["ranks"]
    assert got["findings"] == want["findings"] and got["not_applicable"] == want["not_applicable"]
    assert {f["location"]["rank"] for f in got["findings"]} == {0, 1}


@pytest.mark.parametrize("large", [False, True], ids=["tables", "compressed"])
def test_parquet_outputs_are_taken_from_the_analysis_and_equal_each_rank_computed_again(ten, large, monkeypatch):
    """analyze keeps each rank's rows of critical_path.parquet and work.parquet as its analysis
    ends (10 ranks: more than the critical path's cache of recent ranks holds), as tables, or
    compressed in a run of more events than a batch (here made small), and writes the same
    tables as computing every rank's path and work again on its own partition."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from neuron_explorer.analyzers import critical_path as cp
    from neuron_explorer.analyzers import engine, outputs

    if large:
        monkeypatch.setattr(engine, "BATCH_EVENTS", 10)  # the run: 10 ranks of 6 events
    report = analyze(ten)
    assert sorted(report.rank_parts) == list(range(10))
    assert {type(p["work"]) for p in report.rank_parts.values()} == ({bytes} if large else {pa.Table})
    written = {name: pq.read_table(ten / "analysis" / f"{name}.parquet") for name in ("critical_path", "work")}
    cp._CACHE.clear()
    with open_run(ten) as run:
        again = {"critical_path": outputs._critical_path(run, list(range(10))), "work": outputs._work(run, list(range(10)))}
    assert sorted(set(written["critical_path"]["rank"].to_pylist())) == list(range(10))
    assert written["critical_path"].num_rows >= 10 * 3  # every step of every rank has a path
    for name in written:
        assert written[name].equals(again[name]), name


def test_views_pointed_at_a_rank_are_made_when_it_is_first_queried(many):
    """The engine points each rank's views lazily (store.point_views): a rank whose queries its
    batch ran makes none; a query reads the rank it was pointed at, never the one before."""
    from neuron_explorer.store import Run, create_views, new_connection, point_views

    run_dir, _ = many
    with open_run(run_dir) as opened:
        run = Run(opened.path, opened.manifest, new_connection())
        try:
            create_views(run, [0])
            assert run.sql("SELECT DISTINCT rank FROM events").fetchall() == [(0,)]
            point_views(run, [2])
            assert run.view_ranks == [2] and run.views_pending == [2]
            assert run.sql("SELECT DISTINCT rank FROM events").fetchall() == [(2,)] and run.views_pending is None
            point_views(run, [3])
            cur = run.query_cursor("SELECT DISTINCT rank FROM events")
            assert cur.sql("SELECT DISTINCT rank FROM events").fetchall() == [(3,)]
            cur.close()
        finally:
            run.con.close()
