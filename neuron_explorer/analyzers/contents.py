"""What is inside a finding (`contents` of report.json's findings; docs/METRICS.md "What is inside a finding").

A finding names where it is (an operator, its sample events, a source line); `finding_contents`
returns what runs beneath that: its *roots*, the events the finding is about, grouped by name,
input shapes and dtypes; and its *children*, the operators and runtime calls nested inside the
roots on their thread and the device work those launched, grouped by kind, name, input shapes
and dtypes, the heaviest CONTENTS_TOP of each class (operators, runtime calls, device work) by
summed duration, each with its count. The roots are, the first that applies:

1. the finding names an operator (`location.op`): every host event of that name on the finding's
   rank, and the graph-replayed device work charged to it at capture (vocab.charged_at_capture_to:
   an operator seen only at capture has no host event in the replay), in the finding's steps
   when it names some;
2. else its sample events (`evidence.sample_event_ids`): host events as they are, device events
   replaced by the top-level operator that launched them;
3. else its source line (`location.source`): the top-level operators of that user statement, and
   the graph-replayed device work it launched at capture (vocab.charged_at_capture: a replay
   imported with its capture gives that work the statement it had then);
and of those the outermost (OUTERMOST: an operator inside another chosen one is its child).
The device work chosen at capture is no call of the operator or statement: it is listed with the
children (device work it launched, at capture), and counted apart (`roots.captured`), not in the
roots' calls (mi300x_sglang_qwen3_decode's aten::copy_: 5 calls, not 78 with the 73 replayed
kernels the copies launched at capture).

Input shapes and dtypes are the profiler's (`Input Dims`, `Input type`, recorded with
record_shapes=True): an operator's own; a runtime call's and a device event's, those of the
innermost operator around their launch. Times are sums of `dur_ns`: a child operator's time is
inclusive of the operators inside it (which are listed too), so the rows of one class can add up
to more than the roots' time; device rows are device time, which runs beside the host's.

Computed once here, for report.json; the text report, the dashboard and the agent show it.
Must not: judge (advice from the contents is analyzers/advice.py) or render.
"""

from __future__ import annotations

import json

from ..collectors.kineto_names import INPUT_DIMS_ARG, INPUT_TYPE_ARG
from ..store import Run
from ..vocab import (
    DEVICE_WORK_SQL,
    OPTIMIZER_STEP_RANGE,
    charged_at_capture,
    charged_at_capture_to,
    charged_at_capture_to_sql,
    device_work,
    in_steps,
    sql_literal,
    top_host_call,
)
from .metrics import graph_replays, rank_entry
from .utilisation import args_named_known

CONTENTS_TOP = 5
"""Rows kept per class of children (operators, runtime calls, device work) and of roots."""
HOST_KINDS = ("cpu_op", "runtime", "python", "user_annotation")
"""Kinds a root can be (a finding's operator may be a Python call or an annotation)."""
CHILD_CLASSES = {"cpu_op": "operator", "runtime": "runtime", "kernel": "device", "memcpy": "device", "memset": "device"}
"""The class of each kind of child: CONTENTS_TOP rows are kept per class."""


def _roots_sql(run: Run, rank: int, location: dict, sample_ids: list[int]) -> tuple[str | None, str]:
    """The SQL selecting the roots' event ids (the outermost: `_outermost`), and how they were chosen (in words)."""
    chosen, words = _chosen_sql(rank, location, sample_ids)
    return (None, words) if chosen is None else (_outermost(chosen, rank), words)


OUTERMOST = ("NOT EXISTS (SELECT 1 FROM {events} p WHERE p.rank = {r}.rank AND p.kind = 'cpu_op' AND {r}.kind = 'cpu_op' "
             "AND p.top_op_id = {r}.top_op_id AND p.pid = {r}.pid AND p.tid = {r}.tid AND p.depth < {r}.depth "
             "AND p.ts_ns <= {r}.ts_ns AND p.ts_ns + p.dur_ns >= {r}.ts_ns + {r}.dur_ns AND {chosen})")
"""A chosen root `{r}` that no other chosen operator on its thread holds (`{chosen}`: p is chosen
too). An operator nested in another of its name (aten::copy_ inside aten::copy_) is a child of the
outer one, not a second root: counted twice, the roots of mi300x_sglang_qwen3_decode's 463 ms copy
summed 926 ms in a 474 ms trace."""


