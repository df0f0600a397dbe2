"""Figures never larger than the trace (issue #33, item 1): on every shared trace, no finding's
impact nor its saving bound exceeds the analysed time of its rank (`summary.ranks[i].analysed_ns`:
the profiler steps' total, or the span without steps), and no share exceeds 1; the device-time
breakdown of every device (`summary.ranks[i].device_time`) is exclusive and adds up to the analysed
window exactly, per step and in all.

A finding without a rank (a job-wide one) is held to the ranks' analysed time together.
"""

from __future__ import annotations

import pytest

from neuron_explorer.analyzers import analyze
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import TRACES, real_traces

KNOWN = {
    # (trace, rule): a figure larger than the trace, known and not yet fixed, with the figures measured;
    # the test reports it as xfail. Empty since python-loop and comm-exposed were fixed (issue #33).
}


def _traces() -> list:
    out = real_traces()
    if (TRACES / "multirank_128").is_dir():
        out.append(TRACES / "multirank_128")
    return out


def _name(path) -> str:
    return path.name.split(".")[0]


def violations(report: dict) -> list[tuple[str, str]]:
    """(rule id, what) for each figure of the report larger than its rank's analysed time."""
    ranks = {r["rank"]: r for r in report["summary"]["ranks"]}
    out = []
    for f in report["findings"]:
        rank = (f.get("location") or {}).get("rank")
        analysed = ranks[rank]["analysed_ns"] if rank in ranks else sum(r["analysed_ns"] or 0 for r in ranks.values())
        for key in ("impact_ns", "saving_bound_ns"):
            if analysed is not None and (f.get(key) or 0) > analysed:
                out.append((f["rule_id"], f"{key} {f[key]} > analysed {analysed} (rank {rank}): {f['title'][:90]}"))
        if analysed and (f.get("impact_ns") or 0) / analysed > 1 + 1e-9 or (f.get("impact_share") or 0) > 1:
            out.append((f["rule_id"], f"share {f.get('impact_share')} of rank {rank}: {f['title'][:90]}"))
    for r in ranks.values():
        for d in r.get("device_time") or []:
            parts = [d[k] for k in ("compute_ns", "communication_ns", "memory_ns", "idle_ns")]
            if min(parts) < 0 or sum(parts) != d["window_ns"] or d["window_ns"] != r["analysed_ns"]:
                out.append(("summary", f"rank {r['rank']} device {d['device']} time {parts} does not add up to {d['window_ns']} "
                                       f"(analysed {r['analysed_ns']})"))
            for st in d["steps"]:
                parts = [st[k] for k in ("compute_ns", "communication_ns", "memory_ns", "idle_ns")]
                if min(parts) < 0 or sum(parts) != st["dur_ns"]:
                    out.append(("summary", f"rank {r['rank']} device {d['device']} step {st['step']} time {parts} != {st['dur_ns']}"))
        overall = (r.get("bound") or {}).get("overall") or {}
        for c, v in (overall.get("shares") or {}).items():
            if v > 1:
                out.append(("summary", f"rank {r['rank']} bound share {c} = {v}"))
        counted = (r.get("achieved") or {}).get("counted_share")
        if counted is not None and not 0 <= counted <= 1:
            out.append(("summary", f"rank {r['rank']} achieved.counted_share = {counted}"))
    return out


@pytest.mark.parametrize("path", _traces(), ids=_name)
def test_no_figure_is_larger_than_the_analysed_time(path, tmp_path):
    run_dir = import_traces(path, tmp_path / "run").run_dir
    report = analyze(run_dir, write=False).to_dict()
    found = violations(report)
    name = _name(path)
    unknown = [what for rule, what in found if (name, rule) not in KNOWN]
    assert not unknown, "\n".join(unknown)
    known = sorted({rule for rule, _ in found if (name, rule) in KNOWN})
    if known:
        pytest.xfail(f"figures larger than the trace in rules owned elsewhere: {', '.join(known)} "
                     f"({'; '.join(KNOWN[(name, r)] for r in known)})")


def test_the_check_sees_a_breakdown_that_does_not_add_up():
    """A device time whose classes miss 1 ns of the window, and a step with a negative class, are caught."""
    dev = {"device": 0, "window_ns": 100, "compute_ns": 50, "communication_ns": 20, "memory_ns": 10, "idle_ns": 19,
           "steps": [{"step": 1, "dur_ns": 100, "compute_ns": 60, "communication_ns": 30, "memory_ns": 20, "idle_ns": -10}]}
    report = {"summary": {"ranks": [{"rank": 0, "analysed_ns": 100, "bound": None, "device_time": [dev]}]}, "findings": []}
    assert [r for r, _ in violations(report)] == ["summary", "summary"]
    report["summary"]["ranks"][0]["achieved"] = {"counted_share": 1.2}  # counted kernels' time above all compute kernels'
    assert [r for r, _ in violations(report)] == ["summary"] * 3


def test_the_check_sees_a_figure_larger_than_the_trace():
    """The check is not blind: a finding of 3,080 ms on a 1,074 ms rank (the A100 host-sync of the issue) is caught."""
    report = {"summary": {"ranks": [{"rank": 0, "analysed_ns": 1_074_000_000, "bound": None}]},
              "findings": [{"rule_id": "host-sync", "impact_ns": 3_080_000_000, "saving_bound_ns": 3_080_000_000,
                            "impact_share": 1.0, "location": {"rank": 0}, "title": "715 host-device synchronisations"}]}
    assert {r for r, _ in violations(report)} == {"host-sync"} and len(violations(report)) == 3
