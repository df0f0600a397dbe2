"""hotspot: one operator, kernel or source line dominates the time.

Reports, per rank, the single top-level CPU operator (by total CPU time), the single kernel name
(by total device time) and the single user source line (its own time by analyzers/lines.py:
device time where the rank has devices, else the CPU time of the outermost operators it called,
backward work counted on the forward statement) that take at least HOTSPOT_SHARE_MIN of the
analysed time; an operator's title counts its top-level calls (aten::to 29,987.99 ms over 18
top-level calls, where what is inside lists all 20 of the name, two of them inside other operators).
The DataLoader's fetch (`enumerate(DataLoader)#...__next__`) is left to input-pipeline,
whose advice fits a loader; a compile's range (`torch.compile: …`, vocab.compile_range) is no
operator to make cheaper and is not named as one, and an operator's figure leaves out the compiles
inside it (lines.compile_inside_sql: compile time is the compile-time rule's) and the time the host
syncs beneath it waited for a device (host_sync.waiting_calls_sql: a blocking copy in `aten::copy_`
waiting 463 ms is host-sync's, not an operator to give cheaper shapes), and the time in device
allocator calls beneath it (vocab.allocator_call: allocator-churn's; the MI300X run without the
caching allocator spent 1,527 of ConvolutionBackward0's 1,539 ms in hipFree). A device queue's wait
(MTIA's `event_wait`, vocab.DEVICE_WAIT_KERNEL_PATTERN) is no kernel: the import files it as a
sync on its stream. A statement that
one call of its function runs python-loop's RUNS_PER_CALL_MIN times or more is left to that rule,
which names the batched alternative. Calls per step are over the steady steps (metrics.steady_steps). A hotspot is where optimisation pays first.
Impact: for the operator and the kernel, their time on the steps' critical paths
(analyzers/critical_path.py: the operator's host time, the kernel's device time; an operator
that runs while the device is busy costs nothing), and they are reported only when that is at
least HOTSPOT_SHARE_MIN too; without steps (no path), their time. For the line: its time. The
share in the title is the impact's: an operator's or kernel's time in all (also given) is summed
over every call of the rank, inside and outside the steps and across streams, and can pass the
analysed time (a kernel running on past its step's end, one overlapping itself on several streams).
Without steps a kernel's impact is the time some call of it runs (`running_ns`, the union of its
calls on every stream), which the span holds, where that is less than its calls summed.
Saving bound: the same (an upper bound — the work itself cannot vanish, but a better algorithm,
dtype or kernel can shrink it). A statement most of whose device time is a CUDA/HIP graph it
replays is the replay call, not where the work was written: its advice says so and how to see the
graph's kernels by the statements that captured them (`import --capture`). Imported so, the replayed
work takes the statement that launched it at capture (`capture_op`): a statement most of whose device
time is such work is where it was written, and its advice names the operators it captured. When one call of the operator holds at
least half its time, and ONE_OFF_RATIO times its other calls' mean, the advice says it is a one-off more likely than its cost per call (the first
`.to('cuda')` creating the device's context, a library's first use) and to profile steady steps,
not to tune its shapes. An operator most of whose time is one kernel launch that the critical path
names as a one-off (a kernel's first launch loading its code) is left to that finding (`leaves_to`), and
so is one whose one-off call is the host's heaviest call in a gap device-idle names (`longest_id` among
its sample events): the device idled through that call, and that finding names it as a one-off. A
statement at least half of whose device time is hand-written attention (critical-path's normalisation
class on the same statement, its `attention_work_ns`) is left to that finding, which names the fix,
and so is a kernel that is that attention's softmax (among the finding's heaviest items). A collective
kernel is left to comm-exposed where it reports the rank: that finding names the communication the
steps wait for, with the same fix.
A kernel's advice follows what it does (vocab.work_class) in the device's own words (peaks.matrix_units):
a matrix kernel gets the sizes its matrix units run fastest at (NVIDIA Tensor Cores, AMD MFMA, the
Trainium Tensor Engine) and lower precision only where its name does not show one already; a
collective, attention or memory-bound kernel gets what changes its time.
"""

from __future__ import annotations

import functools
import re

