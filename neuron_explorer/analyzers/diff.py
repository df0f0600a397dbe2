"""Compare two runs: did the step get slower, what changed (operator, kernel, module, source line),
and is it real or noise.

Only the steady state is compared: start-up, warm-up and partial steps are left out by
metrics.steady_steps, the one selection that the summary's step statistics and the step-outliers
rule use too. Step time is compared by medians (bootstrap confidence interval of the difference),
with Mann-Whitney U, or Welch's t where both runs pass its screen (stats.compare_samples), and
Cliff's delta as the effect size. The verdict is "cannot tell" with fewer than MIN_STEADY_STEPS
steady steps in a run, or when the significant line, operator or kernel deltas add up to more
than the step-time verdict could still call no change. Every number is per profiler step, from
per-step samples; with several recordings per side the verdict and the delta rows are both tested
on one value per recording (the recordings differ as wholes, which their steps cannot show).
Source lines are matched by (file, function, code text) when the collector recorded the code, so
an edit above a hot line does not turn it into a "new" hotspot. The work per step (operator calls
per steady step, and the work priced at the base's time per call) is reported beside the verdict:
counts that the machine's speed does not move. When the priced work changed past the floor and the
step times do not rule that change out, the verdict stands on the work (`basis` 'work'): a
regression that adds calls is found even where the host's noise hides it in the step times.
Definitions: docs/COMPARE.md. Reads runs only through open_run.

Must not: select steps itself (metrics.steady_steps does) or print (render_text returns text).
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePath

from ..store import Run, open_run
from . import job
from .metrics import StepSelection, steady_steps
from .stats import (Sample, Test, bootstrap_median_diff_ci, cliffs_delta, compare_samples, describe, detectable_change,
                    mann_whitney, median, paired_difference_t, paired_ratio_t, pairs_to_detect, recording_value, robust_sd, run_level_t,
                    runs_to_detect,
                    slow_recordings, steps_to_detect, RECORDING_QUANTILE, SLOW_RECORDING_SHARE)

ALPHA = 0.05
"""A change is significant when the test's two-sided p-value is below this..."""
MIN_SHARE_OF_STEP = 0.05
"""...and it moves time per step by at least this share of the base median step (noise floor)."""
MIN_STEADY_STEPS = 5
"""With fewer steady steps in a run the verdict is "cannot tell"."""
POWER = 0.8
"""Steps to record are sized so that a change of the asked size is detected with this probability."""
DEVICE_KINDS_SQL = "('kernel', 'memcpy', 'memset')"
_TYPE_ORDER = ("source_line", "module", "operator", "kernel")
_CONSISTENCY_TYPES = ("source_line", "operator", "kernel")
"""Delta lists whose significant rows are summed to check the verdict (modules overlap lines)."""


@dataclass
class StepTime:
    base: Sample  # over the steady steps
    test: Sample
    delta_ns: float  # median(test) - median(base)
    delta_pct: float  # delta_ns as a percentage of median(base)
    t: float  # Welch's t when that test was used, else NaN
    p_value: float
    significant: bool  # p < ALPHA, |delta| >= MIN_SHARE_OF_STEP of median(base), and its CI wholly past that
    verdict: str  # 'slower', 'faster', 'no significant change', 'cannot tell'
    reason: str = ""  # one sentence: why this verdict
    test_name: str = "none"  # 'mann-whitney-u' | 'welch-t' | 't-on-run-values' | 'paired-t-on-run-ratios' | 'none'
    test_reason: str = ""
    statistic: float = float("nan")  # U (Mann-Whitney) or t (Welch)
    effect_size: float = float("nan")  # Cliff's delta: P(test step > base step) - P(test step < base step)
    delta_ci_low_ns: float = float("nan")  # 95% bootstrap interval of delta_ns
    delta_ci_high_ns: float = float("nan")
    steps: dict = field(default_factory=dict)  # base / test: {steps, used, left_out: [{step, dur_ns, reason}]}
    detect_pct: float = 100 * MIN_SHARE_OF_STEP  # the change the step counts below are sized for
    min_detectable_pct: float = float("nan")  # smallest change these steps detect with POWER
    steps_to_record: int | None = None  # steps per run to record to detect detect_pct (left-out steps included)
    significant_deltas: dict | None = None  # the largest total of significant deltas: {type, metric, delta_ns_per_step, rows}
    runs: dict = field(default_factory=dict)  # base / test: [{path, value_ns, median_ns, set_aside, steps: the run's selection}] per recording
    runs_to_record: int | None = None  # recordings per side to detect detect_pct between runs (several recordings per side)
    job_differences: list = field(default_factory=list)  # how the runs are not the same job (job.differences); [] when the same
    work: dict | None = None  # what the steps do, base against test (_work): operator calls and the priced work; None without operators
    basis: str = "step time"  # what the verdict stands on: 'step time', or 'work' (the priced work, the step times not ruling it out)
    estimate_pct: float = float("nan")  # the change the verdict stands on, % of the base: delta_pct, or with basis 'work' the
    # priced work's change clipped to the step time's 95% CI; what `--fail-if-slower` compares with its limit


@dataclass
class Delta:
    type: str  # operator | kernel | module | source_line
    key: str
    metric: str  # cpu (self time on the host) | device (kernel, memcpy, memset time)
    base_ns_per_step: float
    test_ns_per_step: float
    delta_ns_per_step: float
    delta_pct: float | None  # None when the key is new
    p_value: float
    significant: bool
    status: str  # changed | new | gone
    base_key: str | None = None  # for source lines: the matched line in the base run
    test_name: str = "none"  # which test gave p_value: stats.compare_samples's on the steps, or with several
    # recordings per side 't-on-run-values' / 'paired-t-on-run-differences' on each recording's mean per step


@dataclass
class Diff:
    base: str
    test: str
    step_time: StepTime
    deltas: list[Delta]
    notes: list[str] = field(default_factory=list)
    utilisation: dict = field(default_factory=dict)  # base / test: step_utilisation over the steady steps

    def to_dict(self) -> dict:
        return {"base": self.base, "test": self.test, "step_time": _clean(asdict(self.step_time)),
                "deltas": [_clean(asdict(d)) for d in self.deltas], "notes": self.notes, "utilisation": _clean(self.utilisation)}


def _clean(obj):
    """NaN/inf are not JSON: they become null."""
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _step_samples(run: Run) -> tuple[StepSelection, list[float]]:
    """The steady-state selection and the job's time per used step (the slowest rank's duration of
    that step); a run with no steps has one sample, its span."""
    sel = steady_steps(run)
    if sel.steps:
        return sel, sel.used_durations_ns
    span = run.sql("SELECT max(ts_ns + dur_ns) - min(ts_ns) FROM events").fetchone()[0]
    return sel, [float(span or 0)]