def _outermost(chosen_sql: str, rank: int) -> str:
    """The event ids of `chosen_sql` that OUTERMOST keeps."""
    held = OUTERMOST.format(events="events", r="r", chosen=f"p.event_id IN ({chosen_sql})")
    return f"SELECT r.event_id FROM events r WHERE r.rank = {rank} AND r.event_id IN ({chosen_sql}) AND {held}"


def _chosen_sql(rank: int, location: dict, sample_ids: list[int]) -> tuple[str | None, str]:
    """The SQL selecting the events a finding is about (before OUTERMOST), and how they were chosen."""
    host = "kind IN " + "(" + ", ".join(sql_literal(k) for k in HOST_KINDS) + ")"
    op = location.get("op")
    if op:
        steps = [int(s) for s in location.get("steps") or []]
        in_steps_ = f" AND {in_steps(steps)}" if steps else ""
        words = f"every {op!r} on rank {rank}" + (f" in steps {steps[0]}-{steps[-1]}" if len(steps) > 1 else
                                                    f" in step {steps[0]}" if steps else "")
        return (f"SELECT event_id FROM events WHERE rank = {rank} AND ({host} AND name = {sql_literal(op)} OR "
                f"{charged_at_capture_to(op)}){in_steps_}", words)
    if sample_ids:
        ids = ", ".join(str(int(i)) for i in sample_ids)
        return (f"SELECT CASE WHEN kind IN {DEVICE_WORK_SQL} OR device IS NOT NULL THEN top_op_id ELSE event_id END AS event_id "
                f"FROM events WHERE rank = {rank} AND event_id IN ({ids})", "its sample events (device work: the operator that launched it)")
    source = location.get("source")
    if source and ":" in source:
        file, _, line = source.rpartition(":")
        if line.isdigit():
            return (f"SELECT e.event_id FROM events e JOIN frames f ON f.frame_id = e.source_frame_id WHERE e.rank = {rank} "
                    f"AND {_at_statement('e')} AND f.file = {sql_literal(file)} AND f.line = {int(line)}",
                    f"the top-level operators of {source}")
    return None, ""


def _at_statement(alias: str) -> str:
    """An event a statement's finding is about: a top-level host call of it, or device work a graph
    replays that the statement launched at capture (its `source_frame_id` is the capture's)."""
    return f"({top_host_call(alias)} OR {device_work(alias)} AND {charged_at_capture(alias)})"


def _shapes(dims: str | None, types: str | None) -> tuple[list, list]:
    def parse(text):
        try:
            v = json.loads(text) if text else []
        except ValueError:
            return []
        return v if isinstance(v, list) else []
    return parse(dims), parse(types)


def contents_sql(roots_sql: str, rank: int) -> str:
    """One row per group of children of the roots `roots_sql` selects: class, kind, name, the
    input shapes and dtypes (JSON text), count and summed dur_ns; a root that is device work (charged
    at capture) is listed as a child. The same text is the evidence a user can run (docs/METRICS.md)."""
    dims, types = f"'$.\"{INPUT_DIMS_ARG}\"'", f"'$.\"{INPUT_TYPE_ARG}\"'"
    return f"""WITH roots AS (SELECT DISTINCT r.event_id, r.kind, r.pid, r.tid, r.depth, r.top_op_id, r.ts_ns, r.ts_ns + r.dur_ns AS end_ns
  FROM events r WHERE r.rank = {rank} AND r.event_id IN ({roots_sql})),
host AS (
  SELECT e.event_id FROM roots r JOIN events e ON e.rank = {rank} AND e.top_op_id = r.top_op_id
  WHERE r.kind = 'cpu_op' AND e.kind IN ('cpu_op', 'runtime') AND e.pid = r.pid AND e.tid = r.tid AND e.depth > r.depth
    AND e.ts_ns >= r.ts_ns AND e.ts_ns + e.dur_ns <= r.end_ns
  UNION
  SELECT e.event_id FROM roots r JOIN events e ON e.rank = {rank} AND e.pid = r.pid AND e.tid = r.tid
  WHERE r.kind <> 'cpu_op' AND e.kind IN ('cpu_op', 'runtime') AND e.depth > r.depth AND e.ts_ns >= r.ts_ns AND e.ts_ns + e.dur_ns <= r.end_ns),
launchers AS (SELECT event_id FROM roots UNION SELECT event_id FROM host),
children AS (SELECT event_id FROM host
  UNION SELECT d.event_id FROM events d WHERE d.rank = {rank} AND {device_work('d')} AND d.launch_id IN (SELECT event_id FROM launchers)
  UNION SELECT event_id FROM roots WHERE {device_work()})
SELECT c.kind, c.name, json_extract_string(o.args, {dims}) AS dims, json_extract_string(o.args, {types}) AS types,
  count(*) AS count, sum(c.dur_ns)::BIGINT AS total_ns
FROM children JOIN events c ON c.event_id = children.event_id
LEFT JOIN events o ON o.event_id = CASE WHEN c.kind = 'cpu_op' THEN c.event_id ELSE c.op_id END
GROUP BY ALL ORDER BY total_ns DESC, c.name, c.kind, dims NULLS FIRST, types NULLS FIRST"""  # ties in a fixed order


