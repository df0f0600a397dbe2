"""Who waits for whom across ranks: rank-skew (straggler), collective-wait, load-imbalance, and the
collective wait per rank in the report, `info` and the MCP summary (analyzers/ranks.py).

The hand-built job: 3 ranks, 3 steps of 1000 µs, each step a GEMM then an NCCL all-reduce on a second
stream, both launched from the step. Times below are on one true clock (µs from the step's start);
each rank's trace reads its own clock: rank 1's is 7.5 ms ahead, rank 2's 3 ms behind.

    step 1      0   100        500 520 510      620                 1000
    rank 0      |    [gemm.......][allreduce.......]                  |   arrives 500
    rank 1      |    [gemm.......]   [allreduce....]                  |   arrives 520 (last)
    rank 2      |    [gemm.......]  [allreduce.....]                  |   arrives 510

    steps 2, 3  0   100        500 520         800      900           1000
    rank 0      |    [gemm.......][allreduce...................]      |   arrives 500
    rank 1      |    [gemm.......]   [allreduce................]      |   arrives 520
    rank 2      |    [gemm............................][allreduce]    |   arrives 800 (last, the straggler)

The all-reduce ends together on every rank (when the last one's data arrived, +100 µs), so the
clocks are aligned on those ends. Compared on raw start times rank 1 would be 7.5 ms "late" everywhere.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from neuron_explorer.analyzers import ranks as xr
from neuron_explorer.analyzers.engine import analyze
from neuron_explorer.analyzers.render import text as render_text
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.info import render_info, run_info
from neuron_explorer.store import open_run

from .conftest import X, workload_env, write_trace

pytestmark = pytest.mark.slow  # tier: spawns torch.distributed processes

BASE = 1_700_000_000_000_000_000
US = 1000
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
CLOCK_US = {0: 0, 1: 7500, 2: -3000}
ARRIVAL_US = {1: {0: 500, 1: 520, 2: 510}, 2: {0: 500, 1: 520, 2: 800}, 3: {0: 500, 1: 520, 2: 800}}


def K(name, ts, dur, stream, corr):
    return X(name, "kernel", ts, dur, pid=0, tid=stream, device=0, stream=stream, correlation=corr)


def _rank_events(rank: int, steps=(1, 2, 3), clock_us: int = 0) -> list[dict]:
    ev = []
    for step in steps:
        t0 = (step - 1) * 1000 + clock_us
        arrive = ARRIVAL_US[step][rank]
        end = max(ARRIVAL_US[step].values()) + 100
        corr = step * 10
        ev += [X(f"ProfilerStep#{step}", "user_annotation", t0, 1000),
               X("aten::mm", "cpu_op", t0 + 10, 20, **{"External id": corr}),
               X("cudaLaunchKernel", "cuda_runtime", t0 + 12, 5, correlation=corr, **{"External id": corr}),
               X("c10d::allreduce_", "cpu_op", t0 + 40, 20, **{"External id": corr + 1}),
               X("cudaLaunchKernel", "cuda_runtime", t0 + 42, 5, correlation=corr + 1, **{"External id": corr + 1}),
               K("ampere_sgemm_128x64_nn", t0 + 100, arrive - 100, 7, corr),
               K(NCCL, t0 + arrive, end - arrive, 20, corr + 1)]
    return ev


def _job(tmp_path: Path, n_ranks: int = 3, clock_us: dict | None = None, steps: dict | None = None) -> Path:
    """Ranks 0-2 as drawn above; further ranks (for the many-rank view) behave like rank 0."""
    clock_us = CLOCK_US if clock_us is None else clock_us
    steps = steps or {}
    for rank in range(n_ranks):
        events = _rank_events(min(rank, 2) if rank < 3 else 0, steps.get(rank, (1, 2, 3)), clock_us.get(rank, 0))
        write_trace(tmp_path / "traces" / f"rank{rank}.json", events, baseTimeNanoseconds=BASE,
                    distributedInfo={"rank": rank, "world_size": n_ranks, "backend": "nccl"})
    return import_traces(tmp_path / "traces", tmp_path / "run").run_dir


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    run_dir = _job(tmp_path_factory.mktemp("cross_rank"))
    return run_dir, analyze(run_dir)


def _one(report, rule_id):
    (f,) = [f for f in report.findings if f.rule_id == rule_id]
    return f


def _evidence(run_dir: Path, sql: str) -> list[dict]:
    """The finding's evidence SQL on plain DuckDB views over the run's files."""
    con = duckdb.connect()
    con.execute(f"CREATE VIEW events AS SELECT * FROM read_parquet('{run_dir}/rank=*/events.parquet')")
    rel = con.execute(sql)
    return [dict(zip([d[0] for d in rel.description], r)) for r in rel.fetchall()]


def test_clocks_are_aligned_on_the_collectives_ends(job):
    run_dir, _ = job
    with open_run(run_dir) as run:
        got = {r["rank"]: r for r in xr.collective_waits(run)["ranks"]}
    assert {r: (g["offset_ns"], g["aligned_on"]) for r, g in got.items()} == {
        0: (0, "collective_ends"), 1: (7_500_000, "collective_ends"), 2: (-3_000_000, "collective_ends")}


def test_the_arrivals_and_the_waits_from_one_read_equal_their_evidence_queries(job):
    """The arrivals and the per-rank waits start from one read of the collective events
    (`collective_events`), dropped once both are kept; each equals its query over the events
    (per_rank_sql, the evidence text) on plain DuckDB views."""
    run_dir, _ = job
    with open_run(run_dir) as run:
        waits = xr.collective_waits(run)["ranks"]
        arrivals = sorted(tuple(r.values()) for r in xr.arrivals(run).to_pylist())
        assert id(run) not in xr._EVENTS
    full = {r["rank"]: r for r in _evidence(run_dir, xr.per_rank_sql())}
    assert [{k: v for k, v in full[w["rank"]].items() if k in w and k not in ("wait_share", "late_steps")} for w in waits] == \
        [{k: v for k, v in w.items() if k not in ("wait_share", "late_steps")} for w in waits]
    assert [w["late_steps"] for w in waits] == [[{k: int(v) for k, v in s.items()} for s in full[w["rank"]]["late_steps"] or []] for w in waits]
    assert arrivals == sorted(tuple(r.values()) for r in _evidence(run_dir, f"WITH {xr.arrivals_sql()}\n{xr.ARRIVALS_SELECT}"))
    assert len(arrivals) == 3 * 3  # three ranks at each of three matched all-reduces


def test_straggler_is_rank_2_late_in_steps_2_and_3(job):
    run_dir, report = job
    f = _one(report, "rank-skew")  # rank 1, 20 µs late in step 1 (0.7% of its time), is below the threshold
    assert f.location.rank == 2 and f.location.steps == [2, 3] and f.location.kernel == NCCL
    # lateness: its arrival minus the median of the others' (500 and 520: the lower, 500)
    assert f.impact_ns == 2 * (800 - 500) * US
    assert f.evidence.values["late_by_step"] == {"2": 300 * US, "3": 300 * US}
    assert f.evidence.values["collectives"] == 2 and f.evidence.values["matched_instances"] == 3
    # saving bound: were it on time, the all-reduce would start at the second-latest arrival (520)
    assert f.saving_bound_ns == 2 * (800 - 520) * US
    assert f.evidence.values["max_clock_offset_ns"] == 7_500_000
    assert "step 2 0.30 ms, step 3 0.30 ms" in f.recommendation
    (row,) = _evidence(run_dir, f.evidence.sql)
    assert (row["rank"], row["late_ns"], row["late_saving_ns"], row["times_last"]) == (2, 600 * US, 560 * US, 2)


def test_collective_wait_is_on_the_ranks_that_arrive_early(job):
    run_dir, report = job
    f = _one(report, "collective-wait")
    # waits: rank 0 (520-500) + 2 x (800-500) = 620 µs; rank 1 0 + 2 x 280 = 560 µs; rank 2 10 µs + 0 + 0
    waits = {w["rank"]: (w["wait_ns"], w["wait_share"]) for w in report.summary["cross_rank"]["ranks"]}
    assert waits == {0: (620 * US, round(620 / 3000, 6)), 1: (560 * US, round(560 / 3000, 6)), 2: (10 * US, round(10 / 3000, 6))}
    assert f.location.rank == 0 and f.location.steps == [1, 2, 3] and f.location.kernel == NCCL
    assert f.impact_ns == (620 + 560 + 10) * US // 3  # the mean wait over ranks
    assert f.evidence.values["waited_for"][0] == {"rank": 2, "late_ns": 600 * US}
    # balanced saving: per instance the last arrival minus the mean arrival: 10 + 2 x (800 - 606.67) µs
    assert f.evidence.values["balanced_saving_ns"] == 396_667
    assert _evidence(run_dir, f.evidence.sql) == [{"mean_wait_ns": f.impact_ns, "balanced_saving_ns": 396_667, "matched_instances": 3}]


def test_load_imbalance_names_the_rank_with_the_most_device_work(job):
    run_dir, report = job
    f = _one(report, "load-imbalance")
    # device work without the all-reduce: the GEMMs, 400, 420 and 410 µs in step 1; 400, 420 and 700 µs in steps 2-3
    assert f.location.rank == 2 and f.location.steps == [2, 3]
    assert f.impact_ns == (420 - 410) * US + 2 * (700 - 420) * US  # max minus median, per step
    assert f.saving_bound_ns == (420 - 410) * US + 2 * 193_333  # max minus mean (506.67 µs in steps 2-3)
    v = f.evidence.values
    assert (v["work"], v["max_work_ns"], v["median_work_ns"]) == ("device", 1810 * US, 1260 * US)
    assert [(r["step"], r["max_ns"], r["heaviest_rank"], r["median_ns"]) for r in _evidence(run_dir, f.evidence.sql)] == [
        (1, 420 * US, 1, 410 * US), (2, 700 * US, 2, 420 * US), (3, 700 * US, 2, 420 * US)]


def test_raw_start_times_would_blame_rank_1(tmp_path):
    """Without the offsets (the same job on one clock) the answer is the same; the offsets alone never
    make a straggler."""
    report = analyze(_job(tmp_path, clock_us={}))
    f = _one(report, "rank-skew")
    assert f.location.rank == 2 and f.impact_ns == 600 * US and f.evidence.values["max_clock_offset_ns"] == 0


def test_a_window_that_began_a_step_later_is_matched_by_step(tmp_path):
    # rank 0 recorded steps 2-3 only: step 1's all-reduce is matched on ranks 1 and 2
    report = analyze(_job(tmp_path, steps={0: (2, 3)}))
    f = _one(report, "rank-skew")
    assert f.location.rank == 2 and f.location.steps == [2, 3] and f.impact_ns == 600 * US
    waits = {w["rank"]: (w["wait_ns"], w["instances"], w["offset_ns"]) for w in report.summary["cross_rank"]["ranks"]}
    # step 1: rank 2 (510) waits 10 µs for rank 1 (520); steps 2-3 as before
    assert waits == {0: (600 * US, 2, 0), 1: (560 * US, 3, 7_500_000), 2: (10 * US, 3, -3_000_000)}


def test_a_rank_waits_in_a_collective_kernel_no_longer_than_it_ran(tmp_path):
    """Two ranks, four steps of 1000 µs, one clock; each step a SendRecv kernel on each rank (an
    all-to-all's point-to-point part, which may finish before its peer arrives):

        steps 1-3   rank 0 [500, 600)   rank 1 [500, 600)   together: no wait
        step 4      rank 0 [500, 540)   rank 1 [700, 740)   rank 1 arrives 200 µs later

    The clocks align on the ends of steps 1-3 (medians). At step 4 rank 0 arrived 200 µs before rank
    1, but its kernel ran 40 µs: it waited in the collective 40 µs, not 200 (multirank_128's rank 0
    arrived 164.18 ms before rank 1 at a kernel of 47.65 ms). Rank 1's lateness is what it cost the
    other rank, 40 µs: 1% of its 4000 µs, under rank-skew's 5% (200 µs would have been 5%: reported)."""
    kernel = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t"
    for rank in (0, 1):
        ev = []
        for step in (1, 2, 3, 4):
            t0, corr = (step - 1) * 1000, step * 10
            start, dur = (500, 100) if step < 4 else ((500, 40) if rank == 0 else (700, 40))
            ev += [X(f"ProfilerStep#{step}", "user_annotation", t0, 1000),
                   X("c10d::alltoall_", "cpu_op", t0 + 40, 20, **{"External id": corr}),
                   X("cudaLaunchKernel", "cuda_runtime", t0 + 42, 5, correlation=corr, **{"External id": corr}),
                   K(kernel, t0 + start, dur, 20, corr)]
        write_trace(tmp_path / "traces" / f"rank{rank}.json", ev, baseTimeNanoseconds=BASE,
                    distributedInfo={"rank": rank, "world_size": 2, "backend": "nccl"})
    report = analyze(import_traces(tmp_path / "traces", tmp_path / "run").run_dir)
    waits = {w["rank"]: (w["wait_ns"], w["late_ns"], w["times_last"]) for w in report.summary["cross_rank"]["ranks"]}
    assert waits == {0: (40 * US, 0, 0), 1: (0, 40 * US, 4)}  # (at a tie the higher rank counts as last)
    assert not [f for f in report.findings if f.rule_id in ("rank-skew", "collective-wait")]


def test_report_and_info_summarise_collective_wait_per_rank(job):
    run_dir, report = job
    text = render_text(report, width=1000)
    assert "collective wait (for the last arrival): 620.00 µs (20.7%) over 3 collectives; last to arrive at 0 of them" in text
    info = run_info(run_dir)
    assert [(r["rank"], r["collective_wait_ns"], r["collectives_matched"]) for r in info["ranks"]] == [
        (0, 620 * US, 3), (1, 560 * US, 3), (2, 10 * US, 3)]
    assert "collective wait (for the last arrival): 620.00 µs (20.7% of its analysed time) over 3 collectives" in render_info(info)


def test_mcp_summary_has_the_collective_wait_per_rank(job):
    from neuron_explorer.agent.tools import AgentRuns

    run_dir, _ = job
    rs = AgentRuns([run_dir])
    try:
        short, out = rs.summary(), rs.summary(detail="full")
    finally:
        rs.close()
    assert short["ok"] and out["ok"]
    assert [(r["rank"], r["wait_ns"], r["instances"]) for r in short["collective_wait"]] == [(0, 620 * US, 3), (1, 560 * US, 3), (2, 10 * US, 3)]
    assert [(r["rank"], r["wait_ns"], r["late_ns"]) for r in out["report_summary"]["cross_rank"]["ranks"]] == [
        (0, 620 * US, 0), (1, 560 * US, 20 * US), (2, 10 * US, 600 * US)]
    assert [r["collective_wait_ns"] for r in out["info"]["ranks"]] == [620 * US, 560 * US, 10 * US]


def test_many_ranks_show_the_spread_and_the_ranks_that_wait_most(tmp_path):
    run_dir = _job(tmp_path, n_ranks=10)  # ranks 3-9 behave like rank 0
    report = analyze(run_dir)
    text = render_text(report, width=1000)
    assert "most waiting: rank 0 620.00 µs (20.7%), rank 3 620.00 µs (20.7%), rank 4 620.00 µs (20.7%) over 3 matched collectives" in text
    assert "collective wait per rank (for the last arrival, share of its analysed time): min 0.3% (rank 2)" in text
    info_text = render_info(run_info(run_dir))
    assert "most waiting: rank 0 620.00 µs (20.7%), rank 3 620.00 µs (20.7%)" in info_text
    assert _one(report, "rank-skew").location.rank == 2


def test_one_rank_is_not_applicable(tmp_path):
    write_trace(tmp_path / "t.json", _rank_events(0), baseTimeNanoseconds=BASE)
    report = analyze(import_traces(tmp_path / "t.json", tmp_path / "run").run_dir)
    reasons = {n["rule_id"]: n["reason"] for n in report.not_applicable}
    assert all("one rank only" in reasons[r] for r in ("rank-skew", "collective-wait", "load-imbalance"))
    assert report.summary["cross_rank"] == {"ranks": [], "instances": 0}


# ---- live: a 2-process gloo job where rank 1 sleeps before each all_reduce ---------------------

GLOO_JOB = """\
import os, sys, time, socket
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import neuron_explorer as nx


def worker(rank, out, port):
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    grad = torch.ones(1000)
    with nx.profile(out, schedule=nx.schedule(wait=0, warmup=1, active=4, repeat=1)) as prof:
        for step in range(6):
            y = torch.matmul(grad.view(10, 100), grad.view(100, 10))
            if rank == 1:
                time.sleep(0.03)  # @late
            dist.all_reduce(grad)  # @all_reduce
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    mp.spawn(worker, args=(sys.argv[1], port), nprocs=2)
"""
LINES = {line.split("# @")[1].strip(): i for i, line in enumerate(GLOO_JOB.splitlines(), 1) if "# @" in line}


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gloo")
    script = tmp / "gloo_job.py"
    script.write_text(GLOO_JOB)
    done = subprocess.run([sys.executable, str(script), str(tmp / "run")], capture_output=True, text=True, timeout=300,
                          cwd=tmp, env=workload_env())
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp / "run", analyze(tmp / "run")


def test_live_gloo_names_rank_1_the_straggler_at_its_sleep(gloo_run):
    run_dir, report = gloo_run
    f = _one(report, "rank-skew")
    steps = [s for (s,) in duckdb.sql(f"SELECT DISTINCT step FROM read_parquet('{run_dir}/rank=1/events.parquet') "
                                      "WHERE kind = 'step' ORDER BY 1").fetchall()]
    assert f.location.rank == 1 and f.location.steps == steps and len(steps) == 4
    assert f.evidence.values["late_collective"] == "c10d::allreduce_" and f.evidence.values["collectives"] == 4
    assert f.source.endswith(f"gloo_job.py:{LINES['late']}")


def test_live_gloo_puts_the_collective_wait_on_rank_0(gloo_run):
    _, report = gloo_run
    f = _one(report, "collective-wait")
    waits = {w["rank"]: w for w in report.summary["cross_rank"]["ranks"]}
    assert f.location.rank == 0 and f.location.op == "c10d::allreduce_"
    assert waits[1]["wait_ns"] == 0 and waits[1]["times_last"] == 4  # rank 1 arrives last at every all_reduce
    assert waits[0]["wait_ns"] == _one(report, "rank-skew").impact_ns  # two ranks: rank 0 waits what rank 1 is late
    assert waits[0]["wait_share"] > 0.5  # it sleeps 30 ms a step before the all_reduce; the rest of the step is ~0.3 ms of work
    assert not [x for x in report.findings if x.rule_id == "load-imbalance"]  # both ranks do the same matmul


def test_work_per_step_is_the_union_of_overlapping_work_without_collectives(tmp_path):
    """Load imbalance's work per rank and step (xr.imbalance, one query over every rank): overlapping
    and nested intervals count once, collectives not at all, and a CPU-only rank's work is its
    top-level operators (an operator inside another is not counted again).

        rank 0, step 1 (µs)   0        100  150   200 210     300        400
          stream 7            [k1.......)
          stream 8                 [k2.........)                                 k1 ∪ k2 = 0..150
          stream 9                      [k3)                                     inside k2
          stream 7                                [k4)                           200..210
          stream 9                                          [nccl all-reduce)   a collective: left out
        (each kernel launched from the step at 0-4 µs)
        rank 1 (CPU only)     [op_a......)  [op_b inside op_a]  thread 2: [op_c: 60..160)  c10d: left out
    """
    r0 = [X("ProfilerStep#1", "user_annotation", 0, 500)]
    for i, (name, ts, dur, s) in enumerate([("k1", 0, 100, 7), ("k2", 50, 100, 8), ("k3", 120, 10, 9), ("k4", 200, 10, 7),
                                            (NCCL, 300, 100, 9)]):  # each launched from the step (its step is its launch's)
        r0 += [X("cudaLaunchKernel", "cuda_runtime", i, 1, correlation=i + 1), K(name, ts, dur, s, i + 1)]
    r1 = [X("ProfilerStep#1", "user_annotation", 0, 500), X("aten::op_a", "cpu_op", 0, 100), X("aten::op_b", "cpu_op", 10, 20),
          X("aten::op_c", "cpu_op", 60, 100, tid=2), X("c10d::allreduce_", "cpu_op", 300, 100)]
    for r, ev in enumerate((r0, r1)):
        write_trace(tmp_path / "traces" / f"rank{r}.json", ev, baseTimeNanoseconds=BASE, distributedInfo={"rank": r, "world_size": 2})
    run_dir = import_traces(tmp_path / "traces", tmp_path / "run").run_dir
    with open_run(run_dir) as run:
        got = xr.imbalance(run)
        rows = run.sql(xr.work_per_step_sql() + "\nSELECT rank, step, work_ns, on_device FROM work ORDER BY rank").fetchall()
    assert rows == [(0, 1, 160 * US, True), (1, 1, 160 * US, False)]
    assert got["steps"] == [{"step": 1, "max_ns": 160 * US, "heaviest_rank": 0, "median_ns": 160 * US, "mean_ns": 160 * US,
                             "ranks": 2, "on_device": False}]
