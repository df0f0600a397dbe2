"""Check a run's manifest and partitions against the format (schema.py) when the run is opened.

A manifest hand-edited or written by another tool (a list where an object is expected, a string
for a number, `format_version: true`), or a partition rewritten with a column missing, of another
type, or with times at the int64 edge, used to end in a Python or DuckDB traceback deep inside
`info`, `analyze`, `export` or `diff`. Here each is one `InputError` naming the file and what is
wrong, before anything reads the run: `check_manifest` looks at the parsed manifest (types of the
keys that readers use; keys it does not know are left alone, for newer writers), `check_partitions`
at every `rank=<r>/<table>.parquet` footer (columns and types against schema.RANK_TABLES, and the
min/max statistics of the nanosecond columns against MAX_ABS_NS). Footers are read once per file
version (path, size, mtime): re-opening a run costs a `stat` per file. The files found good are
also recorded beside the run (RUN/derived/partitions_checked.json, CHECKED_RECORD), so that a
later process opening the same run reads only the footers of files added or changed since (a
run of 256 ranks has 1,280 footers: 0.5-0.6 s of CPU at each dashboard start otherwise).

Must not: read row data (the footer only), change a run (it writes only its record, in the
run's derived/ folder, which is not part of the run), or import DuckDB.
"""

from __future__ import annotations

import threading
from pathlib import Path

from . import schema
from .errors import InputError

MIN_FORMAT_VERSION = 1
"""The oldest run format read (v1 runs open with the columns added since derived, see DERIVED_ON_READ)."""
MAX_ABS_NS = 2**62
"""Times and durations (the int64 `ns` columns) must lie within ±2^62 ns, what an import accepts:
sums such as `ts_ns + dur_ns` then never overflow int64."""
MAX_RANK = 2**31 - 1

_NONE = type(None)
_INT = (int,)
_TEXT = (str,)
_LIST = (list,)
_DICT = (dict,)

MANIFEST_TYPES: dict[str, tuple[type, ...]] = {
    "tool_version": (str, _NONE), "created": (str, _NONE), "source": (str, _NONE), "sources": (list, _NONE),
    "command": (list, str, _NONE), "ranks": (list,), "devices": (list, dict, _NONE), "steps": (list, dict, _NONE),
    "warnings": (list, _NONE), "data_quality": (dict, _NONE), "profiler": (dict, _NONE), "converter": (str, _NONE),
    "git": (dict, _NONE), "host": (str, _NONE), "cwd": (str, _NONE), "torch_version": (str, _NONE),
    "python_version": (str, _NONE), "started": (str, _NONE), "process_group": (dict, _NONE),
}
"""The JSON types each top-level manifest key may have (schema.MANIFEST_KEYS says what they mean)."""
RANK_TYPES: dict[str, tuple[type, ...]] = {
    "world_size": (int, _NONE), "events": (int,), "span_ns": (int, _NONE), "base_ns": (int, _NONE),
    "counts": (dict,), "devices": (list,), "devices_used": (list,), "devices_listed_without_events": (list,),
    "devices_without_properties": (list,), "steps": (list,), "data_quality": (dict,), "source": (str, _NONE),
    "distributed_info": (dict, _NONE), "device_properties": (list, _NONE), "trace_metadata": (dict, _NONE),
    "metadata_events": (list, _NONE), "unsupported_phases": (dict,), "category_counts": (dict,), "op_args_named": (bool, _NONE),
}
"""The JSON types of the keys of one `ranks` entry (`rank` itself: an int from 0 to 2^31-1)."""
_COUNT_DICTS = ("counts", "data_quality", "unsupported_phases", "category_counts")
"""Rank-entry objects whose values are counts: numbers (ints, or null)."""
_INT_LISTS = ("devices", "devices_listed_without_events", "devices_without_properties")
LIST_ITEMS: dict[str, dict[str, tuple[type, ...]]] = {
    "steps": {"step": (int,), "dur_ns": (int,), "ts_ns": (int, _NONE)},
    "devices_used": {"device": (int, _NONE), "name": (str, _NONE)},
    "metadata_events": {},
}
"""Rank-entry lists whose items are objects, with the types of the keys readers use in them."""


