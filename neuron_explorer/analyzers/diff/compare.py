"""Compare two runs over their steady steps: the step time's test, the delta rows, how many steps
or recordings would detect a change, and the verdict (verdict.py's decision table) with its reason.

Step time is compared by medians (bootstrap confidence interval of their ratio), with
Mann-Whitney U, or Welch's t where both runs pass its screen (stats.compare_samples), and Cliff's
delta as the effect size. With several recordings per side the step time and the delta rows are
both tested on one value per recording (the recordings differ as wholes, which their steps cannot
show), paired where the recordings were made in pairs. Definitions: docs/COMPARE.md.

Must not: query a run itself (collect.py reads each side), decide the verdict (verdict.py's table
does) or write prose (render.py does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from .. import job
from ..stats import (
    RECORDING_QUANTILE,
    SLOW_RECORDING_SHARE,
    Test,
    bootstrap_median_ratio_ci,
    cliffs_delta,
    compare_samples,
    describe,
    detectable_change,
    log_ratio_t_ci,
    median,
    paired_difference_t,
    paired_ratio_t,
    pairs_to_detect,
    recording_value,
    robust_sd,
    run_level_t,
    runs_to_detect,
    slow_recordings,
    steps_to_detect,
)
from .collect import Side, read_side, recording_pairs
from .match import match_kernels, match_line_files
from .render import notes_text, reason_text
from .result import (
    ALPHA,
    MIN_SHARE_OF_STEP,
    MIN_STEADY_STEPS,
    POWER,
    TYPE_ORDER,
    Delta,
    Diff,
    StepTime,
)
from .verdict import FASTER, SLOWER, WORK, Facts, decide, work_estimate_pct
from .work import mean, work_per_step

CONSISTENCY_TYPES = ("source_line", "operator", "kernel")
"""Delta lists whose significant rows are summed to check the verdict (modules overlap lines)."""


@dataclass
class _StepTest:
    """The step time's test: between the steps of one recording per side, or between recordings."""
    outcome: Test
    ref: float  # the reference the change is a percentage of
    delta: float
    ci_low: float
    ci_high: float
    run_sd: float  # the recordings' standard deviation (between_runs), else NaN
    pairs: list[tuple[int, int]] | None  # the recordings compared as pairs, None when not paired
    aside: dict[str, list[int]]  # recordings set aside as disturbed, per role
    values: dict[str, list[float]]  # per role: each recording's value (stats.recording_value)


