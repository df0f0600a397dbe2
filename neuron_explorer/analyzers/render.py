"""Render a Report as terminal text (rich, fits 100 columns) or Markdown. Pure: Report in, string out.

Must not: compute numbers (they come from the Report) or write files.
"""

from __future__ import annotations

import io

from ..fmt import collective_wait_lines as _wait_lines
from ..fmt import duration, kernel_name, share, summarise_warnings
from ..fmt import id_ranges as _id_ranges
from ..fmt import shapes as _shapes
from ..fmt import spread as _spread_of
from .critical_path import heaviest_words
from .device_time import COUNTED_SHARE_MIN, launched_by
from .metrics import no_device_words
from .model import Finding, Report

INSIDE_SHOWN = 5
"""Children of a finding the text and Markdown reports list (report.json has every kept one)."""
ROOT_NAMES, ADVICE = "of them:", "advice:"
"""How `inside_lines` starts its line of the roots by name and each advice line (the dashboard's
findings grid keeps the children apart from them)."""
_KIND_WORD = {"cpu_op": "op", "runtime": "runtime", "kernel": "kernel", "memcpy": "memcpy", "memset": "memset"}


def inside_lines(f: Finding, shown: int = INSIDE_SHOWN) -> list[str]:
    """What is inside a finding (its `contents`, analyzers/contents.py), in a few lines: the roots
    (count, time, their commonest shapes; where they have several names, the heaviest names; the
    graph-replayed device work they launched at capture, which is no call), then the heaviest
    children, each with its input shapes and dtypes, count and time; then the advice chosen from them."""
    c = f.contents or {}
    roots = c.get("roots")
    if not roots:
        return []
    top = roots["groups"][0] if roots["groups"] else {}
    shape = _shapes(top.get("shapes"), top.get("dtypes"))
    captured = roots.get("captured") or {}
    calls = ("none in this trace" if captured.get("count") and not roots["count"]  # only graph-replayed work, captured there
             else f"{roots['count']:,} call{'' if roots['count'] == 1 else 's'}, {duration(roots['total_ns'])}")
    replays = (f"; replayed by a graph, launched at capture: {captured['count']:,} device event{'' if captured['count'] == 1 else 's'}, "
               f"{duration(captured['total_ns'])}" if captured.get("count") else "")
    out = [f"inside {roots['what']}: {calls}" + (f"; inputs {shape}" if shape else "") + replays]
    names = roots.get("names") or []
    if len(names) > 1:  # a statement's several operators: which of them the time is in, before what runs inside them
        out.append(f"  {ROOT_NAMES} " + ", ".join(f"{n['name']} ×{n['count']:,} {duration(n['total_ns'])}" for n in names[:shown]))
    for ch in (c.get("children") or [])[:shown]:
        shape = _shapes(ch["shapes"], ch["dtypes"])
        out.append(f"  {_KIND_WORD.get(ch['kind'], ch['kind'])} {kernel_name(ch['name'], 70)}" + (f" {shape}" if shape else "")
                   + f" ×{ch['count']:,} {duration(ch['total_ns'])}")
    out += [f"{ADVICE} {a}" for a in c.get("advice") or []]
    return out


def _where(f: Finding) -> str:
    loc = f.location
    parts = [f"rank {loc.rank}" if loc.rank is not None else None, f"device {loc.device}" if loc.device is not None else None,
             loc.source, loc.op, kernel_name(loc.kernel, 60),
             ("steps " + ",".join(map(str, loc.steps[:6])) + ("…" if len(loc.steps) > 6 else "")) if loc.steps else None]
    return " · ".join(p for p in parts if p)


MANY_RANKS = 8
"""With more ranks than this, the text and Markdown summaries describe the ranks as a distribution
(step time, busy share, exposed communication: spread, slowest and fastest) instead of one block
per rank; report.json keeps every rank."""
FINDINGS_SHOWN_MANY = 20
"""With many ranks, the text report details the heaviest findings only, and counts the rest by rule."""


