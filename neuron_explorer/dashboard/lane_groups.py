"""Lanes grouped per rank and process (host threads of one pid; streams of one device), and
collapsed groups: every lane of a collapsed group is drawn on one row, labelled with the group.

Works on a timeline view as timeline.timeline_arrays returns it (lanes with y0 and rows; slices
and buckets with y rows): `collapse` moves rows, nothing is queried again, so a collapse costs
no server query. `original_rows` maps a row range of the collapsed layout back to the lanes it
stands for (what an area selection on a collapsed group means).

Must not: query the run, or decide which lanes exist (runs.py does).
"""

from __future__ import annotations

import numpy as np


def group_key(lane: dict) -> str:
    """The group of a lane (a lane dict of timeline_arrays): "r<rank> GPU <device>" for device
    streams, "r<rank> pid <pid>" for host threads (the process's text name when it has no pid)."""
    if lane["is_device"]:
        return f"r{lane['rank']} " + (lane.get("name") or f"GPU {lane['a']}")
    return f"r{lane['rank']} pid {lane['a']}" if lane["a"] is not None else f"r{lane['rank']} {lane['text'] or '(no thread)'}"


def groups(lanes: list[dict]) -> list[dict]:
    """The groups of a layout in order: key, the number of lanes, and their first y row."""
    out: dict[str, dict] = {}
    for ln in lanes:
        g = out.setdefault(group_key(ln), {"key": group_key(ln), "lanes": 0, "y0": ln["y0"]})
        g["lanes"] += 1
    return list(out.values())


def _row_map(lanes: list[dict], collapsed: set[str]) -> tuple[np.ndarray, list[dict]]:
    """(new row of every old row, the new lanes)."""
    n_rows = max((ln["y0"] + ln["rows"] + 1 for ln in lanes), default=1)
    new_of = np.zeros(n_rows, np.int64)
    out: list[dict] = []
    y = 0
    seen: dict[str, dict] = {}
    for ln in lanes:
        key = group_key(ln)
        if key in collapsed:
            if key not in seen:
                seen[key] = {**ln, "label": f"▸ {key} (collapsed)", "rows": 1, "y0": y, "group": key, "collapsed": True}
                out.append(seen[key])
                y += 2
            new_of[ln["y0"]:ln["y0"] + ln["rows"] + 1] = seen[key]["y0"]
            continue
        out.append({**ln, "y0": y, "group": key, "collapsed": False})
        new_of[ln["y0"]:ln["y0"] + ln["rows"] + 1] = y + np.minimum(np.arange(ln["rows"] + 1), ln["rows"] - 1)
        y += ln["rows"] + 1
    return new_of, out


def collapse(tl: dict, collapsed) -> tuple[dict, callable]:
    """The view with the lanes of the `collapsed` groups drawn on one row each, and a function
    that moves any other y (highlights, flows, the selected event) the same way."""
    collapsed = {str(c) for c in (collapsed or [])}
    if not collapsed:
        return tl, lambda y: y
    new_of, lanes = _row_map(tl["lanes"], collapsed)

    def move(y):
        if y is None:
            return None
        return int(new_of[min(max(int(y), 0), len(new_of) - 1)])

    def move_all(ys: np.ndarray) -> np.ndarray:
        return new_of[np.clip(ys.astype(np.int64), 0, len(new_of) - 1)].astype(np.int32) if len(ys) else ys

    out = {**tl, "lanes": lanes, "slices": {**tl["slices"], "y": move_all(tl["slices"]["y"])},
           "buckets": {**tl["buckets"], "y": move_all(np.asarray(tl["buckets"]["y"]))}}
    return out, move


def original_rows(lanes: list[dict], collapsed, y0: float, y1: float) -> tuple[float, float] | None:
    """The rows of the uncollapsed layout that rows y0..y1 of the collapsed one stand for (a
    collapsed group stands for all its lanes); None when they hold no lane."""
    collapsed = {str(c) for c in (collapsed or [])}
    if not collapsed:
        return y0, y1
    _, new = _row_map(lanes, collapsed)
    lo, hi = min(y0, y1), max(y0, y1)
    picked = [ln for ln in new if ln["y0"] - 0.5 <= hi and ln["y0"] + ln["rows"] - 0.5 >= lo]
    if not picked:
        return None
    old = [ln for ln in lanes if group_key(ln) in {p["group"] for p in picked if p["collapsed"]}
           or any(not p["collapsed"] and p["index"] == ln["index"] for p in picked)]
    return min(ln["y0"] for ln in old), max(ln["y0"] + ln["rows"] - 1 for ln in old)