def compare(base_path: Path | str, test_path: Path | str, detect_pct: float | None = None) -> Diff:
    """Compare two runs (or run sets) over their steady-state steps. Deltas: source lines, then
    modules, operators, kernels; each by absolute change per step. `detect_pct` sizes the advice
    on how many steps to record (default: the MIN_SHARE_OF_STEP noise floor)."""
    detect = 100 * MIN_SHARE_OF_STEP if detect_pct is None else float(detect_pct)
    base, test = read_side(base_path), read_side(test_path)
    test_vals, test_disp = match_line_files(base.vals, test.vals, test.disp)  # one file, recorded by two paths
    test_vals = match_kernels(base.vals, test_vals)  # one kernel, named by two torch builds
    base_times, test_times = base.pooled_times, test.pooled_times
    base_stats, test_stats = describe(base_times), describe(test_times)
    between_runs = len(base.paths) + len(test.paths) >= 3
    st = _step_test(base, test, between_runs)
    p = st.outcome.p_value
    pct = 100.0 * st.delta / st.ref if st.ref else float("nan")
    floor = MIN_SHARE_OF_STEP * (st.ref if math.isfinite(st.ref) else 0.0)
    ci_known = math.isfinite(st.ci_low) and math.isfinite(st.ci_high)
    # slower/faster only when the whole interval is past the floor: a change that may be smaller
    # than the floor is what two recordings of the same code can show on a busy machine
    past_floor = ci_known and (st.ci_low >= floor if st.delta > 0 else st.ci_high <= -floor)
    significant = bool(math.isfinite(p) and p < ALPHA and abs(st.delta) >= floor and past_floor)

    # the rows are judged on the step time's unit: its steps with one recording per side; with several,
    # one value per recording (its mean per step), the recordings and pairs the step time kept
    row_test = _row_test(base, test, st.pairs, st.aside) if between_runs else None
    deltas = _delta_rows(base, test_vals, test_disp, base_times, test_times, row_test, floor)

    # how many steps (or recordings) it takes to see a change of `detect` percent, from the runs' own noise
    sd = _pooled_sd(base_times, test_times)
    all_sels = base.sels + test.sels
    every_run_has_steps = all(x.steps for x in all_sels)
    fewest_steady = min(len(x.used) for x in all_sels) if every_run_has_steps else 0
    left_out = max(len(x.left_out) for x in all_sels)
    target = detect / 100 * st.ref if math.isfinite(st.ref) else float("nan")
    runs_to_record = None
    if between_runs:
        detect_n = pairs_to_detect if st.pairs else runs_to_detect
        runs = detect_n(st.run_sd, target, ALPHA, POWER) if math.isfinite(target) else float("nan")
        runs_to_record = max(3, math.ceil(runs)) if math.isfinite(runs) else None
    needed = steps_to_detect(sd, target, ALPHA, POWER) if math.isfinite(sd) and math.isfinite(target) else float("nan")
    steps_to_record = max(MIN_STEADY_STEPS, math.ceil(needed) if math.isfinite(needed) else MIN_STEADY_STEPS) + left_out
    mdc = (100 * detectable_change(sd, fewest_steady, ALPHA, POWER) / st.ref
           if fewest_steady and math.isfinite(sd) and st.ref else float("nan"))
    if between_runs and math.isfinite(st.run_sd) and st.ref:
        spread = math.sqrt(1 / len(st.pairs)) if st.pairs else math.sqrt(1 / len(base.paths) + 1 / len(test.paths))
        mdc = 100 * (2.8 * st.run_sd * spread) / st.ref  # z(0.975) + z(0.8) = 2.8

    def steady(sel) -> int:
        return len(sel.used) if sel.steps else 0

    few = tuple((role, steady(sel)) for role, side in (("base", base), ("test", test))
                for sel in side.sels[:1] + [x for x in side.sels[1:] if steady(x) < MIN_STEADY_STEPS]
                if steady(sel) < MIN_STEADY_STEPS)
    work = work_per_step(base, test)
    facts = Facts(
        fewest_steady_steps=fewest_steady, few_steps=few, steps_to_record=steps_to_record, detect_pct=detect,
        significant=significant, delta_ns=st.delta, delta_pct=pct, ref_ns=st.ref, floor_ns=floor, p_value=p,
        test_name=st.outcome.name, ci_low_ns=st.ci_low, ci_high_ns=st.ci_high, between_runs=between_runs,
        paired=bool(st.pairs), runs_to_record=runs_to_record, cost=(work or {}).get("cost") or {},
        significant_deltas=_largest_significant_total(deltas), job_differences=tuple(job.differences(base.job, test.job)),
        min_detectable_pct=mdc, every_run_has_steps=every_run_has_steps,
        same_recordings=bool(base.pooled_times) and base.times == test.times and base.spans == test.spans)
    decision = decide(facts)
    estimate = float("nan")
    if decision.verdict in (SLOWER, FASTER):
        estimate = work_estimate_pct(facts) if decision.basis == WORK else pct
    ci_pct = [100 * x / st.ref if st.ref else float("nan") for x in (st.ci_low, st.ci_high)]
    step_time = StepTime(
        base_stats, test_stats, st.delta, pct, st.outcome.statistic if st.outcome.name == "welch-t" else float("nan"), p,
        significant and decision.reason in ("steps_slower", "steps_faster"), decision.verdict,
        reason=reason_text(decision.reason, facts), test_name=st.outcome.name, test_reason=st.outcome.reason,
        statistic=st.outcome.statistic, effect_size=st.outcome.effect_size, delta_ci_low_ns=st.ci_low, delta_ci_high_ns=st.ci_high,
        delta_ci_low_pct=ci_pct[0], delta_ci_high_pct=ci_pct[1],
        steps={"base": base.sels[0].to_dict(), "test": test.sels[0].to_dict()}, detect_pct=detect, min_detectable_pct=mdc,
        steps_to_record=steps_to_record, significant_deltas=facts.significant_deltas, runs_to_record=runs_to_record,
        job_differences=list(facts.job_differences), work=work, basis=decision.basis, estimate_pct=estimate,
        runs={role: [{"path": path, "value_ns": st.values[role][i] if times else None, "median_ns": median(times) if times else None,
                      "set_aside": i in st.aside[role], "steps": sel.to_dict()}
                     for i, (path, times, sel) in enumerate(zip(side.paths, side.times, side.sels))]
              for role, side in (("base", base), ("test", test))})
    return Diff(str(base_path), str(test_path), step_time, deltas, notes_text(facts, decision, work),
                {"base": base.util, "test": test.util}, decision.reason)


