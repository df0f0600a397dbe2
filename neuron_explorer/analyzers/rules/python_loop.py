"""python-loop: one statement that a Python loop runs many times in one call of its function.

A statement inside a Python loop (per head, per sample, per token) issues many small operators,
each paying Python and dispatch overhead and each too small to use the device well. The rule
counts how often each user statement runs in one call of the function it is in (analyzers/lines.py
`statement_runs_sql`: a statement's runs in one enclosing call are the smallest count of one
operator name among its outermost forward operators there), over the steady steps
(metrics.steady_steps: warm-up and a partial last step left out), or over the whole window
without steps. It reports the heaviest statement that one call runs at least RUNS_PER_CALL_MIN
times and whose time is at least SHARE_MIN of the analysed time: a statement that ten module
instances run once each runs once per call, and is no loop; nor is `opt.step()`, whose operators
run inside torch.optim's step (pass 'optimizer': the loop over the parameters is torch's, and
its fix is the optimizer's fused or foreach implementation, which the statement's hotspot
advises from what is inside it, analyzers/advice.py). Only statements are counted
(`frames.line_kind = 'call'`, the live collector's): an imported trace names def lines, which say
in which function an operator ran but not which statement, so the rule does not apply to it.
It names the operators the statement runs and, where they show it, the batched form: per-slice
matrix products → one batched matmul (`torch.bmm`, `einsum`) or
`F.scaled_dot_product_attention` when a softmax goes with them; indexing → whole-tensor slicing.
Impact: the statement's time (forward and backward): the union of its outermost CPU operators'
intervals and, where the rank has devices, its device work's, each cut to its profiler step (with
steps), so never more than the analysed time. Saving bound: what remains after batching is
modelled as one run per call at the loop's mean cost per run, so the bound is the time less
1/runs_per_call of it.
"""

from __future__ import annotations

from ...vocab import DEVICE_WORK_SQL, GEMM_OPS, line_key_sql, top_op
from ..engine import Context, NotApplicable
from ..lines import line_times_sql, statement_runs_sql, statement_time_sql
from ..model import Location
from ._util import ms, pct, q, row, rows

RULE_ID = "python-loop"
TITLE = "Python loop over small operators"
CATEGORY = "python_overhead"
SCOPE = "rank"
THRESHOLDS = {
    "RUNS_PER_CALL_MIN": 20,  # runs of one statement in one call of its function
    "SHARE_MIN": 0.05,  # the statement's time / analysed time
}

_MATMUL = GEMM_OPS | {"aten::einsum"}
"""Matrix products a batched form replaces (einsum: a product too, though not a GEMM class of its own)."""
_INDEX = {"aten::select", "aten::slice", "aten::index", "aten::narrow", "aten::__getitem__"}


def _advice(ops: set[str]) -> str:
    if ops & _MATMUL and ops & {"aten::softmax", "aten::_softmax"}:
        return ("Compute all heads and samples at once: reshape to (batch, heads, seq, dim) and call "
                "torch.nn.functional.scaled_dot_product_attention (or one batched matmul and one softmax).")
    if ops & _MATMUL:
        return "Stack the slices and use one batched matrix product (torch.bmm, torch.matmul on 3-d tensors, or einsum)."
    if ops & _INDEX:
        return "Index whole tensors at once (slicing, gather, masks) instead of element by element in a Python loop."
    return "Vectorise the loop into whole-tensor operations, or compile the function (torch.compile) to fuse it."


def looped_statements(ctx: Context) -> list[dict]:
    """The statements of the rank that one call of their function runs at least RUNS_PER_CALL_MIN
    times (lines.statement_runs_sql over the steady steps), most runs per call first; hotspot
    leaves them to this rule."""
    if not ctx.has_user_frames():
        return []
    t = THRESHOLDS
    sql = (f"SELECT * FROM ({statement_runs_sql(ctx.rank, ctx.steady_steps, t['RUNS_PER_CALL_MIN'])})\n"
           f"WHERE runs_per_call >= {t['RUNS_PER_CALL_MIN']} ORDER BY runs_per_call DESC, source")
    return rows(ctx.run, sql)


