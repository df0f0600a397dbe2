"""Many ranks: the text output sums each kind of warning up in one line; `info --json` keeps every one."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import X, cli, write_trace


def _rank_with_overlaps(path: Path, rank: int, overlaps: int) -> None:
    # each pair on its own thread: |a----|
    #                                 |b-----|   (b starts inside a and ends after it: one overlap)
    events = []
    for k in range(overlaps):
        events += [X("a", "cpu_op", 100 * k, 10, tid=k), X("b", "cpu_op", 100 * k + 5, 15, tid=k)]
    write_trace(path, events, distributedInfo={"rank": rank, "world_size": 12})


def test_warnings_of_many_ranks_are_one_line_per_kind(tmp_path: Path):
    traces = tmp_path / "traces"
    for rank in range(12):
        _rank_with_overlaps(traces / f"rank-{rank}.json", rank, overlaps=rank + 1)
    res = cli("import", traces, "-o", tmp_path / "run")
    assert res.returncode == 0, res.stderr
    overlap_lines = [line for line in res.stdout.splitlines() if "overlap" in line]
    assert len(overlap_lines) == 1, res.stdout
    line = overlap_lines[0]
    assert "12 ranks" in line and f"{sum(range(1, 13))} in all" in line
    assert "rank 11 (12), rank 10 (11), rank 9 (10)" in line
    full = json.loads(cli("info", tmp_path / "run", "--json").stdout)["warnings"]
    assert len([w for w in full if "overlap" in w]) == 12


def test_few_warnings_are_shown_as_they_are(tmp_path: Path):
    traces = tmp_path / "traces"
    for rank in range(2):
        _rank_with_overlaps(traces / f"rank-{rank}.json", rank, overlaps=3)
    text = cli("import", traces, "-o", tmp_path / "run").stdout
    assert "rank 0: 3 slices that overlap" in text and "rank 1: 3 slices that overlap" in text