def _ranks_overview(ranks: list[dict], shown: int = 3) -> list[str]:
    """The ranks of a large job in a few lines: how many, step time per rank (the median of its
    steady steps) with the slowest and fastest ranks, device busy share, exposed communication
    (collective kernels not overlapped with compute; on CPU-only ranks, the host's collectives)."""
    ids = sorted(r["rank"] for r in ranks)
    out = [f"{len(ranks)} ranks ({_id_ranges(ids)}); every rank's numbers are in report.json (analyze --json)"]
    step = [(r["steps"]["p50_ns"], r["rank"]) for r in ranks if r["steps"].get("p50_ns") is not None]
    if step:
        out.append("  step time per rank (median of its steady steps): " + _spread_of(step, duration))
        by_time = sorted(step, key=lambda x: (-x[0], x[1]))
        out.append("  slowest ranks: " + ", ".join(f"rank {r} {duration(t)}" for t, r in by_time[:shown]))
        out.append("  fastest ranks: " + ", ".join(f"rank {r} {duration(t)}" for t, r in reversed(by_time[-shown:])))
    if len(step) < len(ranks):
        out.append(f"  {len(ranks) - len(step)} ranks without profiler steps")
    busy = [(sum(d["busy_ns"] for d in r["devices"]) / max(sum(d["window_ns"] or 0 for d in r["devices"]), 1), r["rank"])
            for r in ranks if r["devices"]]
    if busy:
        out.append("  device busy share per rank: " + _spread_of(busy, share))
    comm = [(_exposed_ns(r) if r["devices"] else r.get("comm_cpu_exposed_ns", 0), r["rank"]) for r in ranks]
    if any(c for c, _ in comm):
        out.append("  exposed communication per rank: " + _spread_of(comm, duration))
    lost = [r for r in ranks if not r["devices"] and r.get("device_events_lost")]
    if lost:
        out.append(f"  {len(lost)} ranks with {no_device_words(lost[0]['device_events_lost']).split(' (')[0]}: "
                   f"ranks {_id_ranges([r['rank'] for r in lost])}")
    if len(busy) + len(lost) < len(ranks):
        out.append(f"  {len(ranks) - len(busy) - len(lost)} ranks CPU only")
    return out


def _exposed_ns(r: dict) -> int:
    """Exposed communication of a rank: device_time's communication (in its analysed window) when
    the summary has it, else the devices' whole-window comm_exposed_ns."""
    if r.get("device_time") is not None:
        return sum(d["communication_ns"] for d in r["device_time"])
    return sum(d["comm_exposed_ns"] for d in r["devices"])


def _device_time_lines(r: dict, kernels_shown: int = 5) -> list[str]:
    """Per device: the exclusive device time over the analysed window, exposed communication by
    collective and per step, and the top kernels (docs/METRICS.md "Device time")."""
    out = []
    for d in r.get("device_time") or []:
        win = d["window_ns"]
        if not win:
            continue
        parts = ", ".join(f"{label} {duration(d[key])} ({share(d[key] / win)})" for label, key in (
            ("compute", "compute_ns"), ("communication", "communication_ns"), ("memory copies/sets", "memory_ns"), ("idle", "idle_ns")))
        out.append(f"  device {d['device']} time in the analysed window ({duration(win)}): {parts}")
        named = d.get("exposed_communication") or []
        if named:
            out.append("    exposed communication: " + "; ".join(
                f"{x['collective']} from {launched_by(x)} {duration(x['ns'])} "
                f"({x['kernels']} kernel{'' if x['kernels'] == 1 else 's'})"
                for x in named[:3]))
            steps = [st for st in d.get("steps", []) if st["communication_ns"]]
            if steps:
                out.append("    exposed communication per step: " + ", ".join(
                    f"{st['step']} {duration(st['communication_ns'])}" for st in steps[:8]) + (" …" if len(steps) > 8 else ""))
        if d.get("top_kernels"):
            out.append("    top kernels (time in the window, share of the device's kernel time, count):")
            out += [f"      {k['kernel']}  {duration(k['dur_ns'])}  {share(k['share'])}  ×{k['count']:,}" for k in d["top_kernels"][:kernels_shown]]
    return out


def _gib(b: int | None) -> str:
    return "-" if b is None else f"{b / 2**30:.2f} GiB" if b >= 2**28 else f"{b / 2**20:.1f} MiB"


