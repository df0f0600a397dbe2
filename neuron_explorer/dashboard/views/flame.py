"""The flame view: a flame graph of the call stack, over one profiler step, the steady steps or a window.

A box is a call path: thread → the slices around the work on its track, outermost first (profiler
step, Python frames, `nn.Module` frames, annotations, operators, runtime calls; any depth, by
`events.parent_id`) → for device time, the kernel, copy or set at the end of its launch's path.

- device (the default where the run has device work): every kernel, copy and set picked, at its
  own duration, on the path of the runtime call that launched it (`launch_id`); work with no
  launch sits under "(no launch)".
- cpu: every host slice picked, at its self time (`self_ns`), on its own path: a box is then the
  CPU time of its slice and of everything inside it (of the slices picked).

Picked: the work of one step (`events.step`), of the steady steps (analyzers.metrics.steady_steps,
the selection the step statistics use), or that starts in a window. The path of a picked slice
reads its ancestors wherever they start, so a frame that began before the step still heads it.
The tool's own frames (vocab.TOOL_FRAME_PATTERN: the CLI that ran the script, runpy) are left out
of the paths unless asked for; their self time counts on the box around them.

Every box is its own time plus the sum of the boxes above it, and the root is all the time picked
(`total_ns`). `call_paths` is the one aggregation query, `tree` turns its rows into boxes,
`search` marks the boxes whose name matches; ui/flame.py draws it. Data only, served at /api/flame.

Must not: draw (no Dash, no plotly), compute any other figure, or read source files.
"""

from __future__ import annotations

import re

from ...analyzers.metrics import steady_steps
from ...vocab import device_work, tool_frame
from ..runs import OpenRun, QueryError, RunSet, parse_int
from ..timeline import TIME_LIMIT_NS, parse_rank

METRICS = ("device", "cpu")
STEADY = "steady"
"""The `step` value that picks every steady step."""
NO_LAUNCH = "(no launch)"
MAX_BOXES = 20_000
"""At most this many boxes are sent (the heaviest paths first); the rest is said, not drawn."""


def call_paths(r: OpenRun, rank: int | None, where: str, params: list, metric: str, tool_frames: bool = False,
               merge_steps: bool = False) -> list[dict]:
    """Rows (path: list of names, kinds: their event kinds, count, ns) of the work picked by
    `where` (a condition on the work's events `e`), summed per call path. The one aggregation of
    the flame view. With `merge_steps`, every profiler step's slice is one box ('ProfilerStep#3'
    and 'ProfilerStep#4' are both 'ProfilerStep#*'), so that the steps' paths add up."""
    rank_where = "" if rank is None else f" AND e.rank = {int(rank)}"
    host = "e.device IS NULL AND e.phase = 'X'"
    if metric == "device":
        work = f"{device_work('e')} AND e.device IS NOT NULL"
        span_sql = (f"SELECT min(l.ts_ns), max(l.ts_ns + l.dur_ns) FROM events e JOIN events l ON l.event_id = e.launch_id "
                    f"WHERE {work}{rank_where} AND ({where})")
    else:
        work = host
        span_sql = f"SELECT min(e.ts_ns), max(e.ts_ns + e.dur_ns) FROM events e WHERE {work}{rank_where} AND ({where})"
    _, got = r.query(span_sql, params)
    lo, hi = got[0] if got else (None, None)
    hidden = "FALSE" if tool_frames else tool_frame("c")
    thread = ("'rank ' || c.rank || ' · ' || " if rank is None and len(r.run.ranks) > 1 else "") + \
        "'thread ' || coalesce(c.tid_text, CAST(c.tid AS VARCHAR))"
    # the host slices that may lie on a picked path: those overlapping the picked work's span
    cand = (f"SELECT event_id, parent_id, name, kind, rank, tid, tid_text, self_ns, depth FROM events e "
            f"WHERE {host}{rank_where} AND e.ts_ns < ? AND e.ts_ns + e.dur_ns > ?") if lo is not None else \
        "SELECT * FROM (SELECT 0::BIGINT event_id, 0::BIGINT parent_id, '' name, '' kind, 0 rank, 0::BIGINT tid, '' tid_text, " \
        "0::BIGINT self_ns, 0 depth) WHERE FALSE"
    cand_params = [hi, lo] if lo is not None else []
    name = "CASE WHEN c.kind = 'step' THEN regexp_replace(c.name, '#\\d+$', '#*') ELSE c.name END" if merge_steps else "c.name"
    paths = f"""
        WITH RECURSIVE cand AS MATERIALIZED ({cand}),
        stack(event_id, path, kinds) AS (
            SELECT c.event_id,
                   CASE WHEN {hidden} THEN [{thread}] ELSE [{thread}, {name}] END,
                   CASE WHEN {hidden} THEN ['thread'] ELSE ['thread', c.kind] END
            FROM cand c WHERE c.parent_id IS NULL OR c.parent_id NOT IN (SELECT event_id FROM cand)
            UNION ALL
            SELECT c.event_id,
                   CASE WHEN {hidden} THEN s.path ELSE list_append(s.path, {name}) END,
                   CASE WHEN {hidden} THEN s.kinds ELSE list_append(s.kinds, c.kind) END
            FROM cand c JOIN stack s ON c.parent_id = s.event_id)"""
    if metric == "device":
        sql = f"""{paths}
            SELECT list_append(coalesce(s.path, ['{NO_LAUNCH}']), e.name) AS path,
                   list_append(coalesce(s.kinds, ['thread']), e.kind) AS kinds, count(*) AS count, sum(e.dur_ns)::BIGINT AS ns
            FROM events e LEFT JOIN stack s ON s.event_id = e.launch_id
            WHERE {work}{rank_where} AND ({where}) GROUP BY 1, 2 ORDER BY ns DESC"""
    else:
        sql = f"""{paths}
            SELECT s.path, s.kinds, count(*) AS count, sum(e.self_ns)::BIGINT AS ns
            FROM events e JOIN stack s ON s.event_id = e.event_id
            WHERE {work}{rank_where} AND ({where}) GROUP BY 1, 2 ORDER BY ns DESC"""
    return r.records(sql, cand_params + params)


