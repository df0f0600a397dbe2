"""`neuron-explorer info`: what a run holds (ranks, devices, steps, counts, warnings), as data.

`run_info` returns plain data (the JSON of `info --json`); `render_info` draws it as text.
"""

from __future__ import annotations

import re
from pathlib import Path

from .store import open_run


def run_info(path: Path | str) -> dict:
    run = open_run(path)
    try:
        m = run.manifest
        per_rank = {
            r: {"span_ns": span, "events": n}
            for r, span, n in run.sql("SELECT rank, max(ts_ns + dur_ns) - min(ts_ns), count(*) FROM events GROUP BY rank").fetchall()
        }
        ranks = []
        for e in m.get("ranks", []):
            r = e.get("rank", 0)
            steps = e.get("steps") or []
            durs = sorted(s["dur_ns"] for s in steps)
            ranks.append({
                "rank": r,
                "world_size": e.get("world_size"),
                "source": e.get("source"),
                "events": e.get("events", 0),
                "span_ns": (per_rank.get(r) or {}).get("span_ns"),
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
        run.close()


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


def render_info(info: dict) -> str:
    lines = [
        f"run {info['path']}  (format v{info['format_version']}, {info['source']}"
        + (f" ({info['converter']} converter)" if info.get("converter") else "") + f", created {info['created']})",
    ]
    for r in info["ranks"]:
        counts = r["counts"]
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]) if v and k not in ("frames",))
        devs = ", ".join(f"{d['device']}" + (f" ({d['name']})" if d.get("name") else "") for d in r["devices"]) or "none (CPU only)"
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
    if info["warnings"]:
        lines.append(f"warnings ({len(info['warnings'])}):")
        lines += [f"  - {w}" for w in info["warnings"][:20]]
        if len(info["warnings"]) > 20:
            lines.append(f"  ... {len(info['warnings']) - 20} more (info --json lists all)")
    return "\n".join(lines)