from ...fmt import kernel_name
from ...vocab import (
    WORK_CLASSES,
    allocator_call,
    charged_top_op,
    compile_range,
    device_work,
    is_comm_kernel_name,
    is_compile_range,
    kernel_precision,
    kernel_runs_tf32,
    line_key_sql,
    top_op,
    work_class,
)
from .. import peaks as P
from ..critical_path import on_path_ns
from ..engine import Context
from ..lines import compile_inside_sql, line_times_by_rank, line_times_sql
from ..metrics import union_sql
from ..model import Location
from ..rank_rows import RankQuery
from ..rank_rows import rows as rank_rows
from ..utilisation import detect_device, device_name
from . import python_loop
from ._util import STEADY_STEPS, ms, pct, q, row, share_at_least
from .host_sync import waiting_calls_sql
from .input_pipeline import LOADER_NAME

RULE_ID = "hotspot"
TITLE = "Hotspot"
CATEGORY = "hotspot"
SCOPE = "rank"
THRESHOLDS = {
    "HOTSPOT_SHARE_MIN": 0.25,  # time of the one op / kernel / line / analysed time
}


def _finding(ctx: Context, what: str, sql: str, loc: Location, key: str, rec, top: tuple | None = None):
    """`rec`: the advice, or a function of the row `sql` gives that writes it. `top`: (name, time)
    of the row `sql` would give, when the summary already has it: its tests are made first, and the
    query (for the rest of the row) only when they pass."""
    if top is not None and top[0] is not None and not _passes(ctx, what, {"name": top[0], key: top[1]}, key):
        return None
    v = row(ctx.run, sql)
    if not _passes(ctx, what, v, key):
        return None
    on_path = _on_path(ctx, what, v["name"])
    if on_path is not None:
        on_path = min(on_path, v[key])  # (an operator's path time holds the compiles inside it, which its figure leaves out)
    running = _running_ns(ctx, v["name"]) if on_path is None and what == "kernel" else None
    impact = on_path if on_path is not None else v[key] if running is None else min(running, v[key])
    label = v["name"]
    if what == "source line":
        loc.source = label
    elif what == "kernel":
        loc.kernel, loc.device = label, v.get("device")
        loc.op, loc.source = v.get("op"), ctx.source_of(v.get("frame_id"))
    else:
        loc.op, loc.source = label, ctx.source_of(v.get("frame_id"))
    # the share printed is of the impact, which the analysed time holds: an operator's or kernel's time in
    # all is summed over every call of the rank, inside and outside the steps and across streams (an NCCL
    # kernel overlapping itself on several streams summed 71.52 ms in a 48.64 ms step: 147%)
    # an operator's figures are of its top-level calls (one inside another operator is that one's time); what
    # is inside the finding lists every call of the name, so the words say which calls these are
    calls = f"{v['calls']}{' top-level' if what == 'operator' else ''} call{'' if v['calls'] == 1 else 's'}"
    if on_path is not None:
        what_share = f"takes {pct(on_path / ctx.analysed_ns)} on the critical path ({ms(on_path)}; {ms(v[key])} over {calls} in all)"
    elif impact < v[key]:  # (a kernel without steps running on several streams at once)
        what_share = f"takes {pct(impact / ctx.analysed_ns)} ({ms(impact)} running; {ms(v[key])} over {calls} in all)"
    else:
        what_share = f"takes {pct(v[key] / ctx.analysed_ns)} ({ms(v[key])} over {calls})"
    return ctx.finding(
        title=f"Hotspot {what}: {kernel_name(label, 80) if what == 'kernel' else label[:80]} {what_share}",
        impact_ns=impact, saving_bound_ns=impact, location=loc, sql=sql,
        values={key: v[key], "calls": v["calls"], "name": v["name"], "on_path_ns": on_path,
                **({"running_ns": running} if running is not None else {}),
                # (an operator's longest call: a one-off where it holds half its time, _operator_advice, leaves_to)
                **({"longest_ns": v["longest_ns"], "longest_id": v["longest_id"]} if "longest_id" in v else {})},
        sample_event_ids=[v["sample_id"]] if v.get("sample_id") is not None else [], uses_source=True,
        recommendation=rec(v) if callable(rec) else rec)


