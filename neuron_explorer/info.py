"""`neuron-explorer info`: what a run holds (ranks, devices, steps, counts, warnings), as data.

`run_info` returns plain data (the JSON of `info --json`); `render_info` draws it as text.
"""

from __future__ import annotations

import re
from pathlib import Path

from .store import open_run, read_manifest, resolve_run


def run_info(path: Path | str) -> dict:
    run_dir = resolve_run(path)
    m = read_manifest(run_dir)
    entries = m.get("ranks", [])
    # the tables are opened only for what the manifest does not hold (older runs' spans, the
    # collective waits of several ranks), so that `import` prints a one-rank run's summary at once
    run = open_run(run_dir) if len(entries) > 1 or not all("span_ns" in e for e in entries) else None
    try:
        # the importer and the collector write each rank's span_ns; a run written before they did is read
        scanned = {} if all("span_ns" in e for e in entries) else dict(
            run.sql("SELECT rank, max(ts_ns + dur_ns) - min(ts_ns) FROM events GROUP BY rank").fetchall())
        ranks = []
        for e in entries:
            r = e.get("rank", 0)
            steps = e.get("steps") or []
            durs = sorted(s["dur_ns"] for s in steps)
            ranks.append({
                "rank": r,
                "world_size": e.get("world_size"),
                "source": e.get("source"),
                "events": e.get("events", 0),
                "span_ns": e["span_ns"] if "span_ns" in e else scanned.get(r),
                "counts": e.get("counts", {}),
                # devices events ran on, named from the device properties (runs before the
                # devices_used key: the properties as listed)
                "devices": e["devices_used"] if "devices_used" in e else [
                    {"device": d.get("id"), "name": d.get("name")} for d in (e.get("device_properties") or [])
                ] or [{"device": d, "name": None} for d in e.get("devices", [])],
                "devices_listed_without_events": e.get("devices_listed_without_events", []),
                "devices_without_properties": e.get("devices_without_properties", []) if e.get("device_properties") else [],
                "steps": len(steps),
                "step_first": steps[0]["step"] if steps else None,
                "step_last": steps[-1]["step"] if steps else None,
                "step_median_ns": durs[len(durs) // 2] if durs else None,
                "data_quality": e.get("data_quality", {}),
            })
        waits = _collective_waits(run) if len(ranks) > 1 else {}
        for entry in ranks:
            entry.update(waits.get(entry["rank"], {}))
        return {
            "path": str(Path(path)),
            "format_version": m.get("format_version"),
            "tool_version": m.get("tool_version"),
            "source": m.get("source"),
            "converter": m.get("converter"),
            "created": m.get("created"),
            "ranks": ranks,
            "warnings": m.get("warnings", []),
        }
    finally:
        if run is not None:
            run.close()


def _collective_waits(run) -> dict[int, dict]:
    """Per rank: its wait in collectives for the last rank to arrive (analyzers/ranks.py)."""
    from .analyzers.ranks import collective_waits

    return {r["rank"]: {"collective_wait_ns": r["wait_ns"], "collective_wait_share": r["wait_share"], "collectives_matched": r["instances"]}
            for r in collective_waits(run)["ranks"]}


def collective_wait_lines(waits: list[tuple[float, int, int]], instances: int | None = None, shown: int = 3) -> list[str]:
    """(share, rank, wait ns) per rank -> the spread of the ranks' collective wait and the ranks that wait the most."""
    if not waits:
        return []
    worst = sorted(waits, key=lambda x: (-x[0], x[1]))[:shown]
    return ["  collective wait per rank (for the last arrival, share of its analysed time): "
            + spread([(w, r) for w, r, _ in waits], lambda x: f"{100 * x:.1f}%"),
            "  most waiting: " + ", ".join(f"rank {r} {fmt_ns(ns)} ({100 * w:.1f}%)" for w, r, ns in worst)
            + (f" over {instances:,} matched collectives" if instances is not None else "")]


def fmt_ns(ns: int | float | None) -> str:
    """A duration for people: 1.23 s, 45.6 ms, 789 us, 12 ns."""
    if ns is None:
        return "-"
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.0f} ns"