def _step_test(base: Side, test: Side, between_runs: bool) -> _StepTest:
    """The step time's change and its test. One recording per side: the steps' medians
    (stats.compare_samples, bootstrap CI). Several: one value per recording, recordings more than
    SLOW_RECORDING_SHARE slower than their side's fastest set aside, paired t on the ratios when the
    recordings were made in pairs (and whatever slowed one recording of a pair slowed its partner),
    else Student's t."""
    values = {role: [recording_value(t) for t in side.times] for role, side in (("base", base), ("test", test))}
    aside: dict[str, list[int]] = {"base": [], "test": []}
    if not between_runs:
        outcome = compare_samples(base.pooled_times, test.pooled_times)
        base_median = describe(base.pooled_times).median
        ratio_low, ratio_high = bootstrap_median_ratio_ci(base.pooled_times, test.pooled_times)
        return _StepTest(outcome, base_median, describe(test.pooled_times).median - base_median, base_median * (ratio_low - 1),
                         base_median * (ratio_high - 1), float("nan"), None, aside, values)
    pairs = recording_pairs(base, test)
    all_base, all_test = values["base"], values["test"]
    aside = {"base": slow_recordings(all_base), "test": slow_recordings(all_test)}
    if pairs and {(i, j) for i, j in pairs if i in aside["base"] or j in aside["test"]} <= {
            (i, j) for i, j in pairs if i in aside["base"] and j in aside["test"]}:
        # recorded in pairs, and whatever slowed a recording slowed its partner too: what the machine did
        # while a pair ran cancels in the pair's ratio, so every pair counts
        aside = {"base": [], "test": []}
        kept_base, kept_test = _kept(all_base, all_test, pairs, aside)
        run_test, name = paired_ratio_t(kept_base, kept_test), "paired-t-on-run-ratios"
        why = (f"{len(pairs)} pairs of recordings made together on one host: paired t ({run_test.df} df) on the log of each "
               f"pair's ratio of values (test / base; a recording's value is its {RECORDING_QUANTILE:.0%} quantile step), so what the "
               "machine did while a pair ran cancels")
    else:
        kept_base, kept_test = _kept(all_base, all_test, None, aside)
        run_test, name = run_level_t(kept_base, kept_test), "t-on-run-values"
        why = (f"{len(kept_base)} base and {len(kept_test)} test recordings: Student's t (pooled variance, {run_test.df} df) on each "
               f"recording's value (its {RECORDING_QUANTILE:.0%} quantile step: its steps at the machine's full speed), so the "
               "variation between recordings is in the test")
        if aside["base"] or aside["test"]:
            named = "; ".join(f"{role} {', '.join(str(i + 1) for i in idx)}" for role, idx in aside.items() if idx)
            why += (f"; set aside as disturbed, more than {SLOW_RECORDING_SHARE:.0%} slower than the fastest "
                    f"recording of their side (the two fastest are kept): {named}" + (" (one recording of a pair slowed without its partner: that "
                                                                 "does not cancel in their ratio, so no pairing)" if pairs else ""))
            pairs = None
    outcome = Test(name, run_test.t, run_test.p_value, cliffs_delta(kept_base, kept_test), why)
    ref = sum(kept_base) / len(kept_base)
    ci_low, ci_high = run_test.ci_low, run_test.ci_high  # paired: already the ratio's interval, times ref
    if name == "t-on-run-values":
        ratio_low, ratio_high = log_ratio_t_ci(kept_base, kept_test)
        ci_low, ci_high = ref * (ratio_low - 1), ref * (ratio_high - 1)
    return _StepTest(outcome, ref, run_test.delta, ci_low, ci_high, run_test.sd, pairs, aside, values)


def _delta_rows(base: Side, test_vals: dict, test_disp: dict, base_times: list[float], test_times: list[float], row_test,
                floor: float) -> list[Delta]:
    """Every (type, key, metric) that changed, base against test: the mean per step of each side,
    the test (`row_test`, or stats.compare_samples on the steps) and whether it is significant (p <
    ALPHA and at least `floor`). The most actionable view first (the user's lines, then modules,
    operators, kernels), each ranked by absolute change: an operator's total spans many lines, so
    across types sizes do not compare."""
    deltas = []
    for k in set(base.vals) | set(test_vals):
        type_, key, metric = k
        a = base.vals.get(k, [0.0] * len(base_times))
        b = test_vals.get(k, [0.0] * len(test_times))
        if row_test is None:
            base_mean, test_mean = mean(a), mean(b)
            kt = compare_samples(a, b)
        else:
            base_mean, test_mean, kt = row_test(a, b)
        d = test_mean - base_mean
        if d == 0:
            continue
        sig = bool(math.isfinite(kt.p_value) and kt.p_value < ALPHA and abs(d) >= floor)
        status = "new" if k not in base.vals else "gone" if k not in test_vals else "changed"
        shown = test_disp.get(key) or base.disp.get(key) or key
        base_shown = base.disp.get(key) if type_ == "source_line" and k in base.vals else None
        deltas.append(Delta(type_, shown, metric, base_mean, test_mean, d, (100.0 * d / base_mean) if base_mean else None,
                            kt.p_value, sig, status, base_shown if base_shown != shown else None, kt.name))
    deltas.sort(key=lambda x: (TYPE_ORDER.index(x.type), -abs(x.delta_ns_per_step), x.key))
    return deltas