_CHEAPER = ("make this operator cheaper: check its shapes and dtype (lower precision, channels_last), call it less often "
            "or on bigger batches, or replace it with a fused / compiled version (torch.compile).")


ONE_OFF_RATIO = 5.0
"""An operator's longest call that holds half its time is a one-off only when it also takes this many
times the mean of its other calls: two calls of 0.40 ms are no one-off."""


def _one_off_call(v: dict) -> bool:
    """One call of the operator holds half its time, ONE_OFF_RATIO times its other calls' mean or more."""
    longest, ns, calls = v.get("longest_ns") or 0, v.get("cpu_ns") or 0, v.get("calls") or 0
    return calls > 1 and bool(ns) and longest * 2 >= ns and longest >= ONE_OFF_RATIO * (ns - longest) / (calls - 1)


def _operator_advice(v: dict) -> str:
    """The operator's advice. When one of its calls holds at least half its time (`_one_off_call`), that
    call is a one-off more likely than the operator's cost (the first `.to('cuda')` creating the device's
    context: 29.9 s of cudaDeviceGetStreamPriorityRange in one of 18 calls), and shapes are no fix."""
    longest, ns = v.get("longest_ns") or 0, v["cpu_ns"] or 0
    if _one_off_call(v):
        return (f"One call of {ms(longest)} holds {pct(min(1.0, longest / ns))} of this operator's time: a one-off more likely "
                "than its cost per call, such as the first use of the device or of a library (context creation, lazy "
                "loading, autotuning), which shapes and dtype do not change. " + STEADY_STEPS + " to see what it costs each "
                "iteration; if it does repeat, " + _CHEAPER)
    return _CHEAPER[0].upper() + _CHEAPER[1:]


def _kernel_advice(ctx: Context, v: dict) -> str:
    """The kernel's advice, by what the kernel does (vocab.work_class of its name and operator) and in
    the device's terms (peaks.matrix_units, precision_advice): a matrix kernel gets the sizes its
    matrix units run fastest at, and lower precision only where its name does not show it already
    (mi300x_vllm_hipgraph_piecewise's `..._bf16xbf16xmxfp4_...` GEMM); a collective, attention or
    memory-bound kernel gets what changes its time (MTIA's `merge` is no matrix work to give tensor-core sizes), and a
    lower precision only where its name shows none (a bf16 softmax has none to go to)."""
    name, op = v["name"] or "", v.get("op")
    arch = detect_device(ctx.run, ctx.rank, device_name(ctx.run, ctx.rank)).arch
    cls = work_class("kernel", name, op)
    by = f" (launched by {op})" if op else ""
    if cls in ("matmul", "fp32_matmul"):
        units, sizes = P.matrix_units(arch)
        low = kernel_precision(name)
        if low:
            dtype = (f"It already runs in {low}: what is left is a kernel better tuned for its "
                     "shapes (for cuBLAS/hipBLASLt GEMMs PyTorch's TunableOp, PYTORCH_TUNABLEOP_ENABLED=1; for Triton kernels "
                     "their autotune configs; torch.compile(mode='max-autotune')) and fewer, larger products.")
        elif cls == "fp32_matmul":  # its name says fp32
            dtype = f"It computes in float32 (its name says so): {P.precision_advice(arch, tf32_already=kernel_runs_tf32(name))}."
        else:  # the name shows no precision (rocBLAS's Tensile names code it in letters), and the operator's args are not read here
            dtype = f"If it computes in float32, {P.precision_advice(arch)}."
        return f"This matrix kernel dominates device time{by}: give it shapes that run at full speed on the {units}: {sizes}. {dtype}"
    if cls == "communication":
        return (f"This collective dominates device time{by}: its time is the bytes it moves plus the wait for the slowest rank "
                "(collective-wait says how much is waiting). Overlap it with compute (DDP's gradient buckets, FSDP's prefetch) "
                "and send fewer bytes (bf16 gradients through a DDP communication hook).")
    if cls == "attention":
        return (f"This attention kernel dominates device time{by}: its time grows with the sequence length squared and the "
                "heads. Use a fused kernel (torch.nn.functional.scaled_dot_product_attention) if it is not one, and cut the "
                "padding (pack sequences of different lengths).")
    if cls in ("norm", "elementwise"):
        low = kernel_precision(name)  # (a bf16 or fp16 kernel has no lower precision to move fewer bytes in)
        return (f"This {WORK_CLASSES[cls]} kernel dominates device time{by}: it moves bytes, it does little arithmetic. Fuse it "
                "with the kernels around it (torch.compile) or make fewer passes over the tensor"
                + (f" (it runs in {low} already)." if low else ", or move fewer bytes (a lower precision)."))
    return (f"This kernel dominates device time{by}: check what it does for the shapes and dtype it is given, call it less "
            "often or on bigger batches, or swap in a faster implementation.")