def _per_step(run: Run, steps: list[int], call_ns: dict) -> dict[tuple[str, str, str], list[float]]:
    """(type, key, metric) → time per step, one value per step of the run (0 where absent).
    Operators' CPU self time and kernels' device time are the calls' (`call_ns`, from
    _calls_per_step over the same steps) summed by name."""
    in_steps = "e.step IS NOT NULL" if steps else "true"
    step_col = "e.step" if steps else "0"
    index = {s: i for i, s in enumerate(steps)} if steps else {0: 0}
    n = len(index)
    # CPU: self time of operators (duration minus the slices directly inside them: the self_ns
    # column); device: kernel, memcpy and memset time. Keyed by what each delta list groups on.
    self_ns = f"SELECT {{key}}, {step_col}, sum(e.self_ns) FROM events e WHERE e.kind = 'cpu_op' AND {{key}} IS NOT NULL AND {in_steps} GROUP BY 1, 2"
    device_ns = (f"SELECT {{key}}, {step_col}, sum(e.dur_ns) FROM events e {{join}} "
                 f"WHERE e.kind IN {DEVICE_KINDS_SQL} AND {{key}} IS NOT NULL AND {in_steps} GROUP BY 1, 2")
    queries = {
        ("operator", "device"): device_ns.format(key="o.name", join="JOIN events o ON e.op_id = o.event_id"),
        ("module", "cpu"): self_ns.format(key="e.module_path"),
        ("module", "device"): device_ns.format(key="e.module_path", join=""),
        # lines by the statement the time belongs to (analyzers/lines.py: backward work on its forward statement)
        ("source_line", "cpu"): self_ns.format(key="e.source_frame_id"),
        ("source_line", "device"): device_ns.format(key="e.source_frame_id", join=""),
    }
    out: dict[tuple[str, str, str], list[float]] = {}
    for (type_, metric), sql in queries.items():
        for key, step, ns in run.sql(sql).fetchall():
            if step not in index:
                continue
            vec = out.setdefault((type_, str(key), metric), [0.0] * n)
            vec[index[step]] += float(ns)
    for (metric, (name, _)), ns in call_ns.items():
        vec = out.setdefault(("operator" if metric == "cpu" else "kernel", name, metric), [0.0] * n)
        for i, x in enumerate(ns):
            vec[i] += x
    return out


def _line_keys(run: Run) -> dict[str, tuple[str, str]]:
    """frame_id → (matching key, display 'file:line').

    Several frames can share a line (the live collector keeps call sites as a tree). The matching
    key is file, function and code text — with the rank of the line among lines of equal text in
    that function, so duplicates pair up in order — else file, function and line number. The
    file is `source_file`'s: a path recorded relative to the working directory is made absolute
    with the cwd the run recorded.
    """
    cwd = run.manifest.get("cwd")
    rows = [(fid, source_file(file, cwd), line, function, code)
            for fid, file, line, function, code in run.sql("SELECT frame_id, file, line, function, code FROM frames").fetchall()]
    lines_by_text: dict[tuple, set[int]] = defaultdict(set)
    for _, file, line, function, code in rows:
        if code:
            lines_by_text[(file, function, code)].add(line)
    rank_of = {k: {ln: i for i, ln in enumerate(sorted(v), 1)} for k, v in lines_by_text.items()}
    keys = {}
    for frame_id, file, line, function, code in rows:
        if code:
            match = f"{file}\x1f{function}\x1f{code}\x1f{rank_of[(file, function, code)][line]}"
        else:
            match = f"{file}\x1f{function}\x1fline {line}"
        keys[str(frame_id)] = (match, f"{file}:{line}")
    return keys


def source_file(file: str | None, cwd: str | None) -> str | None:
    """The file a frame names, absolute where the run says from where: a relative path (as
    `python sub/train.py` records the script) joined to the working directory recorded in the
    manifest (`cwd`, live runs). Pseudo-files (`<string>`) and absolute paths stay as recorded."""
    if not file or not cwd or file.startswith("<") or os.path.isabs(file):
        return file
    return os.path.normpath(os.path.join(cwd, file))


def match_files(base_files: set[str], test_files: set[str]) -> dict[str, str]:
    """test file -> the base file it is the same file as, for test files that the base run does not
    name by the same path: the one base file with which it shares the longer one's path as a
    suffix, whole components (`sub/train.py` and `/home/u/proj/sub/train.py`; not `ain.py`). A
    file that matches none, or several, keeps its own path."""
    def parts(f: str) -> tuple[str, ...]:
        return tuple(p for p in f.replace("\\", "/").split("/") if p not in ("", "."))

    by_name: dict[str, list[tuple[str, tuple[str, ...]]]] = defaultdict(list)
    for f in base_files:
        if f and not f.startswith("<"):
            by_name[PurePath(f).name].append((f, parts(f)))
    out = {}
    for f in test_files:
        if not f or f in base_files or f.startswith("<"):
            continue
        mine = parts(f)
        hits = [b for b, bp in by_name.get(PurePath(f).name, [])
                if mine and bp and (bp[-len(mine):] == mine if len(mine) <= len(bp) else mine[-len(bp):] == bp)]
        if len(hits) == 1:
            out[f] = hits[0]
    return out


def _match_line_files(base_vals: dict, test_vals: dict, test_disp: dict) -> tuple[dict, dict]:
    """Rename the test run's source-line keys whose file `match_files` pairs with a base file."""
    file_of = lambda key: key.split("\x1f", 1)[0]  # noqa: E731  (the matching key starts with the file)
    base_files = {file_of(k) for t, k, _ in base_vals if t == "source_line"}
    test_files = {file_of(k) for t, k, _ in test_vals if t == "source_line"}
    same = match_files(base_files, test_files)
    if not same:
        return test_vals, test_disp
    rename = lambda key: same.get(file_of(key), file_of(key)) + key[len(file_of(key)):]  # noqa: E731
    vals: dict = {}
    for (t, k, m), vec in test_vals.items():
        nk = (t, rename(k) if t == "source_line" else k, m)
        vals[nk] = vec if nk not in vals else [a + b for a, b in zip(vals[nk], vec)]
    return vals, {rename(k): v for k, v in test_disp.items()}