def tree(rows: list[dict], root: str) -> dict:
    """The boxes of `call_paths` rows, as plotly icicle arrays (ids, labels, parents, values,
    counts, kinds, depths): each box's value its own time plus its children's (branchvalues
    "total"), its count the pieces of work at or above it."""
    nodes: dict[str, dict] = {root: {"label": root, "parent": "", "ns": 0, "count": 0, "kind": "root", "depth": 0}}
    for x in rows:
        parent = root
        nodes[root]["ns"] += x["ns"]
        nodes[root]["count"] += x["count"]
        for i, (label, kind) in enumerate(zip(x["path"], x["kinds"])):
            node_id = f"{parent}\x1f{label}"
            n = nodes.setdefault(node_id, {"label": label, "parent": parent, "ns": 0, "count": 0, "kind": kind, "depth": i + 1})
            n["ns"] += x["ns"]
            n["count"] += x["count"]
            parent = node_id
    ids = list(nodes)
    return {"ids": ids, "labels": [nodes[i]["label"] for i in ids], "parents": [nodes[i]["parent"] for i in ids],
            "values": [nodes[i]["ns"] for i in ids], "counts": [nodes[i]["count"] for i in ids],
            "kinds": [nodes[i]["kind"] for i in ids], "depths": [nodes[i]["depth"] for i in ids]}


def search(data: dict, text: str | None) -> dict:
    """The boxes whose name matches `text` (a substring, any case; /regex/ for a regular
    expression): `matched` (a flag per box) and `matched_ns`, the time of the matching boxes
    without counting a box inside another matching one twice."""
    if not text or not str(text).strip():
        return {"matched": [False] * len(data["ids"]), "matched_ns": 0, "matched_boxes": 0}
    t = str(text).strip()
    if len(t) > 2 and t.startswith("/") and t.endswith("/"):
        try:
            pat = re.compile(t[1:-1])
        except re.error as e:
            raise QueryError(f"bad regular expression: {e}") from None
        hit = [bool(pat.search(label)) for label in data["labels"]]
    else:
        hit = [t.lower() in label.lower() for label in data["labels"]]
    hit[0] = False  # the root is what was picked, not a frame
    index = {i: k for k, i in enumerate(data["ids"])}
    ns = 0
    for k, h in enumerate(hit):
        if not h:
            continue
        p = data["parents"][k]
        while p and not hit[index[p]]:
            p = data["parents"][index[p]]
        if not p:  # no matching box below it
            ns += data["values"][k]
    return {"matched": hit, "matched_ns": ns, "matched_boxes": sum(hit)}


