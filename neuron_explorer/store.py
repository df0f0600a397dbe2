"""Write and open run directories (format v2, schema.FORMAT_VERSION; see schema.py and docs/SCHEMA.md).

Writing is atomic: a run, or one rank's partition of it, is written to a temporary directory
beside its final place and renamed into place, so a crash never leaves a half-written run that
looks whole, and an existing run is only replaced when asked (and only once the new one is whole).
Faults on the way are one-line errors (InputError), never a traceback and never a lost run: a disk
that fills up (or any other OSError while writing) leaves the old run as it was; a failed final
rename puts the old run back in place; temporary directories left by a killed writer
(`.OUT.tmp-<pid>-<host>-<id>`) are removed by the next write to the same place, once their writer's
process is gone (same host) or they are a day old; and replacing is only ever done to a run: a
directory that is not one, or one that holds the traces being imported, is refused even when
replacing is asked for.

Reading goes through `open_run`, the one connection helper that analyzers, the dashboard and
the agent interface share: a DuckDB connection with one view per table. `read_manifest` (which
`open_run` calls) checks the manifest and every partition's footer first (run_check.py): a run of
the wrong shape is one InputError naming the file.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as _dt
import errno
import hashlib
import itertools
import json
import math
import os
import re
import shutil
import socket
import tempfile
import threading
import time
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from . import run_check, schema
from ._version import __version__
from .errors import InputError, RunExistsError

if TYPE_CHECKING:  # DuckDB is imported where a run is opened (an import writes runs without it), pyarrow where one is
    import duckdb  # written or opened: importing the package (the CLI's start-up) loads neither
    import pyarrow as pa
    import pyarrow.parquet as pq

MANIFEST = "manifest.json"
ROW_GROUP_ROWS = 128 * 1024
ROW_GROUP_PIECES = 4
"""A large table's row group is made and handed to the parallel writer in this many pieces
(build.SortedTable.batches): only a piece is held at once, not the group. The file is the same
whatever the pieces; 4 rather than 2 took a trace recorded with shapes (the operators' inputs in
its args: larger rows) from its JSON's size to 0.94x of it at the import's peak, in the same time
(bench/README.md)."""


def is_run(path: Path | str) -> bool:
    return (Path(path) / MANIFEST).is_file()


def runs_in(folder: Path | str, *, depth: int = 3) -> list[Path]:
    """The run directories under `folder` (itself not a run), at most `depth` levels down, not
    looking inside a run; in path order. A folder such as `runs/` or the one a training
    integration writes into holds several runs; an empty list for a run or a file."""
    top = Path(folder)
    if not top.is_dir() or is_run(top):
        return []
    found: list[Path] = []
    level = [top]
    for _ in range(depth):
        below: list[Path] = []
        for d in level:
            try:
                subs = sorted(c for c in d.iterdir() if c.is_dir() and not c.name.startswith("."))
            except OSError:
                continue
            for c in subs:
                (found if is_run(c) else below).append(c)
        level = below
    return sorted(found)


FOLDER_LISTED = 10
"""Runs a folder-of-runs error names before it says how many more there are."""


def folder_of_runs(folder: Path | str, runs: list[Path]) -> InputError:
    """The one-line error for a folder of runs given where one run (or trace) is expected: it says
    so and lists them (nothing is imported or cached for it)."""
    names = [str(r) for r in runs[:FOLDER_LISTED]] + ([f"... and {len(runs) - FOLDER_LISTED} more"] if len(runs) > FOLDER_LISTED else [])
    return InputError(folder, f"a folder of {len(runs)} run{'s' if len(runs) != 1 else ''}, not a run: {', '.join(names)}; "
                              "give one of them (diff, dashboard and mcp take the folder)")


def check_writable_target(out_dir: Path | str, force: bool) -> Path:
    """Fail early (before any long work) when the output cannot be written: a run already there
    (unless `force`), something there that is not a run (even with `force`: only runs are ever
    replaced), a place where no directory can be created."""
    out = Path(out_dir)
    if out.is_symlink() and not out.exists():
        raise InputError(out, "is a dangling symbolic link; remove it or pick another output")
    if out.exists():
        if not out.is_dir():
            raise InputError(out, "exists and is not a directory; pick another output")
        if is_run(out):
            if not force:
                raise RunExistsError(out)
        elif _has_entries(out):
            raise InputError(out, "is a directory that is not a run (no manifest.json); --force (overwrite=True) only "
                                  "replaces a run: pick another output, or empty it")
    check_can_create(out)
    return out


def check_can_create(out: Path) -> None:
    """Whether a directory can be created beside `out` (where its temporary directory goes): tried for
    real, once, with the name a temporary directory will have, so /proc, read-only mounts and names
    that are too long are one-line errors now, not after the work."""
    parent = out.parent if str(out.parent) else Path(".")
    probe = parent
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.is_file():
        raise InputError(out, f"cannot create the run: {probe} is a file")
    if not os.access(probe, os.W_OK):
        raise InputError(out, "cannot write here (permission denied)")
    name = _temp_name(out.name, "probe") if probe == parent else f".nx-probe-{uuid.uuid4().hex[:8]}"
    try:
        (probe / name).mkdir()
        (probe / name).rmdir()
    except OSError as e:
        raise InputError(out, f"cannot write here ({_reason(e)})") from None


def _has_entries(d: Path) -> bool:
    """Whether `d` holds anything but the temporary directories of writes to itself."""
    try:
        return any(not _TEMP_RE.match(p.name) for p in d.iterdir())
    except OSError as e:
        raise InputError(d, f"cannot read the directory ({_reason(e)})") from None


STALE_AFTER_S = 24 * 3600
"""A temporary directory whose writer cannot be checked (another host, an older name) is stale
once nothing in it changed for this long."""
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:6]
_TEMP_RE = re.compile(r"^\.(?P<name>.+)\.(?P<kind>tmp|old)-(?:(?P<pid>\d+)-(?P<host>[0-9a-f]{6})-)?[0-9a-f]{8}$")


def _temp_name(name: str, kind: str) -> str:
    """`.NAME.tmp-<pid>-<host>-<id>`: the writer's pid and host let a later write tell a stale one."""
    return f".{name}.{kind}-{os.getpid()}-{_HOST}-{uuid.uuid4().hex[:8]}"