def leaves_to(finding) -> list:
    """An operator most of whose time is one kernel launch, the first launch of a kernel loading its
    code, is the critical path's one-off launch (its launch class, `one_off_ns`, charged under this
    operator): that finding names the narrower cause, and this one is left to it
    (engine.leave_to_owners). rocm_mi250_train: one hipLaunchKernel of 6.54 ms under the first
    AccumulateGrad was both the operator's hotspot (6.68 ms) and the path's kernel launches (6.67 ms).
    Likewise an operator one call of which holds half its time, where that call is the host's heaviest
    call in one of device-idle's named gaps (its sample events): device-idle's finding names the one-off
    and the idle it caused. A source line at least half of whose device time is hand-written attention
    that critical-path names on the same statement (its normalisation class's `attention_work_ns`)
    leaves to that finding, which gives the fix, and so does a kernel that is that attention's softmax
    (among the finding's heaviest items). A collective kernel leaves to comm-exposed, which names the
    time the steps wait for it with the same fix (mi300x_ddp_resnet_act_checkpoint: 'ncclDevKernel_Generic
    takes 32.7% on the critical path' beside '32.15 ms of communication not overlapped with compute')."""
    v = finding.evidence.values
    if "source" in v and v.get("device_ns"):
        # a statement most of whose device time is hand-written attention: critical-path's finding on its softmax names
        # it, its products and score arithmetic, with the fix (h100_timesformer: modeling_timesformer.py:200, 138.97 ms)
        return [("critical-path", lambda c: c.evidence.values.get("class") == "norm" and c.location.source == v["source"]
                 and c.evidence.values.get("attention_work_ns", 0) * 2 >= v["device_ns"])]
    if v.get("device_ns") and "name" in v and is_comm_kernel_name(v["name"]):
        # a collective: comm-exposed names the part of it the step waits for, with the same fix (overlap, fewer bytes)
        return [("comm-exposed", None)]
    if v.get("device_ns") and "name" in v:
        # a kernel that is hand-written attention's softmax, which critical-path names with its fix
        return [("critical-path", lambda c: c.evidence.values.get("class") == "norm" and c.evidence.values.get("unfused_attention_ns", 0) > 0
                 and v["name"] in {h["item"] for h in c.evidence.values.get("heaviest", [])})]
    if not v.get("cpu_ns") or "name" not in v or "source" in v:  # a kernel (device_ns) or a source line: no operator
        return []

    def same_launch(c) -> bool:
        cv = c.evidence.values
        heaviest = cv.get("heaviest") or [{}]
        return cv.get("class") == "launch" and heaviest[0].get("op") == v["name"] and cv.get("one_off_ns", 0) * 2 >= v["cpu_ns"]
    owners = [("critical-path", same_launch)]
    if _one_off_call(v):
        # one call holds half its time, and it is the host call of a device-idle gap: device-idle names that
        # one-off with the idle it caused (cuda_alexnet_train: the first aten::to, 29,937.80 ms creating the
        # CUDA context, was 'aten::to takes 69.0%' and the lead of 'Device 0 idle 80.3%' alike)
        owners.append(("device-idle", lambda g: v.get("longest_id") in g.evidence.sample_event_ids))
    return owners


