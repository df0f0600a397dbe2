"""Import Kineto / Chrome JSON traces (what torch.profiler already writes) into a run directory.

One file, or a directory of per-rank files (`tensorboard_trace_handler` output), on disk or in an
object store (s3://bucket/key or s3://bucket/prefix/: remote.py copies each to a local file). The rank comes
from `distributedInfo.rank`, else from a `rank-N` / `rank_N` file name, else 0 with a warning.
Data-quality problems are counted in the manifest, never raised; bad input raises InputError.

A run is written only when every later reader can use it, so what the run cannot hold truthfully
is refused with one line (InputError) before anything is written: a rank beyond MAX_RANK, a
`baseTimeNanoseconds` that is not within TIME_LIMIT_NS, times (start, and start plus duration,
after the base) beyond ±TIME_LIMIT_NS, durations or allocation sizes whose sum does not fit int64
(DuckDB's int64 arithmetic on them must never overflow). Descriptive metadata that is
malformed is dropped with a warning instead: `deviceProperties` entries without an integer id
(or not a list at all), a `world_size` that is not a positive integer, a `distributedInfo` that is
not an object.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from .. import parquet_native, store
from ..errors import InputError
from ..schema import ID_STRIDE
from . import _kineto_json, remote, sources
from .build import RankTables, RawRank, build_rank
from ._malloc import BUILD_MMAP_THRESHOLD, DECODE_MMAP_THRESHOLD, WRITE_MMAP_THRESHOLD, set_mmap_threshold
from .kineto_names import MEMORY_ARGS

TRACE_SUFFIXES = (".json", ".json.gz")
_RANK_IN_NAME = re.compile(r"rank[-_](\d+)", re.IGNORECASE)
HEADER_KEYS_KEPT_APART = ("deviceProperties", "computeProperties", "distributedInfo", "baseTimeNanoseconds")
MAX_RANK = (2**63 - 1) // ID_STRIDE - 1
"""The largest rank a run holds: event ids are `rank * ID_STRIDE + index` in int64."""
TIME_LIMIT_NS = 2**62
"""Every time in a run (ns from the epoch, or from the trace's start) lies within ±2^62 ns (about
146 years), and a rank's durations (and allocation sizes) add up to less than 2^63: then any
difference of times, start plus duration, or sum of durations a query forms fits int64."""


@dataclass
class ImportResult:
    run_dir: Path
    manifest: dict


def find_traces(source: Path | str) -> list[Path] | list[remote.RemoteTrace]:
    """The trace files of `source` (a file, or every .json/.json.gz under a directory), each checked
    readable now: an unreadable one is a one-line error before any work. A URI (s3://bucket/key
    or s3://bucket/prefix/) lists the traces there (remote.py)."""
    if remote.is_uri(source):
        return remote.find_traces(source, TRACE_SUFFIXES)
    src = Path(source)
    try:
        if not src.exists():
            raise InputError(src, "no such file or directory")
        if src.is_file():
            files = [src]
        else:
            files = sorted(p for p in src.rglob("*") if p.is_file() and p.name.endswith(TRACE_SUFFIXES))
    except OSError as e:
        raise InputError(src, f"cannot read ({_reason(e)})") from None
    if not files:
        raise InputError(src, "no .json or .json.gz traces in this directory")
    for p in files:
        try:
            with open(p, "rb"):
                pass
        except OSError as e:
            raise InputError(p, f"cannot read the file ({_reason(e)})") from None
    return files


def _reason(e: OSError) -> str:
    return " ".join((e.strerror or str(e)).split()) or type(e).__name__


def rank_bounds_error(rank: int) -> str | None:
    if 0 <= rank <= MAX_RANK:
        return None
    return f"rank {rank} is not one a run can hold (0 to {MAX_RANK})"


def rank_of(path: Path, header: dict) -> tuple[int, str | None]:
    """(rank, warning or None)."""
    info = header.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int) and not isinstance(info.get("rank"), bool):
        if problem := rank_bounds_error(info["rank"]):
            raise InputError(path, f"distributedInfo: {problem}")
        return info["rank"], None
    m = _RANK_IN_NAME.search(path.name)
    if m:
        rank = int(m.group(1)[:40])
        if problem := rank_bounds_error(rank):
            raise InputError(path, f"the file name says {problem}")
        return rank, None
    return 0, f"{path.name}: no rank in distributedInfo or the file name; assumed rank 0"