def flame(rs: RunSet, run=0, rank=None, step=None, t0=None, t1=None, metric=None, tool_frames=False, text=None) -> dict:
    """The flame graph of one profiler step (`step`: a number; "steady": every steady step; default:
    the middle step of the run, or the whole run when it has no steps), on `rank` or every rank,
    or of the window [t0, t1) (ns on the run clock) when both are given. `metric`: device (device work; the default where the run has
    some) or cpu (host slices' self time). `tool_frames`: keep the tool's own frames in the paths.
    `text`: mark the boxes whose name matches (`search`). Returns the boxes (values in ns),
    total_ns, and what was picked."""
    r = rs.get(run)
    rank = parse_rank(r, rank)
    if metric in (None, ""):
        _, got = r.query(f"SELECT count(*) FROM (SELECT 1 FROM events WHERE {device_work()} LIMIT 1)")
        metric = "device" if got[0][0] else "cpu"
    if metric not in METRICS:
        raise QueryError(f"metric must be one of {', '.join(METRICS)}, got {str(metric)[:40]!r}")
    steps = sorted({s["step"] for s in r.steps() if rank is None or s["rank"] == rank})
    picked_steps: list[int] = []
    if t0 not in (None, "") and t1 not in (None, ""):
        a = parse_int(t0, "t0", None, -TIME_LIMIT_NS, TIME_LIMIT_NS)
        b = parse_int(t1, "t1", None, -TIME_LIMIT_NS, TIME_LIMIT_NS)
        if b <= a:
            raise QueryError("t1 must be after t0")
        where, params, picked = "e.ts_ns >= ? AND e.ts_ns < ?", [a, b], {"t0": a, "t1": b, "step": None}
        root = f"{(b - a) / 1e6:,.3f} ms window"
    elif not steps and step in (None, ""):  # a run without profiler steps (an inference server's trace): all of it
        where, params, picked = "TRUE", [], {"t0": None, "t1": None, "step": None}
        root = "the whole run (no profiler steps)"
    else:
        if not steps:
            raise QueryError("no profiler steps in this run: pick a time range instead (t0, t1)")
        if step == STEADY:
            with r.lock:
                picked_steps = [s for s in steady_steps(r.run, rank).used if s in steps]
            if not picked_steps:
                raise QueryError("no steady steps in this run")
            root = f"steady steps ({len(picked_steps)})"
            chosen = STEADY
        else:
            chosen = steps[(len(steps) - 1) // 2] if step in (None, "") else parse_int(step, "step")
            if chosen not in steps:
                raise QueryError(f"no step {chosen} in this run")
            picked_steps = [chosen]
            root = f"step {chosen}"
        where = f"e.step IN ({', '.join('?' * len(picked_steps))})"
        params, picked = list(picked_steps), {"t0": None, "t1": None, "step": chosen}
    rows = call_paths(r, rank, where, params, metric, bool(tool_frames), merge_steps=len(picked_steps) > 1)
    boxes = tree(rows, root)
    cut = len(boxes["ids"]) > MAX_BOXES
    if cut:  # keep the heaviest boxes: a box kept has its parent kept (a parent weighs at least as much)
        order = sorted(range(1, len(boxes["ids"])), key=lambda k: -boxes["values"][k])[:MAX_BOXES - 1]
        keep = sorted([0, *order])
        boxes = {k: [v[i] for i in keep] for k, v in boxes.items()}
    found = search(boxes, text)
    return {"run": r.index, "rank": rank, "metric": metric, **picked, "steps": steps, "picked_steps": picked_steps,
            "tool_frames": bool(tool_frames), "total_ns": boxes["values"][0], "paths": len(rows), "boxes_cut": cut,
            "depth": max(boxes["depths"]), "text": text or "", **found, **boxes}
