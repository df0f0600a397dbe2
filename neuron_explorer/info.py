"""`neuron-explorer info`: what a run holds (ranks, devices, steps, counts, warnings), as data.

`run_info` returns plain data (the JSON of `info --json`); `render_info` draws it as text.
"""

from __future__ import annotations

from pathlib import Path

from .fmt import collective_wait_lines, duration, id_ranges, share, spread, summarise_warnings
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
                "device_events_lost": None if e.get("devices") else _lost(e),  # (no device events, yet a device run)
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
            "provenance": m.get("provenance"),  # Inductor's provenance files an import read (collectors/provenance.py)
        }
    finally:
        if run is not None:
            run.close()


def _collective_waits(run) -> dict[int, dict]:
    """Per rank: its wait in collectives for the last rank to arrive (analyzers/ranks.py)."""
    from .analyzers.ranks import collective_waits

    return {r["rank"]: {"collective_wait_ns": r["wait_ns"], "collective_wait_share": r["wait_share"], "collectives_matched": r["instances"]}
            for r in collective_waits(run)["ranks"]}


MANY_RANKS = 8
"""With more ranks than this, `render_info` describes them together (counts, distributions, the
slowest and fastest ranks) instead of a block each; `info --json` keeps every rank."""


def _render_many_ranks(ranks: list[dict], shown: int = 3) -> list[str]:
    world = sorted({r["world_size"] for r in ranks if r.get("world_size")})
    lines = [f"{len(ranks)} ranks ({id_ranges([r['rank'] for r in ranks])})"
             + (f" of {', '.join(map(str, world))}" if world else "") + f"; {sum(r['events'] for r in ranks):,} events"
             + "; info --json lists every rank"]
    lines.append("  events per rank: " + spread([(r["events"], r["rank"]) for r in ranks], lambda n: f"{n:,.0f}"))
    spans = [(r["span_ns"], r["rank"]) for r in ranks if r.get("span_ns") is not None]
    if spans:
        lines.append("  span per rank: " + spread(spans, duration))
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
        lines.append("  step time per rank (its median step): " + spread(step, duration))
        by_time = sorted(step, key=lambda x: (-x[0], x[1]))
        lines.append("  slowest ranks: " + ", ".join(f"rank {r} {duration(t)}" for t, r in by_time[:shown]))
        lines.append("  fastest ranks: " + ", ".join(f"rank {r} {duration(t)}" for t, r in reversed(by_time[-shown:])))
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
        lines.append(f"  backward: {duration(backward)} of operator and device time over all ranks, {share(linked)} linked to "
                     "the forward statement that built it")
    return lines


def _lost(entry: dict) -> dict | None:
    """analyzers.metrics.device_events_lost of a manifest entry (imported only for a rank without devices)."""
    from .analyzers.metrics import device_events_lost

    return device_events_lost(entry)


def _no_device(rank: dict) -> str:
    """A rank with no device events: CPU only, unless it ran device work whose events the trace
    lost (run_info's `device_events_lost`, analyzers.metrics'; a warning says more)."""
    from .analyzers.metrics import no_device_words

    return no_device_words(rank.get("device_events_lost"))


def _ranks_text(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"{len(ranks)} ranks ({id_ranges(ranks)})"


def render_info(info: dict) -> str:
    lines = [
        f"run {info['path']}  (format v{info['format_version']}, {info['source']}"
        + (f" ({info['converter']} converter)" if info.get("converter") else "") + f", created {info['created']})",
    ]
    if info.get("provenance"):
        lines.append(f"torch.compile kernels' provenance from {', '.join(info['provenance'])}")
    many = len(info["ranks"]) > MANY_RANKS
    if many:
        lines += _render_many_ranks(info["ranks"])
    for r in [] if many else info["ranks"]:
        counts = r["counts"]
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]) if v and k not in ("frames",))
        devs = ", ".join(f"{d['device']}" + (f" ({d['name']})" if d.get("name") else "") for d in r["devices"]) or f"none ({_no_device(r)})"
        world = f" of {r['world_size']}" if r.get("world_size") else ""
        lines.append(f"rank {r['rank']}{world}: {r['events']} events over {duration(r['span_ns'])}")
        lines.append(f"  devices: {devs}")
        if r.get("devices_without_properties"):
            lines.append(f"    events ran on device {id_ranges(r['devices_without_properties'])}, which the device properties do not list")
        if r.get("devices_listed_without_events"):
            lines.append(f"    the device properties also list device {id_ranges(r['devices_listed_without_events'])}, with no events")
        if r["steps"]:
            lines.append(f"  steps: {r['steps']} (#{r['step_first']}..#{r['step_last']}), median {duration(r['step_median_ns'])}")
        else:
            lines.append("  steps: none recorded (no ProfilerStep#N ranges)")
        lines.append(f"  counts: {kinds}")
        if r.get("collectives_matched"):
            lines.append(f"  collective wait (for the last arrival): {duration(r['collective_wait_ns'])} "
                         f"({share(r['collective_wait_share'] or 0)} of its analysed time) over {r['collectives_matched']} collectives")
        dq = r.get("data_quality") or {}
        if dq.get("backward_ns"):
            linked = dq.get("backward_linked_ns", 0) / dq["backward_ns"]
            lines.append(f"  backward: {duration(dq['backward_ns'])} of operator and device time, {share(linked)} linked to "
                         "the forward statement that built it")
        if dq.get("compiled_kernels"):
            time_ = dq.get("compiled_kernels_ns") or 0
            of_time = f" ({share(dq.get('compiled_kernels_charged_ns', 0) / time_)} of their time)" if time_ else ""
            lines.append(f"  compiled kernels: {dq.get('compiled_kernels_charged', 0)} of {dq['compiled_kernels']} charged to "
                         f"their statements{of_time}")
        if dq.get("graph_replay_device_events"):
            from .analyzers.metrics import graph_replays

            g = graph_replays(r)
            n, launches = g["device_events"], g["launches"]
            lines.append(f"  graph replays: {n} device events from {launches} graph launch{'es' if launches != 1 else ''}, "
                         f"{share(dq.get('graph_replay_on_a_line', 0) / n)} on a statement, {share(g['operator_share'])} on an operator")
            if g["captures"] is not None:
                lines.append(f"    linked to their capture's operator: {g['capture_linked']} ({share(g['capture_linked_share'])}); "
                             f"to their launch only: {g['launch_only']}; {g['launches_matched']} of {launches} launches matched "
                             f"{g['captures']} captured graph{'s' if g['captures'] != 1 else ''}")
            if g["not_linked"]:
                lines.append(f"    not linked: {g['not_linked']} device events of the rank have no launch")
    if info["warnings"]:
        summary = summarise_warnings(info["warnings"])
        lines.append(f"warnings ({len(info['warnings'])}" + (f", {len(summary)} kinds" if len(summary) < len(info["warnings"]) else "") + "):")
        lines += [f"  - {w}" for w in summary[:20]]
        if len(summary) > 20:
            lines.append(f"  ... {len(summary) - 20} more (info --json lists all)")
    return "\n".join(lines)