def _running_ns(ctx: Context, name: str) -> int:
    """The time some kernel of this name runs on the rank (the union of its calls' intervals, on
    every stream and device): a rank without steps has no critical path, and the kernel's calls
    summed count twice where it runs on several streams at once, past the span they are a share of."""
    union = union_sql(f"rank = {int(ctx.rank)} AND kind = 'kernel' AND name = {q(name)}")
    return int(ctx.run.sql(f"SELECT coalesce(sum(end_ns - start_ns), 0)::BIGINT FROM ({union})").fetchone()[0])


def _on_path(ctx: Context, what: str, name: str) -> int | None:
    # what shortening it could save is its time on the steps' critical paths (a CPU operator that
    # runs while the device is busy saves nothing); without steps there is no path: its duration
    return on_path_ns(ctx.run, ctx.rank, **({"kernel": name} if what == "kernel" else {"top_op": name}))


def _passes(ctx: Context, what: str, v: dict, key: str) -> bool:
    """The operator's or kernel's time, and its time on the critical path, reach the share."""
    if v.get(key) is None or not ctx.analysed_ns or v[key] / ctx.analysed_ns < THRESHOLDS["HOTSPOT_SHARE_MIN"]:
        return False
    on_path = _on_path(ctx, what, v["name"])
    return on_path is None or on_path / ctx.analysed_ns >= THRESHOLDS["HOTSPOT_SHARE_MIN"]


def _line_finding(ctx: Context):
    """The heaviest user statement by its own time (analyzers/lines.py): device time where the
    rank has devices, else CPU time of its outermost operators; backward work counts on the
    forward statement that built it."""
    key = "device_ns" if ctx.has_device() else "cpu_ns"
    looped = [x["source"] for x in python_loop.looped_statements(ctx)]  # python-loop's, with a batched fix
    not_looped = f"WHERE source NOT IN ({', '.join(q(s) for s in looped)})\n" if looped else ""
    st = ctx.summary["steps"]
    steps = list(st.get("steady_steps") or []) if st["count"] else None  # calls per steady step
    sql = f"SELECT * FROM ({line_times_sql(ctx.rank, steps)})\n{not_looped}ORDER BY {key} DESC, source LIMIT 1"
    v = row(ctx.run, sql)
    if v.get(key) is None or not ctx.analysed_ns or v[key] / ctx.analysed_ns < THRESHOLDS["HOTSPOT_SHARE_MIN"]:
        return None
    share = v[key] / ctx.analysed_ns
    backward = v[key.replace("_ns", "_backward_ns")] or 0
    code = f" `{v['code'][:60]}`" if v.get("code") else ""
    split = f"; forward {ms(v[key] - backward)}, backward {ms(backward)}" if backward else ""
    per_step = f", {v['calls_per_step']:.0f} calls/step" if v.get("calls_per_step") else ""
    replayed = _replayed(ctx, v["source"]) if key == "device_ns" and v[key] else {"ns": 0, "captured_ns": 0, "ops": []}
    return ctx.finding(
        title=f"Hotspot source line: {v['source']}{code} takes {pct(share)} ({ms(v[key])}{split}{per_step})",
        impact_ns=v[key], saving_bound_ns=v[key], location=Location(source=v["source"]), sql=sql,
        values={**{k: v[k] for k in ("source", "code", "calls", "calls_per_step", "cpu_ns", "cpu_backward_ns", "device_ns",
                                     "device_backward_ns")}, "graph_replay_ns": replayed["ns"],
                "graph_replay_captured_ns": replayed["captured_ns"],
                "graph_replay_capture_ops": [{"op": op, "top_op": top_name, "device_ns": ns} for op, top_name, ns in replayed["ops"]]},
        sample_event_ids=[], uses_source=True, recommendation=_line_advice(v, key, replayed))


