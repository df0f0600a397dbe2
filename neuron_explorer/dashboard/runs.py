"""The runs a dashboard serves, opened once, addressed by index (never by a path from a request).

`RunSet` opens every run it is given up front (a bad path raises InputError before any server
starts), keeps one DuckDB connection per run behind a lock (the web server is threaded and a
DuckDB connection must not run two statements at once), and caches the per-run facts that every
timeline query needs: the lanes, the time span, and the few very long events that would otherwise
defeat row-group pruning.

Must not: open a path that arrives in a request, or read a file that the run's frames do not name.
"""

from __future__ import annotations

import os
import re
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa

from .. import schema, store
from ..errors import NeuronExplorerError
from ..store import Run, open_run
from ..vocab import tool_frame

# Lane identity of an event: device events (those with a `device`, see schema.DEVICE_KINDS) go to
# (rank, device, stream), host events to (rank, pid, tid). pid/tid that were not integers in the
# trace are kept in pid_text. Testing `device IS NOT NULL` rather than the kind keeps the per-row
# cost of a 2-million-event scan low.
LANE_SQL = ("rank, (device IS NOT NULL) AS is_device, coalesce(device, pid) AS lane_a, "
            "CASE WHEN device IS NOT NULL THEN coalesce(stream, tid) ELSE tid END AS lane_b, "
            "coalesce(pid_text, '') AS lane_text")

HIDDEN_LANE_SQL = "(NOT is_device AND (lane_text <> '' OR lane_a IS NULL OR coalesce(lane_b, 0) < 0))"
"""Lane.hidden in SQL, on the lane columns of LANE_SQL."""

MAX_DEPTH_ROWS = 32
"""Nesting rows drawn per lane; deeper slices are drawn on the last row (it says so in the label)."""

BAND_ROW_SQL = "CASE WHEN kind = 'python' THEN 0 ELSE 1 + coalesce(depth, 0) - coalesce(python_ancestors, 0) END"
"""The row of an event in its lane with the Python frames folded (OpenRun.python_band, the default):
the outermost Python frames on one band (row 0; the frames inside them are not drawn, drawn_sql),
every other slice one row below its depth with the Python frames around it left out (schema:
events.python_ancestors). A lane without Python frames has no band (Lane.skip)."""


def drawn_sql(band: bool, tool_hidden: bool = False) -> str:
    """SQL condition on the events drawn: with the band, only the outermost Python frames (the ones
    inside them would all lie on the band, over each other); unfold to see them. Nested with
    `tool_hidden` (the default of "Python frames nested"), every event but the tool's own Python
    frames (vocab.TOOL_FRAME_PATTERN: the CLI, typer, click, record.py, runpy that ran the script)."""
    if band:
        return "NOT (kind = 'python' AND coalesce(python_ancestors, 0) > 0)"
    return f"NOT {tool_frame()}" if tool_hidden else "true"


def drawn_for(r: OpenRun) -> str:
    """drawn_sql in `r`'s layout (OpenRun.python_band, OpenRun.tool_hidden)."""
    return drawn_sql(r.python_band, r.tool_hidden)


def row_sql(band: bool) -> str:
    """SQL of an event's row in its lane, before the lane's skip: folded (BAND_ROW_SQL) or by depth."""
    return BAND_ROW_SQL if band else "coalesce(depth, 0)"


def placed_cols(r: OpenRun) -> str:
    """The columns that place an event on `r`'s timeline: its lane (LANE_SQL) and its row_sql, as
    `lane_row` (Lane.y_of turns it into a y)."""
    return f"{LANE_SQL}, {row_sql(r.python_band)} AS lane_row"


SCOPED_RANKS = 8
"""A timeline of one rank of a run with more ranks than this reads views over that rank's
partition only (`OpenRun.of_rank`); the views of this many ranks are kept open per run."""

LONG_EVENTS = 4096
"""At most this many of the longest events are kept in memory per run; every other event is
shorter than the run's `short_max_dur_ns`, which bounds how far before a window a query must look."""