def _rekey_lines(values: dict, keys: dict[str, tuple[str, str]]) -> tuple[dict, dict[str, str]]:
    out: dict[tuple[str, str, str], list[float]] = {}
    display: dict[str, str] = {}
    for (type_, key, metric), vec in values.items():
        if type_ == "source_line":
            match, shown = keys.get(key, (key, key))
            display[match] = shown
            key = match
        prev = out.get((type_, key, metric))
        out[(type_, key, metric)] = vec if prev is None else [a + b for a, b in zip(prev, vec)]
    return out, display


def step_utilisation(run: Run, steps: list[int]) -> dict:
    """MFU and achieved TFLOP/s over the given (steady) steps, from analyzers/utilisation.py's per-rank
    step figures: per step the mean over ranks (ranks without a device peak have no MFU), then the
    median over steps. `mfu_median` is null when no rank's device has a known peak."""
    from .utilisation import rank_utilisation

    keep = set(steps)
    mfu: dict[int, list[float]] = defaultdict(list)
    tflops: dict[int, list[float]] = defaultdict(list)
    devices, dtypes = set(), set()
    for (rank,) in run.sql("SELECT DISTINCT rank FROM steps ORDER BY 1").fetchall():
        u = rank_utilisation(run, rank)
        devices.add(u["device_name"])
        dtypes.add(u["dtype"])
        for s in u["steps"]:
            if s["step"] in keep:
                if s["mfu"] is not None:
                    mfu[s["step"]].append(s["mfu"])
                if s["tflops_per_s"] is not None:
                    tflops[s["step"]].append(s["tflops_per_s"])

    def median_of_means(per_step: dict[int, list[float]]) -> float | None:
        vals = sorted(sum(v) / len(v) for v in per_step.values() if v)
        return None if not vals else (vals[len(vals) // 2] if len(vals) % 2 else (vals[len(vals) // 2 - 1] + vals[len(vals) // 2]) / 2)

    return {"mfu_median": median_of_means(mfu), "tflops_per_s_median": median_of_means(tflops), "steps": len(keep),
            "devices": sorted(d for d in devices if d), "dtypes": sorted(d for d in dtypes if d)}


def _mean(v: list[float]) -> float:
    return sum(v) / len(v) if v else 0.0


def compare(base_path: Path | str, test_path: Path | str, detect_pct: float | None = None) -> Diff:
    """Compare two runs over their steady-state steps. Deltas: source lines, then modules, operators,
    kernels; each by absolute change per step. `detect_pct` sizes the advice on how many steps to
    record (default: the MIN_SHARE_OF_STEP noise floor)."""
    detect = 100 * MIN_SHARE_OF_STEP if detect_pct is None else float(detect_pct)
    bs, ts = _side(base_path), _side(test_path)
    base_sel, test_sel = bs.sels[0], ts.sels[0]
    base_times, test_times = bs.pooled_times, ts.pooled_times
    base_vals, base_disp = bs.vals, bs.disp
    test_vals, test_disp = _match_line_files(base_vals, ts.vals, ts.disp)  # one file, recorded by two paths
    util = {"base": bs.util, "test": ts.util}
    notes = []
    sb, st = describe(base_times), describe(test_times)
    between_runs = len(bs.paths) + len(ts.paths) >= 3
    pairs = recording_pairs(bs, ts) if between_runs else None
    aside: dict[str, list[int]] = {"base": [], "test": []}
    values = {role: [recording_value(t) for t in side.times] for role, side in (("base", bs), ("test", ts))}
    if between_runs:  # several recordings per side: each one is one value, so run-to-run variation counts
        all_bm, all_tm = values["base"], values["test"]
        aside = {"base": slow_recordings(all_bm), "test": slow_recordings(all_tm)}
        if pairs and {(i, j) for i, j in pairs if i in aside["base"] or j in aside["test"]} <= {
                (i, j) for i, j in pairs if i in aside["base"] and j in aside["test"]}:
            # recorded in pairs, and whatever slowed a recording slowed its partner too: what the machine did
            # while a pair ran cancels in the pair's ratio, so every pair counts
            aside = {"base": [], "test": []}
            bm, tm = _kept(all_bm, all_tm, pairs, aside)
            rl, name = paired_ratio_t(bm, tm), "paired-t-on-run-ratios"
            why = (f"{len(pairs)} pairs of recordings made together on one host: paired t ({rl.df} df) on the log of each "
                   f"pair's ratio of values (test / base; a recording's value is its {RECORDING_QUANTILE:.0%} quantile step), so what the "
                   "machine did while a pair ran cancels")
        else:
            bm, tm = _kept(all_bm, all_tm, None, aside)
            rl, name = run_level_t(bm, tm), "t-on-run-values"
            why = (f"{len(bm)} base and {len(tm)} test recordings: Student's t (pooled variance, {rl.df} df) on each "
                   f"recording's value (its {RECORDING_QUANTILE:.0%} quantile step: its steps at the machine's full speed), so the "
                   "variation between recordings is in the test")
            if aside["base"] or aside["test"]:
                named = "; ".join(f"{role} {', '.join(str(i + 1) for i in idx)}" for role, idx in aside.items() if idx)
                why += (f"; set aside as disturbed, more than {SLOW_RECORDING_SHARE:.0%} slower than the fastest "
                        f"recording of their side (the two fastest are kept): {named}" + (" (one recording of a pair slowed without its partner: that "
                                                                 "does not cancel in their ratio, so no pairing)" if pairs else ""))
                pairs = None
        outcome = Test(name, rl.t, rl.p_value, cliffs_delta(bm, tm), why)
        ref = sum(bm) / len(bm)
        delta, ci_low, ci_high = rl.delta, rl.ci_low, rl.ci_high
    else:
        outcome = compare_samples(base_times, test_times)
        ref = sb.median
        delta = st.median - sb.median
        ci_low, ci_high = bootstrap_median_diff_ci(base_times, test_times)
    measure = measure_name(between_runs)
    p = outcome.p_value
    pct = 100.0 * delta / ref if ref else float("nan")
    floor = MIN_SHARE_OF_STEP * (ref if math.isfinite(ref) else 0.0)
    ci_known = math.isfinite(ci_low) and math.isfinite(ci_high)
    # slower/faster only when the whole interval is past the floor: a change that may be smaller
    # than the floor is what two recordings of the same code can show on a busy machine
    past_floor = ci_known and (ci_low >= floor if delta > 0 else ci_high <= -floor)
    within_floor = ci_known and -floor < ci_low and ci_high < floor
    significant = bool(math.isfinite(p) and p < ALPHA and abs(delta) >= floor and past_floor)

    # the rows are judged on the step time's unit: its steps with one recording per side; with several,
    # one value per recording (its mean per step), the recordings and pairs the step time kept
    row_test = _row_test(bs, ts, pairs, aside) if between_runs else None
    deltas = []
    for k in set(base_vals) | set(test_vals):
        type_, key, metric = k
        a = base_vals.get(k, [0.0] * len(base_times))
        b = test_vals.get(k, [0.0] * len(test_times))
        if row_test is None:
            ma, mb = _mean(a), _mean(b)
            kt = compare_samples(a, b)
        else:
            ma, mb, kt = row_test(a, b)
        d = mb - ma
        if d == 0:
            continue
        sig = bool(math.isfinite(kt.p_value) and kt.p_value < ALPHA and abs(d) >= floor)
        status = "new" if k not in base_vals else "gone" if k not in test_vals else "changed"
        shown = test_disp.get(key) or base_disp.get(key) or key
        base_shown = base_disp.get(key) if type_ == "source_line" and k in base_vals else None
        deltas.append(Delta(type_, shown, metric, ma, mb, d, (100.0 * d / ma) if ma else None, kt.p_value, sig, status,
                            base_shown if base_shown != shown else None, kt.name))
    # the most actionable view first (the user's lines, then modules, operators, kernels), each ranked
    # by absolute change: an operator's total spans many lines, so across types sizes do not compare
    deltas.sort(key=lambda x: (_TYPE_ORDER.index(x.type), -abs(x.delta_ns_per_step), x.key))

    # how many steps it takes to see a change of `detect` percent, from the runs' own noise
    sd = _pooled_sd(base_times, test_times)
    all_sels = bs.sels + ts.sels
    n_steady = min(len(x.used) for x in all_sels) if all(x.steps for x in all_sels) else 0
    left_out = max(len(x.left_out) for x in all_sels)
    target = detect / 100 * ref if math.isfinite(ref) else float("nan")
    runs_needed = None
    if between_runs:
        detect_n = pairs_to_detect if pairs else runs_to_detect
        r = detect_n(rl.sd, target, ALPHA, POWER) if math.isfinite(target) else float("nan")
        runs_needed = max(3, math.ceil(r)) if math.isfinite(r) else None
    needed = steps_to_detect(sd, target, ALPHA, POWER) if math.isfinite(sd) and math.isfinite(target) else float("nan")
    to_record = max(MIN_STEADY_STEPS, math.ceil(needed) if math.isfinite(needed) else MIN_STEADY_STEPS) + left_out
    mdc = 100 * detectable_change(sd, n_steady, ALPHA, POWER) / ref if n_steady and math.isfinite(sd) and ref else float("nan")
    if between_runs and math.isfinite(rl.sd) and ref:
        spread = math.sqrt(1 / len(pairs)) if pairs else math.sqrt(1 / len(bs.paths) + 1 / len(ts.paths))
        mdc = 100 * (2.8 * rl.sd * spread) / ref  # z(0.975) + z(0.8) = 2.8
    more = (f"record about {runs_needed} {'pairs of runs' if pairs else 'runs per side'}" if runs_needed
            else f"record about {to_record} steps per run")
    big = _largest_significant_total(deltas)

    work = _work(bs, ts)
    cost = (work or {}).get("cost") or {}  # the priced work (_priced_work)
    basis, estimate = "step time", pct
    if n_steady < MIN_STEADY_STEPS:
        verdict = "cannot tell"
        few = ", ".join(f"{role} has {len(sel.used) if sel.steps else 0}" for role, sels in (("base", bs.sels), ("test", ts.sels))
                        for sel in sels[:1] + [x for x in sels[1:] if (len(x.used) if x.steps else 0) < MIN_STEADY_STEPS]
                        if (len(sel.used) if sel.steps else 0) < MIN_STEADY_STEPS)
        reason = (f"fewer than {MIN_STEADY_STEPS} steady-state steps ({few}): record at least {to_record} steps per run "
                  f"to detect a {detect:g}% change")
        significant = False
    elif significant:
        verdict = "slower" if delta > 0 else "faster"
        reason = (f"{measure} changed by {pct:+.1f}% (p={p:.2g}, {outcome.name}), and its 95% CI "
                  f"({100 * ci_low / ref:+.1f}% .. {100 * ci_high / ref:+.1f}%) lies past the {MIN_SHARE_OF_STEP:.0%} floor")
    elif cost.get("significant") and ci_known and (
            ci_high >= floor if cost["delta_pct"] > 0 else ci_low <= -floor):
        # the work changed past the floor (a count, which the machine's speed does not move) and the
        # step times, too noisy to size the change, do not rule a change of the floor out: the work decides
        basis = "work"
        est = min(max(cost["delta_pct"] / 100 * ref, ci_low), ci_high)
        estimate = 100 * est / ref
        verdict = "slower" if cost["delta_pct"] > 0 else "faster"
        reason = (f"{_work_change(cost)}, and {measure}'s 95% CI "
                  f"({100 * ci_low / ref:+.1f}% .. {100 * ci_high / ref:+.1f}%, p={p:.2g}) does not rule out a change of "
                  f"{MIN_SHARE_OF_STEP:.0%}: about {estimate:+.1f}%")
    elif within_floor and big is not None and abs(big["delta_ns_per_step"]) > floor:
        what = (f"the significant {big['type'].replace('_', ' ')} deltas ({big['metric']}) add up to "
                f"{_signed_ms(big['delta_ns_per_step'])} per step, more than the {MIN_SHARE_OF_STEP:.0%} "
                f"({_signed_ms(floor).lstrip('+')}) that 'no significant change' allows")
        verdict = "cannot tell"
        reason = (f"{what}, but the step time does not change past the floor (p={p:.2g}): either time outside these "
                  f"rows changed the other way, or the steps are too noisy to show it ({more})")
    elif cost.get("significant") and within_floor and not between_runs:
        # the steps of one recording per side cannot show how fast each recording's machine ran, so
        # their interval cannot rule out what the work shows
        verdict = "cannot tell"
        reason = (f"{_work_change(cost)}, but {measure}'s 95% CI ({100 * ci_low / ref:+.1f}% .. {100 * ci_high / ref:+.1f}%) lies "
                  f"within ±{MIN_SHARE_OF_STEP:.0%}: with one recording per side the steps cannot show whether the two "
                  f"recordings' machines ran at different speeds (the calls both make took {cost['test_speed']:.2f}x as long in "
                  f"the test), so they cannot rule the work out; record several runs per side (`neuron-explorer record --runs 5`)")
    elif within_floor:
        verdict = "no significant change"
        reason = (f"the 95% CI of the change ({100 * ci_low / ref:+.1f}% .. {100 * ci_high / ref:+.1f}%) "
                  f"lies within ±{MIN_SHARE_OF_STEP:.0%} (p={p:.2g}, {outcome.name})")
        if math.isfinite(mdc) and mdc > detect:
            notes.append(f"these runs detect only changes over about {mdc:.0f}% (with {POWER:.0%} probability); "
                         f"{more} to detect {detect:g}%")
    else:
        verdict = "cannot tell"
        ci_text = (f"its 95% CI ({100 * ci_low / ref:+.1f}% .. {100 * ci_high / ref:+.1f}%)" if ci_known
                   else "its confidence interval is unknown")
        reason = (f"{measure} changed by {pct:+.1f}% (p={p:.2g}, {outcome.name}), but {ci_text} neither lies within "
                  f"±{MIN_SHARE_OF_STEP:.0%} nor wholly past it: these {'recordings' if between_runs else 'steps'} cannot tell a change of {MIN_SHARE_OF_STEP:.0%} "
                  f"from none; {more}")
    differ = job.differences(bs.job, ts.job)
    if differ:  # a change between two different programs says nothing about either
        verdict, significant, basis = "cannot tell", False, "step time"
        reason = (f"the two runs are not the same job ({'; '.join(differ)}): their step times are not comparable, "
                  f"whatever the change ({pct:+.0f}%)")
        notes.append("not the same job: " + "; ".join(differ))
    if verdict in ("slower", "faster") and basis == "step time" and not between_runs:
        notes.append("one recording per side: the test sees the variation between steps, not between recordings (process "
                     "placement, machine load); for a CI gate record several runs per side (`neuron-explorer record --runs 5`) "
                     "and pass the two folders")
    if not all(x.steps for x in all_sels):
        notes.append("a run has no profiler steps: significance cannot be judged (record with prof.step() or `neuron-explorer record`)")
    if work and (work["changed"] or cost.get("significant")) and verdict in ("cannot tell", "no significant change"):
        priced = (f"; priced at the base's time per call, {_signed_ms(cost['delta_ns_per_step'])} per step "
                  f"({cost['delta_pct']:+.1f}% of the base's step, p={cost['p_value']:.2g})" if cost.get("significant") else "")
        notes.append(f"{_calls_change(work)} ({work['base_median']:.0f} → {work['test_median']:.0f} per step, p={work['p_value']:.2g}){priced}: "
                     f"the code's work per step changed, which the machine's speed does not change, though the step time is '{verdict}'")
    step_time = StepTime(
        sb, st, delta, pct, outcome.statistic if outcome.name == "welch-t" else float("nan"), p, significant, verdict,
        reason=reason, test_name=outcome.name, test_reason=outcome.reason, statistic=outcome.statistic,
        effect_size=outcome.effect_size, delta_ci_low_ns=ci_low, delta_ci_high_ns=ci_high,
        steps={"base": base_sel.to_dict(), "test": test_sel.to_dict()}, detect_pct=detect, min_detectable_pct=mdc,
        steps_to_record=to_record, significant_deltas=big, runs_to_record=runs_needed, job_differences=differ, work=work,
        basis=basis, estimate_pct=estimate if verdict in ("slower", "faster") else float("nan"),
        runs={role: [{"path": path, "value_ns": values[role][i] if t else None, "median_ns": median(t) if t else None,
                      "set_aside": i in aside[role], "steps": sel.to_dict()}
                     for i, (path, t, sel) in enumerate(zip(side.paths, side.times, side.sels))]
              for role, side in (("base", bs), ("test", ts))})
    return Diff(str(base_path), str(test_path), step_time, deltas, notes, util)


def _kept(base: list, test: list, pairs: list[tuple[int, int]] | None, aside: dict[str, list[int]]) -> tuple[list, list]:
    """Per-recording values (the step time's, or a delta row's) that a run-set test compares: in
    pair order when the recordings are compared as pairs, else those not set aside as disturbed."""
    if pairs:
        return [base[i] for i, _ in pairs], [test[j] for _, j in pairs]
    return ([v for i, v in enumerate(base) if i not in aside["base"]],
            [v for j, v in enumerate(test) if j not in aside["test"]])


def _recording_means(vec: list[float], times: list[list[float]]) -> list[float]:
    """One delta row's mean per step in each recording of a side (`vec` holds the recordings' steady
    steps one after the other, as _Side.vals does; `times` gives each recording's steps)."""
    out, at = [], 0
    for t in times:
        part = vec[at:at + len(t)]
        out.append(sum(part) / len(part) if part else 0.0)
        at += len(t)
    return out


def _row_test(bs: "_Side", ts: "_Side", pairs: list[tuple[int, int]] | None, aside: dict[str, list[int]]):
    """The delta rows' test with several recordings per side, on the step time's unit: each
    recording is one value (the row's mean per step in it). Recordings in pairs: paired t on the
    pairs' differences (a row can be 0 in a recording, so not on ratios); else Student's t on the
    recordings the step time kept (those set aside as disturbed are left out here too). So the
    variation between recordings, which the steps of one recording cannot show, is in every row's
    p-value as in the verdict's. Returns f(base_vec, test_vec) -> (base mean, test mean, Test)."""
    def test(a: list[float], b: list[float]):
        ra, rb = _recording_means(a, bs.times), _recording_means(b, ts.times)
        av, bv = _kept(ra, rb, pairs, aside)
        rl, name = (paired_difference_t(av, bv), "paired-t-on-run-differences") if pairs else (run_level_t(av, bv), "t-on-run-values")
        return _mean(av), _mean(bv), Test(name, rl.t, rl.p_value, float("nan"), "")
    return test


@dataclass
class _Side:
    """One side of a comparison: one run, or several recordings of the same job (a run set)."""
    paths: list[str]
    sels: list[StepSelection]
    times: list[list[float]]  # per recording: the job's time per steady step
    vals: dict  # (type, key, metric) -> time per steady step, recordings one after the other
    disp: dict
    util: dict
    job: dict  # job.identity of the first recording
    hosts: list = field(default_factory=list)  # per recording: the manifest's host (None when unknown)
    spans: list = field(default_factory=list)  # per recording: (first step start, last step end) in epoch ns, or None
    counts: dict = field(default_factory=dict)  # (metric, (name, inputs)) -> calls per steady step (_calls_per_step), recordings one after the other
    call_ns: dict = field(default_factory=dict)  # (metric, call) -> their time per steady step, likewise
    step_ranks: list = field(default_factory=list)  # per steady step (recordings one after the other): its recording's ranks

    @property
    def pooled_times(self) -> list[float]:
        return [x for t in self.times for x in t]


def run_set(path: Path | str) -> list[Path]:
    """The runs a diff argument names: a run (or trace) itself, or a folder whose subfolders are
    runs — several recordings of the same job (`neuron-explorer record --runs N`), in name order."""
    p = Path(path)
    if p.is_dir() and not (p / "manifest.json").exists():
        subs = sorted((d for d in p.iterdir() if (d / "manifest.json").is_file()), key=lambda d: (len(d.name), d.name))
        if subs:
            return subs
    return [p]


def _side(path: Path | str) -> _Side:
    paths = run_set(path)
    sels, times, vals, disp, utils, ident, hosts, spans, counts, call_ns, step_ranks = [], [], {}, {}, [], None, [], [], {}, {}, []
    offset = 0
    for rp in paths:
        with open_run(rp) as run:
            hosts.append(run.manifest.get("host") or None)
            spans.append(_wall_span(run.manifest))
            sel, t = _step_samples(run)
            c, cn = _calls_per_step(run, sel.used)
            v, d = _rekey_lines(_per_step(run, sel.used, cn), _line_keys(run))
            utils.append(step_utilisation(run, sel.used))
            ident = ident or job.identity(run)
            ranks = len(run.manifest.get("ranks") or []) or 1
        n = len(t)
        for whole, part in ((vals, v), (counts, c), (call_ns, cn)):  # one vector per key over every recording's steps, 0 where absent
            for key in set(whole) | set(part):
                whole[key] = whole.get(key, [0.0] * offset) + part.get(key, [0.0] * n)
        step_ranks += [ranks] * n
        offset += n
        sels.append(sel)
        times.append(t)
        disp.update(d)
    util = utils[0] if len(utils) == 1 else _merge_util(utils)
    return _Side([str(p) for p in paths], sels, times, vals, disp, util, ident, hosts, spans, counts, call_ns, step_ranks)


def _calls_per_step(run: Run, steps: list[int]) -> tuple[dict, dict]:
    """(metric, (name, inputs)) → in each of `steps`, in their order, every rank: how many such
    calls, and their time. A call is an operator (metric 'cpu', kind 'cpu_op', timed by its self
    time) or a kernel, memcpy or memset ('device', its device time) of one name with the same
    inputs: the operator's input shapes and types (args 'Input Dims' and 'Input type', where the
    profiler recorded them), the kernel's grid and block ('' when not recorded). A run without
    steps gives one value per call, its whole run (as _step_samples gives one time, its span)."""
    index = {s: i for i, s in enumerate(steps)} if steps else {0: 0}
    step_col, in_steps = ("step", "step IS NOT NULL") if steps else ("0", "true")
    inputs = ("CASE WHEN kind = 'cpu_op' THEN concat_ws(chr(31), json_extract_string(args, '$.\"Input Dims\"'), "
              "json_extract_string(args, '$.\"Input type\"')) "
              "ELSE concat_ws(chr(31), json_extract_string(args, '$.grid'), json_extract_string(args, '$.block')) END")
    sql = (f"SELECT CASE WHEN kind = 'cpu_op' THEN 'cpu' ELSE 'device' END, name, {inputs}, {step_col}, count(*), "
           f"sum(CASE WHEN kind = 'cpu_op' THEN self_ns ELSE dur_ns END) FROM events "
           f"WHERE kind IN ('cpu_op', {DEVICE_KINDS_SQL[1:-1]}) AND name IS NOT NULL AND {in_steps} GROUP BY 1, 2, 3, 4")
    counts: dict[tuple[str, tuple[str, str]], list[float]] = {}
    times: dict[tuple[str, tuple[str, str]], list[float]] = {}
    for metric, name, inputs, step, n, ns in run.sql(sql).fetchall():
        if step in index:
            call = (metric, (str(name), inputs))
            counts.setdefault(call, [0.0] * len(index))[index[step]] += float(n)
            times.setdefault(call, [0.0] * len(index))[index[step]] += float(ns or 0)
    return counts, times


def _work_change(cost: dict) -> str:
    """The priced work's change in words: "the test's steps do 16.4% more host work than the base's,
    priced at the base's time per call (+3.14 ms per step, p=8.3e-65)"."""
    return (f"the test's steps do {abs(cost['delta_pct']):.1f}% {'more' if cost['delta_pct'] > 0 else 'less'} "
            f"{'host' if cost['metric'] == 'cpu' else 'device'} work than the base's, priced at the base's time per call "
            f"({_signed_ms(cost['delta_ns_per_step'])} per step, p={cost['p_value']:.2g})")


def _calls_change(work: dict) -> str:
    """The work's change in words: "the test's steps make 19.9% more operator calls than the base's"."""
    more_less = "more" if work["test_median"] > work["base_median"] else "fewer"
    return f"the test's steps make {abs(work['delta_pct']):.1f}% {more_less} operator calls than the base's"


def _work(bs: "_Side", ts: "_Side") -> dict | None:
    """What the steps do, base against test, over every recording's steady steps (none set aside:
    what a step does does not move with the machine's speed). Operator calls per step: medians,
    Mann-Whitney p (1 when the two sides' counts are the same values); `changed`: p < ALPHA and the
    medians differ by at least MIN_SHARE_OF_STEP of the base's. `cost`: the priced work
    (_priced_work). None when neither side has an operator call."""
    base, test = _calls(bs), _calls(ts)
    if not any(base) and not any(test):
        return None
    mb, mt = median(base), median(test)
    p = _rank_p(base, test)
    pct = 100.0 * (mt - mb) / mb if mb else float("nan")
    changed = bool(math.isfinite(p) and p < ALPHA and mb and abs(mt - mb) >= MIN_SHARE_OF_STEP * mb)
    return {"metric": "operator calls per step", "base_median": mb, "test_median": mt, "delta_pct": pct,
            "p_value": p, "test_name": "mann-whitney-u", "changed": changed, "cost": _priced_work(bs, ts)}


def _calls(side: "_Side") -> list[float]:
    """Operator calls per steady step of a side, every rank, its recordings one after the other."""
    vecs = [v for (metric, _), v in side.counts.items() if metric == "cpu"]
    return [float(sum(col)) for col in zip(*vecs)] if vecs else [0.0] * len(side.pooled_times)


def _rank_p(base: list[float], test: list[float]) -> float:
    """Mann-Whitney's two-sided p of two sides' per-step values; 1 when they are the same values."""
    return 1.0 if sorted(base) == sorted(test) else mann_whitney(base, test)[1]


def _priced_work(bs: "_Side", ts: "_Side") -> dict | None:
    """The work per step priced at the base's time per call: each call (_calls_per_step: one name,
    the same inputs) at its mean time per call in the base; a call only the test makes at the test's
    time per call divided by `test_speed`, the ratio of the test's to the base's time for the calls
    both make (how much slower the test's machine ran the same work). Per steady step, the sum of
    calls x price, divided by the recording's ranks (a per-rank figure, as the step is). For the host
    ('cpu': operators' self time) and the device ('device': kernels, memcpys, memsets) each: the
    medians per step, their difference, that as a percentage of the base's mean steady step (the
    steps the prices came from, so the share does not move with the machine's speed), Mann-Whitney
    p on the per-step values (1 when they are the same values), and `significant`: p < ALPHA and
    |delta_pct| >= MIN_SHARE_OF_STEP. The resource with the larger change (a significant one
    first); None when neither side made a call."""
    step = _mean(bs.pooled_times)
    found = []
    for metric in ("cpu", "device"):
        calls = sorted({c for m, c in bs.counts if m == metric} | {c for m, c in ts.counts if m == metric})
        if not calls or not step:
            continue

        def per_call(side: _Side, call: str) -> float | None:
            n = sum(side.counts.get((metric, call), ()))
            return sum(side.call_ns[(metric, call)]) / n if n else None

        pb, pt = {c: per_call(bs, c) for c in calls}, {c: per_call(ts, c) for c in calls}
        both = [c for c in calls if pb[c] is not None and pt[c] is not None]
        made = {c: sum(ts.counts[(metric, c)]) for c in both}
        at_base, at_test = sum(made[c] * pb[c] for c in both), sum(made[c] * pt[c] for c in both)
        speed = at_test / at_base if at_base > 0 and at_test > 0 else 1.0
        price = {c: pb[c] if pb[c] is not None else (pt[c] or 0.0) / speed for c in calls}
        wb, wt = _priced_steps(bs, metric, price), _priced_steps(ts, metric, price)
        delta = median(wt) - median(wb)
        p = _rank_p(wb, wt)
        pct = 100.0 * delta / step
        found.append({"metric": metric, "base_ns_per_step": median(wb), "test_ns_per_step": median(wt), "delta_ns_per_step": delta,
                      "delta_pct": pct, "p_value": p, "test_name": "mann-whitney-u", "test_speed": speed,
                      "significant": bool(p < ALPHA and abs(pct) >= 100 * MIN_SHARE_OF_STEP)})
    return max(found, key=lambda c: (c["significant"], abs(c["delta_pct"])), default=None)


def _priced_steps(side: "_Side", metric: str, price: dict[tuple[str, str], float]) -> list[float]:
    """Per steady step of a side (its recordings one after the other): the calls of `metric` priced
    at `price`, divided by the step's recording's ranks."""
    out = [0.0] * len(side.pooled_times)
    for call in sorted(price):
        vec = side.counts.get((metric, call))
        if vec:
            c = price[call]
            out = [w + n * c for w, n in zip(out, vec)]
    return [w / r for w, r in zip(out, side.step_ranks)]


EPOCH_2001_NS = 10**18
"""Step times past this are wall-clock (epoch) nanoseconds, comparable between recordings."""


def _wall_span(manifest: dict) -> tuple[int, int] | None:
    """(start of the first step, end of the last) of a recording, in epoch ns; None when its steps
    are not on a wall clock."""
    ts = [(int(s["ts_ns"]), int(s["ts_ns"]) + int(s.get("dur_ns") or 0)) for r in manifest.get("ranks", [])
          for s in r.get("steps", []) if s.get("ts_ns") is not None]
    start = min((a for a, _ in ts), default=None)
    if start is None or start < EPOCH_2001_NS:
        return None
    return start, max(b for _, b in ts)


def recording_pairs(bs: _Side, ts: _Side) -> list[tuple[int, int]] | None:
    """Pairs (base index, test index) when the two run sets were recorded in pairs: as many
    recordings on each side (at least 2), all on one host, and in the order of their start times
    every two consecutive recordings are one base and one test (recorded side by side, or one
    right after the other: ABAB, ABBA...). None otherwise. Pairing cancels what the machine did
    while each pair ran (docs/COMPARE.md "Recordings made in pairs")."""
    n = len(bs.paths)
    if n < 2 or n != len(ts.paths) or None in bs.spans + ts.spans:
        return None
    if {os.path.realpath(p) for p in bs.paths} & {os.path.realpath(p) for p in ts.paths}:
        return None  # a run compared with itself is not a pair of recordings
    hosts = set(bs.hosts + ts.hosts)
    if len(hosts) != 1 or None in hosts:
        return None
    order = sorted([(sp[0], "base", i) for i, sp in enumerate(bs.spans)] + [(sp[0], "test", i) for i, sp in enumerate(ts.spans)])
    pairs = []
    for k in range(0, 2 * n, 2):
        a, b = order[k], order[k + 1]
        if a[1] == b[1]:
            return None
        pairs.append((a[2], b[2]) if a[1] == "base" else (b[2], a[2]))
    return pairs


def _merge_util(utils: list[dict]) -> dict:
    """Several recordings' utilisation: the median over recordings of each one's medians."""
    def med(key):
        vals = [u[key] for u in utils if u.get(key) is not None]
        return median(vals) if vals else None
    return {"mfu_median": med("mfu_median"), "tflops_per_s_median": med("tflops_per_s_median"),
            "steps": sum(u["steps"] for u in utils), "devices": sorted({d for u in utils for d in u["devices"]}),
            "dtypes": sorted({d for u in utils for d in u["dtypes"]})}


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
        if d.type in _CONSISTENCY_TYPES and math.isfinite(d.p_value):
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


def _signed_ms(ns: float) -> str:
    from ..info import fmt_ns

    return f"{'+' if ns >= 0 else '-'}{fmt_ns(abs(ns))}"


def gate(diff: Diff, max_slower_pct: float) -> tuple[bool, str]:
    """The CI gate of `diff --fail-if-slower PCT`: (fail, message). It fails when the verdict is
    "slower" by more than PCT; with "cannot tell" it passes and the message says why it could not
    judge (a gate that failed on noise would be switched off)."""
    s = diff.step_time
    if s.verdict == "slower" and s.estimate_pct > max_slower_pct:
        if s.basis == "work":
            return True, (f"the step does about {s.estimate_pct:.1f}% more work (priced at the base's time per call, "
                          f"p={s.work['cost']['p_value']:.2g}), over the {max_slower_pct:g}% limit")
        return True, f"step time is {s.delta_pct:.1f}% slower (p={s.p_value:.2g}, {s.test_name}), over the {max_slower_pct:g}% limit"
    if s.verdict == "cannot tell":
        w = s.work or {}
        more = f"; {_calls_change(w)}" if w.get("changed") and w["test_median"] > w["base_median"] else ""
        return False, f"cannot tell whether the step time is over the {max_slower_pct:g}% limit: {s.reason}{more}"
    return False, ""


RUN_SET_TESTS = ("t-on-run-values", "paired-t-on-run-ratios")
"""The tests of several recordings per side, on each recording's value (stats.recording_value)."""


def measure_name(run_sets: bool) -> str:
    """What the step-time verdict compares: the steps' median, or with several recordings per side
    the recordings' values."""
    return f"the recordings' {RECORDING_QUANTILE:.0%}-quantile step" if run_sets else "the median step"


def _step_list(steps: list[int]) -> str:
    if len(steps) > 3 and steps == list(range(steps[0], steps[-1] + 1)):
        return f"{steps[0]}..{steps[-1]}"
    return ", ".join(map(str, steps)) or "none"


TEST_NAMES = {"mann-whitney-u": "Mann-Whitney U", "welch-t": "Welch's t", "t-on-run-values": "Student's t on the recordings' values",
              "paired-t-on-run-ratios": "paired t on the ratios of recordings made in pairs",
              "paired-t-on-run-differences": "paired t on the differences of recordings made in pairs",
              "none": "no test"}


def work_lines(w: dict) -> tuple[str, str | None]:
    """The work per step in words (the text and the Compare view): the operator calls, and the
    priced work (None when there is none). `w` is step_time.work, as a dict or from JSON (nulls)."""
    from ..info import fmt_ns

    pct = w.get("delta_pct")
    wp = "" if pct is None or not math.isfinite(pct) else f" ({pct:+.1f}%)"
    calls = (f"work per step: operator calls (median) {w['base_median']:.0f} → {w['test_median']:.0f}{wp}, "
             f"Mann-Whitney U p={w['p_value']:.2g}" + (" — changed" if w["changed"] else ""))
    c = w.get("cost")
    if not c:
        return calls, None
    return calls, (f"{'host' if c['metric'] == 'cpu' else 'device'} work priced at the base's time per call: "
                   f"{fmt_ns(c['base_ns_per_step'])} → {fmt_ns(c['test_ns_per_step'])} per step ({c['delta_pct']:+.1f}% of the "
                   f"base's step), Mann-Whitney U p={c['p_value']:.2g}" + (" — changed" if c["significant"] else ""))


def render_text(diff: Diff, top: int = 20) -> str:
    from ..info import fmt_ns

    s = diff.step_time

    def sample(x: Sample) -> str:
        if x.n < 2:
            return f"{fmt_ns(x.median)} (n={x.n})"
        return f"median {fmt_ns(x.median)}, mean {fmt_ns(x.mean)} [95% CI {fmt_ns(x.ci_low)} .. {fmt_ns(x.ci_high)}]"

    lines = [f"warning: not the same job ({'; '.join(s.job_differences)}): the step times are not comparable"] if s.job_differences else []
    for role, path, x in (("base", diff.base, s.base), ("test", diff.test, s.test)):
        recordings = s.runs.get(role, [])
        if len(recordings) > 1:
            lines.append(f"{role} {path}: {len(recordings)} recordings, step time {sample(x)} over all their steady steps")
            for i, r in enumerate(recordings, 1):
                used = r["steps"].get("used", [])
                value = fmt_ns(r["value_ns"]) if r.get("value_ns") is not None else "n/a"
                med = fmt_ns(r["median_ns"]) if r["median_ns"] is not None else "n/a"
                aside = ", set aside as disturbed" if r.get("set_aside") else ""
                lines.append(f"  {i}. {r['path']}: value {value} (median {med}), {len(used)} of {r['steps'].get('steps', 0)} "
                             f"steps used{aside}")
            continue
        sel = s.steps.get(role, {})
        used = sel.get("used", [])
        lines.append(f"{role} {path}: step time {sample(x)}, {len(used)} of {sel.get('steps', 0)} steps used ({_step_list(used)})")
        for lo in sel.get("left_out", []):
            lines.append(f"  left out step {lo['step']} ({fmt_ns(lo['dur_ns'])}): {lo['reason']}")
    p = "p=n/a" if not math.isfinite(s.p_value) else f"p={s.p_value:.3g}"
    ci = "" if not math.isfinite(s.delta_ci_low_ns) else f" [95% CI {_signed_ms(s.delta_ci_low_ns)} .. {_signed_ms(s.delta_ci_high_ns)}]"
    eff = "" if not math.isfinite(s.effect_size) else f", Cliff's delta {s.effect_size:+.2f}"
    pct = "" if not math.isfinite(s.delta_pct) else f" ({s.delta_pct:+.1f}%)"
    test_name = TEST_NAMES.get(s.test_name, s.test_name)
    change = _signed_ms(s.delta_ns) if math.isfinite(s.delta_ns) else "n/a"
    lines.append(f"change of {measure_name(s.test_name in RUN_SET_TESTS)}: {change}{pct}{ci}, {test_name} {p}{eff} → {s.verdict.upper()}")
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
        lines.append("MFU: unknown (no device peak for " + (", ".join(ub.get("devices", []) + ut.get("devices", [])) or "a CPU run")
                     + ")")
    if ub.get("tflops_per_s_median") and ut.get("tflops_per_s_median"):
        lines.append(f"achieved TFLOP/s per step (median): {ub['tflops_per_s_median']:.4g} → {ut['tflops_per_s_median']:.4g}")
    unit = ("; each recording's mean per step is one value, over the recordings the step time kept"
            if s.test_name in RUN_SET_TESTS else "")
    lines += ["", f"largest changes per step over the steady steps (* = significant: p < {ALPHA} and at least "
                  f"{MIN_SHARE_OF_STEP:.0%} of the step{unit})"]
    for type_ in _TYPE_ORDER:
        rows = [d for d in diff.deltas if d.type == type_][:top]
        if not rows:
            continue
        lines.append(f"{type_.replace('_', ' ')}s:")
        for d in rows:
            sign = "+" if d.delta_ns_per_step >= 0 else "-"
            was = f" (was {d.base_key})" if d.base_key else ""
            status = "" if d.status == "changed" else f" [{d.status}]"
            pv = "" if not math.isfinite(d.p_value) else f" p={d.p_value:.2g}"
            lines.append(f"  {'*' if d.significant else ' '} {sign}{fmt_ns(abs(d.delta_ns_per_step)):>9}  {d.metric:<6} "
                         f"{d.key[-70:]}{was}{status}  {fmt_ns(d.base_ns_per_step)} → {fmt_ns(d.test_ns_per_step)}{pv}")
    if not diff.deltas:
        lines.append("  (no differences)")
    lines += [f"note: {n}" for n in diff.notes]
    return "\n".join(lines)
