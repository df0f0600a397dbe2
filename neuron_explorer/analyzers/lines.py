"""Time per source line: the one definition, used by the report, rules, dashboard, agent and diff.

A line's time is the time of the work whose statement it is (`events.source_frame_id`: the
innermost user statement that called it, and for backward work the forward statement that built
its autograd node):
- `cpu_ns`: sum of durations of outermost CPU operators (`vocab.top_op`) of the line;
- `device_ns`: sum of durations of device work (kernel, memcpy, memset) of the line (streams that
  overlap add up);
- `python_ns`: Python-level time: the self time (`self_ns`) of the Python calls the line made
  outside any operator (decoding, `time.sleep`, Python loops in `__getitem__`, callbacks): time
  no operator accounts for;
- `*_backward_ns`: the part of each in the backward pass (`pass = 'backward'`); the rest is the
  forward pass, optimizer and data loading work called from the line;
- `calls`: number of outermost CPU operators of the line; `calls_per_step`: that over the rank's
  profiler steps (null without steps); `kernels`: number of kernel events of the line.
"self" is the line's own figure; "total" adds the figures of every line it called (a line counts
once per event, through `frames.parent_frame_id`).

Must not: decide what is a problem (rules do) or render anything.
"""

from __future__ import annotations

from ..store import Run
from ..vocab import DEVICE_WORK_SQL, in_steps, line_key, line_key_sql, top_op
from .metrics import union_of_sql

LINE_FIELDS = ("calls", "kernels", "cpu_ns", "cpu_backward_ns", "device_ns", "device_backward_ns", "python_ns")

LINE_DEFINITIONS = {
    "source": "file:line of a user statement; backward work counts on the forward statement that built its autograd node",
    "code": "the text of the line, when the source was readable",
    "calls": "number of outermost CPU operators (operators with no operator around them) of the line; calls_per_step: over the profiler steps",
    "kernels": "number of kernel events of the line",
    "cpu_ns": "sum of durations of the line's outermost CPU operators (also as cpu_op_ns)",
    "device_ns": "sum of durations of the line's kernel, memcpy and memset events (device events take their launch's "
                 "statement); streams that overlap add up",
    "cpu_backward_ns": "the part of cpu_ns in the backward pass",
    "python_ns": "Python-level time: self time of the Python calls the line made outside any operator",
    "device_backward_ns": "the part of device_ns in the backward pass",
}
"""What each figure of `line_times` means: for agents, beside the rows."""


PYTHON_SELF = "e.kind = 'python' AND e.op_id IS NULL"
"""Python calls whose self time is Python-level work of their calling statement: outside every
operator (inside one, the operator's time already holds it)."""


def own_ns_sql(device: bool = True) -> str:
    """SQL (over `events e`) of an event's part in its statement's own time: an outermost CPU
    operator's duration, a Python call's self time outside operators (PYTHON_SELF), and with
    `device` a device event's duration; 0 for anything else."""
    dev = f" WHEN e.kind IN {DEVICE_WORK_SQL} THEN e.dur_ns" if device else ""
    return (f"CASE WHEN {top_op('e')} THEN e.dur_ns WHEN {PYTHON_SELF} THEN e.self_ns"
            f"{dev} ELSE 0 END")


def _rank_filter(rank: int | None, alias: str = "e") -> str:
    return "TRUE" if rank is None else f"{alias}.rank = {int(rank)}"


def frame_times_sql(rank: int | None, steps: list[int] | None = None) -> str:
    """One row per source frame of the rank (every rank: None): LINE_FIELDS (plain DuckDB over
    the run's views); with `steps`, then `calls_in_steps`: the calls in those steps."""
    dev = DEVICE_WORK_SQL
    top = top_op("e")
    in_steps_ = f"\n  , count(*) FILTER (WHERE {top} AND {in_steps(steps, 'e')}) AS calls_in_steps" if steps is not None else ""
    return f"""SELECT e.source_frame_id AS frame_id,
  count(*) FILTER (WHERE {top}) AS calls,
  count(*) FILTER (WHERE e.kind = 'kernel') AS kernels,
  coalesce(sum(e.dur_ns) FILTER (WHERE {top}), 0)::BIGINT AS cpu_ns,
  coalesce(sum(e.dur_ns) FILTER (WHERE {top} AND e.pass = 'backward'), 0)::BIGINT AS cpu_backward_ns,
  coalesce(sum(e.dur_ns) FILTER (WHERE e.kind IN {dev}), 0)::BIGINT AS device_ns,
  coalesce(sum(e.dur_ns) FILTER (WHERE e.kind IN {dev} AND e.pass = 'backward'), 0)::BIGINT AS device_backward_ns,
  coalesce(sum(e.self_ns) FILTER (WHERE {PYTHON_SELF}), 0)::BIGINT AS python_ns{in_steps_}
FROM events e WHERE {_rank_filter(rank)} AND e.source_frame_id IS NOT NULL AND (({top}) OR e.kind IN {dev} OR ({PYTHON_SELF}))
GROUP BY 1"""