def _id_ranges(ids: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    out: list[str] = []
    for i in sorted(ids):
        if out and out[-1].split("-")[-1] == str(i - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ", ".join(out)


id_ranges = _id_ranges


def spread(values: list[tuple[float, int]], fmt) -> str:
    """'min X (rank a), p50 Y, p90 Z, max W (rank b)' of (value, rank) pairs (nearest-rank quantiles)."""
    v = sorted(values)

    def q(f: float) -> float:
        return v[min(len(v) - 1, int(f * (len(v) - 1) + 0.5))][0]

    return f"min {fmt(v[0][0])} (rank {v[0][1]}), p50 {fmt(q(0.5))}, p90 {fmt(q(0.9))}, max {fmt(v[-1][0])} (rank {v[-1][1]})"


MANY_RANKS = 8
"""With more ranks than this, `render_info` describes them together (counts, distributions, the
slowest and fastest ranks) instead of a block each; `info --json` keeps every rank."""


def _render_many_ranks(ranks: list[dict], shown: int = 3) -> list[str]:
    world = sorted({r["world_size"] for r in ranks if r.get("world_size")})
    lines = [f"{len(ranks)} ranks ({_id_ranges([r['rank'] for r in ranks])})"
             + (f" of {', '.join(map(str, world))}" if world else "") + f"; {sum(r['events'] for r in ranks):,} events"
             + "; info --json lists every rank"]
    lines.append("  events per rank: " + spread([(r["events"], r["rank"]) for r in ranks], lambda n: f"{n:,.0f}"))
    spans = [(r["span_ns"], r["rank"]) for r in ranks if r.get("span_ns") is not None]
    if spans:
        lines.append("  span per rank: " + spread(spans, fmt_ns))
    by_devices: dict[str, list[int]] = {}
    for r in ranks:
        devs = ", ".join(f"{d['device']}" + (f" ({d['name']})" if d.get("name") else "") for d in r["devices"])
        by_devices.setdefault(f"device {devs}" if devs else _no_device(r), []).append(r["rank"])
    lines.append("  devices: " + "; ".join(f"{devs} on {_ranks_text(rs)}" for devs, rs in by_devices.items()))
    by_steps: dict[str, list[int]] = {}
    for r in ranks:
        key = f"{r['steps']} (#{r['step_first']}..#{r['step_last']})" if r["steps"] else "none recorded"
        by_steps.setdefault(key, []).append(r["rank"])
    lines.append("  steps: " + "; ".join(f"{k} on {_ranks_text(rs)}" for k, rs in by_steps.items()))
    step = [(r["step_median_ns"], r["rank"]) for r in ranks if r.get("step_median_ns") is not None]
    if step:
        lines.append("  step time per rank (its median step): " + spread(step, fmt_ns))
        by_time = sorted(step, key=lambda x: (-x[0], x[1]))
        lines.append("  slowest ranks: " + ", ".join(f"rank {r} {fmt_ns(t)}" for t, r in by_time[:shown]))
        lines.append("  fastest ranks: " + ", ".join(f"rank {r} {fmt_ns(t)}" for t, r in reversed(by_time[-shown:])))
    lines += collective_wait_lines([(r["collective_wait_share"], r["rank"], r["collective_wait_ns"]) for r in ranks
                                    if r.get("collectives_matched") and r.get("collective_wait_share") is not None])
    counts: dict[str, int] = {}
    for r in ranks:
        for k, v in r["counts"].items():
            counts[k] = counts.get(k, 0) + (v or 0)
    lines.append("  counts (all ranks): " + ", ".join(f"{k} {v:,}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])
                                                      if v and k != "frames"))
    backward = sum((r.get("data_quality") or {}).get("backward_ns", 0) for r in ranks)
    if backward:
        linked = sum((r.get("data_quality") or {}).get("backward_linked_ns", 0) for r in ranks) / backward
        lines.append(f"  backward: {fmt_ns(backward)} of operator and device time over all ranks, {100 * linked:.1f}% linked to "
                     "the forward statement that built it")
    return lines


def _no_device(rank: dict) -> str:
    """A rank with no device events: CPU only, unless it launched device work whose events the
    trace lost (the importer's `launches_without_device_events`: a warning says more)."""
    dq = rank.get("data_quality") or {}
    lost = dq.get("launches_without_device_events") or dq.get("launch_flows_without_device_events")
    return "device events lost (launches recorded)" if lost else "CPU only"


def _ranks_text(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"{len(ranks)} ranks ({_id_ranges(ranks)})"


def render_info(info: dict) -> str:
    lines = [
        f"run {info['path']}  (format v{info['format_version']}, {info['source']}"
        + (f" ({info['converter']} converter)" if info.get("converter") else "") + f", created {info['created']})",
    ]
    many = len(info["ranks"]) > MANY_RANKS
    if many:
        lines += _render_many_ranks(info["ranks"])
    for r in [] if many else info["ranks"]:
        counts = r["counts"]
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]) if v and k not in ("frames",))
        devs = ", ".join(f"{d['device']}" + (f" ({d['name']})" if d.get("name") else "") for d in r["devices"]) or f"none ({_no_device(r)})"
        world = f" of {r['world_size']}" if r.get("world_size") else ""
        lines.append(f"rank {r['rank']}{world}: {r['events']} events over {fmt_ns(r['span_ns'])}")
        lines.append(f"  devices: {devs}")
        if r.get("devices_without_properties"):
            lines.append(f"    events ran on device {_id_ranges(r['devices_without_properties'])}, which the device properties do not list")
        if r.get("devices_listed_without_events"):
            lines.append(f"    the device properties also list device {_id_ranges(r['devices_listed_without_events'])}, with no events")
        if r["steps"]:
            lines.append(f"  steps: {r['steps']} (#{r['step_first']}..#{r['step_last']}), median {fmt_ns(r['step_median_ns'])}")
        else:
            lines.append("  steps: none recorded (no ProfilerStep#N ranges)")
        lines.append(f"  counts: {kinds}")
        if r.get("collectives_matched"):
            lines.append(f"  collective wait (for the last arrival): {fmt_ns(r['collective_wait_ns'])} "
                         f"({100 * (r['collective_wait_share'] or 0):.1f}% of its analysed time) over {r['collectives_matched']} collectives")
        dq = r.get("data_quality") or {}
        if dq.get("backward_ns"):
            linked = dq.get("backward_linked_ns", 0) / dq["backward_ns"]
            lines.append(f"  backward: {fmt_ns(dq['backward_ns'])} of operator and device time, {100 * linked:.1f}% linked to "
                         "the forward statement that built it")
    if info["warnings"]:
        summary = summarise_warnings(info["warnings"])
        lines.append(f"warnings ({len(info['warnings'])}" + (f", {len(summary)} kinds" if len(summary) < len(info["warnings"]) else "") + "):")
        lines += [f"  - {w}" for w in summary[:20]]
        if len(summary) > 20:
            lines.append(f"  ... {len(summary) - 20} more (info --json lists all)")
    return "\n".join(lines)


