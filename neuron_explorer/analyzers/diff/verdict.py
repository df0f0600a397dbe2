"""The verdict of a comparison as a decision table: docs/COMPARE.md's rules, in their order, as
data. Each rule names its reason code (`Diff.reason` in the JSON), the verdict and what the verdict
stands on; the first rule whose condition holds decides. Whatever it decided, two runs that are not
the same job get `not_same_job` ("Not the same job").

render.reason_text turns a code and its Facts into the sentence of `step_time.reason`.

Must not: read runs, compute statistics (compare.py does) or write prose (render.py does).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from .result import MIN_STEADY_STEPS

SLOWER, FASTER, NO_CHANGE, CANNOT_TELL = "slower", "faster", "no significant change", "cannot tell"
STEP_TIME, WORK = "step time", "work"


@dataclass(frozen=True)
class Facts:
    """What the verdict is decided on, and the figures its reason and notes give: the step time's
    change and its 95% CI against the noise floor (ns per step; `ref_ns` is the base's median
    step, or with several recordings per side the mean of the kept base recordings' values), the
    priced work (work.priced_work) and the largest total of significant delta rows."""
    fewest_steady_steps: int  # the fewest steady steps of any recording (0 when a run has no steps)
    few_steps: tuple  # ((role, steady steps), ...) of the recordings with fewer than MIN_STEADY_STEPS
    steps_to_record: int  # steps per run that would detect detect_pct
    detect_pct: float
    significant: bool  # the step time's change: p < ALPHA, at least the floor, and its CI wholly past the floor
    delta_ns: float  # the step time's change
    delta_pct: float
    ref_ns: float
    floor_ns: float  # MIN_SHARE_OF_STEP of ref_ns
    p_value: float
    test_name: str
    ci_low_ns: float  # the change's 95% CI
    ci_high_ns: float
    between_runs: bool  # several recordings on a side: the step time is tested on one value per recording
    paired: bool  # ... recorded in pairs
    runs_to_record: int | None  # recordings (or pairs) per side that would detect detect_pct
    cost: dict = field(default_factory=dict)  # the priced work (work.priced_work); {} without calls
    significant_deltas: dict | None = None  # the largest total of significant delta rows
    job_differences: tuple = ()  # how the runs are not the same job
    min_detectable_pct: float = float("nan")  # for the notes: the smallest change these steps detect
    every_run_has_steps: bool = True  # for the notes: False when a run has no profiler steps
    same_recordings: bool = False  # base and test are the same recordings: the same steps at the same times

    @property
    def ci_known(self) -> bool:
        return math.isfinite(self.ci_low_ns) and math.isfinite(self.ci_high_ns)

    @property
    def within_floor(self) -> bool:
        """The change's CI lies within ±floor."""
        return self.ci_known and -self.floor_ns < self.ci_low_ns and self.ci_high_ns < self.floor_ns

    @property
    def work_changed(self) -> bool:
        """The priced work changed significantly, by at least the floor."""
        return bool(self.cost.get("significant"))

    @property
    def work_slower(self) -> bool:
        return self.cost.get("delta_pct", 0) > 0


@dataclass(frozen=True)
class Rule:
    reason: str  # the reason code
    verdict: str
    basis: str
    applies: Callable[[Facts], bool]
    doc: str  # the rule of docs/COMPARE.md


RULES: tuple[Rule, ...] = (
    Rule("same_recordings", NO_CHANGE, STEP_TIME, lambda f: f.same_recordings,
         "0. base and test are the same recordings (the same steps at the same times)"),
    Rule("too_few_steps", CANNOT_TELL, STEP_TIME, lambda f: f.fewest_steady_steps < MIN_STEADY_STEPS,
         "1. a run has fewer than MIN_STEADY_STEPS steady steps (or none)"),
    Rule("steps_slower", SLOWER, STEP_TIME, lambda f: f.significant and f.delta_ns > 0,
         "2. the step time changed significantly"),
    Rule("steps_faster", FASTER, STEP_TIME, lambda f: f.significant,
         "2. the step time changed significantly"),
    Rule("work_slower", SLOWER, WORK, lambda f: f.work_changed and f.ci_known and f.work_slower and f.ci_high_ns >= f.floor_ns,
         "3. the priced work changed, and the step time's CI reaches the floor in its direction"),
    Rule("work_faster", FASTER, WORK, lambda f: f.work_changed and f.ci_known and not f.work_slower and f.ci_low_ns <= -f.floor_ns,
         "3. the priced work changed, and the step time's CI reaches the floor in its direction"),
    Rule("deltas_past_floor", CANNOT_TELL, STEP_TIME,
         lambda f: f.within_floor and f.significant_deltas is not None and abs(f.significant_deltas["delta_ns_per_step"]) > f.floor_ns,
         "4. the significant delta rows add up to more than the floor"),
    Rule("one_recording_cannot_rule_out", CANNOT_TELL, STEP_TIME, lambda f: f.work_changed and f.within_floor and not f.between_runs,
         "5. one recording per side, the priced work changed, the step time's CI within the floor"),
    Rule("steps_within_floor", NO_CHANGE, STEP_TIME, lambda f: f.within_floor,
         "6. the step time's CI lies within the floor"),
    Rule("steps_cannot_tell", CANNOT_TELL, STEP_TIME, lambda f: True,
         "7. otherwise: the CI neither lies within the floor nor wholly past it"),
)
"""docs/COMPARE.md "The verdict, in this order"; the first rule that applies decides."""

NOT_SAME_JOB = Rule("not_same_job", CANNOT_TELL, STEP_TIME, lambda f: bool(f.job_differences),
                    "the runs are not the same job, whatever the steps say")
REASONS = tuple(r.reason for r in RULES) + (NOT_SAME_JOB.reason,)


@dataclass(frozen=True)
class Decision:
    rule: Rule  # the rule that decided
    steps_rule: Rule  # the rule of the step times and the work (RULES), before NOT_SAME_JOB

    @property
    def reason(self) -> str:
        return self.rule.reason

    @property
    def verdict(self) -> str:
        return self.rule.verdict

    @property
    def basis(self) -> str:
        return self.rule.basis


def work_estimate_pct(facts: Facts) -> float:
    """With basis 'work': the priced work's change clipped to the step time's 95% CI, as a
    percentage of the reference."""
    change = min(max(facts.cost["delta_pct"] / 100 * facts.ref_ns, facts.ci_low_ns), facts.ci_high_ns)
    return 100 * change / facts.ref_ns


def decide(facts: Facts) -> Decision:
    """The first rule of RULES that applies, overruled by NOT_SAME_JOB when the jobs differ."""
    steps_rule = next(r for r in RULES if r.applies(facts))
    return Decision(NOT_SAME_JOB if NOT_SAME_JOB.applies(facts) else steps_rule, steps_rule)
