"""What bounds each step: a critical path per profiler step of a rank, and the step's bound.

Every nanosecond of a step (its `ProfilerStep#N` range, [ts_ns, ts_ns + dur_ns)) is charged to
exactly one item: a device event (kernel, collective kernel, memcpy, memset), a host event (CPU
operator, Python call, annotation, runtime call), or a device idle gap with its cause. The model
(docs/METRICS.md "Critical path" states it for users) walks backwards from the step's end. It
starts on the device when device work other than a collective is still running at the step's end
(the host ran ahead and the step's work is still queued), else on the host:

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
  The part of the call after that work ended is the call's own overhead.
- On the device, the path charges the event back to its start, then goes to whichever
  predecessor became ready last: the previous event on the same stream (ready at its end), its
  launch (ready at the launch's end, or its start for a blocking call), or, when a `Stream Wait
  Event` record on the stream says it waited for another stream, the last event on that stream
  (ready at its end). Ties prefer the stream, then the launch. The time between that predecessor
  being ready and the event starting is an idle gap with its cause. An event with no recorded
  launch follows its stream only when it started within UNLINKED_GAP_MAX_NS of the previous
  work. With no predecessor the path returns to the host at the event's start.

The walk is deterministic and every move goes strictly back in time, so the charged times of a
step add up to its duration exactly.

Must not: decide what is a problem (rules do), render anything or write files.
"""

from __future__ import annotations

from ..store import Run
from ._path_index import HOST_KINDS, RUNTIME_WAIT_MIN_NS, UNLINKED_GAP_MAX_NS, Ev, RankIndex  # noqa: F401 (the model's thresholds)

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


def category_of(index: RankIndex, e: Ev | None) -> str:
    """A charged event's category: device work by kind (collective kernels are communication,
    memcpy and memset are memcpy); host work in the data-loading pass (or the `enumerate(DataLoader)`
    range itself, which old traces file as an operator) is input_pipeline, runtime
    calls launch_overhead, any other host event (or untraced host time) host_compute."""
    if e is None:
        return "host_compute"
    if e.device is not None:
        if e.kind == "kernel":
            return "communication" if e.id in index.is_comm else "device_compute"
        return "memcpy"
    if e.pass_ == "data" or (e.name or "").startswith("enumerate(DataLoader)"):
        return "input_pipeline"
    return "launch_overhead" if e.kind == "runtime" else "host_compute"


def _walk(index: RankIndex, start: int, end: int, step_track: tuple) -> list[tuple]:
    """Charged segments of one step, latest first: (ts_ns, charged_ns, event, category, cause)."""
    out: list[tuple] = []

    def charge(lo, hi, ev, category, cause=None):
        lo = max(lo, start)
        if hi > lo:
            out.append((lo, hi - lo, ev, category, cause))

    t, state, dev = end, "host", None
    running = index.running_at(end)
    if running is not None:  # the host ran ahead: the step's end waits for the device work still queued
        state, dev = "device", running
    guard = 0
    while t > start:
        guard += 1
        if guard > 10_000_000:
            raise RuntimeError("critical path walk did not finish")
        if state == "host":
            ev, lo = index.host_at(t, step_track, start)
            if ev is not None and ev.kind == "runtime":
                d = index.awaited(ev, t)
                if d is not None and d.end > lo:
                    if d.end < t:
                        charge(d.end, t, ev, "launch_overhead", "the call's own time after the device work it waited for")
                        t = d.end
                    state, dev = "device", d
                    continue
            if ev is not None and ev.kind == "step":
                ev = None  # the step range itself: host time outside every traced call
            charge(lo, t, ev, category_of(index, ev), None if ev is not None else "host time outside every traced call")
            t = max(lo, start)
            continue
        d = dev
        lo = max(d.ts, start)
        charge(lo, t, d, category_of(index, d))
        t = lo
        if t <= start:
            break
        pred = index.predecessor(d)
        if pred is None:
            state = "host"
            continue
        ready, how, p = pred
        if ready < t:
            cause = ("waiting for its launch" if how == "launch" else
                     "gap after the previous work on its stream" if how == "stream" else f"waiting for {how}")
            charge(ready, t, d, "idle", cause)
            t = max(ready, start)
            if t <= start:
                break
        if how == "launch":
            state = "host"
        else:
            state, dev = "device", p
    return out


