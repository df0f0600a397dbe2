"""What bounds each step: a critical path per profiler step of a rank, and the step's bound.

Every nanosecond of a step (its `ProfilerStep#N` range, [ts_ns, ts_ns + dur_ns)) is charged to
exactly one item: a device event (kernel, collective kernel, memcpy, memset), a host event (CPU
operator, Python call, annotation, runtime call), or a device idle gap with its cause. The model
(docs/METRICS.md "Critical path" states it for users) walks backwards from the step's end. It
starts on the device when device work other than a collective is still running at the step's end
(the host ran ahead and the step's work is still queued), or a collective is while work launched
before the end still waits on a stream (RankIndex.running_at), else on the host:

- On the host, at each moment the path charges the innermost event of the thread that owns the
  step. When that thread is inside no operator (only Python calls, annotations or the step range)
  and another host thread of the rank runs an operator then, the path charges that operator:
  the step's thread is waiting for it (autograd's backward thread).
- When the charged host event is a runtime call that waits for the device — a call named
  `…Synchronize`, a memcpy call whose own copy finished before it returned (a blocking copy, as
  in `.item()`; it started before the call returned), or any runtime call of at least RUNTIME_WAIT_MIN_NS during which device work
  finished (a launch blocked on a full launch queue) — the path moves to the device work the call
  waited for: the device event on the awaited streams that ended last before the call returned
  (streams from the call's `cuda_sync` records: `Stream Sync` its stream, `Event Sync` the stream
  it waits on, `Context Sync` every stream, else every stream; a blocking copy waits for its own copy).
  The part of the call after that work ended is the call's own overhead. Where the path comes
  back to the host inside a blocking copy before its copy ran (from device work with no recorded
  launch, or launched by another thread), the host was waiting on the device: that time has the
  cause WAITING_IN_COPY.
- On the device, the path charges the event back to its start, then goes to whichever
  predecessor became ready last: the previous event on the same stream (ready at its end), its
  launch (ready at the launch's end, or its start for a blocking call), or, when a `Stream Wait
  Event` record (MTIA: `event_wait`, vocab.stream_wait) on the stream says it waited for another
  stream, the last event on that stream (ready at its end). Ties prefer the stream, then the launch. The time between that predecessor
  being ready and the event starting is an idle gap with its cause. An event with no recorded
  launch follows its stream only when it started within UNLINKED_GAP_MAX_NS of the previous
  work. With no predecessor the path returns to the host at the event's start.

The walk is deterministic and every move goes strictly back in time, so the charged times of a
step add up to its duration exactly. Afterwards, the part of an idle gap during which a kernel ran
on the device (any stream) is charged to that kernel: device compute, or communication for a
collective (where both ran, compute; analyzers/device_time.py: the same nanosecond is never idle and
compute, or idle and communication). The path's device work waited while the device's compute
units were busy with other work; a copy running then leaves the gap idle (copy engines run beside
the kernels). MTIA's inference trace read idle-bound (46%) while its device computed 91.7% of the span.

Must not: decide what is a problem (rules do), render anything or write files.
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_left

import numpy as np

from ..fmt import duration
from ..no_pandas import without_pandas
from ..store import Run
from ..vocab import DEVICE_WORK_KINDS, DEVICE_WORK_SQL, charged_top_op, is_kernel_launch_call_name, is_launch_call_name, is_sync_call_name
from ._path_index import (  # noqa: F401 (the model's thresholds)
    F_COMM,
    F_INPUT,
    F_MEMCPY_CALL,
    HOST_KINDS,
    KERNEL,
    KINDS,
    NONE,
    RUNTIME,
    RUNTIME_WAIT_MIN_NS,
    STEP,
    UNLINKED_GAP_MAX_NS,
    RankIndex,
    distinct,
    factorize,
    factorize_rows,
)
from ._path_index import RANK_QUERIES as _INDEX_QUERIES
from .metrics import LAST_RECORDED, covered_within, device_work_intervals, step_device_busy, union_array
from .rank_rows import RankQuery, arrow_of
from .rank_rows import rows as rank_rows

CATEGORIES = ("device_compute", "communication", "memcpy", "host_compute", "launch_overhead", "input_pipeline", "idle")
"""What each charged nanosecond is: see `category_of` and docs/METRICS.md."""

GROUPS = {"device": ("device_compute", "communication", "memcpy"), "host": ("host_compute", "launch_overhead"),
          "input": ("input_pipeline",), "idle": ("idle",)}
"""Categories grouped into what bounds a step."""

GROUP_LABELS = {"device": "device-bound", "host": "host-bound", "input": "input-bound", "idle": "idle-bound"}
CATEGORY_WORDS = {"device_compute": "device compute", "communication": "communication", "memcpy": "memory copies",
                  "host_compute": "CPU operators and Python", "launch_overhead": "launch overhead",
                  "input_pipeline": "input pipeline", "idle": "device idle"}

PATH_COLUMNS = ("rank", "step", "seq", "ts_ns", "charged_ns", "event_id", "category", "cause", "source_frame_id")

_DEVICE_COMPUTE, _COMMUNICATION, _MEMCPY, _HOST_COMPUTE, _LAUNCH_OVERHEAD, _INPUT_PIPELINE, _IDLE = range(len(CATEGORIES))
_OWN_TIME = "the call's own time after the device work it waited for"
UNTRACED = "host time outside every traced call"
"""The path's host time in no event the trace records, as the verdict and the findings name it."""
WAITING_IN_COPY = "the host waiting in a blocking copy for the device"
"""The cause of host time inside a blocking copy (a memcpy call that returns after its own copy) before
that copy ran: the path came back to the host there (from device work with no recorded launch, or
launched by another thread), and the host was waiting on the device, not running code."""
UNSEEN_QUEUE = "waiting behind work the trace does not show"
"""The cause of an idle gap of at least UNSEEN_QUEUE_MIN_NS on the path before device work that was
ready by everything the trace holds: its launch had returned (not a blocking call running its own
copy) or it followed the previous work on its stream, and no device work of any kind ran on any
device of the rank meanwhile. It waited behind work the trace does not show: a stream waiting on an event of
work launched before the trace began, a CUDA/HIP graph's dependencies, another process, events the
profiler dropped. Short gaps keep their cause (`waiting for its launch`: a launch's latency; `gap
after the previous work on its stream`)."""
UNSEEN_QUEUE_MIN_NS = 1_000_000
"""An idle gap at least this long before ready device work is UNSEEN_QUEUE: a launch's latency, or
the step from one kernel to the next on a stream, is µs."""
_WORK_KINDS = [KINDS.index(k) for k in DEVICE_WORK_KINDS]
LAUNCH_GAP = "waiting for its launch"
"""The cause of idle before device work whose launch became ready last (its latency, or the host late to launch)."""
_STREAM_GAP = "gap after the previous work on its stream"
_COMM_WHILE_WAITING = "a collective ran on another stream while the path's device work waited"
_KERNEL_WHILE_WAITING = "a kernel ran on another stream while the path's device work waited"


def category_of(index: RankIndex, e: int) -> str:
    """A charged event's category (e: a row of the index, -1 for untraced host time): device work
    by kind (collective kernels are communication, memcpy and memset are memcpy); host work in the
    data-loading pass (or the `enumerate(DataLoader)` range itself, which old traces file as an
    operator) is input_pipeline, runtime calls launch_overhead, any other host event (or untraced
    host time) host_compute."""
    return CATEGORIES[_category(index, e)]


def _category(index: RankIndex, e: int) -> int:
    if e < 0:
        return _HOST_COMPUTE
    if index.device[e] != NONE:
        if index.kind[e] == KERNEL:
            return _COMMUNICATION if index.flags[e] & F_COMM else _DEVICE_COMPUTE
        return _MEMCPY
    if index.flags[e] & F_INPUT:
        return _INPUT_PIPELINE
    if index.kind[e] != RUNTIME:
        return _HOST_COMPUTE
    # a blocking copy to the host is the host waiting for the device (a sync), not a launch: the time it
    # spends after its copy (staging into pageable memory) is host work
    return _HOST_COMPUTE if index.flags[e] & F_MEMCPY_CALL and index.blocking_copy(e) else _LAUNCH_OVERHEAD