def _reason(e: OSError) -> str:
    if e.errno == errno.ENOSPC:
        return "no space left on device"
    return " ".join((e.strerror or str(e)).split())[:300]


@contextlib.contextmanager
def write_errors(path: Path):
    """OSError while writing (a full disk, a quota, an I/O error; pyarrow's included) as a one-line InputError."""
    try:
        yield
    except OSError as e:
        raise InputError(path, f"cannot write the run ({_reason(e)})") from None


def new_temp_dir(final: Path) -> Path:
    """A fresh temporary directory beside `final` (parents created), after removing the stale ones
    that killed writers left there."""
    with write_errors(final):
        final.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(final)
        tmp = final.parent / _temp_name(final.name, "tmp")
        tmp.mkdir()
    return tmp


def _writer_gone(pid: int, host: str | None) -> bool:
    if host != _HOST or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists (another user's)
        return False
    return False


def _newest_mtime(d: Path) -> float:
    newest = d.lstat().st_mtime
    for sub in [d, *(p for p in d.iterdir() if p.is_dir() and not p.is_symlink())]:
        for p in sub.iterdir():
            with contextlib.suppress(OSError):
                newest = max(newest, p.lstat().st_mtime)
    return newest


def clean_stale(final: Path) -> list[Path]:
    """Remove `.NAME.tmp-*` beside `final` whose writer is gone (its pid no longer runs on this
    host) or that nothing touched for STALE_AFTER_S; `.NAME.old-*` (an old run moved aside) only
    when `final` exists, since otherwise it may be the only copy. A live concurrent writer's
    directory is never removed. Returns what was removed."""
    removed = []
    prefix = f".{final.name}."
    try:
        siblings = [p for p in final.parent.iterdir() if p.name.startswith(prefix)]
    except OSError:
        return removed
    for p in siblings:
        m = _TEMP_RE.match(p.name)
        if not m or m["name"] != final.name:
            continue
        kind, pid, host = m["kind"], m["pid"], m["host"]
        if kind == "old" and not final.exists():
            continue
        try:
            stale = (pid is not None and _writer_gone(int(pid), host)) or time.time() - _newest_mtime(p) > STALE_AFTER_S
        except OSError:
            continue
        if stale and p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


# Low-cardinality columns: dictionary pages make them small; for ids and args they only cost time.
_DICTIONARY_COLUMNS = ["kind", "category", "name", "phase", "pid_text", "tid_text", "module_path", "file", "function",
                       "line_kind", "series", "binding_point", "pid", "tid", "rank", "device", "stream", "step", "pass"]


def _delta_columns(schema: pa.Schema) -> list[str]:
    """The integer columns without dictionary pages (times, durations, ids), written
    DELTA_BINARY_PACKED: they mostly rise or repeat row to row, so the deltas pack into a few bits.
    On the 1.45M-event bench trace the files are 8% smaller, their write takes 14% less CPU (zstd
    has less to compress) and DuckDB scans them faster (bench/README.md, "The write's integer
    columns, ...")."""
    import pyarrow as pa

    return [f.name for f in schema if pa.types.is_integer(f.type) and f.name not in _DICTIONARY_COLUMNS]


def _column_encoding(schema: pa.Schema) -> dict[str, str]:
    """pyarrow's `column_encoding` for a file of `schema` (_delta_columns)."""
    return dict.fromkeys(_delta_columns(schema), "DELTA_BINARY_PACKED")


_ENCODE_THREADS = max(1, min(os.cpu_count() or 1, 8))
"""Columns of a large table's row group encoded at once (parquet_native)."""


def _write_table(table: pa.Table, path: Path) -> None:
    import pyarrow.parquet as pq

    with write_errors(path.parent):
        pq.write_table(
            table,
            path,
            row_group_size=ROW_GROUP_ROWS,
            compression="zstd",
            write_statistics=True,
            use_dictionary=_DICTIONARY_COLUMNS,
            column_encoding=_column_encoding(table.schema),
        )


def write_partition(dir_: Path, tables: dict, *, release: bool = False) -> None:
    """Write one rank's tables into dir_ (which must exist); an OSError (a full disk) is a one-line InputError.
    With `release`, each table leaves `tables` once written (the caller holds no other reference)."""
    with write_errors(dir_):
        _write_partition(dir_, tables, release)


def _write_partition(dir_: Path, tables: dict, release: bool = False) -> None:
    """Write one rank's tables into dir_ (which must exist).

    A table is a pyarrow Table, or anything with `schema` and `batches(n)` (build.SortedTable),
    which is written row group by row group so that it is never materialised whole.

    The in-memory tables are written first, then such tables, smaller first, on a writer thread
    (Arrow releases the GIL). With `release` each written table leaves `tables`, so that its memory
    (a large trace's flows: 41 MiB of raw flows for 743k) is free before the events' row groups
    and their encoders are made: the import's peak was the events' write with the flows beside it. With the parallel
    writer (parquet_native, once built) each row group's columns are encoded on every core; else
    pyarrow encodes a row group while this thread assembles the next batch.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from . import parquet_native

    with ThreadPoolExecutor(max_workers=1) as pool:  # one worker: each file's writes stay in order
        queued: list = []
        try:
            def streamed(spec) -> tuple[bool, int]:  # the in-memory tables first, then the streamed ones, smaller first
                table = tables.get(spec.name)
                return (True, table.num_rows) if table is not None and not isinstance(table, pa.Table) else (False, 0)

            for spec in sorted(schema.RANK_TABLES, key=streamed):
                table = (tables.pop if release else tables.get)(spec.name, None)
                if table is None:
                    table = spec.empty()
                path = dir_ / spec.file
                if isinstance(table, pa.Table):
                    _write_table(table.replace_schema_metadata(spec.arrow_schema().metadata), path)
                    del table
                    continue
                # string columns arrive as dictionary arrays, written without hashing each string
                # again; the file then stores no Arrow schema (it would name dictionary types), and
                # reads back with the spec's types, which Parquet's own types carry exactly
                native = parquet_native.load(build=False) if table.num_rows else None
                # (the parallel writer takes a row group in pieces that share its dictionaries; pyarrow's
                # write_batch makes a row group of each batch)
                batches = table.batches(ROW_GROUP_ROWS, dictionaries=True, pieces=ROW_GROUP_PIECES if native is not None else 1)
                first = next(batches, None)
                if native is not None:  # its columns encoded on every core, beside the small tables' writes
                    queued.append(pool.submit(parquet_native.write, native, path, first.schema, itertools.chain([first], batches),
                                              row_group_rows=ROW_GROUP_ROWS, dictionary_columns=_DICTIONARY_COLUMNS,
                                              delta_columns=_delta_columns(first.schema),
                                              metadata=spec.arrow_schema().metadata, threads=_ENCODE_THREADS))
                    continue
                file_schema = spec.arrow_schema() if first is None else first.schema
                writer = pq.ParquetWriter(path, file_schema, compression="zstd", write_statistics=True, use_dictionary=_DICTIONARY_COLUMNS,
                                          column_encoding=_column_encoding(file_schema),
                                          store_schema=False)
                writer.add_key_value_metadata(spec.arrow_schema().metadata)
                queued += _queue_batches(pool, writer, itertools.chain([] if first is None else [first], batches))
        finally:
            for future in queued:
                future.result()  # raises the writer thread's error, if any, once all are done


def _queue_batches(pool: ThreadPoolExecutor, writer: pq.ParquetWriter, batches) -> list:
    """Queue each batch's write, then the file's close, on the writer thread; at most one batch
    waits in the queue, so memory holds two batches, not the table."""
    queued = []
    try:
        for batch in batches:
            if queued:
                queued[-1].result()
            queued.append(pool.submit(writer.write_batch, batch, row_group_size=ROW_GROUP_ROWS))
    finally:
        queued.append(pool.submit(writer.close))
    return queued


def write_manifest(run_dir: Path, manifest: dict) -> None:
    tmp = run_dir / f".{MANIFEST}.{uuid.uuid4().hex}"
    # msgspec's encoder (NaN and infinity as null): Python's indenting encoder is pure Python, 26 s
    # on a manifest of 300,000 metadata events before they were deduplicated
    text = msgspec.json.format(msgspec.json.encode(manifest, enc_hook=str), indent=1)
    with write_errors(run_dir):
        try:
            tmp.write_bytes(text)
            os.replace(tmp, run_dir / MANIFEST)
        finally:
            tmp.unlink(missing_ok=True)


def base_manifest(source: str, **extra) -> dict:
    return {
        "format_version": schema.FORMAT_VERSION,
        "tool_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "source": source,
        **extra,
    }


def write_run(out_dir: Path | str, partitions: dict[int, dict[str, pa.Table]], manifest: dict, *, force: bool = False) -> Path:
    """Write a whole run atomically: temporary directory, then rename into place."""
    out, tmp = begin_run(out_dir, force)
    try:
        for rank, tables in sorted(partitions.items()):
            part = tmp / f"rank={rank}"
            part.mkdir()
            write_partition(part, tables)
        finish_run(tmp, out, manifest, force=force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def begin_run(out_dir: Path | str, force: bool = False) -> tuple[Path, Path]:
    """(final path, temporary directory beside it) for a run written piece by piece: write each
    `rank=<r>/` partition into the temporary directory, then `finish_run` (or delete it on error)."""
    out = check_writable_target(out_dir, force)
    tmp = new_temp_dir(out)
    return out, tmp


def finish_run(tmp: Path, out: Path, manifest: dict, *, force: bool = False) -> None:
    """Write the run-level files into `tmp` and rename it onto `out`. What is at `out` is checked
    again now, not only when the work began: a run that appeared meanwhile (another import into
    the same output) is replaced only with `force`, and a directory that is not a run never is."""
    _write_table(schema.schema_fields_table(), tmp / schema.SCHEMA_FIELDS.file)
    write_manifest(tmp, manifest)
    if is_run(out) and not force:
        raise InputError(out, "a run was written here while this one was being made (another import or recording); "
                              "it was not replaced: write elsewhere, or pass --force (overwrite=True) to replace it")
    move_into_place(tmp, out)
    run_check.written_here(out)


def move_into_place(tmp: Path, final: Path) -> None:
    """Rename a finished directory onto `final`; an existing `final` is moved aside first and
    deleted only once the new one is in place (callers decide whether replacing is allowed). When
    the new one cannot be renamed into place, the old one is put back: an InputError, and the old
    run as it was. A run that holds the inputs of the new one (the traces being imported) is never
    replaced."""
    if final.exists() or final.is_symlink():
        if final.is_dir() and not final.is_symlink() and not is_run(final) and _has_entries(final):
            raise InputError(final, "is a directory that is not a run (no manifest.json), created while the run was being "
                                    "written; nothing was replaced: pick another output")
        _refuse_replacing_inputs(tmp, final)
        trash = final.parent / _temp_name(final.name, "old")
        try:
            os.replace(final, trash)
        except OSError as e:
            raise InputError(final, f"cannot move the old run aside to replace it ({_reason(e)}); it is unchanged") from None
        try:
            os.replace(tmp, final)
        except OSError as e:
            try:
                os.replace(trash, final)
            except OSError:
                raise InputError(final, f"cannot move the new run into place ({_reason(e)}); the old run is kept at {trash}") from None
            raise InputError(final, f"cannot move the new run into place ({_reason(e)}); the old run is unchanged") from None
        shutil.rmtree(trash, ignore_errors=True)
    else:
        with write_errors(final):
            os.replace(tmp, final)


def _refuse_replacing_inputs(tmp: Path, final: Path) -> None:
    """An import's new manifest lists its source files: none of them may live inside `final`."""
    try:
        sources = json.loads((tmp / MANIFEST).read_text()).get("sources") or []
    except (OSError, ValueError, AttributeError):
        return
    root = final.resolve()
    for src in sources:
        p = src.get("path") if isinstance(src, dict) else None
        if isinstance(p, str) and (root == Path(p).resolve() or root in Path(p).resolve().parents):
            raise InputError(final, f"holds {p}, an input of this import; replacing it would delete it: write the run elsewhere")


def read_manifest(run_dir: Path | str) -> dict:
    return _read_manifest(run_dir)[0]


def _read_manifest(run_dir: Path | str) -> tuple[dict, dict[str, list[tuple[str, int, int]]]]:
    """The run's manifest, checked, with its rank partitions checked too, and the listing of
    those partitions (run_check.rank_files) that open_run keeps on the Run."""
    p = Path(run_dir) / MANIFEST
    if not Path(run_dir).exists():
        uri = re.match(r"^([A-Za-z][A-Za-z0-9+.-]+):/+(.*)$", str(run_dir))  # a Path folds a URI's '//'
        if uri:
            raise InputError(f"{uri[1]}://{uri[2]}", "runs are read from a filesystem, not a URI: import the traces with "
                                                     "`neuron-explorer import URI -o RUN` and pass RUN")
        raise InputError(run_dir, "no such run directory")
    if not p.is_file():
        runs = runs_in(run_dir)
        if runs:
            raise folder_of_runs(run_dir, runs)
        raise InputError(run_dir, "not a run directory (no manifest.json)")
    try:
        data = p.read_bytes()
        try:  # msgspec: a 256-rank run's manifest (3 MB, mostly the trace's metadata events) in 40% less CPU than json.loads
            manifest = msgspec.json.decode(data)
        except msgspec.MsgspecError:
            manifest = json.loads(data)  # NaN or Infinity (a manifest written by Python's json), or the error to show
    except (OSError, ValueError) as e:
        raise InputError(p, f"unreadable manifest ({e})") from None
    version = manifest.get("format_version") if isinstance(manifest, dict) else None
    if isinstance(version, int) and not isinstance(version, bool) and version > schema.FORMAT_VERSION:
        raise InputError(run_dir, f"run format v{version} is newer than this Neuron Explorer reads (v{schema.FORMAT_VERSION}); "
                                  "upgrade neuron-explorer")
    problem = run_check.manifest_problem(manifest)
    if problem:
        raise InputError(p, problem)
    return manifest, run_check.check_partitions(Path(run_dir))


@dataclass
class Run:
    """An open run: its path, manifest and a DuckDB connection with a view per table."""

    path: Path
    manifest: dict
    con: duckdb.DuckDBPyConnection
    view_ranks: list[int] | None = None  # the ranks the views read (None: every rank)
    # the ranks the views are to be re-pointed at before the next query (point_views), None: they are
    views_pending: list[int] | None = field(default=None, repr=False, compare=False)
    # rows of per-rank queries computed once for a batch of ranks, by query name then rank (analyzers/rank_rows.py)
    prepared: dict = field(default_factory=dict, repr=False, compare=False)
    # the rank partition files when the run was opened (run_check.rank_files; None: not listed):
    # listed once per open, for the check, the views and derived_key (each listing 40-60 ms on 256 ranks).
    # A run re-imported or re-recorded while it is open is seen by opening it again.
    listed: dict | None = field(default=None, repr=False, compare=False)

    def rank_files(self) -> dict[str, list[tuple[str, int, int]]]:
        """The run's rank partition files (run_check.rank_files): the listing made when it was opened, else a new one."""
        return self.listed if self.listed is not None else run_check.rank_files(self.path)

    @property
    def ranks(self) -> list[int]:
        return sorted(r["rank"] for r in self.manifest.get("ranks", []))

    # the events of the views' ranks held in memory without their args (hold_events), and the cursor
    # that reads them: a query that reads no args runs there instead of on the Parquet files
    held: pa.Table | None = field(default=None, repr=False, compare=False)
    held_cursor: duckdb.DuckDBPyConnection | None = field(default=None, repr=False, compare=False)
    held_files: str | None = field(default=None, repr=False, compare=False)

    def file_events(self) -> str:
        """The name of the events as the files hold them, args included, whether the events are held
        or not: a query that reads the args of a few events from it (`FROM {run.file_events()} o WHERE
        o.event_id IN (...)`) reads everything else from the held `events` (hold_events)."""
        return self.held_files or "events"

    def _views_made(self) -> None:
        if self.views_pending is not None:
            ranks, self.views_pending = self.views_pending, None
            create_views(self, ranks)

    def sql(self, query: str, params: list | None = None) -> duckdb.DuckDBPyRelation:
        _refuse_when_stopping()
        self._views_made()
        if _on_held(self, query):
            if self.held_cursor is None:
                self.held_cursor = self._held_events_cursor()
            return self.held_cursor.execute(query, params or [])
        return self.con.execute(query, params or [])

    def query_cursor(self, query: str) -> duckdb.DuckDBPyConnection:
        """A new cursor of the run's connection (`cursor`) to run `query` on, the caller closes it: one
        whose `events` are the held events (hold_events) where there are some and the query reads no
        args but from `file_events()`."""
        _refuse_when_stopping()
        self._views_made()
        return self._held_events_cursor() if _on_held(self, query) else cursor(self.con)

    def _held_events_cursor(self) -> duckdb.DuckDBPyConnection:
        cur = cursor(self.con)
        cur.register("nx_held_events", self.held)
        cur.execute("CREATE TEMP VIEW events AS SELECT * FROM nx_held_events")  # on this cursor, before main.events
        return cur

    def close(self) -> None:
        """Close the connection. A query another thread is still running (a dashboard request
        the server has not finished when it shuts down) is interrupted first: DuckDB refuses
        to close a busy connection rather than wait for it."""
        import duckdb

        for _ in range(100):
            try:
                self.con.close()
                return
            except duckdb.ResourceInUseException:
                self.con.interrupt()
                time.sleep(0.02)
        self.con.close()

    def with_ranks(self, ranks, con: duckdb.DuckDBPyConnection | None = None) -> Run:
        """The same run with views over only `ranks`, on `con` (a new connection when None).
        Queries and evidence SQL read the same; `rank = N` filters then scan one partition."""
        run = Run(self.path, self.manifest, con if con is not None else new_connection(), listed=self.listed)
        create_views(run, ranks)
        return run

    def __enter__(self) -> Run:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def derived_key(run: Run, computation: str) -> str:
    """What a derived table (schema.DERIVED_TABLES) of `run` — of its view_ranks' partitions when it
    is scoped — computed by `computation` (its SQL, its parameters) depends on: a digest of the
    format version, `computation`, and the name, size and modification time of every rank
    partition file it may read. Re-importing or re-recording the run, or a change of the code that
    computes it, gives another key."""
    parts = []
    if run.view_ranks is None:
        listed = run.rank_files()
        cut = len(str(run.path)) + 1
        parts = [(p[cut:].replace(os.sep, "/"), size, mtime) for fs in listed.values() for p, size, mtime in fs]
        parts.sort(key=lambda x: tuple(x[0].split("/")))  # Path order (by folder, then file), as before
    else:
        for f in (run.path / f"rank={r}" / t.file for r in run.view_ranks for t in schema.RANK_TABLES):
            try:
                st = f.stat()
            except OSError:
                continue  # a table the rank does not have
            parts.append((f.relative_to(run.path).as_posix(), st.st_size, st.st_mtime_ns))
    blob = json.dumps([schema.FORMAT_VERSION, computation, parts], separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def derived_file(run: Run, table: schema.Table, variant: str) -> Path:
    """RUN/derived/<table>.<variant>.parquet: one file of a derived table (`variant`: the scope and
    layout it was computed for, letters, digits, '_' and '-')."""
    if table.name not in schema.DERIVED_TABLES or not re.fullmatch(r"[A-Za-z0-9_-]+", variant):
        raise ValueError(f"not a derived table file: {table.name} {variant!r}")
    return run.path / schema.DERIVED_DIR / f"{table.file.removesuffix('.parquet')}.{variant}.parquet"


def read_derived(run: Run, table: schema.Table, variant: str, key: str) -> pa.Table | None:
    """The stored derived table, or None when there is none, or it was computed from something else
    (its key is not `key`), or it cannot be read as `table`: the caller computes it then."""
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(derived_file(run, table, variant))
        if (pf.schema_arrow.metadata or {}).get(schema.DERIVED_KEY) != key.encode():
            return None
        got = pf.read()
    except Exception:  # noqa: BLE001  (missing, truncated, not Parquet: computed again)
        return None
    return got if got.column_names == table.column_names else None


def write_derived(run: Run, table: schema.Table, variant: str, key: str, rows: pa.Table) -> bool:
    """Store `rows` (cast to `table`'s columns) as the derived table computed from `key`, replacing
    the file at once (written beside it, then renamed: a reader sees the old file or the new one).
    False, and nothing written, where the run's folder cannot be written to or the rows do not fit
    the table (a read-only run is read the same, computed at each open)."""
    import pyarrow.parquet as pq

    path = derived_file(run, table, variant)
    target = table.arrow_schema()
    target = target.with_metadata({**(target.metadata or {}), schema.DERIVED_KEY: key.encode()})
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        body = rows.select(table.column_names).cast(target)
        path.parent.mkdir(exist_ok=True)
        pq.write_table(body, tmp, compression="zstd")
        os.replace(tmp, path)
        return True
    except Exception:  # noqa: BLE001  (a read-only folder, a full disk, rows that do not fit the table: the reader computes it again)
        with contextlib.suppress(OSError):
            tmp.unlink()
        return False


def sql_literal(s: str) -> str:
    """A SQL string literal (quotes doubled), for paths and names put into DuckDB statements."""
    return "'" + s.replace("'", "''") + "'"


_GLOB_CHARS = frozenset("[*?")


def sql_file_literal(path: Path | str) -> str:
    """A SQL literal that DuckDB's readers (`read_parquet`) take as exactly this file: they expand
    `*`, `?` and `[...]` in a path (a run named `s[0]` would read `s0`, `r?` would read `rX` too),
    so each glob character is put in a class of its own (`[[]`, `[*]`, `[?]`), which matches only itself."""
    return sql_literal("".join(f"[{c}]" if c in _GLOB_CHARS else c for c in str(path)))


_TRACE_RESOLVER = None


def set_trace_resolver(resolver) -> None:
    """Register `resolver(path) -> run directory` for paths that are not runs (Kineto traces).
    The package registers the trace cache of the collectors (collectors/trace_cache.py) when it is
    imported; store itself reads no trace and imports no collector."""
    global _TRACE_RESOLVER
    _TRACE_RESOLVER = resolver


def resolve_run(path: Path | str) -> Path:
    """A run directory for `path`: the path itself when it is a run, else what the registered trace
    resolver makes of it (the cached import of the Kineto trace, or directory of traces, it names)."""
    p = Path(path)
    if is_run(p) or not p.exists() or _TRACE_RESOLVER is None or runs_in(p):
        return p  # read_manifest gives the error for a missing path, or for a folder of runs
    return Path(_TRACE_RESOLVER(p))


def open_run(path: Path | str, con: duckdb.DuckDBPyConnection | None = None, *, ranks=None) -> Run:
    """Open a run: DuckDB views events, frames, flows, memory, counters, steps, ranks, devices.

    `path` is a run directory, or a Kineto trace file or directory of traces (imported once into
    the cache, see resolve_run and collectors/trace_cache.py). With `ranks` (rank numbers), the views read only those ranks'
    partitions (`rank=<r>/`): per-rank work then costs what that rank holds, not the whole run.
    """
    run_dir = resolve_run(path)
    manifest, listed = _read_manifest(run_dir)
    if con is None:
        con = new_connection()
    run = Run(run_dir, manifest, con, listed=listed)
    create_views(run, ranks)
    return run


_LIVE: weakref.WeakSet = weakref.WeakSet()  # every connection new_connection made that is still referenced
_STOPPING = threading.Event()
_AT_EXIT = None
STOP_WAIT_S = 5.0
"""At interpreter exit, how long the analysis threads get to stop once their queries are interrupted."""


def stopping() -> bool:
    """True once the interpreter is exiting: long work (the analysis's rank workers) stops early."""
    return _STOPPING.is_set()


def _refuse_when_stopping() -> None:
    """No new query once the interpreter is exiting (`_stop_at_exit`): interrupting the queries in
    flight is not enough if the analysis thread starts the next one before it returns to Python, and a
    thread inside DuckDB when the process ends can crash it (a full test run once ended its exit test
    with a segfault after the 5 s wait)."""
    if _STOPPING.is_set():
        raise InterruptedError("the interpreter is exiting: no new query")


def _interrupt_all() -> None:
    for con in list(_LIVE):
        with contextlib.suppress(Exception):  # a closed connection has nothing to interrupt
            con.interrupt()


def _stop_at_exit() -> None:
    """A daemon thread still inside DuckDB when the interpreter finalises aborts the process
    ("terminate called ... exception not rethrown"): a dashboard stopped while it analyses, a
    test's server torn down with a request in flight. So at exit every query is interrupted and
    the analysis threads (named 'nx-...') are given STOP_WAIT_S to return to Python."""
    _STOPPING.set()
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline:
        busy = [t for t in threading.enumerate() if t.name.startswith("nx-") and t.is_alive() and t is not threading.current_thread()]
        if not busy:
            return
        _interrupt_all()
        busy[0].join(0.02)


def new_connection() -> duckdb.DuckDBPyConnection:
    import duckdb

    global _AT_EXIT
    if not _AT_EXIT:
        _AT_EXIT = atexit.register(_stop_at_exit)
    con = duckdb.connect()
    _LIVE.add(con)
    # DuckDB draws a progress bar on stdout for a statement over 2 s (a busy machine, a big rank):
    # it went into `analyze --json`'s output and the benchmarks' readings (the connection's cursors copy this)
    con.execute("SET enable_progress_bar = false")
    # spill large sorts and joins to the system temp folder, not '.tmp' in the user's cwd
    con.execute(f"SET temp_directory = {sql_literal(str(Path(tempfile.gettempdir()) / 'neuron-explorer-duckdb'))}")
    # each Parquet file's footer parsed once per connection, not once per query that scans it (a file's
    # entry is read again when the file changes): a query over a batch of 128 rank partitions paid
    # ~0.5 ms a file for it, more than the rows themselves
    con.execute("SET parquet_metadata_cache = true")
    return con


def cursor(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """A cursor of `con` (a connection of its own to the same database: its results do not clash
    with one left open on `con`) that the exit hook interrupts too: `con.interrupt()` stops only
    `con`'s own query, and a thread left in a cursor's query when Python finalises aborts the
    process. Use this, not `con.cursor()`."""
    cur = con.cursor()
    _LIVE.add(cur)
    return cur


def create_views(run: Run, ranks=None) -> None:
    """(Re)create the run's views on `run.con`, over every rank or only over `ranks`; sets
    `run.view_ranks`.

    The rank tables' views read their files from one macro, `nx_views()` (a struct: each table's
    files, and the ranks the `ranks` and `devices` views keep); re-pointing a connection's views
    at other ranks of the same run replaces that macro alone (one statement, no file opened),
    unless a table's SELECT list changes (a partition written in an older format, or a table
    some rank lacks): then the views are made again. `steps`, `schema_fields` and the manifest's
    ranks and devices are made once per connection and run."""
    run_dir, manifest, con = run.path, run.manifest, run.con
    subset = None if ranks is None else sorted({int(r) for r in ranks})
    files, layout = {}, {}
    listed = {} if subset is not None else run.rank_files()
    for spec in schema.RANK_TABLES:
        if subset is None:
            fs = sorted(p for p, _, _ in listed.get(spec.file, []))
        else:
            fs = [str(p) for r in subset if (p := run_dir / f"rank={r}" / spec.file).is_file()]
        files[spec.name] = fs
        layout[spec.name] = _columns_sql(spec, fs[0]) if fs else None  # None: no file, an empty view
    keep = [int(r.get("rank", 0)) for r in manifest.get("ranks", [])] if subset is None else subset
    struct = ", ".join([f"{sql_literal(name)}: [" + ", ".join(sql_file_literal(f) for f in fs) + "]" for name, fs in files.items() if fs]
                       + ["'ranks': [" + ", ".join(str(r) for r in keep) + "]::INTEGER[]"])
    con.execute(f"CREATE OR REPLACE MACRO nx_views() AS {{{struct}}}")
    state = _VIEW_STATE.get(con)
    fresh = state is None or state[0] != (str(run_dir), id(manifest))
    if fresh:
        _VIEW_STATE.pop(con, None)  # until every view is made again
        state = ((str(run_dir), id(manifest)), {})
    made = state[1]
    for spec in schema.RANK_TABLES:
        if spec.name in made and made[spec.name] == layout[spec.name]:
            continue
        if layout[spec.name] is not None:
            con.execute(f"CREATE OR REPLACE VIEW {spec.name} AS SELECT {layout[spec.name]} "
                        f"FROM read_parquet(nx_views().{spec.name}, hive_partitioning=false)")
        else:  # a run with no rank partitions still answers queries
            cols = ", ".join(f"NULL::{_duck_type(c.type)} AS {c.name}" for c in spec.columns)
            con.execute(f"CREATE OR REPLACE VIEW {spec.name} AS SELECT {cols} WHERE false")
        made[spec.name] = layout[spec.name]
    if fresh:
        _manifest_views(run_dir, manifest, con)
        _VIEW_STATE[con] = state
    run.view_ranks = subset


def point_views(run: Run, ranks) -> None:
    """`create_views(run, ranks)` when `run` is next queried (`Run.sql`, `Run.query_cursor`), not
    now; `run.view_ranks` says `ranks` at once. For the engine's ranks of a batch, whose queries
    the batch ran for them all (rank_rows.prepare): most ask nothing more, and re-pointing the views
    cost 1-2 ms of CPU a rank."""
    run.view_ranks = sorted({int(r) for r in ranks})
    run.views_pending = run.view_ranks


HOLD_EVENTS = 1_000_000
"""The most events `hold_events` holds (about 200 bytes each: ~200 MB)..."""
HOLD_RANK_EVENTS = 20_000
"""...and only of ranks this small on average: the fixed cost of a file is what holding saves, and
over 8 ranks of 45k events each (363k events) holding them was no faster (1.85 s against 1.90 s)
for 139 MiB more at the peak."""

_READS_ARGS = re.compile(r"\bargs\b", re.IGNORECASE)
"""A query that names the events' `args` (held events have none: it reads the Parquet files, unless
it reads the args from `Run.file_events()`)."""


def _on_held(run: Run, query: str) -> bool:
    """Whether `query` runs on `run`'s held events (hold_events)."""
    return run.held is not None and (not _READS_ARGS.search(query) or run.file_events() in query)


def hold_events(run: Run, events: int) -> bool:
    """Hold the events of the views' ranks in memory, without their args, when the views read
    several ranks' small files (`events`, their count, at most HOLD_EVENTS, and HOLD_RANK_EVENTS a
    rank on average): `run.sql` and `run.query_cursor` then run a query that reads no args on them.
    Whatever a query reads, DuckDB pays a fixed cost for each file it scans, about 0.1-0.2 ms: a
    query over a batch of 128 small rank files paid 15-40 ms more than over one file of the same
    rows, and a batch's grouped queries scan the events some forty times. One read into Arrow costs
    0.2-0.4 s for 615k events, ten to twenty of those scans. Text columns are held
    dictionary-encoded (a kernel's name once per distinct name). Returns whether they are held (a
    partition in an older format, whose view derives columns on read, or files that do not read as
    one table, are left to the Parquet views); `release_events` lets them go."""
    ranks = run.view_ranks
    if ranks is None or len(ranks) < 2 or events > min(HOLD_EVENTS, HOLD_RANK_EVENTS * len(ranks)):
        return False  # (before the imports: pyarrow.dataset costs a one-rank analysis 0.06 s)
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    spec = schema.EVENTS
    made = _VIEW_STATE.get(run.con)
    if made is None or made[1].get(spec.name) != "*":  # no file, or columns derived on read (create_views)
        return False
    files = run.con.execute(f"SELECT nx_views().{spec.name}").fetchone()[0]  # the files the view reads
    try:
        first = pq.read_schema(files[0])
        text = [f.name for f in first if pa.types.is_string(f.type) and f.name not in ("args", "graph")]
        fmt = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=text))
        table = ds.dataset(files, format=fmt).to_table(columns=[n for n in first.names if n != "args"])
    except (pa.ArrowException, OSError, InputError):
        return False
    # the view over the files, by its catalog's name: on the cursor that holds the events, `events` and
    # `main.events` both name the held ones
    run.held_files = f"{quote_ident(run.con.execute('SELECT current_database()').fetchone()[0])}.main.events"
    run.held = table
    return True


def release_events(run: Run) -> None:
    """Let go of the events `hold_events` held: queries read the Parquet files again."""
    cur, run.held, run.held_cursor, run.held_files = run.held_cursor, None, None, None
    if cur is not None:
        with contextlib.suppress(Exception):
            cur.close()


_VIEW_STATE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Per connection: the run its views were made for, and each rank table's SELECT list (create_views)."""


def _manifest_views(run_dir: Path, manifest: dict, con: duckdb.DuckDBPyConnection) -> None:
    """The views that do not depend on which ranks' files are read: `schema_fields`, `steps` (over
    `events`), and `ranks` and `devices` (the manifest's, keeping the ranks `nx_views()` names).
    The manifest's rows go in as SQL values, not Arrow arrays: the first `pa.array` of a process
    imports pandas (pyarrow checks every input against pandas' types), 0.45 s of CPU that a
    dashboard paid here, before it could answer its first request."""
    con.execute(f"CREATE OR REPLACE VIEW schema_fields AS SELECT * FROM read_parquet({sql_file_literal(run_dir / schema.SCHEMA_FIELDS.file)})"
                if (run_dir / schema.SCHEMA_FIELDS.file).exists() else
                "CREATE OR REPLACE VIEW schema_fields AS SELECT NULL::VARCHAR AS table_name WHERE false")
    con.execute(
        "CREATE OR REPLACE VIEW steps AS SELECT rank, step, min(ts_ns) AS ts_ns, max(ts_ns + dur_ns) - min(ts_ns) AS dur_ns, "
        "min(event_id) AS event_id FROM events WHERE kind = 'step' GROUP BY rank, step"
    )
    entries = manifest.get("ranks", [])
    rows_table(con, "_ranks_rows", ["rank INTEGER", "world_size BIGINT", "events BIGINT", "source VARCHAR"],
                [(int(r.get("rank", 0)), r.get("world_size"), int(r.get("events", 0)), r.get("source")) for r in entries])
    rows_table(con, "_devices_rows", ["rank INTEGER", "device BIGINT", "name VARCHAR", "properties VARCHAR"],
                [(int(r.get("rank", 0)), d.get("id"), d.get("name"), json.dumps(d)) for r in entries for d in r.get("device_properties") or []])
    con.execute("CREATE OR REPLACE VIEW ranks AS SELECT * FROM _ranks_rows WHERE list_contains(nx_views().ranks, rank)")
    con.execute("CREATE OR REPLACE VIEW devices AS SELECT * FROM _devices_rows WHERE list_contains(nx_views().ranks, rank)")


def rows_table(con: duckdb.DuckDBPyConnection, name: str, columns: list[str], rows: list[tuple]) -> None:
    """Table `name` (`columns`: "name TYPE") of the connection's database holding `rows` of Python
    values (None, bool, int, float, str), inserted as SQL literals in one statement. A table, not a
    registered object: the connection's cursors (store.cursor) see it too."""
    def literal(v) -> str:
        if v is None:
            return "NULL"
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int) or isinstance(v, float) and math.isfinite(v):
            return repr(v)
        return "NULL" if isinstance(v, float) else sql_literal(str(v))
    con.execute(f"CREATE OR REPLACE TABLE {name} ({', '.join(columns)})")
    if rows:
        con.execute(f"INSERT INTO {name} VALUES " + ", ".join("(" + ", ".join(literal(v) for v in row) + ")" for row in rows))