def finding_contents(run: Run, finding: dict, top: int = CONTENTS_TOP, cache: dict | None = None) -> dict:
    """What is inside one finding (its `to_dict()` form): {"roots": {"what", "count", "total_ns",
    "groups"}, "children": [{"kind", "name", "shapes", "dtypes", "count", "total_ns"}], "sql"}; an
    empty dict when the finding names no rank or nothing to look inside. `cache`: kept between the
    findings of one run, so that findings with the same roots (several rules name one operator)
    query them once."""
    loc = finding.get("location") or {}
    rank = loc.get("rank")
    if rank is None:
        return {}
    roots_sql, what = _roots_sql(run, int(rank), loc, list((finding.get("evidence") or {}).get("sample_event_ids") or []))
    if roots_sql is None:
        return {}
    if cache is None:
        return _contents(run, int(rank), roots_sql, what, top)
    if (roots_sql, top) not in cache:
        cache[(roots_sql, top)] = _contents(run, int(rank), roots_sql, what, top)
    return dict(cache[(roots_sql, top)])  # a finding's own copy: the caller adds its advice


def findings_contents(run: Run, findings: list[dict], top: int = CONTENTS_TOP) -> list[dict]:
    """`finding_contents` of many findings (their `to_dict()` forms, of any ranks `run`'s views
    hold), the same dicts in the same order, from two queries grouped by finding instead of two
    per finding: a job of many small ranks pays each query's fixed cost once per batch. Findings
    with the same roots share their contents (each gets its own copy)."""
    keys: list[tuple | None] = []
    todo: dict[tuple, int] = {}
    specs = []
    for f in findings:
        loc = f.get("location") or {}
        rank = loc.get("rank")
        sample_ids = list((f.get("evidence") or {}).get("sample_event_ids") or [])
        roots_sql, what = (None, "") if rank is None else _roots_sql(run, int(rank), loc, sample_ids)
        key = None if roots_sql is None else (int(rank), roots_sql, what)
        keys.append(key)
        if key is not None and key not in todo:
            todo[key] = len(todo)
            specs.append((*key, _root_spec(loc, sample_ids)))
    got = _contents_many(run, specs, top) if todo else []
    return [dict(got[todo[k]]) if k is not None else {} for k in keys]


ROOT_COLUMNS = ("rank", "event_id", "kind", "pid", "tid", "depth", "top_op_id", "ts_ns", "dur_ns", "name")
"""The columns of a root that `_contents_many` reads: where its children are and its own group."""
_READ_COLUMNS = ROOT_COLUMNS + ("op_id", "launch_id", "step", "source_frame_id", "device", "capture_op", "capture_top_op")
"""Every column of the events `_contents_many` reads, but the operators' args (read for few rows)."""