def _memory_line(r: dict) -> str | None:
    """Peak device memory per device (allocator events; docs/METRICS.md `peak_memory`)."""
    peaks = r.get("peak_memory") or []
    if not peaks:
        return None
    return "  peak device memory: " + ", ".join(
        f"device {p['device']} {_gib(p['peak_allocated_bytes'])} allocated"
        + (f", {_gib(p['peak_reserved_bytes'])} reserved" if p.get("peak_reserved_bytes") else "") for p in peaks)


COUNTED_SHARE_WORDS = 0.9
"""Below this share of the compute kernels' time carrying counted FLOPs, the achieved line says
that the rate and MFU leave the rest out."""


def _achieved_line(r: dict) -> str | None:
    """Achieved TFLOP/s over the analysed window and while the counted kernels ran, and MFU, with
    the share of the compute kernels' time the FLOPs describe (`achieved`)."""
    a = r.get("achieved") or {}
    counted = a.get("counted_share")
    if a.get("flops") and a.get("tflops_per_s") is None and counted is not None and counted < COUNTED_SHARE_MIN:
        return (f"  achieved: not counted: {share(counted)} of the compute kernels' time ran in an operator with a FLOP count "
                "(no shapes recorded, no formula, or a graph's replay): too little to give the device's rate")
    if not a.get("flops") or a.get("tflops_per_s") is None:
        return None
    line = f"  achieved: {_flop(a['tflops_per_s'] * 1e12)}/s over the analysed window"
    if a.get("mfu") is not None:
        line += f" (MFU {share(a['mfu'])})"
    if a.get("tflops_per_compute_s") is not None:
        line += f", {_flop(a['tflops_per_compute_s'] * 1e12)}/s while the counted operators' kernels ran ({duration(a['kernel_ns'])}"
        line += ")" if counted is None else f", {share(counted)} of the compute kernels' time)"
    if counted is not None and counted < COUNTED_SHARE_WORDS:
        rest = f"the other {share(1 - counted)}" if a.get("tflops_per_compute_s") is not None else "all of the compute kernels' time"
        line += (f"; {rest} ran in no operator with a FLOP count (no shapes recorded, no formula, or a graph's replay), "
                 "so the window's rate" + (" and MFU leave" if a.get("mfu") is not None else " leaves") + " it out")
    return line


def _collective_wait_lines(cross: dict | None) -> list[str]:
    """Collective wait per rank (waiting in collectives for the last rank to arrive; the `cross_rank`
    summary, analyzers/ranks.py): its spread over ranks and the ranks that wait the most."""
    cross = cross or {}
    return _wait_lines([(r["wait_share"], r["rank"], r["wait_ns"]) for r in cross.get("ranks", [])
                        if r.get("instances") and r.get("wait_share") is not None], cross.get("instances"))


def _left_out_words(left_out: list[dict]) -> str:
    """The steps metrics.steady_steps left out, by the first words of their reasons (`diff` lists the
    reasons whole): 'step 101 left out: warm-up' (it read 'left out 101', as if 101 steps were)."""
    by: dict[str, list[str]] = {}
    for x in left_out:
        by.setdefault(str(x.get("reason") or "").split(":")[0], []).append(str(x["step"]))
    return "; ".join(f"step{'s' if len(steps) > 1 else ''} {', '.join(steps)} left out" + (f": {why}" if why else "")
                     for why, steps in by.items())