def _merge(segments: list[tuple]) -> list[tuple]:
    """Adjacent segments (in time order) charged to the same event, category and cause become one."""
    merged: list[list] = []
    for ts, ns, ev, cat, cause in reversed(segments):  # the walk charges latest first
        if merged and merged[-1][2] is ev and merged[-1][3] == cat and merged[-1][4] == cause and merged[-1][0] + merged[-1][1] == ts:
            merged[-1][1] += ns
        else:
            merged.append([ts, ns, ev, cat, cause])
    return [tuple(m) for m in merged]


_CACHE: dict[tuple, list[dict]] = {}


def _load_rows(run: Run, rank: int):
    return run.sql(
        f"""SELECT event_id, kind, name, ts_ns, ts_ns + dur_ns, pid, coalesce(CAST(tid AS VARCHAR), tid_text, ''),
               device, stream, launch_id, pass, source_frame_id, CASE WHEN kind = 'sync' THEN args END
        FROM events WHERE rank = ? AND dur_ns > 0
          AND kind IN ('cpu_op', 'python', 'user_annotation', 'step', 'runtime', 'kernel', 'memcpy', 'memset', 'sync')""",
        [rank]).fetchall()


def rank_path(run: Run, rank: int) -> list[dict]:
    """The critical path of every profiler step of a rank: one dict per charged segment (the
    columns PATH_COLUMNS), in time order per step. Computed once per run and rank per process."""
    key = (str(run.path), run.manifest.get("created"), int(rank))
    if key in _CACHE:
        return _CACHE[key]
    steps = run.sql("SELECT s.step, s.ts_ns, s.dur_ns, s.event_id, e.pid, coalesce(CAST(e.tid AS VARCHAR), e.tid_text, '') "
                    "FROM steps s JOIN events e ON e.event_id = s.event_id WHERE s.rank = ? ORDER BY s.step", [rank]).fetchall()
    out: list[dict] = []
    if steps:
        rows = [(r[0], r[1], r[2], r[3], r[4], (r[5], r[6]), *r[7:]) for r in _load_rows(run, rank)]
        index = RankIndex(rows)
        for step, ts, dur, _eid, pid, tid in steps:
            segs = _merge(_walk(index, int(ts), int(ts) + int(dur), (pid, tid)))
            for seq, (s_ts, ns, ev, cat, cause) in enumerate(segs):
                out.append({"rank": int(rank), "step": int(step), "seq": seq, "ts_ns": int(s_ts), "charged_ns": int(ns),
                            "event_id": ev.id if ev is not None else None, "category": cat, "cause": cause,
                            "source_frame_id": ev.frame if ev is not None else None})
    if len(_CACHE) >= 8:
        _CACHE.clear()
    _CACHE[key] = out
    return out


def path_table(run: Run):
    """Every rank's critical path as one Arrow table (analysis/critical_path.parquet)."""
    import pyarrow as pa

    rows = [r for (rank,) in run.sql("SELECT DISTINCT rank FROM events ORDER BY 1").fetchall() for r in rank_path(run, rank)]
    schema = pa.schema([("rank", pa.int32()), ("step", pa.int64()), ("seq", pa.int32()), ("ts_ns", pa.int64()),
                        ("charged_ns", pa.int64()), ("event_id", pa.int64()), ("category", pa.string()), ("cause", pa.string()),
                        ("source_frame_id", pa.int64())])
    return pa.Table.from_pylist(rows, schema=schema)


ON_DEVICE = ("device_compute", "communication", "memcpy", "idle")
"""Categories whose item is the device event itself (idle: the device event that waited)."""


def path_items(run: Run, path: list[dict]) -> list[dict]:
    """The path's charged ns per item, heaviest first. An item is (category, item, op, frame_id,
    cause): for device work and idle gaps `item` is the device event's name, for host work the
    top-level operator around the charged event (else the event's own name; None for untraced
    host time); `op` is the top-level operator (device events: of their launch), `frame_id` the
    statement. Each item also has `charged_ns`, `events` (distinct events), `steps`, `sample_id`,
    `module_path` and `op_args` (the operator's Kineto args)."""
    ids = sorted({r["event_id"] for r in path if r["event_id"] is not None})
    info = {eid: (name, op, module_path, op_args) for eid, name, op, module_path, op_args in run.sql(
        "SELECT e.event_id, e.name, o.name, e.module_path, o.args FROM events e LEFT JOIN events o ON o.event_id = e.top_op_id "
        "WHERE e.event_id IN (SELECT unnest(?::BIGINT[]))", [ids]).fetchall()} if ids else {}
    groups: dict[tuple, dict] = {}
    for r in path:
        name, op, module_path, op_args = info.get(r["event_id"], (None, None, None, None))
        item = name if r["category"] in ON_DEVICE else (op if op is not None else name)
        key = (r["category"], item, op, r["source_frame_id"], r["cause"])
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"category": key[0], "item": item, "op": op, "frame_id": key[3], "cause": key[4], "charged_ns": 0,
                               "_events": set(), "_steps": set(), "module_path": module_path, "op_args": op_args}
        g["charged_ns"] += r["charged_ns"]
        if r["event_id"] is not None:
            g["_events"].add(r["event_id"])
        g["_steps"].add(r["step"])
    out = []
    for g in groups.values():
        ev, st = g.pop("_events"), g.pop("_steps")
        out.append({**g, "events": len(ev), "steps": len(st), "sample_id": min(ev) if ev else None})
    out.sort(key=lambda g: (-g["charged_ns"], g["item"] is None, g["item"] or "", g["category"]))
    return out