def _roots_in(items: list[tuple[int, str, str, tuple]], replays: bool = True, events: str = "events") -> str:
    """Rows (fid, ROOT_COLUMNS of the root): the roots of every item, `_roots_sql`'s choice made by
    one scan per way of choosing (a table of the findings joined to the events), not one per
    finding, and read from that same scan (but a sample device event's operator, looked up).
    `replays`: whether some rank may hold graph-replayed work charged at capture (else the two
    scans for it, which find nothing, are left out). `events`: the relation the events are read from
    (a CTE holding the columns read here, or the view)."""
    host = "e.kind IN (" + ", ".join(sql_literal(k) for k in HOST_KINDS) + ")"
    cols = ", ".join(f"e.{c}" for c in ROOT_COLUMNS)
    by_op = [(i, rank, spec) for i, (rank, _, _, spec) in enumerate(items) if spec[0] == "op"]
    by_ids = [(i, rank, spec) for i, (rank, _, _, spec) in enumerate(items) if spec[0] == "ids"]
    by_source = [(i, rank, spec) for i, (rank, _, _, spec) in enumerate(items) if spec[0] == "source"]
    parts = []
    if by_op:
        values = ", ".join(f"({i}, {rank}, {sql_literal(op)}, {'[' + ', '.join(map(str, steps)) + ']' if steps else 'NULL'}::BIGINT[])"
                           for i, rank, (_, op, steps) in by_op)
        names = ", ".join(sorted({sql_literal(op) for _, _, (_, op, _) in by_op}))  # filtered in the scan: few rows joined
        parts.append(f"""SELECT v.fid, {cols} FROM {events} e JOIN (VALUES {values}) v(fid, frank, name, steps)
  ON e.rank = v.frank AND e.name = v.name WHERE {host} AND e.name IN ({names})
  AND (v.steps IS NULL OR list_contains(v.steps, e.step))""")
        for column in ("capture_op", "capture_top_op") if replays else ():  # device work charged to the operator at capture (one definition:
            # vocab.charged_at_capture_to; as two equality joins, which DuckDB hashes)
            parts.append(f"""SELECT v.fid, {cols} FROM {events} e JOIN (VALUES {values}) v(fid, frank, name, steps)
  ON e.rank = v.frank AND e.{column} = v.name WHERE {charged_at_capture_to_sql('v.name', 'e')}
  AND (v.steps IS NULL OR list_contains(v.steps, e.step))""")
    if by_ids:
        values = ", ".join(f"({i}, {rank}, {int(e)})" for i, rank, (_, ids) in by_ids for e in ids)
        # each sample's root id first, then the root by that id: joined in one step, DuckDB paired the
        # two reads of the events by rank alone (a hash join of every event of a rank with every other)
        parts.append(f"""SELECT t.fid, {cols} FROM (SELECT v.fid, v.frank,
    CASE WHEN s.kind IN {DEVICE_WORK_SQL} OR s.device IS NOT NULL THEN s.top_op_id ELSE s.event_id END AS root_id
    FROM (VALUES {values}) v(fid, frank, event_id) JOIN {events} s ON s.rank = v.frank AND s.event_id = v.event_id) t
  JOIN {events} e ON e.rank = t.frank AND e.event_id = t.root_id""")
    if by_source:
        values = ", ".join(f"({i}, {rank}, {sql_literal(file)}, {int(line)})" for i, rank, (_, file, line) in by_source)
        parts.append(f"""SELECT v.fid, {cols} FROM {events} e JOIN frames f ON f.frame_id = e.source_frame_id
  JOIN (VALUES {values}) v(fid, frank, file, line) ON e.rank = v.frank AND f.file = v.file AND f.line = v.line WHERE {_at_statement('e')}""")
    return "\nUNION ALL ".join(parts)


def _may_have_replays(run: Run, rank: int) -> bool:
    """Whether the rank may hold device work charged to an operator at capture (`capture_op`,
    `capture_top_op`): only graph-replayed work has it, and the manifest counts that work
    (metrics.graph_replays); a rank whose manifest does not count it may."""
    entry = rank_entry(run, rank)
    return "graph_replay_device_events" not in (entry.get("data_quality") or {}) or graph_replays(entry) is not None


def _root_spec(location: dict, sample_ids: list[int]) -> tuple:
    """How `_roots_sql` chooses a finding's roots, as data: ("op", name, steps), ("ids", event ids)
    or ("source", file, line)."""
    op = location.get("op")
    if op:
        return ("op", op, [int(s) for s in location.get("steps") or []])
    if sample_ids:
        return ("ids", [int(i) for i in sample_ids])
    file, _, line = (location.get("source") or "").rpartition(":")
    return ("source", file, int(line))