def _kind(v: object) -> str:
    if v is None:
        return "null"
    return {bool: "true/false", int: "a number", float: "a number", str: "text", list: "a list", dict: "an object"}.get(type(v), type(v).__name__)


def _names(types: tuple[type, ...]) -> str:
    words = {int: "a whole number", str: "text", list: "a list", dict: "an object", bool: "true/false", _NONE: "null"}
    return " or ".join(dict.fromkeys(words[t] for t in types))


def _is(v: object, types: tuple[type, ...]) -> bool:
    if isinstance(v, bool):  # JSON true/false is never a number here
        return bool in types
    return isinstance(v, types)


def manifest_problem(manifest: object) -> str | None:
    """What is wrong with a parsed manifest.json (one line), or None when readers can use it."""
    if not isinstance(manifest, dict):
        return f"the manifest is {_kind(manifest)}, not an object"
    version = manifest.get("format_version")
    if "format_version" not in manifest:
        return "the manifest has no format_version"
    if not _is(version, _INT):
        return f"format_version is {_kind(version)} ({str(version)[:40]}), not a whole number"
    if version < MIN_FORMAT_VERSION:
        return f"format_version {version} is not a run format (they start at {MIN_FORMAT_VERSION})"
    for key, types in MANIFEST_TYPES.items():
        if key in manifest and not _is(manifest[key], types):
            return f"'{key}' is {_kind(manifest[key])}; the format has {_names(types)}"
    for i, src in enumerate(manifest.get("sources") or []):
        if not isinstance(src, dict) or not _is(src.get("path", ""), _TEXT):
            return f"sources[{i}] is not an object with a text 'path'"
    for i, entry in enumerate(manifest.get("ranks") or []):
        where = f"ranks[{i}]"
        if not isinstance(entry, dict):
            return f"{where} is {_kind(entry)}, not an object"
        rank = entry.get("rank")
        if not _is(rank, _INT) or not 0 <= rank <= MAX_RANK:
            return f"{where}.rank is {_kind(rank)} ({str(rank)[:40]}); the format has a whole number from 0 to {MAX_RANK}"
        for key, types in RANK_TYPES.items():
            if key in entry and not _is(entry[key], types):
                return f"{where}.{key} is {_kind(entry[key])}; the format has {_names(types)}"
        if entry.get("events", 0) < 0:
            return f"{where}.events is negative"
        for key in _COUNT_DICTS:
            for k, v in (entry.get(key) or {}).items():
                if v is not None and not _is(v, (int, float)):
                    return f"{where}.{key}.{k} is {_kind(v)}, not a count"
        for key in _INT_LISTS:
            if any(not _is(d, (int, _NONE)) for d in entry.get(key) or []):
                return f"{where}.{key} holds something that is not a device number"
        for key, item_types in LIST_ITEMS.items():
            for j, item in enumerate(entry.get(key) or []):
                if not isinstance(item, dict):
                    return f"{where}.{key}[{j}] is {_kind(item)}, not an object"
                for k, types in item_types.items():
                    if (k in item or _NONE not in types) and not _is(item.get(k), types):
                        return f"{where}.{key}[{j}].{k} is {_kind(item.get(k))}; the format has {_names(types)}"
        for j, d in enumerate(entry.get("device_properties") or []):
            if not isinstance(d, dict):
                return f"{where}.device_properties[{j}] is {_kind(d)}, not an object"
            if not _is(d.get("id"), (int, _NONE)) or not _is(d.get("name"), (str, _NONE)):
                return f"{where}.device_properties[{j}]: 'id' must be a whole number and 'name' text"
    return None