class QueryError(NeuronExplorerError):
    """A request the dashboard cannot answer (bad parameter, unknown run or event)."""


INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def parse_int(v, name: str, default=None, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    """An integer request parameter in [lo, hi] (int64 by default); anything else is a QueryError (HTTP 400)."""
    if v is None or v == "":
        if default is None:
            raise QueryError(f"{name} is required")
        return default
    if isinstance(v, bool):
        raise QueryError(f"{name} must be an integer, got {v!r}")
    if isinstance(v, int):
        n = v  # exact: ns timestamps need all 64 bits, a float keeps only 53
    else:
        try:
            n = int(str(v).strip())
        except ValueError:
            try:
                n = int(float(v))  # 1e9 in a query string is fine; nan/inf are not
            except (TypeError, ValueError, OverflowError):
                raise QueryError(f"{name} must be an integer, got {str(v)[:40]!r}") from None
    if not lo <= n <= hi:
        raise QueryError(f"{name} must be between {lo} and {hi}, got {str(v)[:40]}")
    return n


LANE_NAME_CHARS = 22
"""Thread and device names are cut to this many characters in lane labels (the axis is narrow)."""
_KINETO_THREAD = re.compile(r"^thread (\d+) \((.*)\)$")


@dataclass
class Lane:
    index: int
    rank: int
    is_device: bool
    a: int | None  # pid, or device index
    b: int | None  # tid, or stream
    text: str
    rows: int  # nesting rows drawn (max depth + 1, capped)
    y0: int = 0  # first row on the timeline's y axis
    name: str = ""  # the thread's name (host) or the device's ("GPU 0", "MTIA 17") from the trace's metadata
    skip: int = 0  # subtracted from row_sql: 1 for a lane with no Python frames while they are folded (no band)
    band: bool = False  # this lane's Python frames are folded onto its first row
    t0: int | None = None  # the first start of its events, ns
    t1: int | None = None  # the last end of its events, ns

    @property
    def label(self) -> str:
        if self.is_device:
            return f"r{self.rank} {self.name or f'GPU {self.a}'} · stream {self.b}"
        if self.text:
            return f"r{self.rank} {self.text}"
        if self.a is None:
            return f"r{self.rank} (no thread)"
        if self.name:
            return f"r{self.rank} {self.name} · tid {self.b}"
        return f"r{self.rank} pid {self.a} tid {self.b}"

    def y_of(self, row) -> int:
        """The y of an event of this lane whose row_sql is `row` (the SQL of timeline._y_join)."""
        return self.y0 + min(max(int(row or 0) - self.skip, 0), self.rows - 1)

    @property
    def hidden(self) -> bool:
        """A meta lane, hidden unless asked for: the profiler's own spans (`Spans`, `Traces`: pids
        that are not numbers), events with no thread, and the negative tids Kineto gives
        pseudo-threads."""
        return not self.is_device and (bool(self.text) or self.a is None or (self.b is not None and self.b < 0))

    def to_dict(self) -> dict:
        return {"index": self.index, "rank": self.rank, "is_device": self.is_device, "a": self.a, "b": self.b, "text": self.text,
                "name": self.name, "label": self.label, "hidden": self.hidden, "rows": self.rows, "y0": self.y0,
                "python_band": self.band}


def lane_names(manifest: dict, ranks=None) -> dict[tuple, str]:
    """Names of lanes from the trace metadata the importer keeps per rank (Kineto's `ph: "M"`
    events): (rank, "thread", pid, tid) → thread name ("thread 1262 (pt_autograd_0)" becomes
    "pt_autograd_0"; the last name given wins, as in Perfetto) and (rank, "device", pid) → the
    process label of a device ("GPU 0"); of `ranks` only when given (one rank's lanes of a run of
    hundreds need not read every rank's metadata). Anything malformed is skipped."""
    out: dict[tuple, str] = {}
    keep = None if ranks is None else {int(r) for r in ranks}
    for entry in manifest.get("ranks") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("rank"), int):
            continue
        if keep is not None and entry["rank"] not in keep:
            continue
        rank = entry["rank"]
        for m in entry.get("metadata_events") or []:
            if not isinstance(m, dict) or not isinstance(m.get("args"), dict):
                continue
            pid, tid = m.get("pid"), m.get("tid")
            if m.get("name") == "thread_name" and isinstance(m["args"].get("name"), str) and isinstance(pid, int) and isinstance(tid, int):
                name = m["args"]["name"].strip()
                hit = _KINETO_THREAD.match(name)
                name = hit.group(2).strip() if hit else name
                if name:
                    out[(rank, "thread", pid, tid)] = name[:LANE_NAME_CHARS]
            elif m.get("name") == "process_labels" and isinstance(m["args"].get("labels"), str) and isinstance(pid, int):
                label = m["args"]["labels"].strip()
                if label and label.upper() != "CPU":
                    out[(rank, "device", pid)] = label[:LANE_NAME_CHARS]
    return out


