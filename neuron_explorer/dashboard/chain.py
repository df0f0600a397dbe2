"""The event chain: one event and the path from the user's source line down to the device.

user source line → top-level operator → operator → runtime launch → kernels, with the launch →
kernel flows to draw. For a runtime call the kernels are those it launched (launch_id); for an
operator, the kernels launched by runtime calls inside it (op_id, else top_op_id); a kernel is its
own. `brief` is the short form of an event that every view placing events on the timeline uses
(name, times, its timeline row `y`).

Must not: draw, or read source files itself (views/source.py does).
"""

from __future__ import annotations

import json

from ..schema import DEVICE_KINDS
from ..vocab import COMPILED_FROM_ARG
from .runs import OpenRun, QueryError, RunSet, parse_int, placed_cols
from .views.source import frame_row, source

KERNELS_PER_EVENT = 50
"""Most kernels listed for one event's chain."""


def ms_from_start(r: OpenRun, ts_ns) -> float | None:
    """ms from the run's first event (None stays None)."""
    return None if ts_ns is None else round((ts_ns - r.span()[0]) / 1e6, 6)


EVENT_COLS = ("event_id, rank, kind, category, name, ts_ns, dur_ns, pid, tid, device, stream, depth, parent_id, op_id, "
               "top_op_id, launch_id, correlation, external_id, step, module_path, frame_id, args, graph, capture_op, capture_top_op")


def event_row(r: OpenRun, event_id: int) -> dict | None:
    recs = r.records(f"SELECT {EVENT_COLS}, {placed_cols(r)} FROM events WHERE event_id = ?", [event_id])
    return recs[0] if recs else None


def brief(r: OpenRun, e: dict | None, role: str) -> dict | None:
    if e is None:
        return None
    return {"role": role, "event_id": e["event_id"], "name": e["name"], "kind": e["kind"], "ts_ns": e["ts_ns"],
            "dur_ns": e["dur_ns"], "start_ms": ms_from_start(r, e["ts_ns"]), "y": y_of(r, e)}


def y_of(r: OpenRun, e: dict) -> int | None:
    """The timeline row of an event in the all-ranks view (for drawing flows and highlights); `e`
    has the columns of runs.placed_cols."""
    for ln in r.lanes(None):
        if (ln.rank, ln.is_device, ln.a, ln.b, ln.text) == (e["rank"], e["is_device"], e["lane_a"], e["lane_b"], e["lane_text"]):
            return ln.y_of(e["lane_row"])
    return None


def compiled_statements(r: OpenRun, args: dict) -> list[dict]:
    """The user statements a torch.compile kernel was generated from (its COMPILED_FROM_ARG), each
    with its share of the kernel's time (docs/METRICS.md), largest share first; [] for other events."""
    out = []
    for x in args.get(COMPILED_FROM_ARG) or []:
        if not isinstance(x, dict) or not isinstance(x.get("frame_id"), int):
            continue
        f = frame_row(r, x["frame_id"])
        if f is not None:
            out.append({"frame_id": x["frame_id"], "file": f["file"], "line": f["line"], "function": f["function"],
                        "share": x.get("share")})
    return sorted(out, key=lambda x: -(x["share"] or 0))


def event(rs: RunSet, run=0, event_id=None) -> dict:
    """One event and its chain: user source line → top operator → operator → launch → kernels.

    For a runtime call the kernels are those it launched (launch_id); for an operator, the kernels
    launched by runtime calls inside it (op_id, else top_op_id). `flows` are the launch → kernel
    links to draw. `source` is the code around the user's line when the file is readable.
    """
    r = rs.get(run)
    eid = parse_int(event_id, "event_id")
    e = event_row(r, eid)
    if e is None:
        raise QueryError(f"no event {eid} in run {r.index}")
    try:
        args = json.loads(e["args"]) if e["args"] else {}
    except ValueError:
        args = {"raw": e["args"]}
    get = lambda i: event_row(r, i) if i is not None else None  # noqa: E731
    op = get(e["op_id"]) if e["op_id"] != eid else e
    top = get(e["top_op_id"]) if e["top_op_id"] != eid else e
    launch = get(e["launch_id"]) if e["launch_id"] is not None else None
    if e["kind"] == "runtime":
        where, params = "launch_id = ?", [eid]
    elif e["kind"] == "cpu_op":
        where, params = ("op_id = ? AND launch_id IS NOT NULL", [eid]) if e["op_id"] == eid else ("false", [])
        if e["top_op_id"] == eid:
            where, params = "top_op_id = ? AND launch_id IS NOT NULL", [eid]
    else:
        where, params = "false", []
    kernels = r.records(f"SELECT {EVENT_COLS}, {placed_cols(r)} FROM events WHERE {where} AND device IS NOT NULL "
                        f"ORDER BY ts_ns LIMIT {KERNELS_PER_EVENT + 1}", params)
    truncated = len(kernels) > KERNELS_PER_EVENT
    kernels = kernels[:KERNELS_PER_EVENT]
    if e["kind"] in DEVICE_KINDS and e["device"] is not None:
        kernels = [e]
    # launches of the listed kernels (one query), for the chain and the flow arrows
    launch_ids = sorted({k["launch_id"] for k in kernels if k["launch_id"] is not None})
    launches = {x["event_id"]: x for x in r.records(
        f"SELECT {EVENT_COLS}, {placed_cols(r)} FROM events WHERE event_id IN ({', '.join(map(str, launch_ids)) or 'NULL'})")}
    flows = []
    for k in kernels:
        src = launches.get(k["launch_id"])
        if src is not None:
            flows.append({"from": brief(r, src, "launch"), "to": brief(r, k, "kernel")})
    frame = source(rs, run=r.index, frame_id=e["frame_id"]) if e["frame_id"] is not None else None
    chain = []
    if frame is not None:
        chain.append({"role": "source", "name": f"{frame['file']}:{frame['line']} {frame['function']}",
                      "frame_id": e["frame_id"]})
    for role, x in (("top operator", top), ("operator", op), ("launch", launch if launch is not None else
                                                              (e if e["kind"] == "runtime" else None))):
        if x is not None and (not chain or chain[-1].get("event_id") != x["event_id"]):
            chain.append(brief(r, x, role))
    if launch is None and e["kind"] == "cpu_op" and launches:
        chain += [brief(r, x, "launch") for x in list(launches.values())[:5]]
    chain += [brief(r, k, "kernel") for k in kernels[:10]]
    return {
        "run": r.index, "event_id": eid, "name": e["name"], "kind": e["kind"], "category": e["category"],
        "rank": e["rank"], "pid": e["pid"], "tid": e["tid"], "device": e["device"], "stream": e["stream"],
        "ts_ns": e["ts_ns"], "dur_ns": e["dur_ns"], "start_ms": ms_from_start(r, e["ts_ns"]), "end_ms": ms_from_start(r, e["ts_ns"] + e["dur_ns"]),
        "step": e["step"], "module_path": e["module_path"], "args": args, "y": y_of(r, e),
        "operator": brief(r, op, "operator"), "top_operator": brief(r, top, "top operator"),
        "launch": brief(r, launch, "launch"), "kernels": [brief(r, k, "kernel") for k in kernels],
        "chain": chain, "flows": flows, "source": frame, "truncated": truncated,
        "compiled_from": compiled_statements(r, args), "graph": bool(e["graph"]),
        "capture_op": e["capture_op"], "capture_top_op": e["capture_top_op"],
    }
