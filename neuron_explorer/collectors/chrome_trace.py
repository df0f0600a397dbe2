"""Import Kineto / Chrome JSON traces (what torch.profiler already writes) into a run directory.

One file, or a directory of per-rank files (`tensorboard_trace_handler` output). The rank comes
from `distributedInfo.rank`, else from a `rank-N` / `rank_N` file name, else 0 with a warning.
Data-quality problems are counted in the manifest, never raised; bad input raises InputError.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from .. import store
from ..errors import InputError
from . import _kineto_json
from .build import RankTables, RawRank, build_rank

TRACE_SUFFIXES = (".json", ".json.gz")
_RANK_IN_NAME = re.compile(r"rank[-_](\d+)", re.IGNORECASE)
HEADER_KEYS_KEPT_APART = ("deviceProperties", "computeProperties", "distributedInfo", "baseTimeNanoseconds")


@dataclass
class ImportResult:
    run_dir: Path
    manifest: dict


def find_traces(source: Path | str) -> list[Path]:
    src = Path(source)
    if not src.exists():
        raise InputError(src, "no such file or directory")
    if src.is_file():
        return [src]
    files = sorted(p for p in src.rglob("*") if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
    if not files:
        raise InputError(src, "no .json or .json.gz traces in this directory")
    return files


def rank_of(path: Path, header: dict) -> tuple[int, str | None]:
    """(rank, warning or None)."""
    info = header.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int) and not isinstance(info.get("rank"), bool):
        return info["rank"], None
    m = _RANK_IN_NAME.search(path.name)
    if m:
        return int(m.group(1)), None
    return 0, f"{path.name}: no rank in distributedInfo or the file name; assumed rank 0"


def _concat(tables: list[pa.Table]) -> pa.Table:
    """Chunks → one table. Dictionary columns keep their per-chunk dictionaries (build unifies them)."""
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def decode_rank(path: Path, progress: Callable[[int, int], None] | None = None) -> tuple[RawRank, dict, list[str], dict]:
    decoded = _kineto_json.decode_trace(str(path), progress=progress)
    header = decoded.header
    rank, warning = rank_of(path, header)
    warnings = [warning] if warning else []
    base = header.get("baseTimeNanoseconds", 0)
    if isinstance(base, bool) or not isinstance(base, int):
        if base not in (None, 0):
            warnings.append(f"{path.name}: baseTimeNanoseconds is not an integer; ignored")
        base = 0
    chunks = decoded.chunks
    unsupported: dict[str, int] = {}
    for c in chunks:
        for k, v in c.unsupported.items():
            unsupported[k] = unsupported.get(k, 0) + v
    events = _concat([c.events for c in chunks])
    # one args array, so that the chunks' buffers can be freed and sorting takes from one array
    events = events.set_column(events.schema.get_field_index("args"), "args", pa.chunked_array([events["args"].combine_chunks()]))
    raw = RawRank(
        rank=rank,
        events=events,
        flows=_concat([c.flows for c in chunks]),
        memory=_concat([c.memory for c in chunks]),
        counters=_concat([c.counters for c in chunks]),
        base_ns=base,
    )
    metadata_events = [m for c in chunks for m in c.metadata]
    del chunks, decoded, events
    meta = {
        "source": str(path),
        "base_ns": base,
        "distributed_info": header.get("distributedInfo"),
        # torch 1.8-1.9 called deviceProperties computeProperties
        "device_properties": header.get("deviceProperties") or header.get("computeProperties") or [],
        "trace_metadata": {k: v for k, v in header.items() if k not in HEADER_KEYS_KEPT_APART},
        "metadata_events": metadata_events,
        "unsupported_phases": unsupported,
    }
    if unsupported:
        warnings.append(f"{path.name}: events of unsupported phases skipped: {unsupported}")
    return raw, meta, warnings, _category_counts(raw)


def _category_counts(raw: RawRank) -> dict:
    counts: dict[str, int] = {}
    for t in (raw.events, raw.flows, raw.memory):
        if t.num_rows:
            vc = pc.value_counts(t["category"].cast(pa.string()) if not pa.types.is_dictionary(t["category"].type)
                                 else t["category"].cast(pa.string()))
            for item in vc.to_pylist():
                counts[item["values"]] = counts.get(item["values"], 0) + item["counts"]
    return counts


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
        "counts": built.counts,
        "devices": built.devices,
        **device_list(built.devices, meta.get("device_properties") or []),
        "steps": built.steps,
        "data_quality": quality,
        **meta,
    }


def quality_warnings(entry: dict) -> list[str]:
    labels = {
        "device_events_without_launch": "device events with no launch found",
        "nonpositive_duration": "spans with zero or negative duration",
        "overlapping_slices": "slices that overlap another on the same thread",
        "device_before_launch": "device events that start before their launch (clock anomaly)",
        "negative_timestamps": "events with negative timestamps (clock anomaly)",
    }
    out = []
    for key, label in labels.items():
        n = entry["data_quality"].get(key, 0)
        if n:
            out.append(f"rank {entry['rank']}: {n} {label}")
    unlisted = entry.get("devices_without_properties") or []
    if unlisted and entry.get("device_properties"):
        listed = sorted({p.get("id") for p in entry["device_properties"] if isinstance(p, dict) and isinstance(p.get("id"), int)})
        out.append(f"rank {entry['rank']}: events ran on device {', '.join(map(str, unlisted))}, which the device "
                   f"properties do not list (they list {', '.join(map(str, listed)) or 'none'})")
    return out


DECODE_MMAP_THRESHOLD = 256 << 10
BUILD_MMAP_THRESHOLD = 64 << 20


def set_mmap_threshold(nbytes: int, trim: bool = False) -> None:
    """glibc's M_MMAP_THRESHOLD: blocks this large or larger are mmapped, and so returned to the OS
    when freed (a no-op off Linux/glibc). Process-wide, so only batch imports (`tune_allocator=True`,
    what the CLI asks for) change it.

    Decoding interleaves long-lived result buffers with short-lived ones of a few MB; served from
    the heap (glibc's adaptive default) the freed ones stay in the process and the peak grows by
    ~40%, so decoding runs with a small threshold. Building the links allocates and frees arrays of
    tens of MB; mmapping each costs page faults (~0.5 s for a 2M-event trace) while the heap
    reuses them, so the build runs with a large one.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, int(nbytes))  # M_MMAP_THRESHOLD
        if trim:
            libc.malloc_trim(0)  # hand the heap's free memory back now
    except (OSError, AttributeError):
        pass