def _device_properties(path: Path, header: dict, warnings: list[str]) -> list:
    """deviceProperties (or its older name computeProperties), only the entries every reader can
    use: objects with an integer id and a text name (or none)."""
    key = "deviceProperties" if header.get("deviceProperties") else "computeProperties"
    props = header.get(key) or []
    if not isinstance(props, list):
        warnings.append(f"{path.name}: {key} is not a list; ignored")
        return []
    kept = [p for p in props if isinstance(p, dict) and type(p.get("id")) is int and -(2**63) <= p["id"] < 2**63
            and isinstance(p.get("name"), (str, type(None)))]
    if len(kept) < len(props):
        warnings.append(f"{path.name}: {len(props) - len(kept)} {key} entries without an integer id "
                        "(or with a name that is not text) ignored")
    return kept


def _distributed_info(path: Path, header: dict, warnings: list[str]) -> dict | None:
    info = header.get("distributedInfo")
    if info is None:
        return None
    if not isinstance(info, dict):
        warnings.append(f"{path.name}: distributedInfo is not an object; ignored")
        return None
    world = info.get("world_size")
    if world is not None and not (type(world) is int and 0 < world < 2**63):
        warnings.append(f"{path.name}: distributedInfo world_size {str(world)[:40]!r} is not a positive integer; ignored")
        info = {k: v for k, v in info.items() if k != "world_size"}
    return info


def _check_ranges(path: Path, raw: RawRank) -> None:
    """Times and sums that later int64 arithmetic (here and in DuckDB) must hold; see TIME_LIMIT_NS."""
    limit = TIME_LIMIT_NS

    def span(col) -> tuple[int, int]:
        mm = pc.min_max(col).as_py()
        return mm["min"], mm["max"]

    for table, what in ((raw.events, "an event"), (raw.flows, "a flow event"), (raw.memory, "a [memory] event"),
                        (raw.counters, "a counter")):
        if not table.num_rows:
            continue
        lo, hi = span(table["ts_ns"])
        for v in (lo, hi):
            if not -limit <= v + raw.base_ns <= limit:
                raise InputError(path, f"wrong value: {what} starts at {_us_text(v)} µs"
                                       + (f" after baseTimeNanoseconds {raw.base_ns}" if raw.base_ns else "")
                                       + ", beyond the ±2^62 ns (146 years) a run holds")
    ev = raw.events
    if ev.num_rows:
        lo, hi = span(ev["dur_ns"])
        for v in (lo, hi):
            if not -limit <= v <= limit:
                raise InputError(path, f"wrong value: an event lasts {_us_text(v)} µs, beyond the 2^62 ns (146 years) a run holds")
        try:
            lo, hi = span(pc.add_checked(ev["ts_ns"], ev["dur_ns"]))
        except pa.ArrowInvalid:  # overflows int64: far beyond the limit
            lo, hi = -2 * limit, 2 * limit
        for v in (lo, hi):
            if not -limit <= v + raw.base_ns <= limit:
                raise InputError(path, f"wrong value: an event ends at {_us_text(v)} µs, beyond the ±2^62 ns (146 years) a run holds")
        total = pc.sum(pc.abs(ev["dur_ns"].cast(pa.float64(), safe=False))).as_py() or 0
        if total >= 2**63:
            raise InputError(path, f"wrong value: the events' durations add up to {total / 1e9:.3g} s, beyond the int64 ns "
                                   "(292 years) a sum of them must fit")
    mem = raw.memory
    if mem.num_rows:
        total = pc.sum(pc.abs(mem["bytes"].cast(pa.float64(), safe=False))).as_py() or 0
        if total >= 2**63:
            raise InputError(path, f"wrong value: the [memory] events' Bytes add up to {total:.3g}, beyond the int64 a sum of them must fit")
        for col in ("total_allocated", "total_reserved"):
            key = MEMORY_ARGS[col]
            lo, hi = span(mem[col])
            for v in (lo, hi):
                if v is not None and not -limit <= v <= limit:
                    raise InputError(path, f"wrong value: [memory] args {key!r} {v} is beyond the ±2^62 a run holds")


def _us_text(ns: int) -> str:
    return f"{ns / 1000:.6g}"