def _contents_many(run: Run, items: list[tuple[int, str, str, tuple]], top: int) -> list[dict]:
    """`_contents` of each (rank, roots_sql, what, root spec) of `items`, in their order: the same
    figures with a finding number (`fid`) carried through, grouped by it, in one query (the roots'
    groups and the children's, so that the operators' args, a JSON column whose decoding is most
    of a read of the events, are read and decoded once for both). Each root's and child's columns
    are read by the scan that finds it, not again by its id; findings whose roots are the same
    events (rules naming one operator in all its steps, and in no step) have their children found
    once (`canon`: the first of them); and a child is deduplicated (found through two roots of a
    finding) only in the findings where that can happen (`shared`)."""
    dims, types = f"'$.\"{INPUT_DIMS_ARG}\"'", f"'$.\"{INPUT_TYPE_ARG}\"'"
    # where the analysis found that no operator's args name inputs (a trace without shapes), the
    # operators' args are not read: only a root of another kind could have shapes
    ranks = sorted({rank for rank, _, _, _ in items})
    unnamed = all(args_named_known(run, rank) is False for rank in ranks)
    shaped = ("o.kind <> 'cpu_op' AND o.event_id IN (SELECT event_id FROM roots)" if unnamed else
              "o.event_id IN (SELECT event_id FROM roots UNION SELECT op_id FROM children)")
    # over many ranks' files, the columns this query reads are read once (each scan of a batch of 128
    # files costs 60-150 ms, however few rows it keeps: five scans were most of the query); over one
    # rank's file, each part reads its own rows, filtered in the scan. Every part reads only the ranks
    # of the findings' roots, so the one read keeps those ranks alone.
    many = len(run.ranks if run.view_ranks is None else run.view_ranks) > 1
    read = (f"ev AS MATERIALIZED (SELECT {', '.join(_READ_COLUMNS)} FROM events WHERE rank IN ({', '.join(map(str, ranks))})),\n"
            if many else "")
    events = "ev" if many else "events"
    rows = run.sql(f"""WITH {read}roots_in AS ({_roots_in(items, any(_may_have_replays(run, r) for r in ranks), events)}),
chosen AS (SELECT DISTINCT fid, {', '.join(ROOT_COLUMNS)}, ts_ns + dur_ns AS end_ns FROM roots_in),
every_root AS (SELECT * FROM chosen r WHERE {OUTERMOST.format(events="chosen", r="r", chosen="p.fid = r.fid")}),
sets AS (SELECT fid, min(fid) OVER (PARTITION BY root_ranks, root_ids) AS canon
  FROM (SELECT fid, list(rank ORDER BY rank, event_id) AS root_ranks, list(event_id ORDER BY rank, event_id) AS root_ids
        FROM every_root GROUP BY fid)),
roots AS (SELECT r.* FROM every_root r SEMI JOIN sets s ON s.fid = r.fid AND s.canon = r.fid),
-- an operator root's children share its top-level operator and thread: where no two roots of a finding
-- do, and every root is an operator, no event is the child of two roots (nor a root another's child)
shared AS (SELECT DISTINCT fid FROM roots GROUP BY fid, rank, top_op_id, pid, tid HAVING count(*) > 1 OR bool_or(kind <> 'cpu_op')),
host_all AS (
  SELECT r.fid, e.event_id, e.kind, e.name, e.dur_ns, e.op_id FROM roots r JOIN {events} e ON e.rank = r.rank AND e.top_op_id = r.top_op_id
  WHERE r.kind = 'cpu_op' AND e.kind IN ('cpu_op', 'runtime') AND e.pid = r.pid AND e.tid = r.tid AND e.depth > r.depth
    AND e.ts_ns >= r.ts_ns AND e.ts_ns + e.dur_ns <= r.end_ns
  UNION ALL
  SELECT r.fid, e.event_id, e.kind, e.name, e.dur_ns, e.op_id FROM roots r JOIN {events} e ON e.rank = r.rank AND e.pid = r.pid AND e.tid = r.tid
  WHERE r.kind <> 'cpu_op' AND e.kind IN ('cpu_op', 'runtime') AND e.depth > r.depth AND e.ts_ns >= r.ts_ns AND e.ts_ns + e.dur_ns <= r.end_ns),
host AS (SELECT * FROM host_all WHERE fid NOT IN (SELECT fid FROM shared)
  UNION ALL SELECT fid, event_id, any_value(kind), any_value(name), any_value(dur_ns), any_value(op_id)
  FROM host_all WHERE fid IN (SELECT fid FROM shared) GROUP BY fid, event_id),
device_all AS (SELECT l.fid, d.event_id, d.kind, d.name, d.dur_ns, d.op_id
  FROM (SELECT fid, event_id FROM roots UNION ALL SELECT fid, event_id FROM host) l JOIN {events} d ON d.launch_id = l.event_id
  WHERE {device_work('d')} AND d.rank IN (SELECT DISTINCT rank FROM roots)
  UNION ALL SELECT fid, event_id, kind, name, dur_ns, NULL FROM roots WHERE {device_work()}),  -- charged at capture: no call, a child
device AS (SELECT * FROM device_all WHERE fid NOT IN (SELECT fid FROM shared)
  UNION ALL SELECT fid, event_id, any_value(kind), any_value(name), any_value(dur_ns), any_value(op_id)
  FROM device_all WHERE fid IN (SELECT fid FROM shared) GROUP BY fid, event_id),
children AS (SELECT fid, kind, name, dur_ns, CASE WHEN kind = 'cpu_op' THEN event_id ELSE op_id END AS op_id FROM host
  UNION ALL SELECT fid, kind, name, dur_ns, op_id FROM device),
shapes AS (SELECT event_id, j[1] AS dims, j[2] AS types FROM (
  SELECT o.event_id, json_extract_string(o.args, [{dims}, {types}]) AS j
  FROM {run.file_events()} o WHERE {shaped}))
SELECT 0 AS part, r.fid, CASE WHEN {device_work('r')} THEN r.kind END AS kind, r.name, s.dims, s.types, count(*) AS count,
  sum(r.dur_ns)::BIGINT AS total_ns
FROM roots r LEFT JOIN shapes s ON s.event_id = r.event_id GROUP BY ALL
UNION ALL
SELECT 1 AS part, c.fid, c.kind, c.name, s.dims, s.types, count(*) AS count, sum(c.dur_ns)::BIGINT AS total_ns
FROM children c LEFT JOIN shapes s ON s.event_id = c.op_id GROUP BY ALL
UNION ALL
SELECT 2 AS part, fid, NULL, NULL, NULL, NULL, canon, NULL FROM sets WHERE fid <> canon  -- a finding, the one whose roots it has
UNION ALL
SELECT 3 AS part, r.fid, NULL, a.name, NULL, NULL, count(*), sum(r.dur_ns)::BIGINT FROM roots r JOIN {events} a ON {IN_OPTIMIZER_STEP}
GROUP BY ALL
ORDER BY part, fid, total_ns DESC, name, kind, dims NULLS FIRST, types NULLS FIRST""").fetchall()
    root_rows: dict[int, list] = {i: [] for i in range(len(items))}
    child_rows: dict[int, list] = {i: [] for i in range(len(items))}
    steps: dict[int, list] = {i: [] for i in range(len(items))}
    for part, fid, kind, *row in rows:
        if part == 0:
            root_rows[fid].append((kind, *row))
        elif part == 1:
            child_rows[fid].append((kind, *row))
        elif part == 2:
            root_rows[fid], child_rows[fid], steps[fid] = root_rows[row[3]], child_rows[row[3]], steps[row[3]]
        else:
            steps[fid].append((row[0], row[3], row[4]))
    return [_assemble(root_rows[i], child_rows[i], contents_sql(roots_sql, rank), what, top, steps[i])
            for i, (rank, roots_sql, what, _) in enumerate(items)]