def screen(run, summaries: dict) -> set[int]:
    """Ranks whose user frames are def lines only (the check says it does not apply), and those with
    a user statement (a 'call' line) of at least RUNS_PER_CALL_MIN outermost operators
    whose CPU time, plus device time where the rank has devices, reaches SHARE_MIN (bounds of the
    check's tests: a statement runs at most as often as it issues operators)."""
    t = THRESHOLDS
    top = top_op("e")
    out = {int(r) for r, in run.sql("SELECT rank FROM frames WHERE is_user GROUP BY rank "
                                    "HAVING count(*) FILTER (WHERE line_kind = 'call') = 0").fetchall()}  # def lines only: not applicable
    for r, calls, cpu, device in run.sql(f"""SELECT e.rank, count(*) FILTER (WHERE {top}),
  coalesce(sum(e.dur_ns) FILTER (WHERE {top}), 0), coalesce(sum(e.dur_ns) FILTER (WHERE e.kind IN {DEVICE_WORK_SQL}), 0)
FROM events e JOIN frames f ON f.rank = e.rank AND f.frame_id = e.source_frame_id
WHERE f.is_user AND f.line_kind = 'call' AND (({top}) OR e.kind IN {DEVICE_WORK_SQL}) GROUP BY e.rank, f.file, f.line""").fetchall():
        s = summaries.get(int(r))
        if s and s["analysed_ns"] and calls >= t["RUNS_PER_CALL_MIN"] \
                and cpu + (device if s["devices"] else 0) >= t["SHARE_MIN"] * s["analysed_ns"]:
            out.add(int(r))
    return out


def check(ctx: Context) -> list:
    t = THRESHOLDS
    if not ctx.has_user_frames():
        return []
    statements = ctx.run.sql(f"SELECT count(*) FROM frames WHERE rank = {ctx.rank} AND is_user AND line_kind = 'call'").fetchone()[0]
    if not statements:
        raise NotApplicable("the trace names def lines only (an imported trace): which statement ran an operator is unknown, "
                            "so how often one runs is too; record with the live collector (neuron-explorer record, nx.profile)")
    steps = ctx.steady_steps
    if steps == []:
        raise NotApplicable("no steady-state profiler step to count a statement's runs in")
    runs_sql = (f"SELECT * FROM ({statement_runs_sql(ctx.rank, steps, t['RUNS_PER_CALL_MIN'])})\n"
                f"WHERE runs_per_call >= {t['RUNS_PER_CALL_MIN']}")
    best = None
    for v in rows(ctx.run, runs_sql + " ORDER BY runs_per_call DESC, source"):
        time_sql = statement_time_sql(ctx.rank, v["source"], steps is not None, ctx.has_device())
        v["time_ns"] = row(ctx.run, time_sql)["time_ns"]
        if ctx.analysed_ns and v["time_ns"] >= t["SHARE_MIN"] * ctx.analysed_ns and (best is None or v["time_ns"] > best["time_ns"]):
            best, best_time_sql = v, time_sql
    if best is None:
        return []
    v = best
    ops = rows(ctx.run, f"""SELECT e.name, count(*) AS n, min(e.event_id) AS sample_id FROM events e JOIN frames f ON f.frame_id = e.source_frame_id
        WHERE e.rank = {ctx.rank} AND {top_op('e')} AND e.pass IS DISTINCT FROM 'backward' AND {line_key_sql('f')} = {q(v['source'])}
        GROUP BY 1 ORDER BY n DESC, 1 LIMIT 8""")
    code = row(ctx.run, f"SELECT any_value(code) AS code FROM frames WHERE rank = {ctx.rank} AND {line_key_sql('')} = {q(v['source'])}")["code"]
    line = row(ctx.run, f"SELECT cpu_ns, cpu_backward_ns, device_ns, device_backward_ns FROM ({line_times_sql(ctx.rank)}) "
                        f"WHERE source = {q(v['source'])}")  # its figures by the one definition of time per line, for the split
    names = {o["name"] for o in ops}
    code_txt = f" `{code[:60]}`" if code else ""
    where = "per step" if steps is not None else "in the analysed window"
    per_step = v["runs_per_step"] if steps is not None else v["runs"]
    fn = f" of {v['function']}" if v.get("function") else ""
    saving = int(v["time_ns"] * (1 - 1 / max(v["runs_per_call"], 1)))
    return [ctx.finding(
        title=f"{v['source']}{code_txt} runs {per_step:.0f} times {where} from a Python loop ({v['runs_per_call']} in one call{fn}): "
              f"{ms(v['time_ns'])} ({pct(v['time_ns'] / ctx.analysed_ns)})",
        impact_ns=v["time_ns"], saving_bound_ns=saving, location=Location(source=v["source"], op=ops[0]["name"] if ops else None),
        sql=runs_sql + f"\n-- time of {v['source']}:\n" + best_time_sql,
        values={"source": v["source"], "code": code, "function": v.get("function"), "runs": v["runs"], "runs_per_call": v["runs_per_call"],
                "calls_per_step": v["runs_per_step"], "steps": len(steps) if steps is not None else None,
                "operators": v["calls"], "time_ns": v["time_ns"], **line, "forward_ops": [f"{o['name']} x{o['n']}" for o in ops]},
        sample_event_ids=[o["sample_id"] for o in ops[:3]], uses_source=True,
        recommendation=f"The loop calls {', '.join(o['name'] for o in ops[:4])} once per iteration. {_advice(names)}")]