def _concat(tables: list[pa.Table]) -> pa.Table:
    """Chunks → one table. Dictionary columns keep their per-chunk dictionaries (build unifies them)."""
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def decode_rank(path: Path, progress: Callable[[int, int], None] | None = None,
                workers: int | None = None, source: remote.RemoteTrace | None = None) -> tuple[RawRank, dict, list[str], dict]:
    """Decode the trace file `path`; `source`: the trace it is a local copy of, which names it
    (rank from its name, errors, the manifest's source)."""
    try:
        decoded = _kineto_json.decode_trace(str(path), progress=progress, workers=workers)
    except InputError as e:
        if source is None or e.path != str(path):
            raise
        raise InputError(source, e.problem) from None
    if source is not None:
        path = source
    header = decoded.header
    rank, warning = rank_of(path, header)
    warnings = [warning] if warning else []
    base = header.get("baseTimeNanoseconds", 0)
    if isinstance(base, bool) or not isinstance(base, int):
        if base not in (None, 0):
            warnings.append(f"{path.name}: baseTimeNanoseconds is not an integer; ignored")
        base = 0
    if not -TIME_LIMIT_NS <= base <= TIME_LIMIT_NS:
        raise InputError(path, f"wrong value: baseTimeNanoseconds {str(base)[:40]} is beyond the ±2^62 ns (146 years) a run holds")
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
    _check_ranges(path, raw)
    meta = {
        "source": str(path),
        "base_ns": base,
        "distributed_info": _distributed_info(path, header, warnings),
        # older traces call deviceProperties computeProperties
        "device_properties": _device_properties(path, header, warnings),
        "trace_metadata": {k: v for k, v in header.items() if k not in HEADER_KEYS_KEPT_APART},
        "metadata_events": metadata_events,
        "unsupported_phases": unsupported,
    }
    if unsupported:
        warnings.append(f"{path.name}: events of unsupported phases skipped: {unsupported}")
    return raw, meta, warnings, _category_counts(raw)


def _category_counts(raw: RawRank) -> dict:
    """Events per category (null: None) over the events, flows and memory tables."""
    counts: dict[str, int] = {}
    for t in (raw.events, raw.flows, raw.memory):
        for chunk in t["category"].chunks:
            coded = pa.types.is_dictionary(chunk.type)  # counted by code: no string made per event
            for item in pc.value_counts(chunk.indices if coded else chunk).to_pylist():
                value = item["values"]
                if coded and value is not None:
                    value = chunk.dictionary[value].as_py()
                counts[value] = counts.get(value, 0) + item["counts"]
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
        "span_ns": built.span_ns,
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


ImportProgress = Callable[[int, int, int, int], None]
"""Called as each trace is done: (files done, files in all, bytes done, bytes in all)."""

WORKER_BASE_BYTES = 200 << 20
"""Memory a worker process needs before its trace (interpreter, pyarrow, buffers)."""
WORKER_BYTES_PER_JSON_BYTE = 2.5
"""Peak memory of importing a trace, per byte of its JSON (measured: 2.2 on a 410 MB trace)."""


def json_bytes(path: Path) -> int:
    """The size of a trace's JSON: the file's size, or for .gz the size its trailer records (mod 4 GiB)."""
    if isinstance(path, remote.RemoteTrace):
        return remote.json_bytes(path)
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


REMOTE_SIZES_READ = 8
"""Traces in an object store whose JSON size is read (the largest stored) to size the workers."""