IN_OPTIMIZER_STEP = ("r.kind = 'cpu_op' AND a.rank = r.rank AND a.pid = r.pid AND a.tid = r.tid AND a.kind = 'user_annotation' "
                     f"AND starts_with(a.name, {sql_literal(OPTIMIZER_STEP_RANGE)}) "
                     "AND a.ts_ns <= r.ts_ns AND a.ts_ns + a.dur_ns >= r.ts_ns + r.dur_ns")
"""An operator root `r` inside an optimizer's step `a` (torch.optim's `Optimizer.step#AdamW.step` range) on its thread."""


def _summed(rows, key: str) -> list[dict]:
    """(key, count, ns) rows summed per key: [{key: …, "count", "total_ns"}], most time first (then by key)."""
    sums: dict[str, list[int]] = {}
    for k, count, total in rows:
        s = sums.setdefault(k, [0, 0])
        s[0] += int(count)
        s[1] += int(total or 0)
    return [{key: k, "count": c, "total_ns": t} for k, (c, t) in sorted(sums.items(), key=lambda kv: (-kv[1][1], kv[0]))]


def _optimizer_steps(rows: list) -> list[dict]:
    """(annotation name, roots inside, their ns) rows -> `roots.optimizer_steps`: per optimizer class."""
    return _summed(((name[len(OPTIMIZER_STEP_RANGE):].removesuffix(".step"), count, total) for name, count, total in rows), "optimizer")