BACKGROUND_NICE = 10
"""The nice value of the thread that computes the Overview (and of the DuckDB threads of the run's
second connection, OpenRun.background, which inherit it): the page's requests and the browser's
drawing come first on a small machine."""


@contextmanager
def niced(value: int = BACKGROUND_NICE):
    """The calling thread at the nice value `value` (Linux: nice is per thread; elsewhere, or
    without the right, nothing changes), its own again after (where lowering it back is allowed)."""
    tid = threading.get_native_id()
    try:
        before = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, max(before, value))
    except (AttributeError, OSError):
        before = None
    try:
        yield
    finally:
        if before is not None:
            try:
                os.setpriority(os.PRIO_PROCESS, tid, before)
            except OSError:
                pass  # an unprivileged process cannot raise a priority again: the request's thread ends soon


@dataclass
class OpenRun:
    index: int
    path: Path
    run: Run
    lock: threading.Lock = field(default_factory=threading.Lock)
    _facts: dict = field(default_factory=dict)
    _keys_lock: threading.Lock = field(default_factory=threading.Lock)
    _key_locks: dict = field(default_factory=dict)
    python_band: bool = True  # Python frames folded onto one band per lane (BAND_ROW_SQL); False: nested by depth
    show_tool_frames: bool = False  # nested: the tool's own frames drawn too (else hidden and the lane's rows moved up, lanes())

    @property
    def tool_hidden(self) -> bool:
        """The tool's own Python frames are left out of the drawing: nested, unless asked for. (On
        the band only the outermost frame of a thread is drawn; hiding it would empty the band.)"""
        return not self.python_band and not self.show_tool_frames

    @property
    def layout(self) -> tuple[bool, bool]:
        """What decides every event's row: part of the key of each cached fact that depends on it."""
        return (self.python_band, self.tool_hidden)

    @property
    def name(self) -> str:
        return self.path.name

    def query(self, sql: str, params: list | None = None):
        """(column names, rows) of one statement, serialised on this run's connection."""
        with self.lock:
            cur = self.run.con.execute(sql, params or [])
            cols = [d[0] for d in cur.description]
            return cols, cur.fetchall()

    def arrow(self, sql: str, params: list | None = None):
        with self.lock:
            return self.run.con.sql(sql, params=params or None).to_arrow_table()

    def records(self, sql: str, params: list | None = None) -> list[dict]:
        cols, rows = self.query(sql, params)
        return [dict(zip(cols, r)) for r in rows]

    # ---- cached facts -------------------------------------------------------------------
    def cached(self, key, compute):
        """A per-run fact computed once: `compute()` the first time `key` is asked for. Requests
        that ask while it is being computed wait for that one computation (the findings' analysis
        is not run twice because the page asked twice)."""
        if key in self._facts:
            return self._facts[key]
        with self._keys_lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            if key not in self._facts:
                self._facts[key] = compute()
        return self._facts[key]

    def span(self) -> tuple[int, int]:
        """(first start, last end) of all events, ns. From each rank's span, stored beside the run
        (schema.TIMELINE_SPANS, `stored`) at the first open: a run of many ranks does not scan
        every rank's events at each open for it."""
        def compute():
            sql = "SELECT rank, min(ts_ns) AS first_ts_ns, max(ts_ns + dur_ns) AS last_end_ns FROM events GROUP BY rank"
            tbl = self.stored(schema.TIMELINE_SPANS, "all", sql, lambda: self.arrow(sql))
            t0, t1 = tbl["first_ts_ns"].to_pylist(), tbl["last_end_ns"].to_pylist()
            t0, t1 = [t for t in t0 if t is not None], [t for t in t1 if t is not None]
            return (int(min(t0, default=0)), int(max(t1, default=0)))
        return self.cached("span", compute)

    def shown_span(self, rank: int | None = None) -> tuple[int, int]:
        """(first start, last end) of the events on the lanes shown by default (not Lane.hidden: the
        profiler's own spans, events with no thread, negative tids), ns; of `rank` when given. The
        whole-run view: meta lanes that start long before the work (95 ms of the 68k-event CUDA
        trace) would otherwise leave that much of it empty. span() when every lane is a meta lane."""
        if rank is not None and self.run.view_ranks is None and len(self.run.ranks) > SCOPED_RANKS:
            return self.of_rank(rank).shown_span(rank)  # one rank of many: the lanes its timeline reads (that rank's partition)
        shown = [ln for ln in self.lanes(rank, True) if not ln.hidden and ln.t0 is not None]  # each lane's own span (stored with it)
        return (min(ln.t0 for ln in shown), max(ln.t1 for ln in shown)) if shown else self.span()

    def lanes(self, rank: int | None, all_lanes: bool = True) -> list[Lane]:
        """The lanes of the timeline, with their first y row. Without `all_lanes`, meta lanes
        (Lane.hidden) are left out and the others move up — unless that leaves none. With the
        tool's own frames hidden (tool_hidden), a lane's rows start at the shallowest event that is
        not one of them: the frames of the CLI and runpy that ran the script are all above it, and
        the user's outermost frame moves up to row 0."""
        band, tool_hidden = self.python_band, self.tool_hidden

        def compute():
            if all_lanes:
                where = "" if rank is None else f"WHERE rank = {int(rank)}"
                mine = f"NOT {tool_frame()}" if tool_hidden else "true"
                sql = (f"SELECT {LANE_SQL}, coalesce(max({row_sql(band)}) FILTER ({mine}), 0) AS max_row, "
                       f"bool_or(kind = 'python') AS has_python, coalesce(min(coalesce(depth, 0)) FILTER ({mine}), 0) AS first, "
                       "min(ts_ns) AS first_ts_ns, max(ts_ns + dur_ns) AS last_end_ns "
                       f"FROM events {where} "
                       "GROUP BY ALL ORDER BY rank, is_device, lane_a NULLS FIRST, lane_b NULLS FIRST, lane_text")
                tbl = self.stored(schema.TIMELINE_LANES, f"{'all' if rank is None else f'r{int(rank)}'}-{int(band)}{int(tool_hidden)}", sql,
                                  lambda: self.arrow(sql))
                rows = zip(*(tbl[c].to_pylist() for c in schema.TIMELINE_LANES.column_names))
                names = lane_names(self.run.manifest, [rank] if rank is not None else self.run.view_ranks)
                lanes = []
                for i, (rk, dev, a, b, text, max_row, has_python, first, t0, t1) in enumerate(rows):
                    skip = 1 if band and not has_python else int(first) if tool_hidden else 0
                    rows_ = min(max(int(max_row or 0) - skip, 0) + 1, MAX_DEPTH_ROWS)
                    name = names.get((int(rk), "device", a) if dev else (int(rk), "thread", a, b), "")
                    lanes.append(Lane(i, int(rk), bool(dev), a, b, text, rows_, 0, name, skip, band and bool(has_python), t0, t1))
            else:
                full = self.lanes(rank, True)
                lanes = [ln for ln in full if not ln.hidden] or full
                lanes = [replace(ln) for ln in lanes]
            y = 0
            for ln in lanes:
                ln.y0 = y
                y += ln.rows + 1  # one empty row between lanes
            return lanes
        return self.cached(("lanes", rank, bool(all_lanes), band, tool_hidden), compute)

    def long_events(self):
        """(short_max_dur_ns, the longest events as an Arrow table): every event not in the table
        has dur_ns <= short_max_dur_ns (-1 when every event is in the table). Stored beside the run
        (schema.TIMELINE_LONG_EVENTS, `stored`) at the first open, read at every later one."""
        cols = f"event_id, kind, name, ts_ns, dur_ns, depth, python_ancestors, {LANE_SQL}"

        def scan() -> pa.Table:
            _, rows = self.query("SELECT count(*) FROM events")
            n = rows[0][0]
            if n <= LONG_EVENTS:
                threshold = -1  # every event is "long": all are kept
            else:
                _, rows = self.query("SELECT dur_ns FROM events ORDER BY dur_ns DESC LIMIT 1 OFFSET ?", [LONG_EVENTS])
                threshold = int(rows[0][0])
            return self.arrow(f"SELECT {threshold}::BIGINT AS short_max_dur_ns, {cols} FROM events WHERE dur_ns > ?", [threshold])

        def compute():
            tbl = self.stored(schema.TIMELINE_LONG_EVENTS, "all", f"LONG_EVENTS={LONG_EVENTS} SELECT {cols} FROM events", scan,
                              keep=lambda t: t.num_rows > 0)  # an empty table cannot say its threshold
            threshold = int(tbl["short_max_dur_ns"][0].as_py()) if tbl.num_rows else -1
            return (threshold, tbl.drop_columns(["short_max_dur_ns"]))
        return self.cached("long", compute)

    @property
    def scope(self) -> str:
        """The ranks this run's views read, in a derived file's name: `all`, or `rank<r>` (`of_rank`)."""
        return "all" if self.run.view_ranks is None else "rank" + "_".join(str(k) for k in self.run.view_ranks)

    def stored(self, table: schema.Table, variant: str, computation: str, compute, keep=lambda t: True) -> pa.Table:
        """A derived table of this run (schema.DERIVED_TABLES) for `variant` (prefixed with `scope`):
        read from RUN/derived/ when it was computed from the run as it is now by `computation`
        (store.derived_key), else `compute()`d and stored there (where `keep` says it can be)."""
        variant = f"{self.scope}-{variant}"
        key = store.derived_key(self.run, computation)
        tbl = store.read_derived(self.run, table, variant, key)
        if tbl is None:
            tbl = compute()
            if keep(tbl):
                store.write_derived(self.run, table, variant, key, tbl)
        return tbl.select(table.column_names).cast(table.arrow_schema())

    def timeline_stored(self, rank: int | None) -> bool:
        """Whether RUN/derived/ holds the lanes and the longest events that a timeline of `rank` (None:
        every rank) reads, from an earlier open (the pyramid, for a run that has one, is stored with
        them): their files are there (not checked: one computed from an older state of the run is
        computed again when it is read). Then the first timeline is a few reads, not scans of the events."""
        import os

        if rank is None or self.run.view_ranks is not None or len(self.run.ranks) <= SCOPED_RANKS:
            scope = self.scope
        else:
            scope = f"rank{int(rank)}"  # of_rank's
        try:
            names = os.listdir(self.path / schema.DERIVED_DIR)
        except OSError:
            return False
        return all(any(n.startswith(f"{t.file.removesuffix('.parquet')}.{scope}-") for n in names)
                   for t in (schema.TIMELINE_LANES, schema.TIMELINE_LONG_EVENTS))

    def of_rank(self, rank: int) -> OpenRun:
        """This run seen through views over one rank's partition (`Run.with_ranks`), with its own
        connection and cached facts (longest events, lanes, span, steps: that rank's): what one
        rank's timeline reads on a run of many ranks, where the whole run's facts would scan every
        rank's files. The last SCOPED_RANKS ranks asked are kept open."""
        with self.lock:
            scoped = self._facts.setdefault("of_rank", {})
            got = scoped.pop(int(rank), None)
            if got is None:
                got = OpenRun(self.index, self.path, self.run.with_ranks([int(rank)]))
            got.python_band = self.python_band  # the layout the user chose for the run
            got.show_tool_frames = self.show_tool_frames
            scoped[int(rank)] = got  # the most recent last
            while len(scoped) > SCOPED_RANKS:
                del scoped[next(iter(scoped))]  # closed when no request holds it any more
            return got

    def background(self) -> OpenRun:
        """This run on a second connection of its own (its own views, lock and cached facts), for the
        long analyses the Overview runs after the page is painted (the critical path, the roofline):
        under this run's lock they would hold every timeline request for as long (25 s on a
        2.1M-event run), on their own they only share the CPU. Opened once, closed with the run."""
        def compute():
            with niced():  # the connection's DuckDB threads start here and inherit it
                bg = OpenRun(self.index, self.path, self.run.with_ranks(self.run.view_ranks))
            bg.python_band, bg.show_tool_frames = self.python_band, self.show_tool_frames
            return bg
        return self.cached("background", compute)

    def close(self, wait_s: float = 5.0) -> None:
        """Close this run's connection and its ranks' ones. A request still running a query (the
        server stops with one in flight) is interrupted and waited for: a thread left inside
        DuckDB when the interpreter exits aborts the process. The analysis's child process
        (views/findings._in_child), if one is running, is killed."""
        child = self._facts.get("analysis_child")
        if child is not None and child.poll() is None:
            child.kill()
        self.run.con.interrupt()
        held = self.lock.acquire(timeout=wait_s)
        try:
            subs = list(self._facts.get("of_rank", {}).values())
            if self._facts.get("background") is not None:
                subs.append(self._facts["background"])
            for sub in subs:
                sub.close(wait_s)
            self.run.close()
        finally:
            if held:
                self.lock.release()

    def steps(self) -> list[dict]:
        """Every profiler step of every rank (rank, step, ts_ns, dur_ns), in time order."""
        return self.cached("steps", lambda: self.records("SELECT rank, step, ts_ns, dur_ns FROM steps ORDER BY ts_ns, rank"))

    def frame_file(self, frame_id: int) -> tuple[str, int, str] | None:
        _, rows = self.query("SELECT file, line, function FROM frames WHERE frame_id = ?", [int(frame_id)])
        return tuple(rows[0]) if rows else None

    def source_roots(self) -> list[Path]:
        """Where relative frame paths are looked up: the working directory a live run was recorded
        in (manifest `cwd`), the folders of the imported traces, then the folder the run lives in.
        Never a folder a request names."""
        roots: list[Path] = []
        cwd = self.run.manifest.get("cwd")
        if isinstance(cwd, str) and cwd:
            roots.append(Path(cwd))
        for src in self.run.manifest.get("sources") or []:
            p = src.get("path") if isinstance(src, dict) else None
            if isinstance(p, str):
                roots.append(Path(p).parent)
        roots.append(self.path.resolve().parent)
        return roots


class RunSet:
    """The runs one dashboard serves, by index."""

    def __init__(self, paths: list[Path | str]):
        if not paths:
            raise NeuronExplorerError("give at least one run directory")
        self.runs: list[OpenRun] = []
        for i, p in enumerate(paths):
            self.runs.append(OpenRun(i, Path(p), open_run(p)))  # raises InputError for a bad path

    def get(self, index) -> OpenRun:
        try:
            i = int(index)
        except (TypeError, ValueError):
            raise QueryError(f"run must be a run index (0..{len(self.runs) - 1}), got {index!r}") from None
        if not 0 <= i < len(self.runs):
            raise QueryError(f"no run {i}: this dashboard serves runs 0..{len(self.runs) - 1}")
        return self.runs[i]

    def close(self) -> None:
        for r in self.runs:
            r.close()
