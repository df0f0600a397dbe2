"""The flame view: where one step's time went, aggregated by call path, drawn as an icicle.

The call path of a piece of work is: user source line → module → operator → kernel.

- device (the default where the step ran device work): every kernel, copy and set of the step,
  at its own duration. Its source line is the statement that launched it (`source_frame_id`:
  backward work counts on its forward statement, as the source-lines table counts it); its module
  is the `nn.Module` around it or around its operator; its operator is the top-level operator
  around its launch.
- cpu: every top-level operator of the step, at its CPU duration, with no kernel level.

Work with no recorded line, module or operator sits under "(no line)", "(no module)",
"(no operator)", so that the levels always add up: each box is the sum of the boxes under it and
the root is all the step's work of that metric. `call_paths` is the one aggregation query;
`icicle` turns its rows into the tree; ui/flame.py draws it (a plotly icicle). Data only, served
at /api/flame.

Must not: draw (no Dash, no plotly), compute any other figure, or read source files.
"""

from __future__ import annotations

from ...vocab import device_work, line_key_sql, top_op
from ..runs import OpenRun, QueryError, RunSet, parse_int
from ..timeline import TIME_LIMIT_NS, parse_rank

LEVELS = ("line", "module", "operator", "kernel")
NONE_LABELS = {"line": "(no line)", "module": "(no module)", "operator": "(no operator)", "kernel": "(no kernel)"}
METRICS = ("device", "cpu")


def call_paths(r: OpenRun, rank: int | None, where: str, params: list, metric: str) -> list[dict]:
    """Rows (line, module, operator, kernel, count, ns) of the work picked by `where` (a condition
    on the work's events `e`), summed per call path. The one aggregation of the flame view."""
    if metric == "device":
        work = f"{device_work('e')} AND e.device IS NOT NULL"
        kernel = "e.name"
        op_join = "LEFT JOIN events o ON o.event_id = e.op_id LEFT JOIN events t ON t.event_id = e.top_op_id"
        module = "coalesce(e.module_path, o.module_path, t.module_path)"
        operator = "t.name"
    else:
        work = top_op("e")
        kernel = "NULL"
        op_join = ""
        module = "e.module_path"
        operator = "e.name"
    rank_where = "" if rank is None else f" AND e.rank = {int(rank)}"
    return r.records(
        f"""SELECT {line_key_sql('f')} AS line, {module} AS module,
                   {operator} AS operator, {kernel} AS kernel, count(*) AS count, sum(e.dur_ns)::BIGINT AS ns
            FROM events e {op_join} LEFT JOIN frames f ON f.frame_id = e.source_frame_id
            WHERE {work}{rank_where} AND ({where})
            GROUP BY ALL ORDER BY ns DESC""", params)


def icicle(rows: list[dict], levels: tuple[str, ...] = LEVELS, root: str = "step") -> dict:
    """The tree of `call_paths` rows: plotly icicle arrays (ids, labels, parents, values, counts),
    each node's value the sum of its children's (branchvalues "total")."""
    nodes: dict[str, dict] = {root: {"label": root, "parent": "", "ns": 0, "count": 0}}
    for x in rows:
        parent = root
        nodes[root]["ns"] += x["ns"]
        nodes[root]["count"] += x["count"]
        for lvl in levels:
            label = x.get(lvl) or NONE_LABELS[lvl]
            node_id = f"{parent}\x1f{label}"
            n = nodes.setdefault(node_id, {"label": label, "parent": parent, "ns": 0, "count": 0, "level": lvl})
            n["ns"] += x["ns"]
            n["count"] += x["count"]
            parent = node_id
    ids = list(nodes)
    return {"ids": ids, "labels": [nodes[i]["label"] for i in ids], "parents": [nodes[i]["parent"] for i in ids],
            "values": [nodes[i]["ns"] for i in ids], "counts": [nodes[i]["count"] for i in ids],
            "levels": [nodes[i].get("level", "root") for i in ids]}


def flame(rs: RunSet, run=0, rank=None, step=None, t0=None, t1=None, metric=None) -> dict:
    """The flame view of one profiler step (`step`, on `rank` or every rank; default: the middle
    step of the run), or of the window [t0, t1) (ns on the run clock) when both are given.
    `metric`: device (kernel time; the default where device work ran) or cpu (top-level operator
    time). Returns the icicle arrays (values in ns), total_ns, and what was picked."""
    r = rs.get(run)
    rank = parse_rank(r, rank)
    if metric in (None, ""):
        _, got = r.query(f"SELECT count(*) FROM (SELECT 1 FROM events WHERE {device_work()} LIMIT 1)")
        metric = "device" if got[0][0] else "cpu"
    if metric not in METRICS:
        raise QueryError(f"metric must be one of {', '.join(METRICS)}, got {str(metric)[:40]!r}")
    steps = sorted({s["step"] for s in r.steps() if rank is None or s["rank"] == rank})
    if t0 not in (None, "") and t1 not in (None, ""):
        a = parse_int(t0, "t0", None, -TIME_LIMIT_NS, TIME_LIMIT_NS)
        b = parse_int(t1, "t1", None, -TIME_LIMIT_NS, TIME_LIMIT_NS)
        if b <= a:
            raise QueryError("t1 must be after t0")
        where, params, picked = "e.ts_ns >= ? AND e.ts_ns < ?", [a, b], {"t0": a, "t1": b, "step": None}
        root = f"{(b - a) / 1e6:,.3f} ms window"
    else:
        if not steps:
            raise QueryError("no profiler steps in this run: pick a time range instead (t0, t1)")
        chosen = steps[(len(steps) - 1) // 2] if step in (None, "") else parse_int(step, "step")
        if chosen not in steps:
            raise QueryError(f"no step {chosen} in this run")
        where, params, picked = "e.step = ?", [chosen], {"t0": None, "t1": None, "step": chosen}
        root = f"step {chosen}"
    levels = LEVELS if metric == "device" else LEVELS[:3]
    rows = call_paths(r, rank, where, params, metric)
    tree = icicle(rows, levels, root)
    return {"run": r.index, "rank": rank, "metric": metric, **picked, "steps": steps, "levels": list(levels),
            "total_ns": tree["values"][0], "paths": len(rows), **tree}
