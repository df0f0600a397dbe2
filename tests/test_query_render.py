"""`query`'s table cuts long cells for the screen, but never so far that two different values of a
column print the same (issue 37: kernel names sharing their first 59 characters printed identically)."""

from __future__ import annotations

from neuron_explorer.agent import QueryResult, query
from neuron_explorer.agent.render import render_table

from .conftest import TRACES


def _table(rows, max_width=10) -> list[str]:
    res = QueryResult(ok=True, columns=["name", "n"], types=["VARCHAR", "BIGINT"], rows=rows, row_count=len(rows))
    return render_table(res, max_width=max_width).splitlines()[2:-1]


def test_cells_are_cut_only_as_far_as_keeps_them_apart():
    #         123456789012345
    rows = [["kernel_AAAA<1>", 1], ["kernel_AAAA<2>", 2], ["short", 3], ["other_name_long", 4]]
    lines = _table(rows)
    # common prefix of the two kernels: 12 characters, so the column is cut at 14 (13 kept + "…"): they fit whole
    assert [line.split()[0] for line in lines] == ["kernel_AAAA<1>", "kernel_AAAA<2>", "short", "other_name_lo…"]
    rows = [["abcdefghijklmnop_x", 1], ["abcdefghijklmnop_y", 2], ["zzzzzzzzzzzzzzzzzzzzzzz", 3]]
    assert [line.split()[0] for line in _table(rows)] == ["abcdefghijklmnop_x", "abcdefghijklmnop_y", "zzzzzzzzzzzzzzzzzz…"]
    rows = [["abcdefghijklmnopqrstu", 1], ["abcdefghijklmnopqrstu", 2], ["xyz", 3]]  # equal values may print equal: cut at 10
    assert [line.split()[0] for line in _table(rows)] == ["abcdefghi…", "abcdefghi…", "xyz"]


def test_every_kernel_of_a_real_trace_prints_its_own_name():
    res = query(TRACES / "h100_timesformer_inference.json.gz", "SELECT name, count(*) AS n FROM events WHERE kind = 'kernel' GROUP BY 1 ORDER BY 1")
    assert res.ok and res.row_count == 20
    printed = [line.rsplit(None, 1)[0] for line in render_table(res).splitlines()[2:-1]]
    assert len(set(printed)) == 20  # 15 before: five pairs shared their first 59 characters
    assert all(p.rstrip() == name or p.rstrip().endswith("…") for p, (name, _) in zip(printed, res.rows))
