"""The CI gate of `diff --fail-if-slower PCT` (docs/COMPARE.md "The CI gate").

Must not: judge the runs again (it reads the Diff's verdict) or print.
"""

from __future__ import annotations

from .render import calls_change
from .result import Diff
from .verdict import CANNOT_TELL, SLOWER, WORK


def gate(diff: Diff, max_slower_pct: float) -> tuple[bool, str]:
    """(fail, message). It fails when the verdict is "slower" by more than PCT (`estimate_pct`);
    with "cannot tell" it passes and the message says why it could not judge (a gate that failed on
    noise would be switched off)."""
    s = diff.step_time
    if s.verdict == SLOWER and s.estimate_pct > max_slower_pct:
        if s.basis == WORK:
            return True, (f"the step does about {s.estimate_pct:.1f}% more work (priced at the base's time per call, "
                          f"p={s.work['cost']['p_value']:.2g}), over the {max_slower_pct:g}% limit")
        return True, f"step time is {s.delta_pct:.1f}% slower (p={s.p_value:.2g}, {s.test_name}), over the {max_slower_pct:g}% limit"
    if s.verdict == CANNOT_TELL:
        work = s.work or {}
        more = f"; {calls_change(work)}" if work.get("changed") and work["test_median"] > work["base_median"] else ""
        return False, f"cannot tell whether the step time is over the {max_slower_pct:g}% limit: {s.reason}{more}"
    return False, ""