_ARROW_NAMES = {"int64": "int64", "int32": "int32", "double": "double", "string": "string", "bool": "bool"}
_CHECKED: dict[tuple[str, int, int], None] = {}
_CHECKED_LOCK = threading.Lock()
_CHECKED_MAX = 100_000


def partition_problem(path: Path, table: schema.Table) -> str | None:
    """What is wrong with one rank partition's footer (one line), or None. Only the footer is read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        meta = pq.read_metadata(path)
        arrow = meta.schema.to_arrow_schema()
    except (pa.ArrowException, OSError, ValueError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        return f"not a readable Parquet file ({first[:200]}); import or record the run again"
    have = {f.name: f.type for f in arrow}
    derived = schema.DERIVED_ON_READ.get(table.name, {})
    for col in table.columns:
        t = have.get(col.name)
        if t is None:
            if col.name in derived:
                continue
            return f"column '{col.name}' of {table.name} is missing; import or record the run again"
        want = col.arrow_type
        if t != want and not (pa.types.is_dictionary(t) and t.value_type == want) and not (pa.types.is_null(t)):
            shown = str(t.value_type if pa.types.is_dictionary(t) else t)
            return f"column '{col.name}' of {table.name} is {shown}; the format has {_ARROW_NAMES[col.type]}"
    ns_columns = {c.name for c in table.columns if c.unit == "ns" and c.type == "int64"}
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        for i, name in enumerate(names):
            if name not in ns_columns:
                continue
            stats = rg.column(i).statistics
            if stats is None or not stats.has_min_max:
                continue
            lo, hi = stats.min, stats.max
            if isinstance(lo, int) and isinstance(hi, int) and (lo < -MAX_ABS_NS or hi > MAX_ABS_NS):
                edge = hi if hi > MAX_ABS_NS else lo
                return f"column '{name}' holds {edge}, outside the ±2^62 ns a run may hold; import or record the run again"
    return None


def rank_files(run_dir: Path) -> dict[str, list[tuple[str, int, int]]]:
    """Every `rank=*/<name>.parquet` file of a run, by file name: (path, size, mtime_ns) in path
    order (the order of `sorted(run_dir.glob("rank=*/<name>"))`). One listing of the run's folders
    (os.scandir), not a glob per table: on a run of hundreds of ranks each glob took 20-80 ms."""
    import os

    found: dict[str, list[tuple[tuple[str, str], str, int, int]]] = {}
    base = str(run_dir)
    try:
        with os.scandir(base) as top:
            dirs = [(e.name, e.path) for e in top if e.name.startswith("rank=") and e.is_dir()]
    except OSError:
        return {}
    for name, path in dirs:
        try:
            with os.scandir(path) as it:
                entries = [e for e in it if e.name.endswith(".parquet") and not e.name.startswith(".") and e.is_file()]
            for e in entries:
                st = e.stat()
                found.setdefault(e.name, []).append(((name, e.name), os.path.join(base, name, e.name), st.st_size, st.st_mtime_ns))
        except OSError as e:
            raise InputError(path, f"cannot read the run's folder ({e.strerror or e})") from None
    return {k: [(p, size, mtime) for _, p, size, mtime in sorted(v)] for k, v in found.items()}


CHECKED_RECORD = "partitions_checked.json"
"""The files of a run found good by `check_partitions` (in RUN/derived/, schema.DERIVED_DIR):
{"check": CHECK_VERSION, "format_version", "files": [[path in the run, size, mtime_ns], ...]}.
A file whose size or modification time changed since is checked again."""
CHECK_VERSION = 1
"""Bumped whenever `partition_problem` checks something more: every recorded file is checked again."""
RECORD_MIN_FILES = 100
"""Runs with fewer rank partition files (20 ranks) are not recorded: their footers take milliseconds."""


def _recorded(run_dir: Path) -> set[tuple[str, int, int]]:
    """The files CHECKED_RECORD says were found good, or nothing (no record, another version, unreadable)."""
    import json

    try:
        doc = json.loads((run_dir / schema.DERIVED_DIR / CHECKED_RECORD).read_bytes())
        if doc.get("check") != CHECK_VERSION or doc.get("format_version") != schema.FORMAT_VERSION:
            return set()
        return {(p, size, mtime) for p, size, mtime in doc["files"]
                if isinstance(p, str) and isinstance(size, int) and isinstance(mtime, int)}
    except Exception:  # noqa: BLE001  (missing, truncated, of another shape: every footer is read)
        return set()


def _record(run_dir: Path, files: list[tuple[str, int, int]]) -> None:
    """Write CHECKED_RECORD (beside it, then renamed); nothing where the run cannot be written to, or
    for a run of fewer than RECORD_MIN_FILES files."""
    import json
    import os
    import uuid

    if len(files) < RECORD_MIN_FILES:
        return
    folder = run_dir / schema.DERIVED_DIR
    tmp = folder / f".{CHECKED_RECORD}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        folder.mkdir(exist_ok=True)
        tmp.write_text(json.dumps({"check": CHECK_VERSION, "format_version": schema.FORMAT_VERSION, "files": sorted(files)}))
        os.replace(tmp, folder / CHECKED_RECORD)
    except OSError:  # a read-only run: checked again at each open, as before
        try:
            tmp.unlink()
        except OSError:
            pass


def written_here(run_dir: Path) -> None:
    """Count the rank partition files of a run this process has just written (store.finish_run) as
    checked: the summary that `import` and `record` print then opens the run without reading back
    the footers it wrote (70 ms on a fresh import of a 1.45M-event rank, a first read of Parquet
    footers in the process). Another process checks them as any run's."""
    import os

    files = rank_files(run_dir)
    _remember([(os.path.abspath(path), size, mtime_ns) for table in schema.RANK_TABLES for path, size, mtime_ns in files.get(table.file, [])])