_LINE_COLUMNS = line_key_sql("f") + """ AS source, f.file, f.line, any_value(f.code) AS code, any_value(f.function) AS function,
  any_value(f.line_kind) AS line_kind,
  min(f.frame_id) AS frame_id, sum(t.calls)::BIGINT AS calls,
  {per_step} AS calls_per_step,
  sum(t.kernels)::BIGINT AS kernels,
  sum(t.cpu_ns)::BIGINT AS cpu_ns, sum(t.cpu_backward_ns)::BIGINT AS cpu_backward_ns,
  sum(t.device_ns)::BIGINT AS device_ns, sum(t.device_backward_ns)::BIGINT AS device_backward_ns,
  sum(t.python_ns)::BIGINT AS python_ns"""


def line_times_sql(rank: int | None, steps: list[int] | None = None) -> str:
    """Self figures per user source line, with its code text: what `hot_source_lines` and the
    hotspot rule read (evidence SQL that runs on plain DuckDB). Over every rank (None), lines of
    the same file and number add up and `calls_per_step` divides by the steps of all ranks. With
    `steps` (a rank's steady steps, metrics.steady_steps), `calls_per_step` is the calls in those
    steps over their number: warm-up and a partial last step stay out of it."""
    if steps is not None:
        per_step = (f"sum(t.calls_in_steps) / {len(steps)}" if steps else "NULL::DOUBLE")
        return f"""WITH t AS ({frame_times_sql(rank, steps)})
SELECT {_LINE_COLUMNS.format(per_step=per_step)}
FROM t JOIN frames f ON f.frame_id = t.frame_id
WHERE f.is_user GROUP BY f.file, f.line"""
    return f"""WITH t AS ({frame_times_sql(rank)}),
n AS (SELECT count(DISTINCT (rank, step)) AS steps FROM events e WHERE {_rank_filter(rank)} AND kind = 'step')
SELECT {_LINE_COLUMNS.format(per_step="CASE WHEN any_value(n.steps) > 0 THEN sum(t.calls) / any_value(n.steps) END")}
FROM t JOIN frames f ON f.frame_id = t.frame_id CROSS JOIN n
WHERE f.is_user GROUP BY f.file, f.line"""


def line_times_by_rank(run: Run) -> dict[int, list[tuple]]:
    """Per rank, (calls, cpu_ns, device_ns) of each user line: the figures of `line_times`, for
    every rank of the run's views in one query (rules screen ranks with it)."""
    dev = DEVICE_WORK_SQL
    top = top_op("e")
    out: dict[int, list[tuple]] = {}
    for r, calls, cpu, device in run.sql(f"""SELECT e.rank, count(*) FILTER (WHERE {top}),
  coalesce(sum(e.dur_ns) FILTER (WHERE {top}), 0), coalesce(sum(e.dur_ns) FILTER (WHERE e.kind IN {dev}), 0)
FROM events e JOIN frames f ON f.rank = e.rank AND f.frame_id = e.source_frame_id
WHERE f.is_user AND (({top}) OR e.kind IN {dev}) GROUP BY e.rank, f.file, f.line""").fetchall():
        out.setdefault(int(r), []).append((int(calls), int(cpu), int(device)))
    return out


def line_times(run: Run, rank: int) -> list[dict]:
    """Self figures per user line of a rank (see the module docstring), heaviest first."""
    rel = run.sql(line_times_sql(rank) + " ORDER BY device_ns DESC, cpu_ns DESC, source")
    cols = [d[0] for d in rel.description]
    return [dict(zip(cols, r)) for r in rel.fetchall()]


def self_and_total(run: Run, rank: int) -> dict:
    """Per user line: self and total CPU and device time ('file:line' → dict), and whether the
    rank has user frames at all. Total adds every line that the line's statement called."""
    found = run.sql("SELECT frame_id, file, line, parent_frame_id, code FROM frames WHERE rank = ? AND is_user", [rank]).fetchall()
    frames = {fid: (line_key(file, line), parent) for fid, file, line, parent, _ in found}
    codes = {line_key(file, line): code for _, file, line, _, code in found if code}
    if not frames:
        return {"lines": {}, "has_frames": False}
    per_frame = run.sql(frame_times_sql(rank)).fetchall()
    chains: dict[int, set[str]] = {}

    def lines_of(fid: int) -> set[str]:
        if fid not in chains:
            seen, out, cur = set(), set(), fid
            while cur is not None and cur in frames and cur not in seen:
                seen.add(cur)
                out.add(frames[cur][0])
                cur = frames[cur][1]
            chains[fid] = out
        return chains[fid]

    lines: dict[str, dict] = {}
    for fid, *values in per_frame:
        if fid not in frames:
            continue
        figures = dict(zip(LINE_FIELDS, values))
        own = frames[fid][0]
        for line in lines_of(fid):
            row = lines.setdefault(line, {"source": line, "code": codes.get(line), **{f"{k}_self": 0 for k in LINE_FIELDS},
                                          **{f"{k}_total": 0 for k in LINE_FIELDS}})
            for k, v in figures.items():
                row[f"{k}_total"] += int(v or 0)
                if line == own:
                    row[f"{k}_self"] += int(v or 0)
    return {"lines": lines, "has_frames": True}