def import_workers(files: list[Path], requested: int | None = None) -> int:
    """Worker processes for importing `files`: `requested` (default: one per core), at most one per
    core and per file, and no more than fit in the memory available now with the largest trace in each."""
    cores = os.cpu_count() or 1
    n = min(requested or cores, cores, len(files))
    available = _available_memory()
    if available and n > 1:
        if isinstance(files[0], remote.RemoteTrace):  # a request per trailer: ask of the largest few only
            files = sorted(files, key=lambda f: f.size)[-REMOTE_SIZES_READ:]
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
    if isinstance(path, remote.RemoteTrace):  # decoded from a local copy, deleted once decoded
        with remote.local_copy(path) as local:
            raw, meta, w, category_counts = decode_rank(local, progress, workers=decode_workers, source=path)
    else:
        raw, meta, w, category_counts = decode_rank(path, progress, workers=decode_workers)
    if tune_allocator:
        set_mmap_threshold(BUILD_MMAP_THRESHOLD)
    built = build_rank(raw)
    del raw  # build_rank took what it needs; let the raw columns go before writing
    built.tables["frames"] = sources.with_code(built.tables["frames"])  # the def lines' text, where readable here
    if tune_allocator:
        set_mmap_threshold(WRITE_MMAP_THRESHOLD, trim=True)  # the build's temporaries go back before writing
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
    check_output_path(out_dir)
    try:
        store.check_writable_target(out_dir, force)
    except OSError as e:  # a path the system refuses to even look at
        raise InputError(out_dir, f"cannot write here ({_reason(e)})") from None
    files = find_traces(source)
    parquet_native.load()  # the parallel Parquet writer, built (once) before any worker starts: workers only load it
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

        kept = _take_kept(out, files, tmp) if len(files) > 1 else {}
        for i in sorted(kept):
            finished(kept[i])
        todo = [i for i in range(len(files)) if i not in kept]
        failed: dict[int, str] = {}  # file index -> why it failed (the other files still run)
        if ray is not None:
            from ..ray_tasks import map_settled

            order = sorted(todo, key=lambda i: -sizes[i])
            for i, ok, result in map_settled(ray, _import_rank, [(i, files[i], tmp, tune_allocator, 1) for i in order]):
                if ok:
                    finished(result)
                else:
                    failed[i] = result
        elif n_workers == 1 or len(todo) <= 1:
            for i in todo:
                file_progress = progress_factory(files[i].name, sizes[i]) if progress_factory else None
                try:
                    finished(_import_rank(i, files[i], tmp, tune_allocator, None, file_progress))
                except Exception as e:  # noqa: BLE001 - reported by file name once the others are done
                    if len(files) == 1:
                        raise
                    failed[i] = _why(e)
        else:
            # a worker that dies breaks the pool and fails every trace in flight with it: those go
            # round again in a fresh pool, and one by one once a round makes no progress, so that
            # only the trace that kills its worker is reported
            while todo:
                died = []
                with ProcessPoolExecutor(max_workers=min(n_workers, len(todo))) as pool:
                    # largest first, so that a big trace does not start last; one decode process per worker
                    order = sorted(todo, key=lambda i: -sizes[i])
                    futures = {pool.submit(_import_rank, i, files[i], tmp, tune_allocator, 1): i for i in order}
                    try:
                        for future in as_completed(futures):
                            try:
                                finished(future.result())
                            except BrokenProcessPool as e:
                                failed[futures[future]] = _why(e)
                                died.append(futures[future])
                            except Exception as e:  # noqa: BLE001 - a failing trace: reported once the others are done
                                failed[futures[future]] = _why(e)
                    finally:
                        for future in futures:
                            future.cancel()
                if not died:
                    break
                for i in died:
                    failed.pop(i)
                    shutil.rmtree(tmp / f".part-{i}", ignore_errors=True)
                if len(died) < len(todo):
                    todo = died
                    continue
                for i in died:  # no progress: each in a process of its own
                    with ProcessPoolExecutor(max_workers=1) as solo:
                        try:
                            finished(solo.submit(_import_rank, i, files[i], tmp, tune_allocator, 1).result())
                        except Exception as e:  # noqa: BLE001 - this trace's own failure
                            failed[i] = _why(e)
                break
        if failed:
            _keep_done(out, files, tmp, results)
            shutil.rmtree(tmp, ignore_errors=True)
            raise ImportFailed(out, files, failed, len(results))
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
        shutil.rmtree(_kept_dir(out), ignore_errors=True)
    except BaseException as e:
        if len(files) > 1 and isinstance(e, KeyboardInterrupt) and "results" in locals():
            _keep_done(out, files, tmp, results)  # interrupted: what was done is kept for the rerun
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ImportResult(out, manifest)


class ImportFailed(InputError):
    """Some of the traces of a directory failed: each named with why; the ranks that were imported
    are kept, and the same command run again imports only the missing ones."""

    def __init__(self, out: Path, files: list[Path], failed: dict[int, str], done: int):
        self.failed = {str(files[i]): why for i, why in sorted(failed.items())}
        names = "; ".join(f"{files[i].name}: {why}" for i, why in sorted(failed.items()))
        super().__init__(out, f"{len(failed)} of {len(files)} traces failed ({names}); the {done} imported are kept "
                              f"in {_kept_dir(out)}: run the same command again to import only the missing ones")

    def __reduce__(self):
        return InputError, (self.path, self.problem)


