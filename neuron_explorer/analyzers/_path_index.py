"""The index the critical path walks (analyzers/critical_path.py): a rank's events, and the
moves of the model — the host event charged at a moment, the device work a runtime call waited
for, a device event's predecessor, the device work running at a moment.

Events are rows of NumPy / `array` columns (read once from DuckDB, no Python object per event)
and are named by their row position (`-1`: none); the walk touches only the rows on its path.
A host thread's "innermost event at each change point" is computed by one C++ sweep (`_innermost`,
vectorised NumPy passes without the library), the streams are position arrays sorted by start, searched with `bisect`.

The ideas it flags events by (a sync call, a copy call, a collective kernel, device work) are
neuron_explorer/vocab.py's; the trace's spellings (sync record kinds and args, the DataLoader's
range) are collectors/kineto_names.py's.

Private to critical_path.py (may change). Must not: charge time (the walk does).
"""

from __future__ import annotations

import functools
import json
from array import array
from bisect import bisect_left, bisect_right

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..collectors.kineto_names import DATALOADER_NEXT, EVENT_SYNC, STREAM_SYNC, SYNC_KIND_ARG, WAIT_ON_STREAM_ARG, launched_before_trace
from ..store import Run
from ..vocab import COMM_KERNEL_RE, DEVICE_WORK_KINDS, kinds_sql, memcpy_call, sql_literal, stream_wait, sync_call, to_host_copy
from . import _path_lib
from .rank_rows import RankQuery
from .rank_rows import rows as rank_rows
from .rank_rows import take as take_rows

RUNTIME_WAIT_MIN_NS = 20_000
"""A runtime call at least this long, during which device work it did not launch itself finished,
is taken as waiting for the device (a launch blocked on a full launch queue); shorter calls are
launch overhead. A launch's own kernel ending before the launch returns is no wait."""

UNLINKED_GAP_MAX_NS = 10_000
"""A device event with no recorded launch follows the previous work on its stream only when it
started within this long after it (back to back); after a longer gap nothing says what it waited
for, and the path returns to the host, unless it was launched before the trace began (F_EARLY):
then the host did not hold it back, and it follows its stream."""

HOST_KINDS = ("cpu_op", "python", "user_annotation", "step", "runtime")
"""Host events the path can charge."""

KINDS = HOST_KINDS + DEVICE_WORK_KINDS + ("sync",)
"""The kinds the index reads; `kind` holds the position in this tuple."""
CPU_OP, PYTHON, ANNOTATION, STEP, RUNTIME = range(5)
KERNEL = KINDS.index("kernel")
SYNC = KINDS.index("sync")

NONE = -(2**62)
"""A null in an integer column (device, stream, launch id, frame)."""

# flag bits (from the event's kind, name and pass)
F_SYNC_CALL, F_MEMCPY_CALL, F_INPUT, F_TO_HOST, F_COMM, F_EARLY = 1, 2, 4, 8, 16, 32
"""A runtime call that waits for a device (vocab.sync_call); a runtime copy call (vocab.memcpy_call);
host work of the input pipeline (the data-loading pass, or the DataLoader's own range); a device copy
to the host (vocab.TO_HOST_COPY_PATTERN); a collective kernel (vocab.COMM_KERNEL_PATTERN); device work
with no recorded launch whose correlation id is below every runtime call's of its rank, or that
starts before its first runtime call (kineto_names.launched_before_trace, as the importer counts it):
launched before the trace's host side began recording (Kineto's device buffers hold the work queued
before; mi300x_ddp_resnet_act_checkpoint: 968 device events of steps 15-16, correlations 4066-5178,
the first runtime call 5179), so before any time in the trace."""
_LOADER_SQL = f"regexp_matches(name, {sql_literal(DATALOADER_NEXT.pattern)})"


def _arr(a: np.ndarray, code: str = "q") -> array:
    """An `array` (fast item access from Python, bisect works on it) of a NumPy array: "q" int64, "i" int32."""
    out = array(code)
    out.frombytes(np.ascontiguousarray(a, dtype=np.int64 if code == "q" else np.int32).tobytes())
    return out


def distinct(a: np.ndarray) -> np.ndarray:
    """The distinct values of a, sorted (`np.unique` without its hash path, slow on large int64 arrays)."""
    s = np.sort(a, kind="stable")  # runs already in order (ids along a path, times) make this near-linear
    return s[np.concatenate([[True], s[1:] != s[:-1]])] if len(s) else s