def _replayed(ctx: Context, source: str) -> dict:
    """The device time of the statement `source` that a graph launch replayed (`events.graph`):
    `ns`; of it, `captured_ns`, the work paired with the graph's capture (`capture_top_op`:
    import --capture), which is the statement's as it launched it at capture; and `ops`, that
    work's operators at capture, (innermost, outermost, ns), the heaviest first."""
    rows = ctx.run.sql(f"""SELECT e.capture_op, e.capture_top_op, sum(e.dur_ns)::BIGINT AS ns
        FROM events e JOIN frames f ON f.frame_id = e.source_frame_id
        WHERE e.rank = {int(ctx.rank)} AND e.graph AND {device_work('e')} AND {line_key_sql('f')} = {q(source)}
        GROUP BY ALL ORDER BY ns DESC, e.capture_top_op NULLS LAST, e.capture_op NULLS LAST""").fetchall()
    ops = [(op, top_name, int(ns)) for op, top_name, ns in rows if top_name is not None]
    return {"ns": sum(int(ns) for *_, ns in rows), "captured_ns": sum(ns for *_, ns in ops), "ops": ops}


def _captured_ops(ops: list[tuple], shown: int = 3) -> str:
    """The operators at capture of a statement's replayed work, in words: `aten::addmm (in
    vllm::rocm_unquantized_gemm) 0.95 ms`, the heaviest `shown`, then how many more."""
    words = [f"{op or top_name}{f' (in {top_name})' if op and op != top_name else ''} {ms(ns)}" for op, top_name, ns in ops[:shown]]
    more = len(ops) - shown
    return ", ".join(words) + (f" and {more} other operator{'' if more == 1 else 's'}" if more > 0 else "")


def _line_advice(v: dict, key: str, replayed: dict) -> str:
    """The statement's advice. A statement most of whose device time is a graph it replays
    (`events.graph`: vLLM's `cuda_graph.py:208`, the replay call) is not where that work was
    written: the graph's kernels are, by the statements that captured them, which a capture's trace
    gives (graph_capture.py, `import --capture`). Imported with that trace, the replayed work is
    paired with its capture (`capture_op`) and takes the statement that launched it then: such a
    statement is where the work was written, and its advice names the operators it captured
    (vLLM's `gpt_oss_triton_kernels_moe.py:269`: vllm::moe_forward, 7.17 ms), not the import it had."""
    total = v[key] if key == "device_ns" else 0
    them, it, its = ("that operator", "it", "its") if len(replayed["ops"]) == 1 else ("those operators", "them", "their")
    if total and replayed["captured_ns"] * 2 >= total:
        return (f"{ms(replayed['captured_ns'])} of this statement's {ms(total)} of device time is work a CUDA/HIP graph "
                f"replays, which this statement launched when the graph was captured, inside {_captured_ops(replayed['ops'])}: "
                f"this is where that work was written (the replay only saves its launches). Make {them} cheaper "
                f"(shapes, dtype, a better tuned or fused kernel) or run {it} less often; {its} kernels are below.")
    if total and replayed["ns"] * 2 >= total:
        return (f"{ms(replayed['ns'])} of this statement's {ms(total)} of device time is a CUDA/HIP graph it replays: the "
                "statement is the replay, not the work. The graph's kernels (below) are what to make cheaper; import the "
                "trace with its capture's trace (`neuron-explorer import TRACE --capture CAPTURE`) to see them by the "
                "statements that captured them.")
    backward = v["device_backward_ns" if key == "device_ns" else "cpu_backward_ns"]
    return (f"Most time comes from the work this statement starts{' (its backward included)' if backward else ''}: make it cheaper "
            "(shapes, dtype, a batched or fused form of a Python loop) or run it less often.")


TOP_KERNEL = RankQuery(
    "hotspot_kernel", "SELECT name, sum(dur_ns)::BIGINT FROM events WHERE rank = ? AND kind = 'kernel' GROUP BY name "
    "ORDER BY 2 DESC, name LIMIT 1",
    "SELECT rank, name, ns FROM (SELECT rank, name, sum(dur_ns)::BIGINT AS ns FROM events WHERE kind = 'kernel' GROUP BY rank, name"
    ") QUALIFY row_number() OVER (PARTITION BY rank ORDER BY ns DESC, name) = 1 ORDER BY rank")
RANK_QUERIES = (TOP_KERNEL,)
"""The kernel name with the most device time, for a batch of ranks at once."""