class _Walker:
    """The walk of a rank's steps. Each move of the walk from a state (t, on host or on a device
    event) charges some segments and goes to an earlier state; a move that stays after the step's
    start does not depend on that start, so it is kept (per host thread) and reused by the walks
    of other steps that reach the same state (steps that overlap: their paths join)."""

    def __init__(self, index: RankIndex):
        self.index = index
        self.memo: dict[tuple, int] = {}  # (host thread, t, device event or -1 on the host) -> node
        self.seg = array("q")  # kept segments, 4 numbers each: ts, ns, event, category * 2^32 + cause
        self.first = array("q", [0])  # node i's segments: [first[i], first[i + 1])
        self.out_t, self.out_dev, self.link = array("q"), array("q"), array("q")  # node's next state, next node (-1: not known)
        self.breaks: list[int] = []  # nodes whose next node is not the node after them (sorted)
        self.causes: dict[str | None, int] = {None: 0, _OWN_TIME: 1, UNTRACED: 2, WAITING_IN_COPY: 3}

    def cause_texts(self) -> list[str | None]:
        """Cause code -> text."""
        out: list[str | None] = [None] * len(self.causes)
        for c, i in self.causes.items():
            out[i] = c
        return out

    def _move(self, t: int, dev: int, own: int | None, start: int, segs: list) -> tuple[int, int]:
        """One move of the walk from state (t, dev): on the host when dev is -1, else on device event
        dev. Adds segments (ts, ns, event, category * 2^32 + cause), latest first, to segs and
        returns the next state."""
        index = self.index
        if dev < 0:
            ev, lo = index.host_at(t, own, start)
            waiting = False  # inside a blocking copy whose own copy has not run yet: the host waits on the device
            if ev >= 0 and index.kind[ev] == RUNTIME:
                d = index.awaited(ev, t)
                if d >= 0 and index.end[d] > lo:
                    dend = index.end[d]
                    if dend < t:
                        segs += (dend, t - dend, ev, _category(index, ev) << 32 | 1)
                        t = dend
                    return t, d
                waiting = d < 0 and bool(index.flags[ev] & F_MEMCPY_CALL) and index.blocking_copy(ev)
            if ev >= 0 and index.kind[ev] == STEP:
                ev = -1  # the step range itself: host time outside every traced call
            if t > lo:
                segs += (lo, t - lo, ev, _category(index, ev) << 32 | (3 if waiting else 0 if ev >= 0 else 2))
            return (lo if lo > start else start), -1
        lo = index.ts[dev]
        if lo < start:
            lo = start
        if t > lo:
            segs += (lo, t - lo, dev, _category(index, dev) << 32)
        t = lo
        if t <= start:
            return t, -1
        pred = index.predecessor(dev)
        if pred is None:
            return t, -1
        ready, how, p = pred
        if ready < t:
            cause = (LAUNCH_GAP if how == "launch" else
                     _STREAM_GAP if how == "stream" else f"waiting for {how}")
            code = self.causes.setdefault(cause, len(self.causes))
            lo = ready if ready > start else start
            segs += (lo, t - lo, dev, _IDLE << 32 | code)
            t = lo
            if t <= start:
                return t, -1
        return t, (-1 if how == "launch" else p)

    def walk(self, start: int, end: int, own: int | None, at: int | None = None) -> tuple[list, list]:
        """A step's walk: the kept moves it made, as runs [first, last + 1) of consecutive node
        numbers (latest first), and the segments of its last move, the one that reached the step's start.
        It starts on the device work running at `at` (default: the end; a window: just before its end)."""
        memo, out_t, out_dev, link, breaks, seg, first = self.memo, self.out_t, self.out_dev, self.link, self.breaks, self.seg, self.first
        runs: list[list[int]] = []
        final: list = []
        t = end
        dev = self.index.running_at(end if at is None else at)  # >= 0: the host ran ahead, the end waits for the device work still queued
        prev, guard = -1, 0
        while t > start:
            key = (own, t, dev)
            node = memo.get(key)
            if node is None:
                segs: list = []
                t2, d2 = self._move(t, dev, own, start, segs)
                if t2 <= start:
                    final = segs
                    break
                node = len(out_t)
                seg += array("q", segs)
                first.append(len(seg) >> 2)
                out_t.append(t2)
                out_dev.append(d2)
                link.append(-1)
                breaks.append(node)
                memo[key] = node
            elif out_t[node] <= start:  # the kept move goes past this step's start: move again, stopping there
                segs = []
                self._move(t, dev, own, start, segs)
                final = segs
                break
            if prev >= 0 and link[prev] != node:
                link[prev] = node
                if node == prev + 1:  # prev no longer ends a run of consecutive nodes
                    if len(breaks) >= 2 and breaks[-2] == prev:
                        del breaks[-2]
                    else:
                        del breaks[bisect_left(breaks, prev)]
            k = node
            while True:  # follow the kept moves: a run of consecutive nodes at a time (their times only decrease)
                last = breaks[-1] if k == breaks[-1] else breaks[bisect_left(breaks, k)]
                j = k if last == k else bisect_left(out_t, -start, k, last + 1, key=_neg) - 1  # the run's last node after start
                if runs and runs[-1][1] == k:
                    runs[-1][1] = j + 1
                else:
                    runs.append([k, j + 1])
                prev = j
                guard += j + 1 - k
                k = link[j]
                if j < last or k < 0 or out_t[k] <= start:
                    break
            if guard > 10_000_000:
                raise RuntimeError("critical path walk did not finish")
            t, dev = out_t[prev], out_dev[prev]
        return runs, final


def _neg(v: int) -> int:
    return -v


class Path:
    """A critical path as columns (PATH_COLUMNS): one row per charged segment, in time order per
    step. `rows()` gives the rows as dicts, `table()` as an Arrow table."""

    def __init__(self, rank, step, seq, ts, ns, event_id, category, cause, frame, causes: list):
        self.rank, self.step, self.seq, self.ts, self.ns = rank, step, seq, ts, ns
        self.event_id, self.category, self.cause, self.frame = event_id, category, cause, frame  # -1 / 0 / NONE: null
        self.causes = causes  # cause code -> text (0: None)
        self._derived: dict = {}

    def __len__(self) -> int:
        return len(self.ts)

    def table(self):
        import pyarrow as pa

        cat = pa.DictionaryArray.from_arrays(pa.array(self.category.astype(np.int32)), pa.array(list(CATEGORIES))).cast(pa.string())
        cause = pa.DictionaryArray.from_arrays(pa.array(self.cause.astype(np.int32), mask=self.cause == 0),
                                               pa.array([c or "" for c in self.causes])).cast(pa.string())
        return pa.table({"rank": pa.array(np.ascontiguousarray(self.rank), pa.int32()), "step": pa.array(self.step, pa.int64()),
                         "seq": pa.array(self.seq, pa.int32()), "ts_ns": pa.array(self.ts, pa.int64()),
                         "charged_ns": pa.array(self.ns, pa.int64()),
                         "event_id": pa.array(self.event_id, pa.int64(), mask=self.event_id < 0), "category": cat, "cause": cause,
                         "source_frame_id": pa.array(self.frame, pa.int64(), mask=self.frame == NONE)}, schema=_SCHEMA())

    def rows(self) -> list[dict]:
        return self.table().to_pylist()

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_derived": {}}  # what was derived from it (per-event tables) is this process's own

    def select(self, keep: np.ndarray) -> Path:
        """The segments where `keep` (a bool mask, e.g. `path.step == s`) as a path of their own."""
        return Path(self.rank[keep], self.step[keep], self.seq[keep], self.ts[keep], self.ns[keep], self.event_id[keep],
                    self.category[keep], self.cause[keep], self.frame[keep], self.causes)

    @classmethod
    def from_rows(cls, rows: list[dict]) -> Path:
        causes = [None] + sorted({r["cause"] for r in rows if r["cause"] is not None})
        code = {c: i for i, c in enumerate(causes)}

        def col(key, null=-1):
            return np.array([null if r[key] is None else r[key] for r in rows], dtype=np.int64)
        return cls(col("rank"), col("step"), col("seq"), col("ts_ns"), col("charged_ns"), col("event_id"),
                   np.array([CATEGORIES.index(r["category"]) for r in rows], dtype=np.int8),
                   np.array([code[r["cause"]] for r in rows], dtype=np.int32), col("source_frame_id", NONE), causes)


def _SCHEMA():
    import pyarrow as pa

    return pa.schema([("rank", pa.int32()), ("step", pa.int64()), ("seq", pa.int32()), ("ts_ns", pa.int64()),
                      ("charged_ns", pa.int64()), ("event_id", pa.int64()), ("category", pa.string()), ("cause", pa.string()),
                      ("source_frame_id", pa.int64())])


def _empty_path(rank: int) -> Path:
    z = np.zeros(0, dtype=np.int64)
    return Path(z, z, z, z, z, z, z.astype(np.int8), z.astype(np.int32), z, [None])


def _step_rows(w: _Walker, runs: list, final: list):
    """A step's segments in time order, adjacent ones charged to the same event, category and
    cause merged: (ts, ns, event, category, cause) columns."""
    first = np.frombuffer(w.first, dtype=np.int64)
    r = np.array(runs, dtype=np.int64).reshape(-1, 2)
    starts, counts = first[r[:, 0]], first[r[:, 1]] - first[r[:, 0]]  # a run of consecutive nodes: consecutive segments
    total = int(counts.sum())
    idx = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts - starts, counts)
    kept = np.frombuffer(w.seg, dtype=np.int64).reshape(-1, 4)[idx]
    if final:
        kept = np.concatenate([kept, np.array(final, dtype=np.int64).reshape(-1, 4)])
    return _merged(kept[:, 0], kept[:, 1], kept[:, 2], (kept[:, 3] >> 32).astype(np.int8), (kept[:, 3] & 0xFFFFFFFF).astype(np.int32))


def _merged(*cols):
    """A step's segments as the walk charged them (latest first) in time order, adjacent ones
    charged to the same event, category and cause merged: (ts, ns, event, category, cause)."""
    ts, ns, ev, cat, cause = (c[::-1] for c in cols)  # the walk charges latest first
    if not len(ts):
        return ts, ns, ev, cat, cause
    new = np.ones(len(ts), dtype=bool)
    new[1:] = ~((ev[1:] == ev[:-1]) & (cat[1:] == cat[:-1]) & (cause[1:] == cause[:-1]) & (ts[:-1] + ns[:-1] == ts[1:]))
    at = np.flatnonzero(new)
    return ts[at], np.add.reduceat(ns, at), ev[at], cat[at], cause[at]


def _kernel_covers(index: RankIndex) -> list[tuple[int, str, dict]]:
    """The kernels an idle row of the path is charged to instead, in device_time's precedence
    (compute kernels, then collectives): (category, cause, `_cover` of those kernels) for each the
    rank has. Copies and sets are not among them: copy engines run beside the kernels, so a copy
    does not keep a kernel from starting."""
    if not index.n:
        return []
    flags, kind = np.asarray(index.flags), np.asarray(index.kind)
    kernel, comm = kind == KERNEL, (flags & F_COMM) != 0
    out = []
    for cat, cause, sel in ((_DEVICE_COMPUTE, _KERNEL_WHILE_WAITING, kernel & ~comm), (_COMMUNICATION, _COMM_WHILE_WAITING, kernel & comm)):
        cover = _cover(index, np.flatnonzero(sel))
        if cover:
            out.append((cat, cause, cover))
    return out