def factorize(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct values sorted, index of each one's first occurrence, code of each element)."""
    order = np.argsort(a, kind="stable")  # few distinct values or long sorted runs: near-linear
    s = a[order]
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] != s[:-1]
    starts = np.flatnonzero(new)
    inv = np.empty(len(a), dtype=np.int64)
    inv[order] = np.cumsum(new) - 1
    return s[starts], order[starts], inv


def factorize_rows(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of each distinct row's first occurrence, code of each row) of int columns, the codes
    in the order of the distinct rows (lexicographic, first column first). The rows are hashed once
    (Arrow's dictionary_encode of each row's values as one fixed-size key) and only the distinct
    ones sorted: a stable sort of every column, as `factorize` of each would, took 0.14 s of a
    1.45M-event rank's index against 0.03 s."""
    n = len(cols[0])
    if not n:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    packed = np.empty((n, len(cols)), dtype=np.int64)
    for i, c in enumerate(cols):
        packed[:, i] = c
    keys = pa.FixedSizeBinaryArray.from_buffers(pa.binary(8 * len(cols)), n, [None, pa.py_buffer(packed)])
    seen = np.asarray(pc.dictionary_encode(keys).indices, dtype=np.int64)  # in order of first occurrence
    del keys, packed
    new = np.ones(n, dtype=bool)  # a row whose code is above every code before it is its code's first row
    new[1:] = seen[1:] > np.maximum.accumulate(seen)[:-1]
    first = np.flatnonzero(new)
    order = np.lexsort([c[first] for c in reversed(cols)])  # the distinct rows, sorted
    rank = np.empty(len(first), dtype=np.int64)
    rank[order] = np.arange(len(first), dtype=np.int64)
    return first[order], rank[seen]


def _innermost(ts: np.ndarray, end: np.ndarray, ids: np.ndarray, pos: np.ndarray, native: bool = True) -> tuple[array, array]:
    """A host thread's change points and the innermost event (row position, -1: none) from each on.

    The innermost event at a point b is, among the events with ts <= b < end, the last in
    (ts, -end, id) order: the top of the stack of open slices (an improperly nested slice that
    has ended stays under a later one until that one ends, then both go). Sorted that way, the
    events with ts <= b are a prefix; the answer is the last of it with end > b, found by
    jumping from each row to the previous one with a strictly greater end. The jumps are one
    sweep in C++ (`_path_lib.innermost`) where the library is built (`native`); the NumPy passes
    below are its reference."""
    order = np.argsort(ids, kind="stable")  # the importer numbers events in (ts, -dur) order: usually this is it
    ts_s, end_s = ts[order], end[order]
    if len(order) > 1 and not np.all((ts_s[1:] > ts_s[:-1]) | ((ts_s[1:] == ts_s[:-1]) & (end_s[1:] <= end_s[:-1]))):
        order = np.lexsort((ids, -end, ts))
        ts_s, end_s = ts[order], end[order]
    pos_s = pos[order]
    bounds = distinct(np.concatenate([ts_s, end_s]))
    got = _path_lib.innermost(ts_s, end_s, pos_s, bounds) if native else None
    if got is not None:
        return _arr(got[0]), _arr(got[1])
    n = len(order)
    prev = np.arange(-1, n - 1, dtype=np.int64)  # candidate: the previous row with end > this row's end
    active = np.flatnonzero(prev >= 0)
    while len(active):
        ok = end_s[prev[active]] > end_s[active]
        active = active[~ok]
        prev[active] = prev[prev[active]]  # everything between was ruled out for the candidate, so for this row
        active = active[prev[active] >= 0]
    j = np.searchsorted(ts_s, bounds, side="right") - 1
    act = np.flatnonzero(j >= 0)
    act = act[end_s[j[act]] <= bounds[act]]
    while len(act):
        j[act] = prev[j[act]]
        act = act[j[act] >= 0]
        act = act[end_s[j[act]] <= bounds[act]]
    inner = np.where(j >= 0, pos_s[np.maximum(j, 0)], -1)
    keep = np.ones(len(bounds), dtype=bool)
    keep[1:] = inner[1:] != inner[:-1]
    return _arr(bounds[keep]), _arr(inner[keep])


_UNSET = object()


def _read(run: Run, query: str, params: list, by_rank: bool = False) -> tuple[dict[str, np.ndarray], list[str]]:
    """The columns of the index query as NumPy arrays, read in batches (DuckDB streams them, so
    the rows are in memory once); `tk` (the host thread's tid text) as codes into the list returned."""
    names: dict[str, int] = {}
    parts: dict[str, list] = {}
    cur = run.query_cursor(query)
    try:
        for b in cur.sql(query, params=params).to_arrow_reader(256 * 1024):
            for i, name in enumerate(b.schema.names):
                col = b.column(i)
                if name == "tk":
                    enc = col.dictionary_encode()
                    # this batch's codes -> codes over all batches; a null (not a host row) indexes the -1 at the end
                    glob = np.array([names.setdefault(v, len(names)) for v in enc.dictionary.to_pylist()] + [-1], dtype=np.int64)
                    parts.setdefault(name, []).append(glob[enc.indices.fill_null(-1).to_numpy(zero_copy_only=False)])
                else:
                    parts.setdefault(name, []).append(col.to_numpy(zero_copy_only=False))
    finally:
        cur.close()
    dtypes = {"k": np.int8, "flags": np.int8, "tk": np.int64}
    out = {name: np.concatenate(parts.pop(name)) if name in parts else np.zeros(0, dtype=dtypes.get(name, np.int64))
           for name in ("event_id", "k", "ts_ns", "end_ns", "device", "stream", "launch_id", "frame", "pid", "flags", "tk", "corr")
           + (("idx_rank",) if by_rank else ())}
    return out, list(names)


def _flag_early(cols: dict) -> dict:
    """F_EARLY on the rows of one rank's columns (`corr`, read for the runtime calls and for device
    work with no launch, then dropped): kineto_names.launched_before_trace."""
    corr = cols.pop("corr")
    early = launched_before_trace(corr, corr != NONE, cols["ts_ns"], (cols["device"] != NONE) & (cols["launch_id"] == NONE),
                                  cols["k"] == KINDS.index("runtime"))
    if early.any():
        cols["flags"] = cols["flags"] | np.where(early, np.int8(F_EARLY), np.int8(0))
    return cols


class _Sync:
    __slots__ = ("id", "device", "stream", "launch_id", "ts", "kind", "wait_on")

    def __init__(self, id_, name, args, device, stream, launch_id, ts):
        try:
            a = json.loads(args or "{}")
        except ValueError:
            a = {}
        a = a if isinstance(a, dict) else {}
        self.id, self.device, self.stream, self.launch_id, self.ts = id_, device, stream, launch_id, ts
        self.kind = a.get(SYNC_KIND_ARG) or name
        try:
            self.wait_on = int(a.get(WAIT_ON_STREAM_ARG, -1))
        except (ValueError, TypeError):
            self.wait_on = -1


_COLUMNS = """SELECT {lead}event_id, {kind} AS k, ts_ns, ts_ns + dur_ns AS end_ns, coalesce(device, {none}) AS device,
  coalesce(stream, {none}) AS stream, coalesce(launch_id, {none}) AS launch_id, coalesce(source_frame_id, {none}) AS frame,
  coalesce(pid, {none}) AS pid, CASE WHEN device IS NULL THEN coalesce(CAST(tid AS VARCHAR), tid_text, '') END AS tk,
  (coalesce({is_sync_call}, false)::INT * {sync_call}
   + coalesce({is_memcpy_call}, false)::INT * {memcpy_call}
   + coalesce(pass = 'data' OR {loader}, false)::INT * {input}
   + coalesce({is_to_host}, false)::INT * {to_host}
   + (kind = 'kernel' AND list_contains(?::VARCHAR[], name))::INT * {comm})::TINYINT AS flags,
  CASE WHEN device IS NULL AND kind <> 'runtime' OR device IS NOT NULL AND launch_id IS NOT NULL THEN {none}
       ELSE coalesce(correlation, {none}) END AS corr
FROM events WHERE {where}dur_ns > 0 AND kind IN {kinds}"""


@functools.lru_cache(maxsize=65536)
def _is_comm_kernel(name: str) -> bool:
    """vocab.COMM_KERNEL_RE's test, remembered per name (the same names come back on every rank)."""
    return bool(COMM_KERNEL_RE.search(name))


KERNEL_NAMES = RankQuery("path_kernel_names", "SELECT DISTINCT name FROM events WHERE rank = ? AND kind = 'kernel' AND name IS NOT NULL ORDER BY 1",
                         "SELECT DISTINCT rank, name FROM events WHERE kind = 'kernel' AND name IS NOT NULL ORDER BY 1, 2")
SYNCS = RankQuery("path_syncs", "SELECT event_id, name, args, device, stream, launch_id, ts_ns FROM events "
                                "WHERE rank = ? AND dur_ns > 0 AND kind = 'sync' AND device IS NOT NULL ORDER BY event_id",
                  "SELECT rank, event_id, name, args, device, stream, launch_id, ts_ns FROM events "
                  "WHERE dur_ns > 0 AND kind = 'sync' AND device IS NOT NULL ORDER BY rank, event_id")


def _index_sql(one: bool) -> str:
    """The index's columns of one rank (`rank = ?`) or, `idx_rank` first, of every rank of the views;
    the comm flag's kernel names are the first parameter."""
    kind_sql = "CASE kind " + " ".join(f"WHEN '{k}' THEN {i}" for i, k in enumerate(KINDS)) + " END::TINYINT"
    # the name tests run only on the rows of the kind they are about (a regexp over every row costs more than the rest of the read)
    return _COLUMNS.format(lead="" if one else "rank AS idx_rank, ", where="rank = ? AND " if one else "",
                           kind=kind_sql, none=NONE, is_sync_call=f"CASE WHEN kind = 'runtime' THEN {sync_call()} END",
                           sync_call=F_SYNC_CALL, is_memcpy_call=memcpy_call(), memcpy_call=F_MEMCPY_CALL,
                           loader=_LOADER_SQL, input=F_INPUT, comm=F_COMM, kinds=kinds_sql(KINDS),
                           is_to_host=f"CASE WHEN kind = 'memcpy' THEN {to_host_copy()} END", to_host=F_TO_HOST)


def _own_codes(tk: np.ndarray, names: list[str]) -> tuple[np.ndarray, list[str]]:
    """Thread codes (-1: none) renumbered in the order they first occur, with their names: the codes
    a read of these rows alone gives."""
    valid = tk >= 0
    u, first = np.unique(tk[valid], return_index=True)
    order = np.argsort(first, kind="stable")
    code = np.empty(len(u), dtype=np.int64)
    code[order] = np.arange(len(u), dtype=np.int64)
    out = np.full(len(tk), -1, dtype=np.int64)
    out[valid] = code[np.searchsorted(u, tk[valid])]
    return out, [names[c] for c in u[order].tolist()]


def _index_rows(run: Run, ranks: list[int]) -> dict[int, dict]:
    """Each rank's index columns (`_read`'s, `tk_names` the names of its thread codes): one read of
    the views' rows for many ranks, split by rank (the rows of a rank in the order its own read gives
    them: a scan returns the files, one a rank, in order), or one rank's own read."""
    if len(ranks) == 1:
        (rank,) = ranks
        kernel_names = [n for (n,) in rank_rows(run, KERNEL_NAMES, rank)]
        cols, tk_names = _read(run, _index_sql(True), [[n for n in kernel_names if _is_comm_kernel(n)], rank])
        return {rank: {**_flag_early(cols), "tk_names": tk_names}}
    names = [n for (n,) in run.sql("SELECT DISTINCT name FROM events WHERE kind = 'kernel' AND name IS NOT NULL").fetchall()]
    cols, tk_names = _read(run, _index_sql(False), [sorted(n for n in names if _is_comm_kernel(n))], by_rank=True)
    rk = cols.pop("idx_rank")
    # a scan gives the files in the order of their names (rank=0, rank=1, rank=10, ...): each rank's
    # rows are one run, taken as a slice; rows of ranks interleaved are put rank by rank first
    def run_starts(rk: np.ndarray) -> np.ndarray:
        return np.flatnonzero(np.diff(rk, prepend=rk[:1] - 1))
    starts = run_starts(rk)
    if len(np.unique(rk[starts])) < len(starts):
        order = np.argsort(rk, kind="stable")
        rk = rk[order]
        cols = {k: v[order] for k, v in cols.items()}
        starts = run_starts(rk)
    run_of = dict(zip(rk[starts].tolist(), zip(starts.tolist(), np.append(starts[1:], len(rk)).tolist())))
    out = {}
    for r in ranks:
        a, b = run_of.get(int(r), (0, 0))
        part = _flag_early({k: v[a:b] for k, v in cols.items()})
        part["tk"], part["tk_names"] = _own_codes(part["tk"], tk_names)
        out[int(r)] = part
    return out


INDEX = RankQuery("path_index", _index_sql(True), _index_sql(False), read=_index_rows)
"""The index's events: read once per batch of ranks and split by rank (`_index_rows`)."""
RANK_QUERIES = (SYNCS, INDEX)
"""The index's per-rank queries that the engine runs once per batch of ranks (rank_rows.py)."""


class RankIndex:
    """A rank's events, indexed for the walk. Rows are positions in the columns below."""

    def __init__(self, run: Run, rank: int):
        cols = dict(take_rows(run, INDEX, rank))
        tk_names = cols.pop("tk_names")
        ids, kind, ts, end = cols["event_id"], cols["k"], cols["ts_ns"], cols["end_ns"]
        device, stream, launch_id, frame = cols["device"], cols["stream"], cols["launch_id"], cols["frame"]
        pid, flags, tk = cols["pid"], cols["flags"], cols["tk"]
        del cols
        n = len(ids)
        # position of the (loaded) event each row was launched by, -1 when none
        launch = np.full(n, -1, dtype=np.int64)
        if n:
            by_id = np.argsort(ids, kind="stable")
            lp = by_id[np.minimum(np.searchsorted(ids, launch_id, sorter=by_id), n - 1)]
            launch = np.where((launch_id != NONE) & (ids[lp] == launch_id), lp, -1)
            del by_id, lp
        del launch_id
        on_host = device == NONE
        # host threads, in the order of str((pid, tid))
        self.tracks: list[tuple[array, array]] = []
        self.track_of: dict[tuple, int] = {}
        host = np.flatnonzero(on_host & (kind <= RUNTIME))
        if len(host):
            codes = tk[host]
            first, inv = factorize_rows(pid[host], codes)
            keys = [(None if pid[r] == NONE else int(pid[r]), tk_names[c]) for r, c in zip(host[first].tolist(), codes[first].tolist())]
            by = np.argsort(inv, kind="stable")
            cuts = np.searchsorted(inv[by], np.arange(len(keys) + 1))
            for k in sorted(range(len(keys)), key=lambda k: str(keys[k])):
                rows = host[by[cuts[k]:cuts[k + 1]]]
                self.track_of[keys[k]] = len(self.tracks)
                self.tracks.append(_innermost(ts[rows], end[rows], ids[rows], rows))
        # streams: device work by (device, stream), sorted by (ts, end, id)
        work = np.flatnonzero(~on_host & (kind >= KINDS.index(DEVICE_WORK_KINDS[0])) & (kind < SYNC))
        self.streams: list[tuple[array, array]] = []
        self.stream_keys: list[tuple] = []
        self.stream_index: dict[tuple, int] = {}
        stream_of = np.full(n, -1, dtype=np.int32)
        at_in_stream = np.full(n, -1, dtype=np.int32)
        if len(work):
            first, inv = factorize_rows(device[work], stream[work])
            keys = [(int(device[r]), None if stream[r] == NONE else int(stream[r])) for r in work[first].tolist()]
            first_id = np.full(len(keys), np.iinfo(np.int64).max, dtype=np.int64)
            np.minimum.at(first_id, inv, ids[work])
            ordered = sorted(range(len(keys)), key=lambda k: (keys[k][0], -1 if keys[k][1] is None else keys[k][1], first_id[k]))
            by = np.lexsort((ids[work], end[work], ts[work], inv))
            cuts = np.searchsorted(inv[by], np.arange(len(keys) + 1))
            for k in ordered:
                rows = work[by[cuts[k]:cuts[k + 1]]]
                si = len(self.streams)
                stream_of[rows] = si
                at_in_stream[rows] = np.arange(len(rows), dtype=np.int32)
                self.streams.append((_arr(rows), _arr(ts[rows])))
                self.stream_keys.append(keys[k])
                self.stream_index[keys[k]] = si
        # device work by the event that launched it (row positions)
        lw = work[launch[work] >= 0]
        lw = lw[np.argsort(launch[lw], kind="stable")]
        self._launched_by, self._launched = _arr(launch[lw]), _arr(lw)
        # sync records: few, read with their args
        self.syncs_of_launch: dict[int, list[_Sync]] = {}
        self.stream_waits: dict[tuple, tuple[list[int], list[_Sync]]] = {}
        waits: dict[tuple, list[_Sync]] = {}
        for r in rank_rows(run, SYNCS, rank):
            s = _Sync(*r)
            if s.launch_id is not None:
                self.syncs_of_launch.setdefault(s.launch_id, []).append(s)
            if stream_wait(r[1]):
                waits.setdefault((s.device, s.stream), []).append(s)
        for key, ws in waits.items():
            ws.sort(key=lambda w: (w.ts, w.id))
            self.stream_waits[key] = ([w.ts for w in ws], ws)
        self.n = n
        # per row, read one item at a time by the walk: memoryviews of the arrays (Python ints, no copy)
        self.id, self.kind, self.ts, self.end = memoryview(ids), memoryview(kind), memoryview(ts), memoryview(end)
        self.device, self.launch, self.flags = memoryview(device), memoryview(launch), memoryview(flags)
        self.stream_of, self.at_in_stream = memoryview(stream_of), memoryview(at_in_stream)
        self.ids, self.frame = ids, frame  # NumPy
        self._wait_targets: dict[int, object] = {}

    def launched(self, x: int) -> list[int]:
        """The device work launched by row x."""
        return list(self._launched[bisect_left(self._launched_by, x):bisect_right(self._launched_by, x)])

    # --- host side -------------------------------------------------------------------------
    def host_at(self, t: int, own: int | None, floor: int) -> tuple[int, int]:
        """The host event charged just before t (row, -1: none), and the time from which that
        choice holds; `own` is the step's host thread (index into tracks)."""
        kind = self.kind
        ev, lo = -1, None
        if own is not None:
            points, inner = self.tracks[own]
            i = bisect_left(points, t) - 1
            if i >= 0:
                ev, lo = inner[i], points[i]
        lo = floor if lo is None or lo < floor else lo
        if ev >= 0 and kind[ev] in (CPU_OP, RUNTIME):
            return ev, lo
        best = -1
        ts = self.ts
        for k, (points, inner) in enumerate(self.tracks):
            if k == own:
                continue
            i = bisect_left(points, t) - 1
            if i < 0:
                continue
            if points[i] > lo:
                lo = points[i]
            other = inner[i]
            if other >= 0 and kind[other] in (CPU_OP, RUNTIME) and (best < 0 or ts[other] > ts[best]):
                best = other
        return (best if best >= 0 else ev), lo

    def wait_targets(self, x: int):
        """The streams a runtime call may wait on: a set of (device, stream), None for every stream,
        "own" for a blocking copy (its own copy), or False when the call does not wait for the device."""
        got = self._wait_targets.get(x, _UNSET)
        if got is not _UNSET:
            return got
        flags = self.flags[x]
        targets: object = False
        if flags & F_SYNC_CALL:
            targets = set()
            for s in self.syncs_of_launch.get(self.id[x], []):
                if s.kind == STREAM_SYNC and s.stream is not None and s.stream >= 0:
                    targets.add((s.device, s.stream))
                elif s.kind == EVENT_SYNC and s.wait_on >= 0:
                    targets.add((s.device, s.wait_on))
                else:
                    targets = None
                    break
            if targets is not None and not targets:
                targets = None
        elif flags & F_MEMCPY_CALL:
            own = self.launched(x)
            xend, ts = self.end[x], self.ts
            if own and all(ts[d] < xend for d in own):
                targets = "own"  # a blocking copy: it returns when its own copy is done
            elif not own and xend - ts[x] >= RUNTIME_WAIT_MIN_NS:
                targets = None  # a long copy call whose copy was not recorded: as any long call
        elif self.end[x] - self.ts[x] >= RUNTIME_WAIT_MIN_NS:
            targets = None
        self._wait_targets[x] = targets
        return targets

    def blocking_copy(self, x: int) -> bool:
        """Runtime call x is a blocking copy to the host: a copy call whose own device-to-host copy
        ended before it returned (the host waited for the copy: a host sync, as in `.item()`)."""
        if not (self.flags[x] & F_MEMCPY_CALL) or self.wait_targets(x) != "own":
            return False
        end, flags, xend = self.end, self.flags, self.end[x]
        return any(flags[d] & F_TO_HOST and end[d] <= xend for d in self.launched(x))

    def awaited(self, x: int, t: int) -> int:
        """The device work a waiting runtime call x waited for, as seen just before t: on its
        target streams, the event started before t that ended last within the call (-1: none)."""
        targets = self.wait_targets(x)
        if targets is False:
            return -1
        end = self.end
        if targets == "own":
            own = [d for d in self.launched(x) if self.ts[d] < t]
            return max(own, key=lambda d: (end[d], self.id[d])) if own else -1
        best = -1
        xts, xend = self.ts[x], end[x]
        until = t if t < xend else xend
        launch = self.launch
        for key, (rows, starts) in zip(self.stream_keys, self.streams):
            if targets is not None and key not in targets:
                continue
            i = bisect_left(starts, until) - 1
            # a call never waits for the work it launched itself (a launch whose kernel ends before it returns,
            # a graph launch and its kernels): only other work ending during it means the host waited
            while i >= 0 and (end[rows[i]] > xend or launch[rows[i]] == x):
                i -= 1
            if i >= 0:
                e = rows[i]
                if end[e] > xts and (best < 0 or end[e] > end[best]):
                    best = e
        return best

    # --- device side -----------------------------------------------------------------------
    def running_at(self, t: int) -> int:
        """The device work still running at t (started before, ends after), the one started last.
        Collectives count only when the host ran ahead: when work it launched before t still waits
        on a stream at t (its launch returned by t, or it was launched before the trace began:
        F_EARLY; it starts after). Otherwise one is left out: it may spin waiting for other ranks
        while the host goes on."""
        best, comm = -1, -1
        ts, end, ids, flags, launch = self.ts, self.end, self.id, self.flags, self.launch
        queued = False
        for rows, starts in self.streams:
            i = bisect_left(starts, t)
            if i < len(rows) and not queued:
                nxt = launch[rows[i]]
                queued = nxt >= 0 and end[nxt] <= t or bool(flags[rows[i]] & F_EARLY)
            if i >= 1:
                e = rows[i - 1]
                if end[e] > t:
                    if not (flags[e] & F_COMM):
                        if best < 0 or (ts[e], ids[e]) > (ts[best], ids[best]):
                            best = e
                    elif comm < 0 or (ts[e], ids[e]) > (ts[comm], ids[comm]):
                        comm = e
        if queued and comm >= 0 and (best < 0 or (ts[comm], ids[comm]) > (ts[best], ids[best])):
            return comm
        return best

    def predecessor(self, d: int):
        """(ready time, how, row) of the predecessor that became ready last, or None; how is
        "stream", "launch" or "stream N" (a stream waited on)."""
        ts, end = self.ts, self.end
        ds = ts[d]
        si, i = self.stream_of[d], self.at_in_stream[d]
        rows = self.streams[si][0]
        prev = rows[i - 1] if i > 0 else -1
        launch = self.launch[d]
        best = None  # (ready, preference, how, row): the latest ready wins, ties prefer the stream, then the launch
        # (work launched before the trace began, F_EARLY, waited for no launch the trace could show: its stream's)
        if prev >= 0 and (launch >= 0 or ds - end[prev] <= UNLINKED_GAP_MAX_NS or self.flags[d] & F_EARLY):
            pe = end[prev]
            best = (pe if pe < ds else ds, 2, "stream", prev)
        if launch >= 0 and self.device[launch] == NONE:
            blocking = self.wait_targets(launch) is not False and not (self.flags[launch] & F_SYNC_CALL)
            le = end[launch]
            ready = ts[launch] if blocking and le > ds else le
            if ready > ds:
                ready = ds
            if best is None or (ready, 1) > (best[0], best[1]):
                best = (ready, 1, "launch", launch)
        key = self.stream_keys[si]
        waits = self.stream_waits.get(key)
        if waits is not None:
            wts, ws = waits
            lo = bisect_left(wts, ts[prev]) if prev >= 0 else 0
            for w in ws[lo:bisect_right(wts, ds)]:
                other = w.wait_on
                ok = (key[0], other)
                if other < 0 or ok == key or ok not in self.stream_index:
                    continue
                orows, ostarts = self.streams[self.stream_index[ok]]
                j = bisect_left(ostarts, ds) - 1
                while j >= 0 and end[orows[j]] > ds:
                    j -= 1
                if j >= 0 and (best is None or end[orows[j]] > best[0]):
                    best = (end[orows[j]], 0, f"stream {other}", orows[j])
        if best is None:
            return None
        return best[0], best[2], best[3]