def _remember(keys: list[tuple[str, int, int]]) -> None:
    """Footers found good in this process (path, size, mtime_ns), at most _CHECKED_MAX remembered."""
    with _CHECKED_LOCK:
        if len(_CHECKED) + len(keys) > _CHECKED_MAX:
            _CHECKED.clear()
        _CHECKED.update(dict.fromkeys(keys))


def check_partitions(run_dir: Path) -> dict[str, list[tuple[str, int, int]]]:
    """Every rank partition of the run checked (footers not seen before in this process, by path,
    size and mtime, nor recorded as good beside the run, read by a few threads: pyarrow reads them
    without the GIL); InputError naming the first bad file (in path order) and what is wrong.
    Returns the files it checked (`rank_files`), which the opening of the run uses again rather
    than list the run's folders once more (40-60 ms on 256 ranks)."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    todo: list[tuple[tuple[str, int, int], Path, schema.Table]] = []
    files = rank_files(run_dir)
    cut = len(str(run_dir)) + 1
    every = [(path[cut:], size, mtime_ns) for table in schema.RANK_TABLES for path, size, mtime_ns in files.get(table.file, [])]
    recorded = _recorded(run_dir)
    for table in schema.RANK_TABLES:
        for path, size, mtime_ns in files.get(table.file, []):
            key = (os.path.abspath(path), size, mtime_ns)
            if key not in _CHECKED and (path[cut:], size, mtime_ns) not in recorded:
                todo.append((key, Path(path), table))
    if not todo:
        if every and not recorded.issuperset(every):
            _record(run_dir, every)  # good in this process's memory, not yet beside the run
        return files
    if len(todo) == 1:
        problems = [partition_problem(todo[0][1], todo[0][2])]
    else:
        with ThreadPoolExecutor(max_workers=min(8, len(todo)), thread_name_prefix="run-check") as pool:
            problems = list(pool.map(lambda item: partition_problem(item[1], item[2]), todo))
    for (_, path, _), problem in zip(todo, problems):
        if problem:
            raise InputError(path, problem)
    _remember([key for key, _, _ in todo])
    _record(run_dir, every)
    return files