def _kept(base: list, test: list, pairs: list[tuple[int, int]] | None, aside: dict[str, list[int]]) -> tuple[list, list]:
    """Per-recording values (the step time's, or a delta row's) that a run-set test compares: in
    pair order when the recordings are compared as pairs, else those not set aside as disturbed."""
    if pairs:
        return [base[i] for i, _ in pairs], [test[j] for _, j in pairs]
    return ([v for i, v in enumerate(base) if i not in aside["base"]],
            [v for j, v in enumerate(test) if j not in aside["test"]])


def _recording_means(vec: list[float], times: list[list[float]]) -> list[float]:
    """One delta row's mean per step in each recording of a side (`vec` holds the recordings' steady
    steps one after the other, as Side.vals does; `times` gives each recording's steps)."""
    out, at = [], 0
    for t in times:
        part = vec[at:at + len(t)]
        out.append(sum(part) / len(part) if part else 0.0)
        at += len(t)
    return out


def _row_test(base: Side, test: Side, pairs: list[tuple[int, int]] | None, aside: dict[str, list[int]]):
    """The delta rows' test with several recordings per side, on the step time's unit: each
    recording is one value (the row's mean per step in it). Recordings in pairs: paired t on the
    pairs' differences (a row can be 0 in a recording, so not on ratios); else Student's t on the
    recordings the step time kept (those set aside as disturbed are left out here too). So the
    variation between recordings, which the steps of one recording cannot show, is in every row's
    p-value as in the verdict's. Returns f(base_vec, test_vec) -> (base mean, test mean, Test)."""
    def row(a: list[float], b: list[float]):
        per_base, per_test = _recording_means(a, base.times), _recording_means(b, test.times)
        kept_base, kept_test = _kept(per_base, per_test, pairs, aside)
        if pairs:
            run_test, name = paired_difference_t(kept_base, kept_test), "paired-t-on-run-differences"
        else:
            run_test, name = run_level_t(kept_base, kept_test), "t-on-run-values"
        return mean(kept_base), mean(kept_test), Test(name, run_test.t, run_test.p_value, float("nan"), "")
    return row


def _pooled_sd(a: list[float], b: list[float]) -> float:
    """Robust standard deviation of the step times, pooled over both runs (1.4826 x MAD each; the
    sample standard deviation where the MAD is 0)."""
    parts = []
    for v in (a, b):
        if len(v) < 2:
            continue
        sd = robust_sd(v) or describe(v).std
        parts.append(sd)
    return math.sqrt(sum(x * x for x in parts) / len(parts)) if parts else float("nan")


def _largest_significant_total(deltas: list[Delta]) -> dict | None:
    """Per (type, metric) of the line, operator and kernel lists, the sum of the deltas per step
    that are significant and stay so after Holm's correction for the number of rows tested in that
    list (with dozens of rows, some pass p < 0.05 by chance; one such row must not overrule the
    step times). The largest total in absolute value, or None when no row qualifies."""
    lists: dict[tuple[str, str], list[Delta]] = {}
    for d in deltas:
        if d.type in CONSISTENCY_TYPES and math.isfinite(d.p_value):
            lists.setdefault((d.type, d.metric), []).append(d)
    totals: dict[tuple[str, str], list[float]] = {}
    for key, rows in lists.items():
        rows.sort(key=lambda d: d.p_value)
        for i, d in enumerate(rows):
            if d.p_value > ALPHA / (len(rows) - i):
                break  # Holm: stop at the first row that fails its threshold
            if d.significant:
                totals.setdefault(key, []).append(d.delta_ns_per_step)
    if not totals:
        return None
    (type_, metric), vals = max(totals.items(), key=lambda kv: (abs(sum(kv[1])), kv[0]))
    return {"type": type_, "metric": metric, "delta_ns_per_step": sum(vals), "rows": len(vals)}
