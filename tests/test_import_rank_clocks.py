"""Ranks whose clocks or profiling windows differ: cross-rank skew compares the same calls on one clock.

Three ranks, three steps of 100 µs each; in every step rank 0 reaches the allreduce 20 µs after
the others (it is the straggler):

    rank 0   |step 1 ..........[allreduce]|step 2 ..........[allreduce]|...     arrives at +80 µs
    rank 1   |step 1 ......[allreduce]    |step 2 ......[allreduce]    |...     arrives at +60 µs
    rank 2   same as rank 1, but its clock reads 7.5 ms later (or its window began a step later)

Compared on raw start times, rank 2 would arrive last everywhere, 7.5 ms "late".
"""

from __future__ import annotations

from pathlib import Path

from neuron_explorer.analyzers.engine import analyze
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import X, write_trace

BASE = 1_700_000_000_000_000_000
ARRIVAL_US = {0: 80, 1: 60, 2: 60}


def _job(tmp_path: Path, clock_offset_us: dict[int, int], first_step: dict[int, int] | None = None) -> Path:
    first_step = first_step or {}
    for rank, arrival in ARRIVAL_US.items():
        shift = clock_offset_us.get(rank, 0)
        events = []
        for step in range(first_step.get(rank, 1), 4):
            t0 = (step - 1) * 100 + shift
            events += [X(f"ProfilerStep#{step}", "user_annotation", t0, 100),
                       X("aten::mm", "cpu_op", t0 + 5, arrival - 10),
                       X("c10d::allreduce_", "cpu_op", t0 + arrival, 95 - arrival)]
        write_trace(tmp_path / "traces" / f"rank{rank}.json", events, baseTimeNanoseconds=BASE,
                    distributedInfo={"rank": rank, "world_size": 3})
    return import_traces(tmp_path / "traces", tmp_path / "run").run_dir


def _skew(run_dir: Path):
    (f,) = [f for f in analyze(run_dir).findings if f.rule_id == "rank-skew"]
    return f


def test_same_clock_names_the_straggler(tmp_path: Path):
    f = _skew(_job(tmp_path, {}))
    assert f.location.rank == 0 and f.impact_ns == 3 * 20_000 and f.evidence.values["collectives"] == 3


def test_a_rank_clock_7_5_ms_ahead_does_not_make_it_the_straggler(tmp_path: Path):
    f = _skew(_job(tmp_path, {2: 7500}))
    assert f.location.rank == 0 and f.impact_ns == 3 * 20_000
    assert f.evidence.values["max_clock_offset_ns"] == 7_500_000


def test_a_window_that_began_a_step_later_compares_the_same_calls(tmp_path: Path):
    # rank 2 recorded steps 2-3 only: its first allreduce is the others' second; step 1's is matched
    # on ranks 0 and 1, where rank 0 is 20 µs late too
    f = _skew(_job(tmp_path, {}, first_step={2: 2}))
    assert f.location.rank == 0 and f.impact_ns == 3 * 20_000 and f.evidence.values["collectives"] == 3
    assert f.evidence.values["late_by_step"] == {"1": 20_000, "2": 20_000, "3": 20_000}
