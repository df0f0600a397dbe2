"""Import Kineto / Chrome JSON traces (what torch.profiler already writes) into a run directory.

One file, or a directory of per-rank files (`tensorboard_trace_handler` output), on disk or in an
object store (s3://bucket/key or s3://bucket/prefix/: remote.py copies each to a local file). Each
trace is decoded into its rank's raw tables (trace_rank.decode_rank), built (build.build_rank), its
frames' source lines read (sources.with_code), and written as that rank's partition, by worker
processes when there are several; this module finds the traces, sizes the workers to the memory
(refusing a trace whose plan, `import_need`, exceeds it: a local one before the run is begun, one
in an object store once its local copy is made, before it is decoded, since only the copy can be
inflated to count its JSON), keeps what was done for a rerun (`kept.json`), makes sure no rank is claimed twice, and writes the
manifest (each rank's entry: rank_entry.py). With Inductor's provenance (`provenance_files`), each
rank's torch.compile kernels are charged to their statements once built (provenance.py). Data-quality problems are counted in the manifest,
never raised; bad input raises InputError, and nothing is written then (what a trace's values
must hold: trace_rank.py).
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import sys
import zlib
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

from .. import parquet_native, store
from ..errors import InputError
from ..no_pandas import without_pandas
from . import graph_capture, provenance, remote, sources
from ._forked import keep_inherited
from ._malloc import (
    BUILD_MMAP_THRESHOLD,
    DECODE_MMAP_THRESHOLD,
    TRIM_ABOVE_JSON,
    WRITE_MMAP_THRESHOLD,
    arrow_on_malloc,
    no_huge_pages,
    set_mmap_threshold,
    trimming,
)
from .build import build_rank
from .rank_entry import quality_warnings, rank_entry
from .trace_rank import TIME_LIMIT_NS, decode_rank  # noqa: F401  (TIME_LIMIT_NS: export.py cites it here)

TRACE_SUFFIXES = (".json", ".json.gz")


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
        elif store.runs_in(src):  # runs hold .json files (manifest.json) that are no traces
            raise store.folder_of_runs(src, store.runs_in(src))
        else:
            files = sorted(p for p in src.rglob("*") if p.is_file() and p.name.endswith(TRACE_SUFFIXES)
                           and graph_capture.CAPTURE_FOLDER not in p.relative_to(src).parts)  # captures are no ranks
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


def capture_files(source: Path | str, given: list[Path | str] | None = None) -> list[Path]:
    """The graph-capture traces of an import: each of `given` (a trace, or the traces under a
    folder), and the traces in a `capture_traces/` folder beside the trace `source` or inside the
    directory `source` (TraceLens's layout; its index `execution_details.json` is no trace)."""
    if remote.is_uri(source):
        folders = []
    else:
        src = Path(source)
        folders = [src / graph_capture.CAPTURE_FOLDER if src.is_dir() else src.parent / graph_capture.CAPTURE_FOLDER]
    out: list[Path] = []
    for g in [*(Path(x) for x in (given or [])), *(f for f in folders if f.is_dir())]:
        if g.is_dir():
            out += sorted(p for p in g.rglob("*") if p.is_file() and p.name.endswith(TRACE_SUFFIXES)
                          and p.name != _CAPTURE_INDEX)
        elif not g.exists():
            raise InputError(g, "no such capture trace")
        else:
            out.append(g)
    return list(dict.fromkeys(out))


_CAPTURE_INDEX = "execution_details.json"


def provenance_files(source: Path | str, given: list[Path | str] | None = None) -> list[Path]:
    """Inductor's provenance for an import (provenance.py): each of `given` (a TORCH_TRACE folder, a
    structured log or a JSON file), else the one structured log beside the trace `source` (or
    directly inside the directory `source`), when there is exactly one."""
    if given:
        return list(dict.fromkeys(Path(g) for g in given))
    found = None if remote.is_uri(source) else provenance.beside(source)
    return [found] if found is not None else []


def read_captures(paths: list[Path]) -> graph_capture.Captures:
    """The graphs captured in each of `paths` (Kineto traces of the captures), each decoded and built
    as a rank is (graph_capture.graphs_of reads the built tables)."""
    out = graph_capture.Captures()
    for p in paths:
        raw, _meta, _warnings, _counts = decode_rank(Path(p))
        out.rank[str(p)] = raw.rank
        built = build_rank(raw)
        out.files.append(str(p))
        graph_capture.graphs_of(built.tables["events"].to_table(), built.tables["frames"], str(p), out)
    return out


def _reason(e: OSError) -> str:
    return " ".join((e.strerror or str(e)).split()) or type(e).__name__


ImportProgress = Callable[[int, int, int, int], None]
"""Called as each trace is done: (files done, files in all, bytes done, bytes in all)."""

WORKER_BASE_BYTES = 200 << 20
"""Memory a worker process needs before its trace (interpreter, pyarrow, buffers)."""
WORKER_BYTES_PER_JSON_BYTE = 3.5
"""Peak memory of importing a trace, per byte of its JSON, above WORKER_BASE_BYTES (bench/bench_import_memory.py,
the process tree's summed USS: 3.0-3.05 for traces of tiny events, 200 and 800 MiB, plain or gzip; 1.2-1.3
for the real 68k-event trace tiled 8 and 32 times; 3.5 leaves room)."""

MEMORY_CHECK_ENV = "NEURON_EXPLORER_IGNORE_MEMORY"
"""Set to 1 to import a trace whose plan (`import_need`) exceeds the memory available."""


def json_bytes(path: Path, cap: int | None = None) -> int:
    """The size of a trace's JSON: the file's size, or for .gz the bytes it expands to, counted by
    inflating it (every member; the trailer's size is mod 4 GiB and only the last member's, so a
    bomb or a >4 GiB trace would lie there); the count stops past `cap`."""
    if isinstance(path, remote.RemoteTrace):
        return remote.json_bytes(path)
    st = path.stat()
    if path.name.endswith(".gz"):
        counted, whole = _GUNZIPPED.get(_gz_key(path, st), (0, False))
        if not (whole or (cap is not None and counted > cap)):
            counted, whole = _gunzipped_bytes(path, cap)
            _GUNZIPPED[_gz_key(path, st)] = (counted, whole)
        return max(st.st_size, counted)
    return st.st_size


def _gz_key(path: Path, st: os.stat_result) -> tuple[str, int, int]:
    """A gzip's entry in _GUNZIPPED: the same path, size and modification time count the same."""
    return str(path), st.st_size, st.st_mtime_ns


_GUNZIPPED: dict[tuple[str, int, int], tuple[int, bool]] = {}
"""(path, size, mtime_ns) -> (bytes counted, whether to the end): a gzip is inflated once per import to plan it."""


def _gunzipped_bytes(path: Path, cap: int | None) -> tuple[int, bool]:
    """Bytes a gzip file expands to (all members), counted in 16 MiB pieces, and whether counted to
    its end: stops once past `cap`, and at the first damaged byte (the decoder reports that)."""
    n = 0
    d = zlib.decompressobj(31)
    buf = b""
    with open(path, "rb") as f:
        while True:
            if not buf:
                buf = f.read(1 << 20)
                if not buf:
                    return n, True
            try:
                n += len(d.decompress(buf, 1 << 24))
            except zlib.error:
                return n, True
            if cap is not None and n > cap:
                return n, False
            buf = d.unconsumed_tail
            if d.eof:  # the next member, if any (what follows the end is unused_data; the tail repeats it)
                buf = d.unused_data
                d = zlib.decompressobj(31)


def import_need(path: Path, cap: int | None = None) -> int:
    """The memory planned for importing one trace: WORKER_BASE_BYTES + WORKER_BYTES_PER_JSON_BYTE x its JSON."""
    return int(WORKER_BASE_BYTES + WORKER_BYTES_PER_JSON_BYTE * json_bytes(path, None if cap is None else _json_cap(cap)))


def _json_cap(memory: int) -> int:
    """JSON bytes past which a trace's plan exceeds `memory`."""
    return int(max(0, memory - WORKER_BASE_BYTES) / WORKER_BYTES_PER_JSON_BYTE) + 1


def check_memory(files: list[Path]) -> None:
    """Refuse, in one line before anything is decoded, a trace whose plan (`import_need`) exceeds
    the memory available now; MEMORY_CHECK_ENV=1 imports it anyway."""
    if os.environ.get(MEMORY_CHECK_ENV, "") not in ("", "0"):
        return
    available = _available_memory()
    if not available:
        return
    for f in files:
        js = json_bytes(f, _json_cap(available))
        need = int(WORKER_BASE_BYTES + WORKER_BYTES_PER_JSON_BYTE * js)
        if need > available:
            at_least = "" if not f.name.endswith(".gz") else "at least "
            raise InputError(f, f"importing it needs {at_least}about {_mb(need)} of memory ({_mb(WORKER_BASE_BYTES)} + "
                                f"{WORKER_BYTES_PER_JSON_BYTE:g} x its {at_least}{_mb(js)} of JSON), more than the "
                                f"{_mb(available)} available; set {MEMORY_CHECK_ENV}=1 to try anyway")


def _mb(n: int) -> str:
    return f"{n / 1e6:,.0f} MB" if n < 10**10 else f"{n / 1e9:,.1f} GB"


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
        need = max(import_need(f) for f in files)
        n = min(n, max(1, int(available * 0.8 // need)))
    return max(1, n)


def _import_rank(index: int, path: Path, tmp: Path, tune_allocator: bool, decode_workers: int | None,
                 progress: Callable[[int, int], None] | None = None,
                 captures: graph_capture.Captures | None = None,
                 kernel_provenance: dict | None = None, keep_device_clock: bool = False) -> tuple[int, int, dict, list[str]]:
    """Decode, build and write one trace into tmp/.part-<index>/ (renamed to rank=<r>/ by the
    caller, who checks that ranks are not claimed twice). Runs in a worker process or inline;
    returns only the small manifest entry, never the tables. A batch import (`tune_allocator`: a
    process of the tool's own) runs without pandas on any thread (no_pandas.without_pandas)."""
    with without_pandas(every_thread=True) if tune_allocator else contextlib.nullcontext():
        return _import_rank_in(index, path, tmp, tune_allocator, decode_workers, progress, captures, kernel_provenance,
                               keep_device_clock)


def _import_rank_in(index: int, path: Path, tmp: Path, tune_allocator: bool, decode_workers: int | None,
                    progress: Callable[[int, int], None] | None, captures: graph_capture.Captures | None,
                    kernel_provenance: dict | None, keep_device_clock: bool = False) -> tuple[int, int, dict, list[str]]:
    if tune_allocator:
        arrow_on_malloc()
        no_huge_pages()
        set_mmap_threshold(DECODE_MMAP_THRESHOLD)
        # the objects made before the first import (modules, classes: hundreds of thousands) are
        # never garbage: left out of the collector's passes, the decode's collections (2,400 on a
        # 2-million-event trace, the decode's threads stopped for each) take 0.2 s instead of 1.1 s
        if not gc.get_freeze_count():
            gc.freeze()
    if isinstance(path, remote.RemoteTrace):  # decoded from a local copy, deleted once decoded
        with remote.local_copy(path) as local:
            try:  # the plan, as for a local file: a gzip's trailer (what the listing could read) may lie
                check_memory([local])
            except InputError as e:
                raise InputError(path, e.problem) from None
            raw, meta, w, category_counts = decode_rank(local, progress, workers=decode_workers, source=path,
                                                        align_clock=not keep_device_clock)
            budget = _trim_budget(local)
    else:
        before = _identity(path, "is gone")
        try:
            raw, meta, w, category_counts = decode_rank(path, progress, workers=decode_workers, align_clock=not keep_device_clock)
        except FileNotFoundError:
            raise InputError(path, "the file disappeared while it was being imported; nothing was written") from None
        if _identity(path, "disappeared while it was being imported; nothing was written") != before:
            raise InputError(path, "the file changed while it was being imported (rewritten or replaced); nothing was "
                                   "written: import it again once it is complete")
        budget = _trim_budget(path)
    if tune_allocator:
        set_mmap_threshold(BUILD_MMAP_THRESHOLD)
    if captures is not None and not captures.whole:
        captures = captures.for_rank(raw.rank)
    # the build's and the write's freed heap pages go back as they go, near the trace's JSON size (batch imports: _malloc.trimming)
    with trimming(above=budget) if tune_allocator else contextlib.nullcontext():
        built = build_rank(raw, captures)
        del raw  # build_rank took what it needs; let the raw columns go before writing
        charged = provenance.charge_rank(built.tables, built.rank, kernel_provenance) if kernel_provenance else None
        built.tables["frames"] = sources.with_code(built.tables["frames"])  # the def lines' text, where readable here
        if tune_allocator:
            set_mmap_threshold(WRITE_MMAP_THRESHOLD, trim=True)  # the build's temporaries go back before writing
        entry = rank_entry(built, meta, charged.quality() if charged is not None else None)
        entry["category_counts"] = category_counts
        if charged is not None:
            w = w + [x for x in [provenance.charge_warning(built.rank, charged)] if x]
        part = tmp / f".part-{index}"
        part.mkdir()
        store.write_partition(part, built.tables, release=True)  # (built.tables is not read after: each goes once written)
    return index, built.rank, entry, w + quality_warnings(entry)


def _trim_budget(path: Path) -> int | None:
    """What the build and the write may hold before they trim (`_malloc.trimming`'s `above`):
    TRIM_ABOVE_JSON of the trace's JSON, where its size is known without reading the file again
    (a plain file's size, a gzip's count made by the memory check); else None: trimmed all along."""
    try:
        st = path.stat()
    except OSError:
        return None
    size = st.st_size
    if path.name.endswith(".gz"):
        counted, whole = _GUNZIPPED.get(_gz_key(path, st), (0, False))
        if not whole:
            return None
        size = max(size, counted)
    return int(TRIM_ABOVE_JSON * size)


def _identity(path: Path, gone: str) -> tuple[int, int, int, int]:
    """What says a local trace is the same file: (device, inode, size, mtime_ns). A trace deleted,
    replaced, rewritten or appended to during its import reads differently before and after."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(path, f"the file {gone}") from None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def import_traces(source: Path | str, out_dir: Path | str, *, force: bool = False, tune_allocator: bool = False,
                  progress_factory: Callable[[str, int], Callable[[int, int], None]] | None = None,
                  command: list[str] | None = None, workers: int | None = None,
                  progress: ImportProgress | None = None, ray: str | None = None,
                  captures: list[Path | str] | None = None, kernel_provenance: list[Path | str] | None = None,
                  keep_device_clock: bool = False) -> ImportResult:
    """Import one trace or a directory of per-rank traces into a run at `out_dir`.

    Several traces are imported by `workers` processes (default and upper bound: `import_workers`,
    one per core within the memory available), each writing its own rank's partition into the
    run's temporary directory, so memory holds a few ranks, never the job. The run is the same
    whatever the number of workers. `progress_factory` gives byte progress within a file (one
    worker only); `progress` is called as each file is done. With `ray` (a cluster address, 'auto'
    or 'local'), each trace is a Ray task instead (ray_tasks.py): the output's folder must be on a
    filesystem every node shares. `captures`: graph-capture traces (capture_files adds a
    `capture_traces/` folder found beside the trace); replayed graph work takes its capture's
    operator and statement (graph_capture.py), each rank the captures of its rank (a single trace:
    all of them). `kernel_provenance`: Inductor's provenance of the trace's torch.compile kernels
    (provenance_files: TORCH_TRACE folders, structured logs or JSON files; the one structured log
    beside the trace when none is given): each kernel is charged to the user statements it was
    generated from, as the live collector does (provenance.py). `keep_device_clock`: a device clock
    behind the host's stays as the trace has it (device_clock moves it to its launches otherwise).
    """
    check_output_path(out_dir)
    try:
        store.check_writable_target(out_dir, force)
    except OSError as e:  # a path the system refuses to even look at
        raise InputError(out_dir, f"cannot write here ({_reason(e)})") from None
    files = find_traces(source)
    if not remote.is_uri(source):
        check_memory(files)
    capture_paths = capture_files(source, captures)
    graphs = read_captures(capture_paths) if capture_paths else None
    if graphs is not None:
        graphs.whole = len(files) == 1
    provenance_paths = provenance_files(source, kernel_provenance)
    kernels = None
    if provenance_paths:
        try:
            kernels = provenance.read_provenance(provenance_paths)
        except InputError:
            if kernel_provenance:
                raise
            provenance_paths = []  # a structured log beside the trace without provenance: the import goes on without it
    parquet_native.load()  # the parallel Parquet writer, built (once) before any worker starts: workers only load it
    out, tmp = store.begin_run(out_dir, force)
    try:
        n_workers = import_workers(files, workers)
        sizes = [p.size if isinstance(p, remote.RemoteTrace) else _identity(p, "is gone")[2] for p in files]
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
            tasks = [(i, files[i], tmp, tune_allocator, 1, None, graphs, kernels, keep_device_clock) for i in order]
            for i, ok, result in map_settled(ray, _import_rank, tasks):
                if ok:
                    finished(result)
                else:
                    failed[i] = result
        elif n_workers == 1 or len(todo) <= 1:
            for i in todo:
                file_progress = progress_factory(files[i].name, sizes[i]) if progress_factory else None
                try:
                    finished(_import_rank(i, files[i], tmp, tune_allocator, None, file_progress, graphs, kernels, keep_device_clock))
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
                with ProcessPoolExecutor(max_workers=min(n_workers, len(todo)), initializer=keep_inherited) as pool:
                    # largest first, so that a big trace does not start last; one decode process per worker
                    order = sorted(todo, key=lambda i: -sizes[i])
                    futures = {pool.submit(_import_rank, i, files[i], tmp, tune_allocator, 1, None, graphs, kernels,
                                           keep_device_clock): i for i in order}
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
                    with ProcessPoolExecutor(max_workers=1, initializer=keep_inherited) as solo:
                        try:
                            finished(solo.submit(_import_rank, i, files[i], tmp, tune_allocator, 1, None, graphs, kernels,
                                                 keep_device_clock).result())
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
            sources=sorted(({"path": str(p), "bytes": sizes[i], "rank": results[i][1]} for i, p in enumerate(files)),
                           key=lambda s: s["rank"]),
            ranks=sorted(entries, key=lambda e: e["rank"]),
            warnings=warnings,
            **({"provenance": [str(p) for p in provenance_paths]} if provenance_paths else {}),
        )
        store.finish_run(tmp, out, manifest, force=force)
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
        try:
            key = _source_key(files[i])
        except OSError:  # the trace is gone since: nothing to match a rerun against
            continue
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