def _cover(index: RankIndex, rows: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per device: the events `rows` sorted by start, as arrays (starts, the furthest end among those
    started so far, the row that reaches it); empty without rows."""
    if not len(rows):
        return {}
    ts, end = np.asarray(index.ts)[rows], np.asarray(index.end)[rows]
    device = np.frombuffer(index.device, dtype=np.int64)[rows]
    order = np.lexsort((end, ts, device))
    ts, end, device, rows = ts[order], end[order], device[order], np.asarray(rows, dtype=np.int64)[order]
    out: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    bounds = np.flatnonzero(np.diff(device)) + 1
    for a, b in zip(np.concatenate([[0], bounds]).tolist(), np.concatenate([bounds, [len(device)]]).tolist()):
        e = end[a:b]
        far = np.maximum.accumulate(e)
        new = np.ones(b - a, dtype=bool)
        new[1:] = e[1:] > far[:-1]  # a new furthest end: that row reaches it from here on
        lead = np.maximum.accumulate(np.where(new, np.arange(b - a), 0))
        out[int(device[a])] = (ts[a:b], far, rows[a:b][lead])
    return out


def _covers_of(w: _Walker, index: RankIndex) -> list[tuple[int, int, dict]]:
    """`_kernel_covers` with their causes as the walker's codes."""
    return [(c, w.causes.setdefault(why, len(w.causes)), v) for c, why, v in _kernel_covers(index)]


def _not_idle(index: RankIndex, covers: list, rows: tuple) -> tuple:
    """A step's walked rows (ts, ns, event, category, cause) with the idle time under a kernel charged
    to it (`_busy_not_idle`), compute first: its ns are not the collectives' (device_time)."""
    for category, code, cover in covers:
        rows = _busy_not_idle(index, cover, category, code, *rows)
    return rows


def _overlapping(starts: np.ndarray, far: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per interval [lo, hi): whether some event of a cover (`starts` sorted, `far` the furthest end
    reached by those started so far) runs during it: one started before it still running at its
    start, or one starting inside it."""
    i = np.searchsorted(starts, lo, side="right") - 1
    nxt = np.minimum(i + 1, len(starts) - 1)
    return ((i >= 0) & (far[np.maximum(i, 0)] > lo)) | ((i + 1 < len(starts)) & (starts[nxt] < hi))


def _device_work_cover(index: RankIndex) -> tuple[np.ndarray, np.ndarray]:
    """Every device event of the rank that is work (kernels, copies, sets), on any of its devices: their
    starts sorted and the furthest end reached by those started so far."""
    rows = np.flatnonzero(np.isin(np.asarray(index.kind), _WORK_KINDS)) if index.n else np.empty(0, dtype=np.int64)
    ts, end = np.asarray(index.ts)[rows], np.asarray(index.end)[rows]
    order = np.argsort(ts, kind="stable")
    return ts[order], np.maximum.accumulate(end[order]) if len(order) else end[order]


def _unseen_queues(w: _Walker, index: RankIndex, work: tuple[np.ndarray, np.ndarray], rows: tuple) -> tuple:
    """A step's rows (after `_not_idle`) with each idle row of UNSEEN_QUEUE_MIN_NS or more before ready
    device work given the cause UNSEEN_QUEUE: its cause the launch's gap (starting after the launch
    returned: a blocking call runs its own copy) or the stream's, and no device work of the rank
    (`work`: `_device_work_cover`, any device: a copy it waited for, or work on a peer device, is work
    the trace shows) running during it."""
    ts, ns, ev, cat, cause = rows
    codes = [c for c in (w.causes.get(LAUNCH_GAP), w.causes.get(_STREAM_GAP)) if c is not None]
    if not codes:
        return rows
    long_ = np.flatnonzero((cat == _IDLE) & np.isin(cause, codes) & (ns >= UNSEEN_QUEUE_MIN_NS))
    if not len(long_):
        return rows
    launch = np.asarray(index.launch)[ev[long_]]
    ok = (cause[long_] != w.causes.get(LAUNCH_GAP, -1)) | ((launch >= 0) & (ts[long_] >= np.asarray(index.end)[np.maximum(launch, 0)]))
    starts, far = work
    if len(starts):  # (no work overlapping the row)
        ok &= ~_overlapping(starts, far, ts[long_], ts[long_] + ns[long_])
    if not ok.any():
        return rows
    cause = cause.copy()
    cause[long_[ok]] = w.causes.setdefault(UNSEEN_QUEUE, len(w.causes))
    return ts, ns, ev, cat, cause


def _busy_not_idle(index: RankIndex, cover: dict, category: int, code: int, ts, ns, ev, cat, cause):
    """A step's rows with each idle row's time during which a kernel of `cover` ran on its device
    (any stream) charged to that kernel as `category`, cause `code` (docs/METRICS.md "Device time":
    the same nanosecond is never idle and compute, or idle and communication); the rest of the row
    stays idle."""
    idle = np.flatnonzero(cat == _IDLE)
    if not len(idle):
        return ts, ns, ev, cat, cause
    # the idle rows some kernel of `cover` overlaps, found for all rows at once (most overlap none)
    device = np.frombuffer(index.device, dtype=np.int64)[ev[idle]]  # (a memoryview over the index's column: no copy)
    hit = np.zeros(len(idle), dtype=bool)
    for d, (starts, far, _who) in cover.items():
        on = np.flatnonzero(device == d)
        if not len(on):
            continue
        hit[on] = _overlapping(starts, far, ts[idle[on]], ts[idle[on]] + ns[idle[on]])
    out: list[tuple] = []
    touched = np.zeros(len(ts), dtype=bool)
    for r in idle[hit].tolist():
        starts, far, who = cover[index.device[int(ev[r])]]
        lo, hi = int(ts[r]), int(ts[r]) + int(ns[r])
        touched[r] = True
        t = lo
        while t < hi:
            i = int(np.searchsorted(starts, t, side="right")) - 1
            if i >= 0 and far[i] > t:
                e = min(hi, int(far[i]))
                out.append((t, e - t, int(who[i]), category, code))
            else:
                e = min(hi, int(starts[i + 1])) if i + 1 < len(starts) else hi
                out.append((t, e - t, int(ev[r]), _IDLE, int(cause[r])))
            t = e
    if not out:
        return ts, ns, ev, cat, cause
    keep = ~touched
    add = np.array(out, dtype=np.int64)
    ts2 = np.concatenate([ts[keep], add[:, 0]])
    order = np.argsort(ts2, kind="stable")
    return (ts2[order], np.concatenate([ns[keep], add[:, 1]])[order], np.concatenate([ev[keep], add[:, 2]])[order],
            np.concatenate([cat[keep], add[:, 3].astype(cat.dtype)])[order],
            np.concatenate([cause[keep], add[:, 4].astype(cause.dtype)])[order])


_CACHE: dict[tuple, Path] = {}
"""The paths this process computed or adopted, by (run, rank): the CACHE_PATHS used last, in the order of use."""
CACHE_PATHS = 8
_CACHE_LOCK = threading.Lock()


def _keep(key: tuple, path: Path) -> None:
    """Hold `path` in `_CACHE`, dropping the entries used longest ago beyond CACHE_PATHS. Not the whole cache:
    the analysis threads each work on a rank of their own, and a rank whose path was dropped while
    its rules still read it would be walked again from its own partition."""
    with _CACHE_LOCK:
        _CACHE.pop(key, None)
        while len(_CACHE) >= CACHE_PATHS:
            del _CACHE[next(iter(_CACHE))]
        _CACHE[key] = path


PATH_STEPS = RankQuery(
    "path_steps", "SELECT s.step, s.ts_ns, s.dur_ns, s.event_id, e.pid, coalesce(CAST(e.tid AS VARCHAR), e.tid_text, '') "
                  "FROM steps s JOIN events e ON e.event_id = s.event_id AND e.rank = s.rank WHERE s.rank = ? ORDER BY s.step",
    "SELECT s.rank, s.step, s.ts_ns, s.dur_ns, s.event_id, e.pid, coalesce(CAST(e.tid AS VARCHAR), e.tid_text, '') "
    "FROM steps s JOIN events e ON e.event_id = s.event_id AND e.rank = s.rank ORDER BY s.rank, s.step")
"""The steps whose paths are walked, with the thread that recorded each (`path_of`)."""
WINDOW_STEP = -1
"""The `step` of a window path's rows (`window_path`): the rank has no profiler step of its own."""

_LAUNCHERS = ("SELECT rank, pid, coalesce(CAST(tid AS VARCHAR), tid_text, '') AS tid, count(*) AS calls FROM events "
              "WHERE {where}kind = 'runtime' GROUP BY ALL")
_WINDOW_SQL = (
    "SELECT {rank}s.lo, s.hi, l.pid, l.tid FROM (SELECT rank, min(ts_ns) AS lo, max(ts_ns + dur_ns) AS hi, "
    f"bool_or(kind IN {DEVICE_WORK_SQL}) AS device_work FROM events WHERE {{where}}kind <> 'other' GROUP BY rank) s "
    "JOIN (SELECT *, row_number() OVER (PARTITION BY rank ORDER BY calls DESC, pid, tid) AS k FROM (" + _LAUNCHERS + ")) l "
    "ON l.rank = s.rank AND l.k = 1 WHERE s.device_work ORDER BY s.rank")
PATH_WINDOW = RankQuery("path_window", _WINDOW_SQL.format(rank="", where="rank = $1 AND "),
                        _WINDOW_SQL.format(rank="s.rank, ", where=""),
                        when=lambda run, ranks: any(not rank_rows(run, PATH_STEPS, r) for r in ranks))
"""A rank's span (metrics.span's: its events but the profiler's own) and the host thread that made the most
runtime calls, when it has device work (`window_of`); read for a batch only when one of its ranks has no steps."""


_OP_ARGS_SQL = "SELECT event_id, args FROM events WHERE event_id IN (SELECT unnest(?::BIGINT[]))"


def _paths_of_batch(run: Run, ranks: list[int]) -> dict[int, Path]:
    """The critical paths of many ranks, with what `path_items` reads of their events (`_Info`) and
    of their top-level operators (args) in one query each for all of them. Walked from the batch's
    prepared index rows (no query a rank); a rank whose walk fails is left out (`path_of` walks it
    again, and `bound` reports why). With one rank, its path as `path_of` computes it."""
    if len(ranks) == 1:
        return {ranks[0]: _walked(run, ranks[0], rank_rows(run, PATH_STEPS, ranks[0]), native=True)}
    paths: dict[int, Path] = {}
    for r in ranks:
        try:
            paths[r] = _walked(run, r, rank_rows(run, PATH_STEPS, r), native=True)
        except Exception:  # noqa: BLE001 - path_of walks this rank again on its own and reports the failure
            continue
    ids = {r: distinct(p.event_id[p.event_id >= 0]) for r, p in paths.items() if len(p)}
    if not ids:
        return paths
    everyone = np.concatenate(list(ids.values()))
    if len(everyone) > 1 and not bool(np.all(everyone[1:] > everyone[:-1])):  # ranks share event ids: each reads its own
        return paths
    t = _Info.table(run, everyone)
    got = t.column("event_id").to_numpy()
    tops = t.column("top_op_id").drop_null().to_numpy()
    op_args = dict(run.sql(_OP_ARGS_SQL, [sorted(set(tops.tolist()))]).fetchall()) if len(tops) else {}
    for r, want in ids.items():
        lo, hi = np.searchsorted(got, want[0], "left"), np.searchsorted(got, want[-1], "right")
        info = _Info(None, paths[r], t.slice(lo, hi - lo))
        paths[r]._derived["per_event"] = (info, _PerEvent(info, paths[r]))
        mine = info.top_op[info.top_op >= 0].tolist()
        paths[r]._derived["op_args"] = {k: op_args[k] for k in mine if k in op_args}
    return paths


PATHS = RankQuery("critical_paths", "", "", read=_paths_of_batch)
"""Each rank's critical path (`Path`), walked for a batch of ranks at once (`_paths_of_batch`)."""
RANK_QUERIES = (PATH_STEPS, *_INDEX_QUERIES, PATHS, PATH_WINDOW)
"""The critical path's per-rank queries, which the engine runs once per batch of ranks (rank_rows.py)."""


def _taken(run: Run, rank: int) -> Path | None:
    """The rank's path as the engine prepared it for its batch (taken: the batch's copy is freed), if so."""
    got = (getattr(run, "prepared", None) or {}).get(PATHS.name)
    return None if got is None else got.pop(int(rank), None)


def _key(run: Run, rank: int) -> tuple:
    return (str(run.path), run.manifest.get("created"), int(rank))


def computed_paths(run: Run) -> dict[int, Path]:
    """The paths of `run`'s ranks this process has computed and still holds (path_of's cache), by
    rank: what another process reading the same run may take (`adopt_paths`; a pickled Path leaves
    what was derived from it behind) instead of walking them again."""
    me = _key(run, 0)[:2]
    return {k[2]: p for k, p in list(_CACHE.items()) if k[:2] == me and len(k) == 3}  # steps' paths (not a window_path)


def adopt_paths(run: Run, paths: dict[int, Path]) -> None:
    """Ranks' paths another process computed for the same run (`computed_paths`) held as this
    process's own: path_of gives them without walking."""
    for rank, path in paths.items():
        _keep(_key(run, rank), path)


_AHEAD: dict[tuple, tuple[threading.Thread, list]] = {}
"""Paths being computed ahead (`path_ahead`), by path_of's key: the thread, and its outcome once done."""


def path_ahead(run: Run, rank: int) -> None:
    """Begin `path_of(run, rank)` on a thread of its own, for a caller that will ask for it after other
    work: the walk's index is read and built (numpy and Python, mostly one core) while that work's
    queries run. `run`: a Run of its own (its own cursor), not used by anyone else meanwhile. The one
    who asks next takes the outcome (path_of), or it is let go (`settle_ahead`)."""
    key = _key(run, rank)
    with _CACHE_LOCK:
        if key in _CACHE or key in _AHEAD:
            return
        outcome: list = []

        def work() -> None:
            try:
                with without_pandas():  # (on this thread too: pyarrow's first conversion would import it)
                    outcome.append(_computed(run, rank))
            except BaseException as e:  # noqa: BLE001 - path_of computes it again where it is asked, and raises there
                outcome.append(e)

        thread = threading.Thread(target=work, name="nx-critical-path", daemon=True)
        _AHEAD[key] = (thread, outcome)
    thread.start()


def settle_ahead(run: Run, rank: int) -> None:
    """Before the connection `run` (path_ahead's) reads from is closed: a path begun ahead for (run,
    rank) that nobody took is stopped (its query interrupted) and let go."""
    with _CACHE_LOCK:
        ahead = _AHEAD.pop(_key(run, rank), None)
    if ahead is not None:
        run.con.interrupt()
        ahead[0].join()


def path_of(run: Run, rank: int) -> Path:
    """The critical path of every profiler step of a rank, as columns. Computed once per run and
    rank per process (or taken from `path_ahead`)."""
    key = _key(run, rank)
    with _CACHE_LOCK:
        got = _CACHE.pop(key, None)
        if got is not None:  # used: the newest again
            _CACHE[key] = got
            return got
        ahead = _AHEAD.pop(key, None)
    if ahead is not None:
        ahead[0].join()
        if ahead[1] and isinstance(ahead[1][0], Path):
            _keep(key, ahead[1][0])
            return ahead[1][0]
    path = _computed(run, rank)
    _keep(key, path)
    return path


def _computed(run: Run, rank: int) -> Path:
    path = _taken(run, rank)
    if path is None:
        path = _walked(run, rank, rank_rows(run, PATH_STEPS, rank), native=True)
    return path


def _native_walks(index: RankIndex, steps: list, causes: dict):
    """Each step's segments (ts, ns, event, category, cause) in time order, walked by the C++ walk
    (_path_native), or None when it is not available; device causes are added to `causes` in the
    order the walks first charge them, as the Python walk adds them."""
    from . import _path_native

    got = _path_native.walk(index, [(int(ts), int(ts) + int(dur), index.track_of.get((pid, tid)), *at) for _s, ts, dur, _e, pid, tid, *at in steps])
    if got is None:
        return None
    seg, off = got
    raw = seg[:, 4]
    device = np.flatnonzero(raw < 0)
    if len(device):
        values, first = np.unique(raw[device], return_index=True)
        lut = {}
        for v in values[np.argsort(first, kind="stable")].tolist():
            text = (LAUNCH_GAP if v == -1 else _STREAM_GAP if v == -2
                    else f"waiting for stream {-10 - v}")
            lut[v] = causes.setdefault(text, len(causes))
        raw[device] = np.array([lut[v] for v in values.tolist()], dtype=np.int64)[np.searchsorted(values, raw[device])]
    out = []
    for k in range(len(steps)):
        part = seg[off[k]:off[k + 1]]
        out.append(_merged(part[:, 0], part[:, 1], part[:, 2], part[:, 3].astype(np.int8), part[:, 4].astype(np.int32)))
    return out


def _walked(run: Run, rank: int, steps: list, native: bool) -> Path:
    """The critical path of the steps (rows of `steps`: step, ts, dur, event id, pid, tid[, the time the
    walk looks for device work still running at: `window_of`]) of a rank, walked by the C++ walk when
    `native` and it is available, else by the Python walk (the reference)."""
    path = _empty_path(rank)
    if steps:
        index = RankIndex(run, rank)
        w = _Walker(index)
        parts = []
        covers = _covers_of(w, index)
        work = _device_work_cover(index)
        walked = _native_walks(index, steps, w.causes) if native else None
        for k, (step, ts, dur, _eid, pid, tid, *at) in enumerate(steps):
            if walked is not None:
                ts_, ns, ev, cat, cause = walked[k]
                walked[k] = None
            else:
                ts_, ns, ev, cat, cause = _step_rows(w, *w.walk(int(ts), int(ts) + int(dur), index.track_of.get((pid, tid)), *at))
            ts_, ns, ev, cat, cause = _unseen_queues(w, index, work, _not_idle(index, covers, (ts_, ns, ev, cat, cause)))
            has = ev >= 0  # rows -> event ids and statements, step by step (the index goes before the columns are joined)
            ev_id = np.where(has, index.ids[np.where(has, ev, 0)], -1) if index.n else np.full(len(ev), -1, dtype=np.int64)
            frame = np.where(has, index.frame[np.where(has, ev, 0)], NONE) if index.n else np.full(len(ev), NONE, dtype=np.int64)
            parts.append((int(step), (ts_, ns, ev_id, cat, cause.astype(np.int16), frame)))
        causes = w.cause_texts()
        del w, index  # the walk's memory, before the path's columns are joined
        n = sum(len(c[0]) for _, c in parts)

        def joined(k):
            out = np.concatenate([c[k] for _, c in parts])
            for _, c in parts:
                c[k] = None
            return out
        parts = [(s, list(c)) for s, c in parts]
        sizes = [len(c[0]) for _, c in parts]
        path = Path(np.broadcast_to(np.int32(rank), (n,)), np.repeat([s for s, _ in parts], sizes).astype(np.int64),
                    np.concatenate([np.arange(k, dtype=np.int32) for k in sizes]), joined(0), joined(1), joined(2),
                    joined(3), joined(4), joined(5), causes)
    return path


def window_of(run: Run, rank: int) -> list[tuple]:
    """The window a rank with no profiler steps is walked over, as a `_walked` steps row: its span
    (metrics.span, the rank's analysed window), from the host thread that made the most runtime
    calls (the one that launched the device work), starting on the device work that ends the window
    (running just before its end: the host ran ahead, and the span ends with that work) or else on
    the host. [] when the rank has steps, no runtime call or no device work: a CPU-only rank is
    host-bound by definition, one whose device events were lost would read host-bound wrongly."""
    if rank_rows(run, PATH_STEPS, rank):
        return []
    got = rank_rows(run, PATH_WINDOW, rank)
    if not got or got[0][1] <= got[0][0]:
        return []
    lo, hi, pid, tid = got[0]
    return [(WINDOW_STEP, int(lo), int(hi) - int(lo), None, pid, tid, int(hi) - 1)]


def window_path(run: Run, rank: int) -> Path:
    """The critical path of a rank with no profiler steps over its analysed window (`window_of`),
    as columns whose `step` is WINDOW_STEP; empty when the rank has steps (`path_of` has them) or
    `window_of` gives no window. Computed once per run and rank per process. Only `bound` reads it:
    the rules' findings are per step."""
    key = (*_key(run, rank), "window")
    with _CACHE_LOCK:
        got = _CACHE.get(key)
    if got is None:
        got = _walked(run, rank, window_of(run, rank), native=True)
        _keep(key, got)
    return got


def rank_path(run: Run, rank: int) -> list[dict]:
    """The critical path of every profiler step of a rank: one dict per charged segment (the
    columns PATH_COLUMNS), in time order per step, built once per run and rank per process
    (`path_of` gives the same as columns, without a dict per row)."""
    path = path_of(run, rank)
    rows = path._derived.get("rows")
    if rows is None:
        rows = path._derived["rows"] = path.rows()
    return rows


def path_table(run: Run):
    """Every rank's critical path as one Arrow table (analysis/critical_path.parquet)."""
    import pyarrow as pa

    tables = [path_of(run, rank).table() for (rank,) in run.sql("SELECT DISTINCT rank FROM events ORDER BY 1").fetchall()]
    return pa.concat_tables(tables) if tables else _SCHEMA().empty_table()


def with_collective_waits(run: Run, table):
    """The path table with each collective's wait for the last rank made its own segment.

    On a rank that arrived at a collective before the last participant (analyzers/ranks.py: its
    wait = the last arrival minus its own, clocks aligned, at most the kernel's duration), the first `wait` ns of the collective's
    kernel are spent waiting for that rank. Where the path charges that kernel, the charged part
    within [kernel start, kernel start + wait) becomes a segment of its own with cause "waiting for
    rank R to arrive" (category unchanged: communication), the rest keeps its cause. Charged ns per
    step do not change. Needs every rank in `run` (the whole job); single-rank runs are returned as
    they are."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from . import ranks as xr

    if table.num_rows == 0 or len(run.sql("SELECT DISTINCT rank FROM events LIMIT 2").fetchall()) < 2:
        return table
    waits = arrow_of(run, "SELECT event_id, ts_ns, wait_ns::BIGINT, last_rank FROM a WHERE on_device AND pos > 1 AND wait_ns > 0",
                     [], {"a": xr.arrivals(run)})
    if not waits.num_rows:
        return table
    wait_of = {int(e): (int(ts), int(ts) + int(w), int(last)) for e, ts, w, last in zip(*(c.to_pylist() for c in waits.columns))}
    ids = np.asarray(table.column("event_id").fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
    touched = np.flatnonzero(np.isin(ids, np.fromiter(wait_of, dtype=np.int64)))
    if not len(touched):
        return table
    rows = table.take(pa.array(touched)).to_pylist()
    extra = []
    for r in rows:
        k_ts, wait_end, last = wait_of[r["event_id"]]
        lo, hi = r["ts_ns"], r["ts_ns"] + r["charged_ns"]
        w_lo, w_hi = max(lo, k_ts), min(hi, wait_end)
        if w_hi <= w_lo:
            extra.append(r)
            continue
        for a, b, cause in ((lo, w_lo, r["cause"]), (w_lo, w_hi, f"waiting for rank {last} to arrive"), (w_hi, hi, r["cause"])):
            if b > a:
                extra.append({**r, "ts_ns": a, "charged_ns": b - a, "cause": cause})
    keep = np.ones(table.num_rows, dtype=bool)
    keep[touched] = False
    out = pa.concat_tables([table.filter(pa.array(keep)), pa.Table.from_pylist(extra, schema=table.schema)])
    out = out.sort_by([("rank", "ascending"), ("step", "ascending"), ("ts_ns", "ascending")])
    # seq: the order of the segments within each (rank, step), 0 = earliest
    key = np.asarray(pc.add(pc.multiply(pc.cast(out.column("rank"), pa.int64()), 1 << 40),
                            pc.cast(out.column("step"), pa.int64())).to_numpy(zero_copy_only=False))
    new = np.ones(len(key), dtype=bool)
    new[1:] = key[1:] != key[:-1]
    starts = np.flatnonzero(new)
    seq = np.arange(len(key)) - np.repeat(starts, np.diff(np.append(starts, len(key))))
    return out.set_column(out.schema.get_field_index("seq"), "seq", pa.array(seq, pa.int32()))


ON_DEVICE = ("device_compute", "communication", "memcpy", "idle")
"""Categories whose item is the device event itself (idle: the device event that waited)."""

HOST_CATEGORIES = ("host_compute", "launch_overhead", "input_pipeline")


def _cat_codes(names) -> np.ndarray:
    return np.array([CATEGORIES.index(c) for c in names], dtype=np.int8)


def _sums(codes: np.ndarray, values: np.ndarray, size: int) -> np.ndarray:
    """Exact int64 sums of values per code (0..size-1)."""
    if not len(values) or int(values.sum()) < 2**53:  # float partial sums of integers are exact below 2^53
        return np.rint(np.bincount(codes, weights=values, minlength=size)).astype(np.int64)
    out = np.zeros(size, dtype=np.int64)
    np.add.at(out, codes, values)
    return out


def _step_codes(step: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct steps sorted, code of each row); a path's rows come step by step."""
    if len(step) and bool(np.all(step[1:] >= step[:-1])):
        new = np.ones(len(step), dtype=bool)
        new[1:] = step[1:] != step[:-1]
        return step[new], np.cumsum(new) - 1
    u, _, code = factorize(step)
    return u, code


_INFO_SQL = (f"SELECT e.event_id, e.name, {charged_top_op('e', 'o')} AS op, e.module_path, e.top_op_id, e.kind FROM events e "
             "SEMI JOIN _path_ids i ON e.event_id = i.id LEFT JOIN events o ON o.event_id = e.top_op_id ORDER BY 1")
"""The names `_Info.table` reads of a path's events (`_path_ids`: a table of their ids), as one query."""


class _Info:
    """Names of a path's events, read once: per event id (sorted), codes into `strs` (0: None) of
    its name and of its top-level operator's name, its module path, its top-level operator and its kind."""

    @staticmethod
    def table(run: Run, ids: np.ndarray):
        """The rows of the events `ids` (sorted, distinct): id, name, the name of the top-level
        operator it is charged to (vocab.charged_top_op: a graph replay's, its operator at capture),
        module path and top-level operator, ordered by id: `_INFO_SQL`'s rows. The names come
        dictionary-encoded, `name` and `op` over one dictionary: a path's events have a few hundred
        distinct names, and sorting and looking up codes moves no text (copying the names of 400k
        events three times cost 0.2-0.8 s, mostly fresh pages)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        # what `_INFO_SQL` gives, without its self-join (most of its time): the events' own rows, then
        # the names of the top-level operators that are not among them, looked up by id
        t = arrow_of(run, "SELECT e.event_id, e.name, e.module_path, e.top_op_id, e.capture_top_op, e.kind FROM events e "
                          "SEMI JOIN _path_ids i ON e.event_id = i.id", [], {"_path_ids": pa.table({"id": ids})})
        ev = t.column("event_id").to_numpy()
        order = np.argsort(ev, kind="stable")
        ev = ev[order]
        top = t.column("top_op_id").fill_null(-1).to_numpy()[order]
        tops = distinct(top[top >= 0])
        at = np.minimum(np.searchsorted(ev, tops), max(len(ev) - 1, 0))
        missing = tops[(ev[at] != tops)] if len(ev) else tops
        more = arrow_of(run, "SELECT e.event_id, e.name FROM events e SEMI JOIN _top_ids i ON e.event_id = i.id ORDER BY 1", [],
                        {"_top_ids": pa.table({"id": missing})}) if len(missing) else None
        more_ids = more.column("event_id").to_numpy() if more is not None else np.zeros(0, dtype=np.int64)
        # one dictionary: the events' distinct names, the missing operators' names, the operators at capture
        own = pc.dictionary_encode(t.column("name").combine_chunks())
        capture = t.column("capture_top_op").combine_chunks()
        captured = np.flatnonzero(capture.is_valid().to_numpy(zero_copy_only=False)[order])
        pieces = [own.dictionary, (more.column("name").combine_chunks() if more is not None else pa.array([], pa.string())),
                  capture.take(pa.array(order[captured])) if len(captured) else pa.array([], pa.string())]
        every = pc.dictionary_encode(pa.concat_arrays([x.cast(pa.string()) for x in pieces]))
        code = every.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        n_own, n_more = len(pieces[0]), len(pieces[1])
        remap = np.append(code[:n_own], -1)  # an own code -> the dictionary's; -1 (null) -> -1
        name = remap[own.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)[order]]
        known = np.concatenate([ev, more_ids])
        known_code = np.concatenate([name, code[n_own:n_own + n_more]])
        korder = np.argsort(known, kind="stable")
        pos = np.minimum(np.searchsorted(known, top, sorter=korder), max(len(known) - 1, 0))
        row = korder[pos] if len(known) else pos
        found = (top >= 0) & (known[row] == top) if len(known) else np.zeros(len(top), dtype=bool)
        op = np.where(found, known_code[row] if len(known) else -1, -1)
        op[captured] = code[n_own + n_more:]

        def coded(c: np.ndarray):
            return pa.DictionaryArray.from_arrays(pa.array(c, type=pa.int32(), mask=c < 0), every.dictionary)

        return pa.table({"event_id": pa.array(ev), "name": coded(name), "op": coded(op),
                         "module_path": pc.dictionary_encode(t.column("module_path").combine_chunks()).take(pa.array(order)),
                         "top_op_id": pa.array(top, mask=top < 0),
                         "kind": pc.dictionary_encode(t.column("kind").combine_chunks()).take(pa.array(order))})

    def __init__(self, run: Run | None, path: Path, t=None):
        """`t`: the rows of `table(run, path's event ids)`, already read (else read here)."""
        if t is None:
            t = self.table(run, distinct(path.event_id[path.event_id >= 0]))
        n = t.num_rows
        self.ids = t.column("event_id").to_numpy()
        name, op = (t.column(c).combine_chunks() for c in ("name", "op"))
        # codes into `strs` by first appearance in the names, then the operators' names (0: None)
        both = np.concatenate([a.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64) for a in (name, op)])
        seen, first = np.unique(both[both >= 0], return_index=True)
        ranked = seen[np.argsort(first, kind="stable")]
        lut = np.zeros(len(name.dictionary) + 1, dtype=np.int64)  # the dictionary's code + 1 -> the code in strs
        lut[ranked + 1] = np.arange(1, len(ranked) + 1)
        codes = lut[both + 1]
        self.strs: list[str | None] = [None] + name.dictionary.take(ranked).to_pylist()
        self.name, self.op = codes[:n], codes[n:]
        self.module_path = t.column("module_path")
        self.top_op = t.column("top_op_id").fill_null(-1).to_numpy(zero_copy_only=False) if n else np.zeros(0, dtype=np.int64)
        self.kind = t.column("kind").combine_chunks()  # dictionary-encoded (schema.KINDS)

    def of_kinds(self, rows: np.ndarray, kinds) -> np.ndarray:
        """Whether the event of each row (of this table; -1: none) is of one of `kinds`."""
        if not len(self.ids):
            return np.zeros(len(rows), dtype=bool)
        codes = np.flatnonzero(np.isin(np.asarray(self.kind.dictionary.to_pylist(), dtype=object), list(kinds)))
        mine = self.kind.indices.fill_null(-1).to_numpy(zero_copy_only=False)
        return (rows >= 0) & np.isin(mine[np.maximum(rows, 0)], codes)

    def rows(self, event_id: np.ndarray) -> np.ndarray:
        """The row of each event id in this table (-1: none)."""
        if not len(self.ids):
            return np.full(len(event_id), -1, dtype=np.int64)
        at = np.searchsorted(self.ids, event_id)
        np.minimum(at, len(self.ids) - 1, out=at)
        at[(event_id < 0) | (self.ids[at] != event_id)] = -1
        return at


class _PerEvent:
    """A path's rows summed per (event, category, cause): far fewer than rows when steps overlap
    or an event is charged in pieces. `key` maps each row to its entry."""

    def __init__(self, info: _Info, path: Path):
        nc = len(path.causes)
        cc = path.category.astype(np.int32) * nc + path.cause
        present = np.flatnonzero(np.bincount(cc, minlength=len(CATEGORIES) * nc))
        lut = np.zeros(len(CATEGORIES) * nc, dtype=np.int64)
        lut[present] = np.arange(len(present))
        key = info.rows(path.event_id)
        key += 1
        key *= len(present)
        key += lut[cc]
        del cc
        size = (len(info.ids) + 1) * len(present)
        used = np.flatnonzero(np.bincount(key, minlength=size))
        small = np.int32 if max(len(used), len(key)) < 2**31 else np.int64
        dense = np.full(size, -1, dtype=small)
        dense[used] = np.arange(len(used), dtype=small)
        self.key = dense[key]  # row -> entry
        del key, dense
        n = len(used)
        self.charged = _sums(self.key, path.ns, n)
        first = np.full(n, len(self.key), dtype=np.int64)
        np.minimum.at(first, self.key, np.arange(len(self.key), dtype=small))
        self.first = first  # the entry's first row
        self.at = used // len(present) - 1  # row of the info table, -1: no event
        combo = present[used % len(present)]
        self.category, self.cause = combo // nc, combo % nc
        self.frame = path.frame[first]
        self.event_id = np.where(self.at >= 0, info.ids[np.maximum(self.at, 0)] if len(info.ids) else -1, -1)
        self.name = np.where(self.at >= 0, info.name[np.maximum(self.at, 0)] if len(info.ids) else 0, 0)
        self.op = np.where(self.at >= 0, info.op[np.maximum(self.at, 0)] if len(info.ids) else 0, 0)


def derived(run: Run, path: Path) -> tuple[_Info, _PerEvent]:
    """The path's events' names and kinds (`_Info`) and its rows summed per event (`_PerEvent`), made once per path."""
    got = path._derived.get("per_event")
    if got is None:
        info = _Info(run, path)
        got = path._derived["per_event"] = (info, _PerEvent(info, path))
    return got


DENSE_CELLS = 50_000_000
"""Items x steps up to which `path_items` counts each item's steps and sums its ns per step in a table
of every (item, step) cell (0.1 s for 2.2M path rows) instead of sorting the rows' cells (0.3 s)."""


def path_items(run: Run, path, by_step: bool = False) -> list[dict]:
    """The path's charged ns per item, heaviest first. An item is (category, item, op, frame_id,
    cause): for device work and idle gaps `item` is the device event's name, for host work the
    top-level operator around the charged event (else the event's own name; None for untraced
    host time); `op` is the top-level operator (device events: of their launch), `frame_id` the
    statement. Each item also has `charged_ns`, `events` (distinct events), `steps`, `sample_id`,
    `module_path` and `op_args` (the operator's Kineto args). `path`: a `Path` or rows as dicts.
    With `by_step`, each item also has `step_ns`: its charged ns per step ({step: ns})."""
    if not isinstance(path, Path):
        # a rank's whole path as `rank_path` gave it: its columns; else (e.g. one step's rows) columns of the rows
        path = next((p for p in list(_CACHE.values()) if p._derived.get("rows") is path), None) or Path.from_rows(list(path))
    if not len(path):
        return []
    info, pe = derived(run, path)
    on_device = np.isin(pe.category, _cat_codes(ON_DEVICE))
    item = np.where(on_device, pe.name, np.where(pe.op != 0, pe.op, pe.name))
    first_e, group = factorize_rows(pe.category, item, pe.op, pe.frame, pe.cause)  # entries -> items
    g = len(first_e)
    charged = _sums(group, pe.charged, g)
    has = pe.at >= 0
    events = np.bincount(group[has], minlength=g)  # an entry is one event: entries of an item are distinct events
    big = np.iinfo(np.int64).max
    sample = np.full(g, big, dtype=np.int64)
    np.minimum.at(sample, group[has], pe.event_id[has])
    lead_row = np.full(g, big, dtype=np.int64)  # each item's first row, and the entry it is in
    np.minimum.at(lead_row, group, pe.first)
    lead = np.flatnonzero(pe.first == lead_row[group])
    lead = lead[np.argsort(group[lead], kind="stable")]
    steps_u, step = _step_codes(path.step)
    row_group = group[pe.key]
    dense = g * len(steps_u) <= DENSE_CELLS  # an item x step table fits: cells by index, no sort of the rows
    flat = row_group.astype(np.int64) * len(steps_u) + step if by_step or not dense else None  # each row's (item, step) cell
    if dense:
        seen = np.zeros((g, len(steps_u)), dtype=bool)
        seen[row_group, step] = True
        steps = seen.sum(axis=1)
    else:
        steps = np.bincount(distinct(flat) // len(steps_u), minlength=g)
    step_ns: dict[int, dict[int, int]] = {}
    if by_step:
        if dense:  # the cells the rows are in, and each one's sum (added in row order, as the sort's inverse was)
            cells = np.flatnonzero(seen.ravel())
            sums = np.bincount(flat, weights=path.ns, minlength=g * len(steps_u))[cells]
        else:
            cells, inverse = np.unique(flat, return_inverse=True)
            sums = np.bincount(inverse, weights=path.ns, minlength=len(cells))
        del flat
        for cell, ns in zip(cells.tolist(), sums.tolist()):
            step_ns.setdefault(cell // len(steps_u), {})[int(steps_u[cell % len(steps_u)])] = int(round(ns))
    tops = {int(info.top_op[pe.at[e]]) for e in lead.tolist() if pe.at[e] >= 0 and info.top_op[pe.at[e]] >= 0}
    known = path._derived.get("op_args")  # read with the batch's paths (`_paths_of_batch`): every top-level operator's
    if known is not None:
        args = {t: known[t] for t in tops if t in known}
    else:
        args = dict(run.sql(_OP_ARGS_SQL, [sorted(tops)]).fetchall()) if tops else {}
    out = []
    ks = np.argsort(lead_row, kind="stable")  # items in the order the path first meets them
    es = lead[ks]
    at = pe.at[es]
    # each item's columns as Python lists, read once (an Arrow value read one at a time costs microseconds)
    module_paths = info.module_path.take(np.maximum(at, 0)).to_pylist() if len(at) and len(info.module_path) else [None] * len(at)
    top_of = np.where(at >= 0, np.asarray(info.top_op)[np.maximum(at, 0)] if len(info.top_op) else -1, -1)
    strs, causes = info.strs, path.causes
    charged_, events_, steps_, sample_ = charged.tolist(), events.tolist(), steps.tolist(), sample.tolist()
    for k, a, top, cat, it, op, fr, cause, mp in zip(ks.tolist(), at.tolist(), top_of.tolist(), pe.category[es].tolist(),
                                                     item[es].tolist(), pe.op[es].tolist(), pe.frame[es].tolist(), pe.cause[es].tolist(),
                                                     module_paths):
        out.append({"category": CATEGORIES[cat], "item": strs[it], "op": strs[op],
                    "frame_id": None if fr == NONE else fr, "cause": causes[cause], "charged_ns": int(charged_[k]),
                    "module_path": mp if a >= 0 else None, "op_args": args.get(top) if top >= 0 else None,
                    "events": int(events_[k]), "steps": int(steps_[k]), "sample_id": sample_[k] if sample_[k] != big else None,
                    **({"step_ns": step_ns.get(k, {})} if by_step else {})})
    out.sort(key=lambda g: (-g["charged_ns"], g["item"] is None, g["item"] or "", g["category"]))
    return out


def saving_bound(run: Run, rank: int, item: dict) -> int:
    """What removing an item (a `path_items(..., by_step=True)` entry) from the critical path could
    save, summed over its steps: the model docs/METRICS.md "Saving bound" states. An item may stand
    for a class of items of one category: then `item["item"]` is the tuple of their names and
    `step_ns` their summed charged ns per step. In a step of
    duration D where the item is charged x ns, the step cannot get shorter than the work of the
    other resource: with H the host time on the step's path (host_compute, launch_overhead,
    input_pipeline) and B the busy time of the busiest device in the step (metrics.step_device_busy),
    the step lasts at least L = max(H, B') without a device item, where B' is B without the device
    events of the item's name; max(B, H - x) without a host item; max(B, H) without an idle gap.
    The saving is min(x, D - L), at least 0. An upper bound: host work that runs off the path now
    (ahead of the device) is not in L."""
    path = path_of(run, rank)
    step_ns = item.get("step_ns") or {}
    if not len(path) or not step_ns:
        return 0
    cache = path._derived.setdefault("saving", {})
    if "steps" not in cache:
        steps_u, code = _step_codes(path.step)
        dur = np.bincount(code, weights=path.ns, minlength=len(steps_u))
        host = np.isin(path.category, _cat_codes(HOST_CATEGORIES))
        h = np.bincount(code[host], weights=path.ns[host], minlength=len(steps_u))
        cache["steps"] = {int(st): (int(round(d)), int(round(x))) for st, d, x in zip(steps_u.tolist(), dur.tolist(), h.tolist())}

    def busiest(without: str | None) -> dict[int, int]:
        if without not in cache:
            work = path._derived.get("device_work")
            if work is None:  # the device work read once, merged per name left out (many items: one query)
                work = path._derived["device_work"] = device_work_intervals(run, rank)
            busy: dict[int, int] = {}
            for r in step_device_busy(run, rank, without_name=without, work=work):
                busy[r["step"]] = max(busy.get(r["step"], 0), r["busy_ns"])
            cache[without] = busy
        return cache[without]

    category = item["category"]
    on_device = category not in HOST_CATEGORIES and category != "idle"
    busy = busiest(None)
    names = tuple(sorted(set(item["item"]))) if isinstance(item["item"], (tuple, list)) else item["item"]
    other = busiest(names) if on_device else busy
    total = 0
    for step, x in step_ns.items():
        if step not in cache["steps"] or x <= 0:
            continue
        d, h = cache["steps"][step]
        b = busy.get(step, 0)
        floor = max(h, other.get(step, 0)) if on_device else max(b, h - x) if category in HOST_CATEGORIES else max(b, h)
        total += max(0, min(x, d - floor))
    return total


def on_path_ns(run: Run, rank: int, *, top_op: str | None = None, kernel: str | None = None) -> int | None:
    """What an item costs on the rank's critical paths, summed over its steps: the host time
    charged inside a top-level operator named `top_op`, or the device time charged to kernels
    named `kernel` (their run on the path: the device's idle the path charges to a kernel, waiting
    for it, is not; h100 Qwen1.5 chat: sm90_xmma_gemm 11.92 ms with 0.41 ms of idle before its
    calls, 11.51 ms of it running, what its class's finding counts). None when the rank has no steps (so no path): callers fall back to durations.
    The sums per name are computed once per rank."""
    path = path_of(run, rank)
    if not len(path):
        return None
    sums = path._derived.get("on_path")
    if sums is None:
        info, pe = derived(run, path)
        host = np.isin(pe.category, _cat_codes(HOST_CATEGORIES))
        device = np.isin(pe.category, _cat_codes(GROUPS["device"]))
        sums = []
        for sel, code in ((device & (pe.name != 0), pe.name), (host & (pe.op != 0), pe.op)):
            total = _sums(code[sel], pe.charged[sel], len(info.strs))
            sums.append({info.strs[c]: int(total[c]) for c in np.flatnonzero(total).tolist()})
        path._derived["on_path"] = sums
    if kernel is not None:
        return sums[0].get(kernel, 0)
    return sums[1].get(top_op, 0)


def host_union(run: Run, rank: int) -> np.ndarray:
    """Where the rank's steps' critical paths run on the host (HOST_CATEGORIES: CPU operators and
    Python, launches, data loading), as a union ((n, 2), sorted); empty without steps. Made once per path."""
    path = path_of(run, rank)
    got = path._derived.get("host_union")
    if got is None:
        keep = np.isin(path.category, _cat_codes(HOST_CATEGORIES)) if len(path) else np.zeros(0, dtype=bool)
        got = path._derived["host_union"] = union_array(path.ts[keep], path.ts[keep] + path.ns[keep])
    return got


def on_host_path_ns(run: Run, rank: int, intervals_sql: str) -> int | None:
    """The part of the intervals `intervals_sql` selects (start_ns, end_ns; merged first) in which the
    rank's steps' critical paths run on the host (`host_union`): what host work there costs the steps
    (tiny-ops' and launch-overhead's `on_path_ns`). None where the walk fails on odd data (the
    critical-path rule says why): the callers keep the host time."""
    try:
        host = host_union(run, rank)
    except Exception:  # noqa: BLE001 - no path to measure against
        return None
    got = run.sql(intervals_sql).fetchnumpy()
    return covered_within(union_array(np.asarray(got["start_ns"], dtype=np.int64), np.asarray(got["end_ns"], dtype=np.int64)), host)


NOT_LAUNCHES_WORDS = "runtime calls other than launches"
"""The verdict's words for `launch_overhead` when less than half of its time is launches
(vocab.is_launch_call_name): the time went to other runtime calls (a device context created on
first use, allocator calls, a sync's own time), and the words name the largest of them."""


def _verdict(ns_by_cat: dict[str, int], total: int) -> dict:
    shares = {c: (ns_by_cat.get(c, 0) / total if total else 0.0) for c in CATEGORIES}
    groups = {g: sum(shares[c] for c in cats) for g, cats in GROUPS.items()}
    group = max(GROUPS, key=lambda g: (groups[g], -list(GROUPS).index(g)))
    top = max(GROUPS[group], key=lambda c: (shares[c], -CATEGORIES.index(c)))
    words = f"{GROUP_LABELS[group]} ({100 * groups[group]:.0f}%): {CATEGORY_WORDS[top]}"
    return {"bound": group, "top_category": top, "words": words,
            "shares": {c: round(v, 4) for c, v in shares.items()}, "group_shares": {g: round(v, 4) for g, v in groups.items()}}


def _name_the_calls(verdict: dict, calls: dict[str, int]) -> None:
    """A verdict (with its `ns` and `dur_ns`) whose top category is `launch_overhead`, less than half
    of it launches: its words say which runtime calls it was (NOT_LAUNCHES_WORDS, the largest and
    the next if it rounds to 1% or more, with their shares of the time), not "launch overhead".
    `calls`: the ns charged to each runtime call by name."""
    others = sorted(((ns, n) for n, ns in calls.items() if not is_launch_call_name(n)), key=lambda x: (-x[0], x[1]))
    total = verdict["dur_ns"]
    if 2 * sum(ns for ns, _ in others) <= verdict["ns"]["launch_overhead"] or not total:
        return
    named = ", ".join(f"{n} {100 * ns / total:.0f}%" for i, (ns, n) in enumerate(others[:2]) if i == 0 or 200 * ns >= total)
    _reword(verdict, f"{NOT_LAUNCHES_WORDS}: {named}")


ONE_OFF_LAUNCH_WORDS = "a kernel's first launch, loading its code"
"""The verdict's words for `launch_overhead` when one launch call holds at least half of it over
more than one call (`one_off_launch`): the first launch of a kernel loads its code (CUDA's lazy
module loading, ROCm's code objects), a one-off, not the cost of every launch."""


def _launch_rows(run: Run, path: Path) -> np.ndarray:
    """The path's launch rows (`launch_overhead`, a sync call's left out: that is a wait, host_sync's),
    as row numbers, made once per path."""
    got = path._derived.get("launch_rows")
    if got is None:
        info, pe = derived(run, path)
        sync = np.fromiter((is_sync_call_name(n) for n in info.strs), dtype=bool, count=len(info.strs))
        got = path._derived["launch_rows"] = np.flatnonzero((path.category == _LAUNCH_OVERHEAD) & ~sync[pe.name[pe.key]])
    return got


def _reword(verdict: dict, words: str) -> None:
    """A verdict's words with what bounds it said as `words` (its group and share kept:
    'host-bound (99%): …')."""
    verdict["words"] = f"{group_words(verdict['words'])}: {words}"


def group_words(words: str) -> str:
    """The group and share a verdict's words begin with ('idle-bound (64%)')."""
    return words.split(": ")[0]


def one_off_launch(run: Run, path: Path, rows: np.ndarray | None = None) -> tuple[int | None, int, int]:
    """A kernel's first launch loading its code, as the bound's words and the critical-path rule's
    launch finding name it: over the path's launch rows (`_launch_rows`) or those of them numbered in
    `rows` (a step's), the call the path charges most. (its event id, its charged ns, the rows'
    charged ns); the event id is None unless that call holds at least half of the rows' time, they
    hold more than one call, and it is a kernel's launch (vocab.is_kernel_launch_call_name: a graph's
    replay or a copy call is paid every time)."""
    return _one_off(run, path, rows)[:3]


def _one_off(run: Run, path: Path, rows: np.ndarray | None) -> tuple[int | None, int, int, str | None]:
    """`one_off_launch` and the name of the call it looked at."""
    rows = _launch_rows(run, path) if rows is None else rows
    if not len(rows):
        return None, 0, 0, None
    ids, first, inverse = np.unique(path.event_id[rows], return_index=True, return_inverse=True)
    per = np.bincount(inverse, weights=path.ns[rows])
    total, i = int(path.ns[rows].sum()), int(np.argmax(per))
    longest = int(per[i])
    info, pe = derived(run, path)
    name = info.strs[int(pe.name[pe.key[rows[first[i]]]])]
    one = int(ids[i]) >= 0 and len(ids) > 1 and 2 * longest >= total and is_kernel_launch_call_name(name)  # (not a graph's replay, not a copy)
    return (int(ids[i]) if one else None), longest, total, name


def _name_the_one_off(run: Run, path: Path, verdict: dict, rows: np.ndarray | None) -> None:
    """A verdict whose top category is `launch_overhead`, mostly launches (its words not changed by
    `_name_the_calls`), one call of which holds at least half (`one_off_launch` over `rows`, its launch
    rows; None: the whole path's): its words say so (ONE_OFF_LAUNCH_WORDS, the call's name and its
    share of the time), not "launch overhead", which reads as the cost of many launches
    (rocm_mi250_train: one hipLaunchKernel of 6.54 ms in 9.34 ms)."""
    event_id, longest, _, name = _one_off(run, path, rows)
    if event_id is None or not verdict["dur_ns"] or NOT_LAUNCHES_WORDS in verdict["words"]:
        return
    _reword(verdict, f"{ONE_OFF_LAUNCH_WORDS}: {name or '?'} {100 * longest / verdict['dur_ns']:.0f}%")


def unseen_queue_ns(run: Run, rank: int, spans: list[tuple[int, int]]) -> int:
    """The idle the rank's critical path (its steps' `path_of`, else its window's `window_path`)
    charges to UNSEEN_QUEUE inside `spans` ([start, end) ns; disjoint): how much of those spans the
    device sat with work launched and ready, behind work the trace does not show."""
    path = path_of(run, rank)
    if not len(path):
        path = window_path(run, rank)
    if not len(path) or UNSEEN_QUEUE not in path.causes:
        return 0
    sel = path.cause == path.causes.index(UNSEEN_QUEUE)
    ts, end = path.ts[sel], path.ts[sel] + path.ns[sel]
    return int(sum(np.clip(np.minimum(end, b) - np.maximum(ts, a), 0, None).sum() for a, b in spans))


UNSEEN_QUEUE_WORDS = "device work queued behind work the trace does not show"
"""The verdict's words for `idle` when at least half of it is UNSEEN_QUEUE: the device was not seen
idle for want of work (its work had been launched) but for something the trace does not hold
(mi300x_sglang_qwen3_decode: 463.25 ms of 473.83 behind a stream's wait on an event of the batch
launched before the trace began)."""


def _name_the_unseen(path: Path, steps: list[dict], step: np.ndarray, overall: dict) -> None:
    """Each verdict (the steps', `step` each row's step code, and `overall`) whose top category is
    `idle`, at least half of it UNSEEN_QUEUE: its words say UNSEEN_QUEUE_WORDS, not "device idle"."""
    if UNSEEN_QUEUE not in path.causes:
        return
    idle = np.flatnonzero(path.category == _IDLE)
    unseen = path.cause[idle] == path.causes.index(UNSEEN_QUEUE)
    n = max(len(steps), 1)
    codes = step[idle] if len(steps) else np.zeros(len(idle), dtype=np.int64)
    all_ = np.bincount(codes, weights=path.ns[idle], minlength=n)
    seen = np.bincount(codes[unseen], weights=path.ns[idle][unseen], minlength=n)
    for v, a, u in [*zip(steps, all_.tolist(), seen.tolist()), (overall, float(all_.sum()), float(seen.sum()))]:
        if v["top_category"] == "idle" and u and 2 * u >= a:
            _reword(v, UNSEEN_QUEUE_WORDS)


def _runtime_calls(run: Run, path: Path, step: np.ndarray, n_steps: int) -> list[dict[str, int]]:
    """Per step (`step`: each row's step code, of `n_steps`) the ns charged to each runtime call by
    name (`launch_overhead` rows), for the verdict's words."""
    rows = np.flatnonzero(path.category == CATEGORIES.index("launch_overhead"))
    out: list[dict[str, int]] = [{} for _ in range(n_steps)]
    if not len(rows):
        return out
    info, pe = derived(run, path)
    cells, inverse = np.unique(step[rows].astype(np.int64) * len(info.strs) + pe.name[pe.key[rows]], return_inverse=True)
    for cell, ns in zip(cells.tolist(), np.bincount(inverse, weights=path.ns[rows]).tolist()):
        name = info.strs[cell % len(info.strs)] or "?"
        out[cell // len(info.strs)][name] = out[cell // len(info.strs)].get(name, 0) + int(ns)
    return out


WINDOW_HEAVIEST = 3
"""How many of a window path's heaviest items its verdict names (`overall["heaviest"]`)."""


def heaviest_items(run: Run, path: Path, k: int = WINDOW_HEAVIEST) -> list[dict]:
    """The `k` items the path charges most, an item's entries of `path_items` summed by category and
    name (an idle gap's by its cause too): {category, item (None: host time outside every traced
    call), cause (an idle gap's, else None), ns}. A rank without profiler steps has no critical-path
    finding to name what its window's path ran; its verdict does (b200_vllm_eager: aten::linear,
    vllm::moe_forward and vllm::all_reduce on a host-bound decode)."""
    merged: dict[tuple, int] = {}
    for it in path_items(run, path):
        key = (it["category"], it["item"], it["cause"] if it["category"] == "idle" else None)
        merged[key] = merged.get(key, 0) + int(it["charged_ns"])
    top = sorted(merged.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1] or "", kv[0][2] or ""))[:k]
    return [{"category": c, "item": i, "cause": cause, "ns": ns} for (c, i, cause), ns in top]


def heaviest_words(items: list[dict], name=lambda s: s) -> str:
    """`heaviest_items` in words, each with its charged time: a kernel or operator by `name` (an
    operator's runtime calls as `OP (runtime calls)`), host time in no traced call as such, an idle gap
    as `idle before K (cause)`."""
    def label(it: dict) -> str:
        if it["category"] == "idle":
            return f"idle before {name(it['item'] or '?')}" + (f" ({it['cause']})" if it["cause"] else "")
        if it["item"] is None:
            return UNTRACED
        return name(it["item"]) + (" (runtime calls)" if it["category"] == "launch_overhead" else "")
    return ", ".join(f"{label(it)} {duration(it['ns'])}" for it in items)


def unrecorded_by_step(path: Path, last_end: int | None) -> dict[int, int]:
    """Host time the path charges to no event after `last_end` (the end of the last event the rank's
    trace holds, its steps' and the profiler's own ranges left out: metrics.LAST_RECORDED), per step
    ({step: ns}, steps with some only): a step's range that runs on after everything recorded, where
    nothing was observed (not Python between calls)."""
    mask = (path.category == CATEGORIES.index("host_compute")) & (path.event_id < 0)
    if last_end is None or not mask.any():
        return {}
    ts, end = path.ts[mask], path.ts[mask] + path.ns[mask]
    after = np.maximum(end - np.maximum(ts, last_end), 0)
    steps, inverse = np.unique(path.step[mask], return_inverse=True)
    per = np.bincount(inverse, weights=after, minlength=len(steps))
    return {int(st): int(round(ns)) for st, ns in zip(steps.tolist(), per.tolist()) if ns > 0}


def bound(run: Run, rank: int) -> dict:
    """What bounds the steps of a rank: per step and over all steps, the charged ns per category,
    their shares of step time and a verdict in words ("device-bound (94%): device compute").
    A rank with no profiler steps: the same over its analysed window (`window_path`), `steps` empty
    and `overall["over"]` "window" (else "steps"); `overall` None when it has no window either (no
    device work). Data the walk cannot read gives `overall: None` and the reason in `error`, not a
    failed report."""
    try:
        path, over = path_of(run, rank), "steps"
        if not len(path):  # no profiler steps: the path over the rank's span, if it has one
            path, over = window_path(run, rank), "window"
    except Exception as e:  # noqa: BLE001 - the summary of a run must not fail on one odd trace
        return {"steps": [], "overall": None, "error": f"{type(e).__name__}: {e}"}
    if not len(path):
        return {"steps": [], "overall": None}
    step_nos, step = _step_codes(path.step)
    ns = _sums(step * len(CATEGORIES) + path.category, path.ns, len(step_nos) * len(CATEGORIES)).reshape(len(step_nos), len(CATEGORIES))
    # (a window ends with the rank's last event: nothing after it to be unrecorded)
    unrecorded_at = unrecorded_by_step(path, (rank_rows(run, LAST_RECORDED, rank) or [(None,)])[0][0]) if over == "steps" else {}
    steps = []
    for i, s in enumerate(step_nos.tolist() if over == "steps" else []):
        d = {c: int(v) for c, v in zip(CATEGORIES, ns[i].tolist())}
        total = sum(d.values())
        steps.append({"step": s, "dur_ns": total, "ns": d, **_verdict(d, total), "unrecorded_ns": unrecorded_at.get(s, 0)})
    total_by_cat = {c: int(v) for c, v in zip(CATEGORIES, ns.sum(axis=0).tolist())}
    total = sum(total_by_cat.values())
    unrecorded = sum(unrecorded_at.values())
    overall = {"dur_ns": total, "ns": total_by_cat, **_verdict(total_by_cat, total), "unrecorded_ns": unrecorded, "over": over}
    if over == "window":  # (no critical-path finding names a window's items: the verdict does)
        overall["heaviest"] = heaviest_items(run, path)
    if any(v["top_category"] == "launch_overhead" for v in (*steps, overall)):  # which runtime calls it was
        calls = _runtime_calls(run, path, step, len(step_nos))
        launches = _launch_rows(run, path)
        for i, (v, per) in enumerate(zip(steps, calls)):
            if v["top_category"] == "launch_overhead":
                _name_the_calls(v, per)
                _name_the_one_off(run, path, v, launches[step[launches] == i])
        if overall["top_category"] == "launch_overhead":
            every: dict[str, int] = {}
            for per in calls:
                for name, v in per.items():
                    every[name] = every.get(name, 0) + v
            _name_the_calls(overall, every)
            _name_the_one_off(run, path, overall, None)
    _name_the_unseen(path, steps, step, overall)
    if total and unrecorded * 2 >= total:  # most of the steps' time is after everything the trace holds: no bound to read
        overall["words"] = (f"not recorded ({100 * unrecorded / total:.0f}%): the steps run on {duration(unrecorded)} after "
                            "the last event the trace holds")
    return {"steps": steps, "overall": overall}
