"""What a comparison of two runs produces (the JSON of `diff --json`), and the thresholds it is
judged with. Definitions: docs/COMPARE.md.

Must not: read runs, decide a verdict or write prose.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from ..stats import Sample

ALPHA = 0.05
"""A change is significant when the test's two-sided p-value is below this..."""
MIN_SHARE_OF_STEP = 0.05
"""...and it moves time per step by at least this share of the base median step (noise floor)."""
MIN_STEADY_STEPS = 5
"""With fewer steady steps in a run the verdict is "cannot tell"."""
POWER = 0.8
"""Steps to record are sized so that a change of the asked size is detected with this probability."""
TYPE_ORDER = ("source_line", "module", "operator", "kernel")
"""The delta lists, the most actionable first."""
RUN_SET_TESTS = ("t-on-run-values", "paired-t-on-run-ratios")
"""The tests of several recordings per side, on each recording's value (stats.recording_value)."""


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
    reason: str = ""  # one sentence: why this verdict (render.reason_text of Diff.reason)
    test_name: str = "none"  # 'mann-whitney-u' | 'welch-t' | 't-on-run-values' | 'paired-t-on-run-ratios' | 'none'
    test_reason: str = ""
    statistic: float = float("nan")  # U (Mann-Whitney) or t (Welch)
    effect_size: float = float("nan")  # Cliff's delta: P(test step > base step) - P(test step < base step)
    delta_ci_low_ns: float = float("nan")  # 95% interval of delta_ns: the interval of the ratio test/base, times the reference, less it
    delta_ci_high_ns: float = float("nan")
    delta_ci_low_pct: float = float("nan")  # the same interval as a percentage of the reference (never below -100)
    delta_ci_high_pct: float = float("nan")
    steps: dict = field(default_factory=dict)  # base / test: {steps, used, left_out: [{step, dur_ns, reason}]}
    detect_pct: float = 100 * MIN_SHARE_OF_STEP  # the change the step counts below are sized for
    min_detectable_pct: float = float("nan")  # smallest change these steps detect with POWER
    steps_to_record: int | None = None  # steps per run to record to detect detect_pct (left-out steps included)
    significant_deltas: dict | None = None  # the largest total of significant deltas: {type, metric, delta_ns_per_step, rows}
    runs: dict = field(default_factory=dict)  # base / test: [{path, value_ns, median_ns, set_aside, steps: the run's selection}] per recording
    runs_to_record: int | None = None  # recordings per side to detect detect_pct between runs (several recordings per side)
    job_differences: list = field(default_factory=list)  # how the runs are not the same job (job.differences); [] when the same
    work: dict | None = None  # what the steps do, base against test (work.work_per_step): operator calls and the priced work; None without operators
    basis: str = "step time"  # what the verdict stands on: 'step time', or 'work' (the priced work, the step times not ruling it out)
    estimate_pct: float = float("nan")  # the change the verdict stands on, % of the base: delta_pct, or with basis 'work' the
    # priced work's change clipped to the step time's 95% CI; what `--fail-if-slower` compares with its limit


@dataclass
class Delta:
    type: str  # operator | kernel | module | source_line
    key: str
    # cpu (an operator's self time; a line's outermost operators' time, analyzers/lines.py's cpu_ns)
    # | device (kernel, memcpy, memset time)
    metric: str
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
    reason: str = ""  # the verdict's reason code (verdict.py's decision table: 'work_slower', 'steps_within_floor', ...)

    def to_dict(self) -> dict:
        return {"base": self.base, "test": self.test, "step_time": _clean(asdict(self.step_time)),
                "deltas": [_clean(asdict(d)) for d in self.deltas], "notes": self.notes, "utilisation": _clean(self.utilisation),
                "reason": self.reason}


def _clean(obj):
    """NaN/inf are not JSON: they become null."""
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj
