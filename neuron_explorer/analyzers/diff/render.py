"""A comparison in words: the verdict's reason from its code (verdict.py), the notes, the work per
step, and the text of `neuron-explorer diff`. Durations and shares are fmt.py's.

Must not: decide anything (verdict.py does) or print (render_text returns text).
"""

from __future__ import annotations

import math

from ...fmt import duration, kernel_labels
from ..stats import RECORDING_QUANTILE, Sample
from .result import (
    ALPHA,
    MIN_SHARE_OF_STEP,
    MIN_STEADY_STEPS,
    POWER,
    RUN_SET_TESTS,
    TYPE_ORDER,
    Diff,
)
from .verdict import (
    CANNOT_TELL,
    FASTER,
    NO_CHANGE,
    SLOWER,
    STEP_TIME,
    Decision,
    Facts,
    work_estimate_pct,
)

TEST_NAMES = {"mann-whitney-u": "Mann-Whitney U", "welch-t": "Welch's t", "t-on-run-values": "Student's t on the recordings' values",
              "paired-t-on-run-ratios": "paired t on the ratios of recordings made in pairs",
              "paired-t-on-run-differences": "paired t on the differences of recordings made in pairs",
              "none": "no test"}


def signed_duration(ns: float) -> str:
    return f"{'+' if ns >= 0 else '-'}{duration(abs(ns))}"


def measure_name(run_sets: bool) -> str:
    """What the step-time verdict compares: the steps' median, or with several recordings per side
    the recordings' values."""
    return f"the recordings' {RECORDING_QUANTILE:.0%}-quantile step" if run_sets else "the median step"


def work_change(cost: dict) -> str:
    """The priced work's change in words: "the test's steps do 16.4% more host work than the base's,
    priced at the base's time per call (+3.14 ms per step, p=8.3e-65)"."""
    return (f"the test's steps do {abs(cost['delta_pct']):.1f}% {'more' if cost['delta_pct'] > 0 else 'less'} "
            f"{'host' if cost['metric'] == 'cpu' else 'device'} work than the base's, priced at the base's time per call "
            f"({signed_duration(cost['delta_ns_per_step'])} per step, p={cost['p_value']:.2g})")


def calls_change(work: dict) -> str:
    """The work's change in words: "the test's steps make 19.9% more operator calls than the base's"."""
    more_less = "more" if work["test_median"] > work["base_median"] else "fewer"
    return f"the test's steps make {abs(work['delta_pct']):.1f}% {more_less} operator calls than the base's"


def _advice(f: Facts) -> str:
    """How much more to record to detect detect_pct."""
    if f.runs_to_record:
        return f"record about {f.runs_to_record} {'pairs of runs' if f.paired else 'runs per side'}"
    return f"record about {f.steps_to_record} steps per run"


def _ci_pct(f: Facts) -> str:
    """The change's 95% CI as percentages of the reference: the interval of the ratio test/base less
    1, so never below -100%."""
    return f"{100 * f.ci_low_ns / f.ref_ns:+.1f}% .. {100 * f.ci_high_ns / f.ref_ns:+.1f}%"


def verdict_line(s) -> str:
    """The verdict in words, from the decision as the JSON carries it (`step_time`: verdict, basis,
    estimate_pct, delta_pct, significant), as a dict or a StepTime: "verdict: SLOWER by about +12.0%,
    on the work per step (the step time's own change, -15.1%, is not significant)"."""
    get = s.get if isinstance(s, dict) else lambda k: getattr(s, k)
    verdict, estimate, delta = get("verdict"), get("estimate_pct"), get("delta_pct")
    if verdict not in (SLOWER, FASTER):
        return f"verdict: {verdict.upper()}"
    size = f" by about {estimate:+.1f}%" if estimate is not None and math.isfinite(estimate) else ""
    if get("basis") == STEP_TIME:
        return f"verdict: {verdict.upper()}{size}: the step time's change is significant"
    own = f", {delta:+.1f}%," if delta is not None and math.isfinite(delta) else ""
    return (f"verdict: {verdict.upper()}{size}, on the work per step: the step time's own change{own} is not significant, "
            f"and its 95% CI does not rule this out")


def reason_text(code: str, f: Facts) -> str:
    """The sentence of `step_time.reason`: why the rule `code` (verdict.RULES) decided, in figures."""
    measure, floor = measure_name(f.between_runs), f"{MIN_SHARE_OF_STEP:.0%}"
    if code == "same_recordings":
        return ("base and test are the same recordings (the same steps at the same times): a run compared with itself "
                "shows no change whatever its noise; to see what a change did, record the changed code into another folder "
                "(`neuron-explorer record -o runs/test train.py`) and compare the two")
    if code == "not_same_job":
        return (f"the two runs are not the same job ({'; '.join(f.job_differences)}): their step times are not comparable, "
                f"whatever the change ({f.delta_pct:+.0f}%)")
    if code == "too_few_steps":
        few = ", ".join(f"{role} has {n}" for role, n in f.few_steps)
        return (f"fewer than {MIN_STEADY_STEPS} steady-state steps ({few}): record at least {f.steps_to_record} steps per run "
                f"to detect a {f.detect_pct:g}% change")
    if code in ("steps_slower", "steps_faster"):
        return (f"{measure} changed by {f.delta_pct:+.1f}% (p={f.p_value:.2g}, {f.test_name}), and its 95% CI "
                f"({_ci_pct(f)}) lies past the {floor} floor")
    if code in ("work_slower", "work_faster"):
        return (f"{work_change(f.cost)}, and {measure}'s 95% CI ({_ci_pct(f)}, p={f.p_value:.2g}) does not rule out a change of "
                f"{floor}: about {work_estimate_pct(f):+.1f}%")
    if code == "deltas_past_floor":
        big = f.significant_deltas
        return (f"the significant {big['type'].replace('_', ' ')} deltas ({big['metric']}) add up to "
                f"{signed_duration(big['delta_ns_per_step'])} per step, more than the {floor} "
                f"({duration(f.floor_ns)}) that 'no significant change' allows, but the step time does not change past the "
                f"floor (p={f.p_value:.2g}): either time outside these rows changed the other way, or the steps are too noisy "
                f"to show it ({_advice(f)})")
    if code == "one_recording_cannot_rule_out":
        return (f"{work_change(f.cost)}, but {measure}'s 95% CI ({_ci_pct(f)}) lies within ±{floor}: with one recording per "
                f"side the steps cannot show whether the two recordings' machines ran at different speeds (the calls both make "
                f"took {f.cost['test_speed']:.2f}x as long in the test), so they cannot rule the work out; record several runs "
                f"per side (`neuron-explorer record --runs 5`)")
    if code == "steps_within_floor":
        return f"the 95% CI of the change ({_ci_pct(f)}) lies within ±{floor} (p={f.p_value:.2g}, {f.test_name})"
    if code == "steps_cannot_tell":
        ci_text = f"its 95% CI ({_ci_pct(f)})" if f.ci_known else "its confidence interval is unknown"
        return (f"{measure} changed by {f.delta_pct:+.1f}% (p={f.p_value:.2g}, {f.test_name}), but {ci_text} neither lies "
                f"within ±{floor} nor wholly past it: these {'recordings' if f.between_runs else 'steps'} cannot tell a change "
                f"of {floor} from none; {_advice(f)}")
    raise ValueError(f"no reason text for {code!r}")


def notes_text(f: Facts, decision: Decision, work: dict | None) -> list[str]:
    """The notes beside the verdict: what the steps could detect, a different job, one recording
    per side, runs without steps, and work that changed under a verdict that is not a change."""
    notes = []
    if f.same_recordings:
        return notes
    if decision.steps_rule.reason == "steps_within_floor" and math.isfinite(f.min_detectable_pct) and f.min_detectable_pct > f.detect_pct:
        notes.append(f"these runs detect only changes over about {f.min_detectable_pct:.0f}% (with {POWER:.0%} probability); "
                     f"{_advice(f)} to detect {f.detect_pct:g}%")
    if f.job_differences:  # a change between two different programs says nothing about either
        notes.append("not the same job: " + "; ".join(f.job_differences))
    if decision.verdict in (SLOWER, FASTER) and decision.basis == STEP_TIME and not f.between_runs:
        notes.append("one recording per side: the test sees the variation between steps, not between recordings (process "
                     "placement, machine load); for a CI gate record several runs per side (`neuron-explorer record --runs 5`) "
                     "and pass the two folders")
    if not f.every_run_has_steps:
        notes.append("a run has no profiler steps: significance cannot be judged (record with prof.step() or `neuron-explorer record`)")
    cost = f.cost
    if work and (work["changed"] or cost.get("significant")) and decision.verdict in (CANNOT_TELL, NO_CHANGE):
        priced = (f"; priced at the base's time per call, {signed_duration(cost['delta_ns_per_step'])} per step "
                  f"({cost['delta_pct']:+.1f}% of the base's step, p={cost['p_value']:.2g})" if cost.get("significant") else "")
        notes.append(f"{calls_change(work)} ({work['base_median']:.0f} → {work['test_median']:.0f} per step, p={work['p_value']:.2g}){priced}: "
                     f"the code's work per step changed, which the machine's speed does not change, though the step time is "
                     f"'{decision.verdict}'")
    return notes


def work_lines(w: dict) -> tuple[str, str | None]:
    """The work per step in words (the text and the Compare view): the operator calls, and the
    priced work (None when there is none). `w` is step_time.work, as a dict or from JSON (nulls)."""
    pct = w.get("delta_pct")
    wp = "" if pct is None or not math.isfinite(pct) else f" ({pct:+.1f}%)"
    calls = (f"work per step: operator calls (median) {w['base_median']:.0f} → {w['test_median']:.0f}{wp}, "
             f"Mann-Whitney U p={w['p_value']:.2g}" + (" — changed" if w["changed"] else ""))
    c = w.get("cost")
    if not c:
        return calls, None
    return calls, (f"{'host' if c['metric'] == 'cpu' else 'device'} work priced at the base's time per call: "
                   f"{duration(c['base_ns_per_step'])} → {duration(c['test_ns_per_step'])} per step ({c['delta_pct']:+.1f}% of the "
                   f"base's step), Mann-Whitney U p={c['p_value']:.2g}" + (" — changed" if c["significant"] else ""))


def _step_list(steps: list[int]) -> str:
    if len(steps) > 3 and steps == list(range(steps[0], steps[-1] + 1)):
        return f"{steps[0]}..{steps[-1]}"
    return ", ".join(map(str, steps)) or "none"