_WARNING_SUBJECT = re.compile(r"^(?:rank (?P<rank>\d+)|(?P<file>[^\s:]+)): (?P<message>.*)$", re.DOTALL)
_LEADING_COUNT = re.compile(r"^(\d+) ")
_NUMBER = re.compile(r"\d+")


def summarise_warnings(warnings: list[str], keep: int = 2) -> list[str]:
    """One line per kind of warning: a kind that more than `keep` ranks (or files) report becomes
    one line with how many, the total of its counts and the ranks with the most. A kind is the
    text after 'rank N: ' with its numbers left out; fewer are kept as they are."""
    groups: dict[str, list[tuple[int | None, str | None, int | None, str]]] = {}
    for w in warnings:
        m = _WARNING_SUBJECT.match(w)
        rank, file, message = (int(m["rank"]) if m["rank"] else None, m["file"], m["message"]) if m else (None, None, w)
        count = _LEADING_COUNT.match(message)
        groups.setdefault(_NUMBER.sub("#", message), []).append((rank, file, int(count[1]) if count else None, w))
    out = []
    for items in groups.values():
        if len(items) <= keep:
            out += [w for *_, w in items]
            continue
        ranks = [r for r, _, _, _ in items if r is not None]
        who = f"{len(items)} ranks" if len(ranks) == len(items) else f"{len(items)} traces"
        _, _, _, first = items[0]
        message = _WARNING_SUBJECT.match(first)["message"] if _WARNING_SUBJECT.match(first) else first
        counts = [(n, r) for r, _, n, _ in items if n is not None]
        if len(counts) == len(items) and len(ranks) == len(items):
            worst = sorted(counts, key=lambda nr: (-nr[0], nr[1]))[:3]
            label = _LEADING_COUNT.sub("", message)
            out.append(f"{who}: {label}: {sum(n for n, _ in counts):,} in all; most on "
                       + ", ".join(f"rank {r} ({n:,})" for n, r in worst))
        else:
            where = f"ranks {_id_ranges(ranks)}" if len(ranks) == len(items) else ", ".join(f for _, f, _, _ in items[:3] if f) + ", ..."
            out.append(f"{who}: {message} ({where})")
    return out
