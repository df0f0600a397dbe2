"""A built rank's entry in the run's manifest, and the warnings its data quality calls for: the
same for the importer (chrome_trace) and the live collector (torch_profiler).

Must not: decode or build anything (it reads a `RankTables` and the collector's metadata).
"""

from __future__ import annotations

from .build import RankTables
from .kineto_names import LAUNCH_FLOW


def device_list(used: list[int], properties: list) -> dict:
    """The devices events ran on, named from the device properties whose `id` matches, and the
    mismatches both ways: properties of devices no event used (each rank of a job often lists
    every GPU of its host) and devices with events that no property describes."""
    names: dict[int, str | None] = {}
    for p in properties if isinstance(properties, list) else []:
        if isinstance(p, dict) and isinstance(p.get("id"), int) and not isinstance(p.get("id"), bool):
            names.setdefault(p["id"], p.get("name") if isinstance(p.get("name"), str) else None)
    return {
        "devices_used": [{"device": d, "name": names.get(d)} for d in used],
        "devices_listed_without_events": sorted(set(names) - set(used)),
        "devices_without_properties": [d for d in used if d not in names],
    }


def rank_entry(built: RankTables, meta: dict, quality_extra: dict | None = None) -> dict:
    info = meta.get("distributed_info") or {}
    world = info.get("world_size") if isinstance(info, dict) else None
    quality = dict(built.quality)
    if quality_extra:
        quality.update(quality_extra)
    return {
        "rank": built.rank,
        "world_size": world,
        "events": built.tables["events"].num_rows,
        "span_ns": built.span_ns,
        "op_args_named": built.op_args_named,
        "counts": built.counts,
        "devices": built.devices,
        **device_list(built.devices, meta.get("device_properties") or []),
        "steps": built.steps,
        "data_quality": quality,
        **meta,
    }


FIRST_WORK_WAIT_WARN_NS = 1_000_000
"""A device's first work starting this long after its launch returned, with nothing the trace holds
running on the device before it (build's `first_work_wait_ns`), is warned about: launch to start
takes microseconds on an idle device."""


def first_work_wait_words(data_quality: dict) -> str | None:
    """'device 2's first work started 149.00 ms after its launch' where a device's first work waited
    FIRST_WORK_WAIT_WARN_NS or more after its launch returned (build's `first_work_wait_ns`), else
    None: the start of this warning and of the findings' confidence note (engine.quality_notes)."""
    wait = data_quality.get("first_work_wait_ns", 0)
    if wait < FIRST_WORK_WAIT_WARN_NS:
        return None
    if data_quality.get("device_clock_shift_device") == data_quality.get("first_work_wait_device") and \
            data_quality.get("device_clock_shift_ns"):
        return None  # (its clock was moved to its launches: device_clock's warning says so, and clock_shift_words)
    return f"device {data_quality.get('first_work_wait_device')}'s first work started {wait / 1e6:,.2f} ms after its launch"


def clock_shift_words(data_quality: dict) -> str | None:
    """'device 2's events moved 146.40 ms earlier, to its launches (its clock offset from the host's, estimated)'
    where the import moved a device's events (device_clock, `device_clock_shift_ns`), else None: the
    findings' confidence note (engine.quality_notes); the import's warning says it at length."""
    shift = data_quality.get("device_clock_shift_ns", 0)
    if not shift:
        return None
    return (f"device {data_quality.get('device_clock_shift_device')}'s events moved {shift / 1e6:,.2f} ms earlier, to its launches "
            "(its clock offset from the host's, estimated)")


def first_work_wait_warnings(entry: dict) -> list[str]:
    """The warning for a device whose first work waited FIRST_WORK_WAIT_WARN_NS or more after its launch."""
    words = first_work_wait_words(entry.get("data_quality") or {})
    if words is None:
        return []
    return [f"rank {entry['rank']}: {words} returned, with nothing the trace holds running on the device before it: the device's "
            "clock is likely offset from the host's (seen in ROCm traces), or the device ran work the trace does not hold; times "
            "from host to device events (launch delays, the idle before device work) may be off by that much"]


def launched_before_trace_words(data_quality: dict) -> str:
    """' (N of them launched before the trace began: ...)' where some device events with no launch
    have a correlation id below every runtime call's or start before the first runtime call
    (`device_launched_before_trace`, kineto_names.launched_before_trace): work queued before the
    profiler's host side recorded, not events it dropped; else ''."""
    early, n = data_quality.get("device_launched_before_trace") or 0, data_quality.get("device_events_without_launch") or 0
    if not early:
        return ""
    which = "all" if early == n else f"{early} of them"
    return (f" ({which} launched before the trace began: their correlation ids precede its first runtime call's or "
            "they start before that call: work queued before the profiler's host side recorded)")


def quality_warnings(entry: dict, only: set | None = None) -> list[str]:
    """The warnings of a rank's data quality (`only`: those of these data_quality keys alone)."""
    labels = {
        "device_events_without_launch": "device events with no launch found",
        "nonpositive_duration": "spans with zero or negative duration",
        "overlapping_slices": "slices that overlap another on the same thread",
        "device_before_launch": "device events that start before their launch (clock anomaly)",
        "negative_timestamps": "events with negative timestamps (clock anomaly)",
        "steps_renumbered": "profiler steps numbered on after the session before them: the trace's ProfilerStep numbers "
                            "start again (profiling sessions joined in one trace), and each step keeps a number of its own",
    }
    out = []
    for key, label in labels.items():
        n = entry["data_quality"].get(key, 0)
        if n and (only is None or key in only):
            out.append(f"rank {entry['rank']}: {n} {label}" + (launched_before_trace_words(entry["data_quality"]) if
                                                               key == "device_events_without_launch" else ""))
    if only is not None:
        return out
    out += lost_kernels_warnings(entry)
    out += first_work_wait_warnings(entry)
    unlisted = entry.get("devices_without_properties") or []
    if unlisted and entry.get("device_properties"):
        listed = sorted({p.get("id") for p in entry["device_properties"] if isinstance(p, dict) and isinstance(p.get("id"), int)})
        out.append(f"rank {entry['rank']}: events ran on device {', '.join(map(str, unlisted))}, which the device "
                   f"properties do not list (they list {', '.join(map(str, listed)) or 'none'})")
    return out


def lost_kernels_warnings(entry: dict) -> list[str]:
    """A rank with launches but no device events (build's `launches_without_device_events`): it is
    no CPU-only rank, its trace lost its kernels."""
    dq = entry.get("data_quality") or {}
    launches, starts = dq.get("launches_without_device_events", 0), dq.get("launch_flows_without_device_events", 0)
    if not launches and not starts:
        return []
    what = (f"{launches} kernel launch{'es' if launches != 1 else ''}" + (f" ({starts} {LAUNCH_FLOW} flow starts)" if starts else "")
            if launches else f"{starts} {LAUNCH_FLOW} flow starts")
    return [(f"rank {entry['rank']}: {what} but no device events: the trace lost its kernels (the profiler recorded the "
             "launches but none of the device activity: device activities not enabled, the activity buffers dropped, or "
             "the trace cut before they were flushed); this rank is not CPU-only, and its device time is unknown")]
