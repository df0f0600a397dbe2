"""python-loop: one statement that a Python loop runs hundreds of times per step.

A statement inside a Python loop (per head, per sample, per token) issues many small operators,
each paying Python and dispatch overhead and each too small to use the device well. Per user
statement (analyzers/lines.py: backward work counted on the forward statement), the rule reports
the heaviest one with at least CALLS_PER_STEP_MIN outermost operators per profiler step whose own
time (CPU time of its outermost operators, plus device time where the rank has devices) is at
least SHARE_MIN of the analysed time. It names the operators the statement runs and, where they
show it, the batched form: per-slice matrix products → one batched matmul (`torch.bmm`,
`einsum`) or `F.scaled_dot_product_attention` when a softmax goes with them; indexing → whole-
tensor slicing.
Impact: the statement's time (forward and backward). Saving bound: what remains after batching is
modelled as one call per step at the loop's mean cost per element, so the bound is the time
less 1/calls_per_step of it.
"""

from __future__ import annotations

from ...vocab import GEMM_OPS, line_key_sql, top_op
from ..engine import Context
from ..lines import line_times_by_rank, line_times_sql
from ..model import Location
from ._util import ms, pct, q, row, rows

RULE_ID = "python-loop"
TITLE = "Python loop over small operators"
CATEGORY = "python_overhead"
SCOPE = "rank"
THRESHOLDS = {
    "CALLS_PER_STEP_MIN": 100,  # outermost operators per step from one statement
    "SHARE_MIN": 0.05,  # the statement's own time / analysed time
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


def screen(run, summaries: dict) -> set[int]:
    """Ranks with steps and a user line passing both of the check's tests (calls per step, own time)."""
    t = THRESHOLDS
    out = set()
    for r, lines in line_times_by_rank(run).items():
        s = summaries.get(r)
        if not s or not s["steps"]["count"] or not s["analysed_ns"]:
            continue
        dev = bool(s["devices"])
        if any(calls / s["steps"]["count"] >= t["CALLS_PER_STEP_MIN"] and (cpu + (device if dev else 0)) >= t["SHARE_MIN"] * s["analysed_ns"]
               for calls, cpu, device in lines):
            out.add(r)
    return out


def check(ctx: Context) -> list:
    t = THRESHOLDS
    if not ctx.has_user_frames() or not ctx.summary["steps"]["count"]:
        return []
    key = "device_ns + cpu_ns" if ctx.has_device() else "cpu_ns"
    sql = (f"SELECT *, {key} AS own_ns FROM ({line_times_sql(ctx.rank)})\n"
           f"WHERE calls_per_step >= {t['CALLS_PER_STEP_MIN']} ORDER BY own_ns DESC, source LIMIT 1")
    v = row(ctx.run, sql)
    if v.get("own_ns") is None or not ctx.analysed_ns or v["own_ns"] / ctx.analysed_ns < t["SHARE_MIN"]:
        return []
    ops = rows(ctx.run, f"""SELECT e.name, count(*) AS n, min(e.event_id) AS sample_id FROM events e JOIN frames f ON f.frame_id = e.source_frame_id
        WHERE e.rank = {ctx.rank} AND {top_op('e')} AND e.pass <> 'backward' AND {line_key_sql('f')} = {q(v['source'])}
        GROUP BY 1 ORDER BY n DESC, 1 LIMIT 8""")
    names = {o["name"] for o in ops}
    backward = (v["cpu_backward_ns"] or 0) + ((v["device_backward_ns"] or 0) if ctx.has_device() else 0)
    code = f" `{v['code'][:60]}`" if v.get("code") else ""
    saving = int(v["own_ns"] * (1 - 1 / max(v["calls_per_step"], 1)))
    return [ctx.finding(
        title=f"{v['source']}{code} runs {v['calls_per_step']:.0f} operators per step from a Python loop: "
              f"{ms(v['own_ns'])} ({pct(v['own_ns'] / ctx.analysed_ns)}; forward {ms(v['own_ns'] - backward)}, backward {ms(backward)})",
        impact_ns=v["own_ns"], saving_bound_ns=saving, location=Location(source=v["source"], op=ops[0]["name"] if ops else None),
        sql=sql, values={**{k: v[k] for k in ("source", "code", "calls", "calls_per_step", "cpu_ns", "cpu_backward_ns",
                                              "device_ns", "device_backward_ns", "own_ns")},
                         "forward_ops": [f"{o['name']} x{o['n']}" for o in ops]},
        sample_event_ids=[o["sample_id"] for o in ops[:3]], uses_source=True,
        recommendation=f"The loop calls {', '.join(o['name'] for o in ops[:4])} once per slice. {_advice(names)}")]
