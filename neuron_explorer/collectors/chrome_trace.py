"""Import Kineto / Chrome JSON traces (what torch.profiler already writes) into a run directory.

One file, or a directory of per-rank files (`tensorboard_trace_handler` output). The rank comes
from `distributedInfo.rank`, else from a `rank-N` / `rank_N` file name, else 0 with a warning.
Data-quality problems are counted in the manifest, never raised; bad input raises InputError.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
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


def decode_rank(path: Path, progress: Callable[[int, int], None] | None = None,
                workers: int | None = None) -> tuple[RawRank, dict, list[str], dict]:
    decoded = _kineto_json.decode_trace(str(path), progress=progress, workers=workers)
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
        # older traces call deviceProperties computeProperties
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


ImportProgress = Callable[[int, int, int, int], None]
"""Called as each trace is done: (files done, files in all, bytes done, bytes in all)."""

WORKER_BASE_BYTES = 200 << 20
"""Memory a worker process needs before its trace (interpreter, pyarrow, buffers)."""
WORKER_BYTES_PER_JSON_BYTE = 2.5
"""Peak memory of importing a trace, per byte of its JSON (measured: 2.2 on a 410 MB trace)."""


def json_bytes(path: Path) -> int:
    """The size of a trace's JSON: the file's size, or for .gz the size its trailer records (mod 4 GiB)."""
    size = path.stat().st_size
    if path.name.endswith(".gz") and size >= 18:
        with open(path, "rb") as f:
            f.seek(-4, os.SEEK_END)
            return max(size, int.from_bytes(f.read(4), "little"))
    return size


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def import_workers(files: list[Path], requested: int | None = None) -> int:
    """Worker processes for importing `files`: `requested` (default: one per core), at most one per
    core and per file, and no more than fit in the memory available now with the largest trace in each."""
    cores = os.cpu_count() or 1
    n = min(requested or cores, cores, len(files))
    available = _available_memory()
    if available and n > 1:
        need = WORKER_BASE_BYTES + WORKER_BYTES_PER_JSON_BYTE * max(json_bytes(f) for f in files)
        n = min(n, max(1, int(available * 0.8 // need)))
    return max(1, n)


def _import_rank(index: int, path: Path, tmp: Path, tune_allocator: bool, decode_workers: int | None,
                 progress: Callable[[int, int], None] | None = None) -> tuple[int, int, dict, list[str]]:
    """Decode, build and write one trace into tmp/.part-<index>/ (renamed to rank=<r>/ by the
    caller, who checks that ranks are not claimed twice). Runs in a worker process or inline;
    returns only the small manifest entry, never the tables."""
    if tune_allocator:
        set_mmap_threshold(DECODE_MMAP_THRESHOLD)
    raw, meta, w, category_counts = decode_rank(path, progress, workers=decode_workers)
    if tune_allocator:
        set_mmap_threshold(BUILD_MMAP_THRESHOLD)
    built = build_rank(raw)
    del raw  # build_rank took what it needs; let the raw columns go before writing
    if tune_allocator:
        set_mmap_threshold(DECODE_MMAP_THRESHOLD, trim=True)  # the build's temporaries go back before writing
    entry = rank_entry(built, meta)
    entry["category_counts"] = category_counts
    part = tmp / f".part-{index}"
    part.mkdir()
    store.write_partition(part, built.tables)
    return index, built.rank, entry, w + quality_warnings(entry)


def import_traces(source: Path | str, out_dir: Path | str, *, force: bool = False, tune_allocator: bool = False,
                  progress_factory: Callable[[str, int], Callable[[int, int], None]] | None = None,
                  command: list[str] | None = None, workers: int | None = None,
                  progress: ImportProgress | None = None, ray: str | None = None) -> ImportResult:
    """Import one trace or a directory of per-rank traces into a run at `out_dir`.

    Several traces are imported by `workers` processes (default and upper bound: `import_workers`,
    one per core within the memory available), each writing its own rank's partition into the
    run's temporary directory, so memory holds a few ranks, never the job. The run is the same
    whatever the number of workers. `progress_factory` gives byte progress within a file (one
    worker only); `progress` is called as each file is done. With `ray` (a cluster address, 'auto'
    or 'local'), each trace is a Ray task instead (ray_tasks.py): the output's folder must be on a
    filesystem every node shares.
    """
    store.check_writable_target(out_dir, force)
    files = find_traces(source)
    out, tmp = store.begin_run(out_dir, force)
    try:
        n_workers = import_workers(files, workers)
        sizes = [p.stat().st_size for p in files]
        done_bytes = 0
        results: dict[int, tuple] = {}
        if progress:
            progress(0, len(files), 0, sum(sizes))

        def finished(result) -> None:
            nonlocal done_bytes
            results[result[0]] = result
            done_bytes += sizes[result[0]]
            if progress:
                progress(len(results), len(files), done_bytes, sum(sizes))

        if ray is not None:
            from ..ray_tasks import map_unordered

            order = sorted(range(len(files)), key=lambda i: -sizes[i])
            for result in map_unordered(ray, _import_rank, [(i, files[i], tmp, tune_allocator, 1) for i in order]):
                finished(result)
            for i in range(len(files)):
                _claim_rank(results, files, tmp, i)
        elif n_workers == 1:
            for i, path in enumerate(files):
                file_progress = progress_factory(path.name, sizes[i]) if progress_factory else None
                finished(_import_rank(i, path, tmp, tune_allocator, None, file_progress))
                _claim_rank(results, files, tmp, i)
        else:
            with ProcessPoolExecutor(max_workers=n_workers) as pool:
                # largest first, so that a big trace does not start last; one decode process per worker
                order = sorted(range(len(files)), key=lambda i: -sizes[i])
                futures = [pool.submit(_import_rank, i, files[i], tmp, tune_allocator, 1) for i in order]
                try:
                    for future in as_completed(futures):
                        finished(future.result())
                finally:
                    for future in futures:
                        future.cancel()
            for i in range(len(files)):
                _claim_rank(results, files, tmp, i)
        entries = [results[i][2] for i in range(len(files))]
        warnings = [w for i in range(len(files)) for w in results[i][3]]
        manifest = store.base_manifest(
            "import",
            command=command or sys.argv,
            sources=sorted(({"path": str(p), "bytes": p.stat().st_size, "rank": results[i][1]} for i, p in enumerate(files)),
                           key=lambda s: s["rank"]),
            ranks=sorted(entries, key=lambda e: e["rank"]),
            warnings=warnings,
        )
        store.finish_run(tmp, out, manifest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ImportResult(out, manifest)


def _claim_rank(results: dict, files: list[Path], tmp: Path, index: int) -> None:
    """Rename file `index`'s partition to rank=<r>/, refusing a rank an earlier file claimed."""
    rank = results[index][1]
    earlier = next((i for i in range(index) if results[i][1] == rank), None)
    if earlier is not None:
        raise InputError(files[index], f"rank {rank} is also claimed by {files[earlier]}; import them into separate runs")
    os.replace(tmp / f".part-{index}", tmp / f"rank={rank}")