def _summary_lines(report: Report) -> list[str]:
    if len(report.summary["ranks"]) > MANY_RANKS:
        return _ranks_overview(report.summary["ranks"]) + _collective_wait_lines(report.summary.get("cross_rank"))
    out = []
    for r in report.summary["ranks"]:
        st = r["steps"]
        line = f"rank {r['rank']}: span {duration(r['span_ns'])}"
        if st["count"]:
            steady = st.get("steady_count", st["count"])
            steps = f"{st['count']} steps" + (f" ({steady} steady; {_left_out_words(st.get('left_out', []))})"
                                              if steady != st["count"] else "")
            cv = "-" if st["cv"] is None else format(st["cv"], ".2f")
            line += (f", {steps}, mean {duration(st['mean_ns'])} (p50 {duration(st['p50_ns'])}, p90 {duration(st['p90_ns'])}, "
                     f"max {duration(st['max_ns'])}, cv {cv})")
        out.append(line)
        if (r.get("bound") or {}).get("overall"):
            out.append(_bound_line(r["bound"]))
        for d in r["devices"]:
            win = d["window_ns"] or 0
            out.append(f"  device {d['device']}: busy {duration(d['busy_ns'])} of its window, first to last device event, {duration(win)} "
                       f"({share(d['busy_ns'] / win if win else 0)}), "
                       f"kernels {duration(d['kernel_ns'])}" + (" (summed over concurrent streams)" if d["kernel_ns"] > d["busy_ns"] else "")
                       + f", memcpy {duration(d['memcpy_ns'])}, comm {duration(d['comm_ns'])}")
        out += _device_time_lines(r)
        for line in (_memory_line(r), _achieved_line(r)):
            if line:
                out.append(line)
        arch = _device_line(r.get("utilisation")) if r["devices"] else None
        if arch:
            out.append(arch)
        if not r["devices"]:
            top = r["top_level_ops"][:3]
            out.append(f"  {no_device_words(r.get('device_events_lost'))}; top operators: "
                       + ", ".join(f"{o['name']} {duration(o['cpu_ns'])}" for o in top)
                       + (f"; collectives {duration(r['comm_cpu_ns'])} of the analysed window, {duration(r.get('comm_cpu_exposed_ns') or 0)} "
                          "with no other operator running" if r.get("comm_cpu_ns") else ""))
        if r.get("compile_ns"):
            out.append(f"  torch.compile: {duration(r['compile_ns'])} compiling, left out of the operators' and lines' time "
                       "(per function: the compile-time findings)")
        line = _utilisation_line(r.get("utilisation"))
        if line:
            out.append(line)
        wait = {x["rank"]: x for x in (report.summary.get("cross_rank") or {}).get("ranks", [])}.get(r["rank"])
        if wait and wait["instances"]:
            out.append(f"  collective wait (for the last arrival): {duration(wait['wait_ns'])} ({share(wait['wait_share'] or 0)}) "
                       f"over {wait['instances']} collectives; last to arrive at {wait['times_last']} of them")
    out.append(_shares_line(report.summary["ranks"]))
    return out


def _shares_line(ranks: list[dict]) -> str:
    """The denominator of every share in the report (docs/METRICS.md, `analysed_ns`)."""
    each = ", ".join(f"rank {r['rank']} {duration(r['analysed_ns'])}" for r in ranks[:4]) + (", ..." if len(ranks) > 4 else "")
    return (f"  shares: impact / the rank's analysed time ({each}): the total of its profiler steps, or its span "
            "when it has none")


def _flop(x: float) -> str:
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if x >= scale:
            return f"{x / scale:,.2f} {unit}"
    return f"{x:,.0f} FLOP"


def _device_line(u: dict | None) -> str | None:
    """The architecture the rank ran on and how the trace shows it (docs/METRICS.md, Utilisation)."""
    d = (u or {}).get("device")
    if not d:
        return None
    if not d.get("arch"):
        return f"  architecture: unknown ({d['how']})"
    return f"  architecture: {d['arch']} (matrix units: {', '.join(d['matrix_dtypes'])}), from {d['how']}"


def _utilisation_line(u: dict | None) -> str | None:
    """FLOPs per step, achieved rate and MFU (docs/METRICS.md, Utilisation), in one line; without
    counted FLOPs on a device, why there is no MFU."""
    if u and not u.get("flops") and u.get("mfu_missing") and u.get("device"):
        return f"  work: no FLOPs counted; MFU not computed: {u['mfu_missing']}"
    if not u or not u.get("flops"):
        return None
    steps = [s for s in u.get("steps", []) if s.get("dur_ns")]
    flops = sorted(s["flops"] for s in steps)
    rates = sorted(s["tflops_per_s"] for s in steps if s.get("tflops_per_s") is not None)
    head = (f"  work: {_flop(flops[len(flops) // 2])} per step (median), {_flop(rates[len(rates) // 2] * 1e12)}/s"
            if flops and rates else f"  work: {_flop(u['flops'])} in all ({u.get('dtype') or 'unknown dtype'})")
    peak = u.get("peak")
    if peak and u.get("mfu_median") is not None:
        p = peak["tflops"].get(u.get("dtype") or "")
        return f"{head}; MFU {share(u['mfu_median'])} of the {peak['name']} {u.get('dtype')} peak ({p:g} TFLOP/s, {peak['source']})"
    if peak:
        return f"{head}; peak {peak['name']} ({peak['source']})"
    return f"{head}; MFU not computed: {u.get('mfu_missing') or 'no device peak'}"