def _why(e: BaseException) -> str:
    """A failed trace's reason in a few words (a worker process that died says so)."""
    if isinstance(e, BrokenProcessPool):
        return "its worker process died (killed, or out of memory)"
    if isinstance(e, InputError):
        return e.problem
    return f"{type(e).__name__}: {e}"


KEPT_INDEX = "kept.json"
"""In `.NAME.kept/` beside a run whose import failed in part: which trace (path, size, mtime)
each kept `<n>/` partition came from, with its manifest entry."""


def _kept_dir(out: Path) -> Path:
    return out.parent / f".{out.name}.kept"


def _source_key(path: Path) -> str:
    st = path.stat()
    return f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"


def _keep_done(out: Path, files: list[Path], tmp: Path, results: dict) -> None:
    """Move the partitions written so far into `.NAME.kept/`, indexed by their trace, so that a
    rerun takes them instead of importing those traces again."""
    import json

    kept = _kept_dir(out)
    kept.mkdir(exist_ok=True)
    index_path = kept / KEPT_INDEX
    index = json.loads(index_path.read_text()) if index_path.is_file() else {}
    for i, (_, rank, entry, warnings) in results.items():
        if not (tmp / f".part-{i}").is_dir():
            continue
        key = _source_key(files[i])
        name = str(len(index)) if key not in index else index[key]["dir"]
        shutil.rmtree(kept / name, ignore_errors=True)
        os.replace(tmp / f".part-{i}", kept / name)
        index[key] = {"dir": name, "rank": rank, "entry": entry, "warnings": warnings}
    index_path.write_text(json.dumps(index))


def _take_kept(out: Path, files: list[Path], tmp: Path) -> dict[int, tuple]:
    """The results of traces a failed import kept (same path, size and modification time),
    their partitions moved into `tmp` as `.part-<i>`."""
    import json

    index_path = _kept_dir(out) / KEPT_INDEX
    if not index_path.is_file():
        return {}
    try:
        index = json.loads(index_path.read_text())
    except (OSError, ValueError):
        return {}
    got = {}
    for i, path in enumerate(files):
        k = index.get(_source_key(path))
        if k and (_kept_dir(out) / k["dir"]).is_dir():
            os.replace(_kept_dir(out) / k["dir"], tmp / f".part-{i}")
            got[i] = (i, k["rank"], k["entry"], k["warnings"])
    return got


_TEMP_SUFFIX = 40
"""Room the run's temporary name beside it takes (`.NAME.tmp-<pid>-<host>-<id>`)."""


def check_output_path(out_dir: Path | str) -> None:
    """A name the file system cannot hold is a one-line error before any work (the temporary
    directory beside the run is named after it, so it has a little less room). A URI is refused:
    a run is read by DuckDB from a filesystem."""
    if remote.is_uri(out_dir):
        raise InputError(out_dir, "a run is written to a directory on a filesystem (local, or shared such as NFS), "
                                  "not to an object store: give a path; traces can be read from s3://")
    out = Path(out_dir)
    try:
        name_max = os.pathconf(_existing_parent(out), "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    longest = max((len(os.fsencode(part)) for part in out.parts), default=0)
    if len(os.fsencode(out.name)) + _TEMP_SUFFIX > name_max or longest > name_max:
        raise InputError(out_dir, f"the name is too long ({len(os.fsencode(out.name))} bytes; at most "
                                  f"{name_max - _TEMP_SUFFIX} here): pick a shorter one")


def _existing_parent(p: Path) -> Path:
    p = p.absolute().parent
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def _claim_rank(results: dict, files: list[Path], tmp: Path, index: int) -> None:
    """Rename file `index`'s partition to rank=<r>/, refusing a rank an earlier file claimed."""
    rank = results[index][1]
    earlier = next((i for i in range(index) if results[i][1] == rank), None)
    if earlier is not None:
        raise InputError(files[index], f"rank {rank} is also claimed by {files[earlier]}; import them into separate runs")
    os.replace(tmp / f".part-{index}", tmp / f"rank={rank}")