HOST_CATEGORIES = ("host_compute", "launch_overhead", "input_pipeline")


def on_path_ns(run: Run, rank: int, *, top_op: str | None = None, kernel: str | None = None) -> int | None:
    """What an item costs on the rank's critical paths, summed over its steps: the host time
    charged inside a top-level operator named `top_op`, or the device time charged to kernels
    named `kernel`. None when the rank has no steps (so no path): callers fall back to durations."""
    path = rank_path(run, rank)
    if not path:
        return None
    if kernel is not None:
        ids = sorted({r["event_id"] for r in path if r["event_id"] is not None and r["category"] not in HOST_CATEGORIES})
        if not ids:
            return 0
        named = {e for (e,) in run.sql("SELECT event_id FROM events WHERE event_id IN (SELECT unnest(?::BIGINT[])) AND name = ?",
                                       [ids, kernel]).fetchall()}
        return sum(r["charged_ns"] for r in path if r["event_id"] in named and r["category"] not in HOST_CATEGORIES)
    ids = sorted({r["event_id"] for r in path if r["event_id"] is not None and r["category"] in HOST_CATEGORIES})
    if not ids:
        return 0
    inside = {e for (e,) in run.sql("SELECT e.event_id FROM events e JOIN events o ON o.event_id = e.top_op_id "
                                    "WHERE e.event_id IN (SELECT unnest(?::BIGINT[])) AND o.name = ?", [ids, top_op]).fetchall()}
    return sum(r["charged_ns"] for r in path if r["event_id"] in inside and r["category"] in HOST_CATEGORIES)


def _verdict(ns_by_cat: dict[str, int], total: int) -> dict:
    shares = {c: (ns_by_cat.get(c, 0) / total if total else 0.0) for c in CATEGORIES}
    groups = {g: sum(shares[c] for c in cats) for g, cats in GROUPS.items()}
    group = max(GROUPS, key=lambda g: (groups[g], -list(GROUPS).index(g)))
    top = max(GROUPS[group], key=lambda c: (shares[c], -CATEGORIES.index(c)))
    words = f"{GROUP_LABELS[group]} ({100 * groups[group]:.0f}%): {CATEGORY_WORDS[top]}"
    return {"bound": group, "top_category": top, "words": words,
            "shares": {c: round(v, 4) for c, v in shares.items()}, "group_shares": {g: round(v, 4) for g, v in groups.items()}}


def bound(run: Run, rank: int) -> dict:
    """What bounds the steps of a rank: per step and over all steps, the charged ns per category,
    their shares of step time and a verdict in words ("device-bound (94%): device compute").
    Data the walk cannot read gives `overall: None` and the reason in `error`, not a failed report."""
    try:
        path = rank_path(run, rank)
    except Exception as e:  # noqa: BLE001 - the summary of a run must not fail on one odd trace
        return {"steps": [], "overall": None, "error": f"{type(e).__name__}: {e}"}
    per_step: dict[int, dict[str, int]] = {}
    for r in path:
        d = per_step.setdefault(r["step"], {})
        d[r["category"]] = d.get(r["category"], 0) + r["charged_ns"]
    if not per_step:
        return {"steps": [], "overall": None}
    steps = []
    total_by_cat: dict[str, int] = {}
    for step, d in sorted(per_step.items()):
        total = sum(d.values())
        steps.append({"step": step, "dur_ns": total, "ns": {c: d.get(c, 0) for c in CATEGORIES}, **_verdict(d, total)})
        for c, v in d.items():
            total_by_cat[c] = total_by_cat.get(c, 0) + v
    total = sum(total_by_cat.values())
    return {"steps": steps, "overall": {"dur_ns": total, "ns": {c: total_by_cat.get(c, 0) for c in CATEGORIES},
                                        **_verdict(total_by_cat, total)}}