_BOUND_SHORT = {"device_compute": "compute", "communication": "comm", "memcpy": "memcpy", "host_compute": "host",
                "launch_overhead": "runtime", "input_pipeline": "input", "idle": "idle"}


def _bound_line(b: dict) -> str:
    """What bounds the steps (critical path, docs/METRICS.md): the verdict, its shares, and the steps that differ; a rank
    with no profiler steps: over its analysed window (its span)."""
    o = b["overall"]
    shares = ", ".join(f"{_BOUND_SHORT.get(c, c)} {100 * v:.0f}%" for c, v in o["shares"].items() if v >= 0.005)
    odd = [s for s in b["steps"] if s["bound"] != o["bound"]]
    tail = ("; steps " + ", ".join(f"{s['step']} {s['words'].split(' (')[0]}" for s in odd[:4]) + ("…" if len(odd) > 4 else "")) if odd else ""
    over = "critical path over the span, no profiler steps" if o.get("over") == "window" else "critical path"
    heaviest = f"; heaviest on it: {heaviest_words(o['heaviest'], lambda s: kernel_name(s, 60))}" if o.get("heaviest") else ""
    return f"  bound: {o['words']} ({over}: {shares}){heaviest}{tail}"


def text(report: Report, width: int = 100) -> str:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    buf = io.StringIO()
    con = Console(file=buf, width=width, force_terminal=False, color_system=None, soft_wrap=False)
    con.print(f"[bold]Neuron Explorer report[/] — {escape(str(report.run))}")
    for line in _summary_lines(report):
        con.print(escape(line), highlight=False)
    con.print()
    findings, ranks_of = report.findings, {}
    if len(report.summary["ranks"]) > MANY_RANKS:
        findings, ranks_of = _group_across_ranks(report.findings)
        if len(findings) > FINDINGS_SHOWN_MANY:
            findings = findings[:FINDINGS_SHOWN_MANY]
            con.print(escape(f"{len(report.findings)} findings; the {len(findings)} heaviest below, the same finding on several "
                             "ranks in one row (analyze --json lists all). By rule: " + _findings_by_rule(report.findings)),
                      highlight=False)
            con.print()
    if not findings:
        con.print("No findings above the thresholds.")
    else:
        t = Table(show_lines=False, expand=False, pad_edge=False)
        for col, kw in (("#", {"justify": "right"}), ("sev", {}), ("impact", {"justify": "right"}), ("share", {"justify": "right"}),
                        ("rule", {}), ("finding", {"overflow": "fold", "max_width": 58})):
            t.add_column(col, **kw)
        for i, f in enumerate(findings, 1):
            t.add_row(str(i), f.severity, duration(f.impact_ns), share(f.impact_share), f.rule_id,
                      escape(f.title + _on_ranks(ranks_of.get(id(f)))))
        con.print(t)
        for i, f in enumerate(findings, 1):
            con.print(f"\n[bold]{i}. {escape(f.title + _on_ranks(ranks_of.get(id(f))))}[/]", highlight=False)
            if _where(f):
                where = _where(f)
                if len(ranks_of.get(id(f)) or ()) > 1:
                    ranks = _id_ranges(ranks_of[id(f)])
                    where = where.replace(f"rank {f.location.rank}", f"ranks {ranks}", 1)
                con.print(f"   where: {escape(where)}", highlight=False)
            con.print(f"   do: {escape(f.recommendation)}", highlight=False)
            for line in inside_lines(f):
                con.print(escape(f"   {line}"), highlight=False)
            notes = f" ({'; '.join(f.confidence_notes)})" if f.confidence_notes else ""
            con.print(escape(f"   confidence {f.confidence:.2f}{notes}"), highlight=False)
    if report.not_applicable:  # the rules only (on a CPU run, ten "no device events" reasons); --json and --markdown say why
        con.print(escape(f"\n{NOT_APPLICABLE_TEXT}" + ", ".join(dict.fromkeys(n["rule_id"] for n in report.not_applicable))),
                  highlight=False)  # wrapped at the report's width like every other line
    warnings = report.warnings
    if len(report.summary["ranks"]) > MANY_RANKS:
        warnings = summarise_warnings(warnings)  # one line per kind of warning across ranks
    for w in warnings:
        con.print(escape(f"warning: {w}"), highlight=False)
    return buf.getvalue()