def render_text(diff: Diff, top: int = 20) -> str:
    """The text of `neuron-explorer diff`: each side's steps, the verdict and why, the work per
    step, utilisation, and the `top` largest changes of each delta list."""
    s = diff.step_time

    def sample(x: Sample) -> str:
        if x.n < 2:
            return f"{duration(x.median)} (n={x.n})"
        return f"median {duration(x.median)}, mean {duration(x.mean)} [95% CI {duration(x.ci_low)} .. {duration(x.ci_high)}]"

    lines = [f"warning: not the same job ({'; '.join(s.job_differences)}): the step times are not comparable"] if s.job_differences else []
    for role, path, x in (("base", diff.base, s.base), ("test", diff.test, s.test)):
        recordings = s.runs.get(role, [])
        if len(recordings) > 1:
            lines.append(f"{role} {path}: {len(recordings)} recordings, step time {sample(x)} over all their steady steps")
            for i, r in enumerate(recordings, 1):
                used = r["steps"].get("used", [])
                value = duration(r["value_ns"]) if r.get("value_ns") is not None else "n/a"
                med = duration(r["median_ns"]) if r["median_ns"] is not None else "n/a"
                aside = ", set aside as disturbed" if r.get("set_aside") else ""
                lines.append(f"  {i}. {r['path']}: value {value} (median {med}), {len(used)} of {r['steps'].get('steps', 0)} "
                             f"steps used{aside}")
            continue
        sel = s.steps.get(role, {})
        used = sel.get("used", [])
        lines.append(f"{role} {path}: step time {sample(x)}, {len(used)} of {sel.get('steps', 0)} steps used ({_step_list(used)})")
        for lo in sel.get("left_out", []):
            lines.append(f"  left out step {lo['step']} ({duration(lo['dur_ns'])}): {lo['reason']}")
    p = "p=n/a" if not math.isfinite(s.p_value) else f"p={s.p_value:.3g}"
    ci = ("" if not (math.isfinite(s.delta_ci_low_pct) and math.isfinite(s.delta_ci_high_pct))
          else f" [95% CI {s.delta_ci_low_pct:+.1f}% .. {s.delta_ci_high_pct:+.1f}%]")
    eff = "" if not math.isfinite(s.effect_size) else f", Cliff's delta {s.effect_size:+.2f}"
    pct = "" if not math.isfinite(s.delta_pct) else f" ({s.delta_pct:+.1f}%)"
    test_name = TEST_NAMES.get(s.test_name, s.test_name)
    change = signed_duration(s.delta_ns) if math.isfinite(s.delta_ns) else "n/a"
    lines.append(f"change of {measure_name(s.test_name in RUN_SET_TESTS)}: {change}{pct}{ci}, {test_name} {p}{eff}")
    lines.append(verdict_line(s))
    if s.reason:
        lines.append(f"  because {s.reason}")
    if s.test_reason:
        lines.append(f"  {test_name} was used: {s.test_reason}")
    if s.work:
        calls, priced = work_lines(s.work)
        lines += [calls] + ([f"  {priced}"] if priced else [])
    ub, ut = diff.utilisation.get("base") or {}, diff.utilisation.get("test") or {}
    if ub.get("mfu_median") is not None and ut.get("mfu_median") is not None:
        lines.append(f"MFU (median over steady steps): {100 * ub['mfu_median']:.3g}% → {100 * ut['mfu_median']:.3g}% "
                     f"({100 * (ut['mfu_median'] - ub['mfu_median']):+.3g} points)")
    elif ub.get("tflops_per_s_median") or ut.get("tflops_per_s_median"):
        why = sorted(set(ub.get("mfu_missing", []) + ut.get("mfu_missing", [])))  # the analysis's own words (utilisation.mfu_missing)
        lines.append("MFU: unknown (" + ("; ".join(why) or "no device peak") + ")")
    if ub.get("tflops_per_s_median") and ut.get("tflops_per_s_median"):
        lines.append(f"achieved TFLOP/s per step (median): {ub['tflops_per_s_median']:.4g} → {ut['tflops_per_s_median']:.4g}")
    unit = ("; each recording's mean per step is one value, over the recordings the step time kept"
            if s.test_name in RUN_SET_TESTS else "")
    lines += ["", f"largest changes per step over the steady steps (* = significant: p < {ALPHA} and at least "
                  f"{MIN_SHARE_OF_STEP:.0%} of the step{unit})"]
    for type_ in TYPE_ORDER:
        rows = [d for d in diff.deltas if d.type == type_][:top]
        if not rows:
            continue
        lines.append(f"{type_.replace('_', ' ')}s:")
        # a path keeps its end (file:line), a kernel its name as every view shortens it (two rows alike told apart)
        names = kernel_labels([k for d in rows for k in (d.key, d.base_key) if k], 70) if type_ == "kernel" else {}
        label = (lambda k, names=names: names.get(k, k)) if type_ == "kernel" else (lambda k: k[-70:])
        for d in rows:
            was = f" (was {label(d.base_key)})" if d.base_key else ""
            status = "" if d.status == "changed" else f" [{d.status}]"
            pv = "" if not math.isfinite(d.p_value) else f" p={d.p_value:.2g}"
            sign = "+" if d.delta_ns_per_step >= 0 else "-"
            lines.append(f"  {'*' if d.significant else ' '} {sign}{duration(abs(d.delta_ns_per_step)):>11}  {d.metric:<6} "
                         f"{label(d.key)}{was}{status}  {duration(d.base_ns_per_step)} → {duration(d.test_ns_per_step)}{pv}")
    if not diff.deltas:
        lines.append("  (no differences)")
    lines += [f"note: {n}" for n in diff.notes]
    return "\n".join(lines)