def manifest_steps(run: Run) -> list[tuple[int, int, int, int, int]] | None:
    """The rows of the `steps` view (rank, step, ts_ns, dur_ns, event_id; ordered by rank, step) of
    the ranks `run`'s views read, from the manifest instead of a scan of every rank's events: both
    collectors list each rank's `kind='step'` events there (its `steps`, collectors/build._steps),
    which grouped by step number as the view groups them give the same rows. None when a rank's
    entry cannot say (no such list, an item without a start or an id, fewer or more items than
    the rank's count of step events): the caller queries the view then."""
    keep = None if run.view_ranks is None else set(run.view_ranks)
    out: dict[tuple[int, int], list[int]] = {}
    for entry in run.manifest.get("ranks") or []:
        rank = entry.get("rank")
        if keep is not None and rank not in keep:
            continue
        items, counts = entry.get("steps"), entry.get("counts")
        count = counts.get("step", 0) if isinstance(counts, dict) else None  # a kind with no event is not counted
        if not isinstance(items, list) or not isinstance(count, int) or count != len(items):
            return None
        for s in items:
            step, ts, dur, eid = (s.get(k) if isinstance(s, dict) else None for k in ("step", "ts_ns", "dur_ns", "event_id"))
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in (step, ts, dur, eid)):
                return None
            row = out.get((rank, step))
            if row is None:
                out[(rank, step)] = [ts, ts + dur, eid]
            else:
                row[0], row[1], row[2] = min(row[0], ts), max(row[1], ts + dur), min(row[2], eid)
    return [(rank, step, t0, t1 - t0, eid) for (rank, step), (t0, t1, eid) in sorted(out.items())]


def _columns_sql(spec: schema.Table, first_file: str) -> str:
    """SELECT list of a table's view: `*`, plus the columns an older format lacks, derived on read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    derived = schema.DERIVED_ON_READ.get(spec.name)
    if not derived:
        return "*"
    try:
        have = set(pq.read_schema(first_file).names)
    except (pa.ArrowException, OSError) as e:
        raise InputError(first_file, f"not a readable Parquet file ({str(e).splitlines()[0] if str(e) else type(e).__name__}); "
                                     "import or record the run again") from None
    missing = [f"{expr} AS {quote_ident(name)}" for name, expr in derived.items() if name not in have]
    return ", ".join(["*", *missing])


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _duck_type(t: str) -> str:
    return {"int64": "BIGINT", "int32": "INTEGER", "double": "DOUBLE", "string": "VARCHAR", "bool": "BOOLEAN"}[t]