def _group_across_ranks(findings: list[Finding]) -> tuple[list[Finding], dict[int, list[int]]]:
    """The same finding (rule, title, and where apart from the rank) on several ranks as one: the
    heaviest of them stands for the group; returns those and, per id() of each, its ranks."""
    groups: dict[tuple, list[Finding]] = {}
    for f in findings:
        loc = f.location
        key = (f.rule_id, f.title, loc.device, loc.source, loc.op, loc.kernel, tuple(loc.steps or ()))
        groups.setdefault(key, []).append(f)
    heads = [fs[0] for fs in groups.values()]
    return heads, {id(fs[0]): sorted({f.location.rank for f in fs if f.location.rank is not None}) for fs in groups.values()}


def _on_ranks(ranks: list[int] | None) -> str:
    return f" — on {len(ranks)} ranks ({_id_ranges(ranks)})" if ranks and len(ranks) > 1 else ""


def _findings_by_rule(findings: list[Finding]) -> str:
    """'device-idle 256 on ranks 0-255; ...': how many findings each rule made, on which ranks."""
    by_rule: dict[str, list[Finding]] = {}
    for f in findings:
        by_rule.setdefault(f.rule_id, []).append(f)
    return "; ".join(f"{rule} {len(fs)} on ranks {_id_ranges(sorted({f.location.rank for f in fs if f.location.rank is not None}))}"
                     for rule, fs in by_rule.items())


NOT_APPLICABLE_TEXT = "not applicable here (why: --json or --markdown): "
"""How the text report starts its one line of rules that did not apply."""


def _dedup(items: list[dict]) -> list[dict]:
    seen, out = set(), []
    for n in items:
        if (n["rule_id"], n["reason"]) not in seen:
            seen.add((n["rule_id"], n["reason"]))
            out.append(n)
    return out


def markdown(report: Report) -> str:
    out = [f"# Performance report: `{report.run}`", "", "## Summary", ""]
    out += [f"- {line.strip()}" for line in _summary_lines(report)]
    out += ["", "Definitions: docs/METRICS.md. Evidence queries run on the views `events`, `frames`, `flows`, `memory`, "
            "`counters` (e.g. `CREATE VIEW events AS SELECT * FROM 'RUN/rank=*/events.parquet'`).", "", "## Findings", ""]
    if not report.findings:
        out.append("No findings above the thresholds.")
    else:
        out += ["| # | severity | impact | share | rule | finding |", "| --- | --- | --- | --- | --- | --- |"]
        out += [f"| {i} | {f.severity} | {duration(f.impact_ns)} | {share(f.impact_share)} | `{f.rule_id}` | {f.title.replace('|', '/')} |"
                for i, f in enumerate(report.findings, 1)]
        for i, f in enumerate(report.findings, 1):
            out += ["", f"### {i}. {f.title}", "", f"- where: {_where(f) or '-'}", f"- saving bound: {duration(f.saving_bound_ns)}",
                    f"- confidence: {f.confidence:.2f}" + (f" ({'; '.join(f.confidence_notes)})" if f.confidence_notes else ""),
                    f"- do: {f.recommendation}"]
            inside = inside_lines(f)
            if inside:
                out += [f"- {inside[0]}"] + [f"  - {line.strip()}" for line in inside[1:]]
            out += ["", "```sql", f.evidence.sql, "```"]
    if report.not_applicable:
        out += ["", "## Not applicable", ""] + [f"- `{n['rule_id']}`: {n['reason']}" for n in _dedup(report.not_applicable)]
    if report.warnings:
        out += ["", "## Warnings", ""] + [f"- {w}" for w in report.warnings]
    return "\n".join(out) + "\n"