def import_traces(source: Path | str, out_dir: Path | str, *, force: bool = False, tune_allocator: bool = False,
                  progress_factory: Callable[[str, int], Callable[[int, int], None]] | None = None,
                  command: list[str] | None = None) -> ImportResult:
    out = store.check_writable_target(out_dir, force)
    files = find_traces(source)
    partitions: dict[int, dict[str, pa.Table]] = {}
    entries: list[dict] = []
    warnings: list[str] = []
    seen: dict[int, Path] = {}
    for path in files:
        progress = progress_factory(path.name, path.stat().st_size) if progress_factory else None
        if tune_allocator:
            set_mmap_threshold(DECODE_MMAP_THRESHOLD)
        raw, meta, w, category_counts = decode_rank(path, progress)
        if raw.rank in seen:
            raise InputError(path, f"rank {raw.rank} is also claimed by {seen[raw.rank]}; import them into separate runs")
        seen[raw.rank] = path
        if tune_allocator:
            set_mmap_threshold(BUILD_MMAP_THRESHOLD)
        built = build_rank(raw)
        del raw  # build_rank took what it needs; let the raw columns go before writing
        if tune_allocator:
            set_mmap_threshold(DECODE_MMAP_THRESHOLD, trim=True)  # the build's temporaries go back before writing
        entry = rank_entry(built, meta)
        entry["category_counts"] = category_counts
        entries.append(entry)
        warnings += w + quality_warnings(entry)
        partitions[built.rank] = built.tables
    manifest = store.base_manifest(
        "import",
        command=command or sys.argv,
        sources=[{"path": str(p), "bytes": p.stat().st_size, "rank": r} for r, p in sorted(seen.items(), key=lambda kv: kv[0])],
        ranks=sorted(entries, key=lambda e: e["rank"]),
        warnings=warnings,
    )
    run_dir = store.write_run(out, partitions, manifest, force=force)
    return ImportResult(run_dir, manifest)