# ---- how often a statement runs in one call of its function (python-loop) -----------------------

RUN_DEFINITIONS = {
    "enclosing call": "of an outermost operator of a statement: the innermost Python call around it that the statement did "
                      "not make itself (its frame is not the statement's): one call of the function the statement is in",
    "runs": "executions of a statement in one enclosing call: the smallest count of one operator name among the statement's "
            "outermost forward operators in that call (each run issues each of its operators: `x[i] @ y[i]` run 50 times "
            "issues 100 selects and 50 matmuls, 50 runs)",
    "runs_per_call": "the most runs of the statement in one enclosing call (within one step)",
    "runs_per_step": "the statement's runs in the steady steps over their number (the window's runs without steps)",
}
"""What the figures of `statement_runs_sql` mean (docs/METRICS.md)."""


def statement_runs_sql(rank: int, steps: list[int] | None, min_ops: int = 1) -> str:
    """One row per user statement (`frames.line_kind = 'call'`: def lines name no statement) with
    at least `min_ops` outermost forward operators in `steps` (the steady steps; None: the whole
    window): source, function, runs, runs_per_call, runs_per_step, calls (its outermost forward
    operators there), and the enclosing call with the most runs (call_id, step). See
    RUN_DEFINITIONS. Plain DuckDB (a recursive walk up `parent_id`)."""
    where_steps = f" AND {in_steps(steps, 'e')}" if steps is not None else ""
    n_steps = len(steps) if steps else 0
    per_step = f"sum(runs) / {n_steps}" if n_steps else ("NULL::DOUBLE" if steps is not None else "sum(runs)::DOUBLE")
    return f"""WITH RECURSIVE ops AS (
  SELECT e.event_id, e.name, e.step, e.parent_id, e.source_frame_id AS frame_id, {line_key_sql('f')} AS source, f.function
  FROM events e JOIN frames f ON f.frame_id = e.source_frame_id
  WHERE e.rank = {int(rank)} AND {top_op('e')} AND e.pass IS DISTINCT FROM 'backward' AND f.is_user AND f.line_kind = 'call'{where_steps}
  QUALIFY count(*) OVER (PARTITION BY f.file, f.line) >= {int(min_ops)}),
walk(event_id, frame_id, up_id, call_id) AS (
  SELECT event_id, frame_id, parent_id, NULL::BIGINT FROM ops
  UNION ALL
  SELECT w.event_id, w.frame_id, p.parent_id,
    CASE WHEN p.kind = 'python' AND p.source_frame_id IS DISTINCT FROM w.frame_id THEN p.event_id END
  FROM walk w JOIN events p ON p.event_id = w.up_id WHERE w.call_id IS NULL),
calls AS (SELECT event_id, max(call_id) AS call_id FROM walk GROUP BY event_id),
by_name AS (SELECT o.source, any_value(o.function) AS function, o.step, c.call_id, o.name, count(*) AS n
  FROM ops o JOIN calls c USING (event_id) GROUP BY o.source, o.step, c.call_id, o.name),
per_call AS (SELECT source, any_value(function) AS function, step, call_id, min(n) AS runs, sum(n) AS calls
  FROM by_name GROUP BY source, step, call_id)
SELECT source, any_value(function) AS function, sum(runs)::BIGINT AS runs, max(runs)::BIGINT AS runs_per_call,
  {per_step} AS runs_per_step, sum(calls)::BIGINT AS calls,
  arg_max(call_id, runs) AS call_id, arg_max(step, runs) AS step
FROM per_call GROUP BY source"""


def statement_time_sql(rank: int, source: str, with_steps: bool, device: bool) -> str:
    """One row, `time_ns`: the union of the intervals of a statement's work (its outermost CPU
    operators, forward and backward, and with `device` its device work), each cut to the range of
    its profiler step with `with_steps` (work outside steps left out): never more than the
    analysed time. `source`: 'file:line'."""
    kinds = f"({top_op('e')} OR e.kind IN {DEVICE_WORK_SQL})" if device else top_op("e")
    src = "'" + source.replace("'", "''") + "'"
    if with_steps:
        iv = f"""SELECT greatest(e.ts_ns, s.ts_ns) AS ts_ns, least(e.ts_ns + e.dur_ns, s.ts_ns + s.dur_ns) AS end_ns
  FROM events e JOIN frames f ON f.frame_id = e.source_frame_id JOIN steps s ON s.rank = e.rank AND s.step = e.step
  WHERE e.rank = {int(rank)} AND {kinds} AND {line_key_sql('f')} = {src}"""
    else:
        iv = f"""SELECT e.ts_ns, e.ts_ns + e.dur_ns AS end_ns
  FROM events e JOIN frames f ON f.frame_id = e.source_frame_id WHERE e.rank = {int(rank)} AND {kinds} AND {line_key_sql('f')} = {src}"""
    return f"""WITH _u AS ({union_of_sql(f"SELECT * FROM ({iv}) WHERE end_ns > ts_ns")})
SELECT coalesce(sum(end_ns - start_ns), 0)::BIGINT AS time_ns FROM _u"""