def screen(run, summaries: dict) -> set[int]:
    """Ranks where the heaviest top-level operator (the summary's), kernel name or user line
    reaches the check's share: the check's first test (its critical-path test only lowers)."""
    share = THRESHOLDS["HOTSPOT_SHARE_MIN"]
    top_op = {r: (s["top_level_ops"][0]["cpu_ns"] if s["top_level_ops"] else 0) for r, s in summaries.items()}
    top = {int(rank): [(name, ns)] for rank, name, ns in run.sql(TOP_KERNEL.many).fetchall()}  # each rank's heaviest kernel name
    if getattr(run, "prepared", None) is not None:  # the batch's rows of TOP_KERNEL (rank_rows.prepare keeps them, no second read)
        run.prepared[TOP_KERNEL.name] = {r: top.get(r, []) for r in summaries}
    kernel = {r: got[0][1] for r, got in top.items()}
    line = {r: max((device if summaries[r]["devices"] else cpu) for _, cpu, device in lines)
            for r, lines in line_times_by_rank(run).items() if r in summaries}
    return share_at_least(summaries, top_op, share) | share_at_least(summaries, kernel, share) | share_at_least(summaries, line, share)


def check(ctx: Context) -> list:
    r = ctx.rank
    # the DataLoader's fetch is input-pipeline's (its advice fits a loader); the operator is the heaviest other one.
    # A compile's range (vocab.compile_range) is one-time work, no operator to make cheaper, and the compiles
    # inside an operator are compile-time's: the summary's operators (lines.top_level_ops_sql) leave both out
    ops = [o for o in ctx.summary.get("top_level_ops") or []
           if not re.search(LOADER_NAME, o["name"] or "") and not is_compile_range(o["name"])]
    out = [
        _finding(ctx, "operator", f"""SELECT e.name, greatest(sum(e.dur_ns) - coalesce(sum(c.compile_ns), 0) - coalesce(sum(w.wait_ns), 0)
  - coalesce(sum(a.alloc_ns), 0), 0)::BIGINT AS cpu_ns, count(*) AS calls, min(e.event_id) AS sample_id, mode(e.source_frame_id) AS frame_id,
  max(e.dur_ns)::BIGINT AS longest_ns, first(e.event_id ORDER BY e.dur_ns DESC, e.event_id) AS longest_id
FROM events e LEFT JOIN ({compile_inside_sql(r)}) c ON c.top_op_id = e.event_id
LEFT JOIN (SELECT top_op_id, sum(dur_ns) AS wait_ns FROM ({waiting_calls_sql(r)}) GROUP BY top_op_id) w ON w.top_op_id = e.event_id
LEFT JOIN (SELECT top_op_id, sum(dur_ns) AS alloc_ns FROM events WHERE rank = {r} AND {allocator_call()} GROUP BY top_op_id) a
  ON a.top_op_id = e.event_id
WHERE e.rank = {r} AND {top_op('e')} AND NOT regexp_matches(e.name, '{LOADER_NAME}') AND NOT {compile_range('e')}
GROUP BY e.name ORDER BY cpu_ns DESC, e.name LIMIT 1""", Location(), "cpu_ns",
                 _operator_advice,
                 # the summary's heaviest top-level operators are in the query's order: the first that is no fetch
                 top=(ops[0]["name"], ops[0]["cpu_ns"]) if ops else None),
    ]
    if ctx.has_device():
        out.append(_finding(ctx, "kernel", f"""SELECT k.name, sum(k.dur_ns)::BIGINT AS device_ns, count(*) AS calls, min(k.event_id) AS sample_id,
  any_value(k.device) AS device, mode({charged_top_op('k', 'o')}) AS op, mode(k.source_frame_id) AS frame_id
FROM events k LEFT JOIN events o ON o.event_id = k.top_op_id WHERE k.rank = {r} AND k.kind = 'kernel'
GROUP BY k.name ORDER BY device_ns DESC, k.name LIMIT 1""", Location(), "device_ns",
                            functools.partial(_kernel_advice, ctx),
                            # the same name and time without the join to the operators (2 ms instead of 8-9 ms on a 5k-event rank)
                            top=(rank_rows(ctx.run, TOP_KERNEL, r) or [(None, None)])[0]))
    if ctx.has_user_frames():
        out.append(_line_finding(ctx))
    return [f for f in out if f is not None]