def _assemble(root_rows: list, child_rows: list, sql: str, what: str, top: int, steps: list = ()) -> dict:
    """The contents dict from a finding's root groups and child groups, each in its order, and the
    (optimizer step, count, ns) rows of its roots inside an optimizer's step. A root group's first
    field is its device kind where it is device work charged at capture (a child too: counted in
    `captured`, not in the calls), else None."""
    if not root_rows:
        return {}
    captured = [r for r in root_rows if r[0] is not None]
    root_rows = [r[1:] for r in root_rows if r[0] is None]
    children, kept = [], {}
    for kind, name, d, t, count, total in child_rows:
        cls = CHILD_CLASSES.get(kind)
        if cls is None or kept.get(cls, 0) >= top:
            continue
        kept[cls] = kept.get(cls, 0) + 1
        shapes, dtypes = _shapes(d, t)
        children.append({"kind": kind, "name": name, "shapes": shapes, "dtypes": dtypes, "count": int(count), "total_ns": int(total or 0)})
    groups = []
    for name, d, t, count, total in root_rows[:top]:
        shapes, dtypes = _shapes(d, t)
        groups.append({"name": name, "shapes": shapes, "dtypes": dtypes, "count": int(count), "total_ns": int(total or 0)})
    names = _summed(((name, count, total) for name, _, _, count, total in root_rows), "name")[:top]  # (every group: whole sums)
    return {"roots": {"what": what, "count": sum(int(r[3]) for r in root_rows), "total_ns": sum(int(r[4] or 0) for r in root_rows),
                      "groups": groups, "names": names, "optimizer_steps": _optimizer_steps(steps),
                      **({"captured": {"count": sum(int(r[4]) for r in captured), "total_ns": sum(int(r[5] or 0) for r in captured)}}
                         if captured else {})},
            "children": children, "sql": sql}


def _contents(run: Run, rank: int, roots_sql: str, what: str, top: int) -> dict:
    dims, types = f"'$.\"{INPUT_DIMS_ARG}\"'", f"'$.\"{INPUT_TYPE_ARG}\"'"
    root_rows = run.sql(f"""SELECT CASE WHEN {device_work('r')} THEN r.kind END, r.name, json_extract_string(r.args, {dims}),
  json_extract_string(r.args, {types}), count(*), sum(r.dur_ns)::BIGINT
FROM events r WHERE r.rank = {rank} AND r.event_id IN ({roots_sql}) GROUP BY ALL ORDER BY 6 DESC, 2, 3 NULLS FIRST, 4 NULLS FIRST""").fetchall()
    if not root_rows:
        return {}
    child_rows = [tuple(r) for r in run.sql(contents_sql(roots_sql, rank)).fetchall()]
    steps = run.sql(f"""SELECT a.name, count(*), sum(r.dur_ns)::BIGINT FROM events r JOIN events a ON {IN_OPTIMIZER_STEP}
WHERE r.rank = {rank} AND r.event_id IN ({roots_sql}) GROUP BY ALL""").fetchall()
    return _assemble([tuple(r) for r in root_rows], child_rows, contents_sql(roots_sql, rank), what, top, steps)
