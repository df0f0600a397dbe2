"""Compare two runs: did the step get slower, what changed (operator, kernel, module, source line),
and is it real or noise.

Every number is per profiler step, computed from per-step samples so that Welch's t-test can tell
a change from step-to-step noise. Source lines are matched by (file, function, code text) when the
collector recorded the code, so an edit above a hot line does not turn it into a "new" hotspot.
Definitions: docs/COMPARE.md. Reads runs only through open_run.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..store import Run, open_run
from .stats import Sample, describe, welch

ALPHA = 0.05
"""A change is significant when Welch's two-sided p-value is below this..."""
MIN_SHARE_OF_STEP = 0.05
"""...and it moves time per step by at least this share of the base step time (noise floor)."""
DEVICE_KINDS_SQL = "('kernel', 'memcpy', 'memset')"
_TYPE_ORDER = ("source_line", "module", "operator", "kernel")


@dataclass
class StepTime:
    base: Sample
    test: Sample
    delta_ns: float
    delta_pct: float
    t: float
    p_value: float
    significant: bool
    verdict: str  # 'slower', 'faster', 'no significant change', 'cannot tell'


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


@dataclass
class Diff:
    base: str
    test: str
    step_time: StepTime
    deltas: list[Delta]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"base": self.base, "test": self.test, "step_time": _clean(asdict(self.step_time)),
                "deltas": [_clean(asdict(d)) for d in self.deltas], "notes": self.notes}


def _clean(obj):
    """NaN/inf are not JSON: they become null."""
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _step_samples(run: Run) -> tuple[list[int], list[float]]:
    """Step numbers and the job's time per step (the slowest rank's duration of that step)."""
    rows = run.sql("SELECT step, max(dur_ns) FROM steps GROUP BY step ORDER BY step").fetchall()
    if rows:
        return [r[0] for r in rows], [float(r[1]) for r in rows]
    span = run.sql("SELECT max(ts_ns + dur_ns) - min(ts_ns) FROM events").fetchone()[0]
    return [], [float(span or 0)]


def _per_step(run: Run, steps: list[int]) -> dict[tuple[str, str, str], list[float]]:
    """(type, key, metric) → time per step, one value per step of the run (0 where absent)."""
    in_steps = "e.step IS NOT NULL" if steps else "true"
    step_col = "e.step" if steps else "0"
    index = {s: i for i, s in enumerate(steps)} if steps else {0: 0}
    n = len(index)
    # CPU: self time of operators (duration minus the slices directly inside them);
    # device: kernel, memcpy and memset time. Keyed by what each delta list groups on.
    self_ns = (f"WITH child AS (SELECT parent_id, sum(dur_ns) AS ns FROM events WHERE parent_id IS NOT NULL GROUP BY 1) "
               f"SELECT {{key}}, {step_col}, sum(e.dur_ns - coalesce(c.ns, 0)) FROM events e "
               f"LEFT JOIN child c ON c.parent_id = e.event_id WHERE e.kind = 'cpu_op' AND {{key}} IS NOT NULL AND {in_steps} GROUP BY 1, 2")
    device_ns = (f"SELECT {{key}}, {step_col}, sum(e.dur_ns) FROM events e {{join}} "
                 f"WHERE e.kind IN {DEVICE_KINDS_SQL} AND {{key}} IS NOT NULL AND {in_steps} GROUP BY 1, 2")
    op_join = "JOIN events o ON e.op_id = o.event_id"
    queries = {
        ("operator", "cpu"): self_ns.format(key="e.name"),
        ("operator", "device"): device_ns.format(key="o.name", join=op_join),
        ("kernel", "device"): device_ns.format(key="e.name", join=""),
        ("module", "cpu"): self_ns.format(key="e.module_path"),
        ("module", "device"): device_ns.format(key="e.module_path", join=""),
        ("source_line", "cpu"): self_ns.format(key="e.frame_id"),
        ("source_line", "device"): device_ns.format(key="e.frame_id", join=""),
    }
    out: dict[tuple[str, str, str], list[float]] = {}
    for (type_, metric), sql in queries.items():
        for key, step, ns in run.sql(sql).fetchall():
            if step not in index:
                continue
            vec = out.setdefault((type_, str(key), metric), [0.0] * n)
            vec[index[step]] += float(ns)
    return out


def _line_keys(run: Run) -> dict[str, tuple[str, str]]:
    """frame_id → (matching key, display 'file:line').

    Several frames can share a line (the live collector keeps call sites as a tree). The matching
    key is file, function and code text — with the rank of the line among lines of equal text in
    that function, so duplicates pair up in order — else file, function and line number.
    """
    rows = run.sql("SELECT frame_id, file, line, function, code FROM frames").fetchall()
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


def _mean(v: list[float]) -> float:
    return sum(v) / len(v) if v else 0.0


def compare(base_path: Path | str, test_path: Path | str) -> Diff:
    """Compare two runs. Deltas: source lines, then modules, operators, kernels; each by absolute change per step."""
    with open_run(base_path) as base, open_run(test_path) as test:
        base_steps, base_times = _step_samples(base)
        test_steps, test_times = _step_samples(test)
        base_vals, base_disp = _rekey_lines(_per_step(base, base_steps), _line_keys(base))
        test_vals, test_disp = _rekey_lines(_per_step(test, test_steps), _line_keys(test))
    notes = []
    if len(base_times) < 2 or len(test_times) < 2:
        notes.append("a run has fewer than 2 profiler steps: significance cannot be judged (record more steps)")
    sb, st = describe(base_times), describe(test_times)
    t, p = welch(base_times, test_times)
    delta = st.mean - sb.mean
    pct = 100.0 * delta / sb.mean if sb.mean else float("nan")
    significant = bool(p < ALPHA and abs(delta) >= MIN_SHARE_OF_STEP * sb.mean) if not math.isnan(p) else False
    if math.isnan(p):
        verdict = "cannot tell"
    elif significant:
        verdict = "slower" if delta > 0 else "faster"
    else:
        verdict = "no significant change"
    step_time = StepTime(sb, st, delta, pct, t, p, significant, verdict)

    floor = MIN_SHARE_OF_STEP * (sb.mean if math.isfinite(sb.mean) else 0.0)
    deltas = []
    for k in set(base_vals) | set(test_vals):
        type_, key, metric = k
        a = base_vals.get(k, [0.0] * len(base_times))
        b = test_vals.get(k, [0.0] * len(test_times))
        ma, mb = _mean(a), _mean(b)
        d = mb - ma
        if d == 0:
            continue
        _, kp = welch(a, b)
        sig = bool(not math.isnan(kp) and kp < ALPHA and abs(d) >= floor)
        status = "new" if k not in base_vals else "gone" if k not in test_vals else "changed"
        shown = test_disp.get(key) or base_disp.get(key) or key
        base_shown = base_disp.get(key) if type_ == "source_line" and k in base_vals else None
        deltas.append(Delta(type_, shown, metric, ma, mb, d, (100.0 * d / ma) if ma else None, kp, sig, status,
                            base_shown if base_shown != shown else None))
    # the most actionable view first (the user's lines, then modules, operators, kernels), each ranked
    # by absolute change: an operator's total spans many lines, so across types sizes do not compare
    deltas.sort(key=lambda x: (_TYPE_ORDER.index(x.type), -abs(x.delta_ns_per_step), x.key))
    return Diff(str(base_path), str(test_path), step_time, deltas, notes)


def render_text(diff: Diff, top: int = 20) -> str:
    from ..info import fmt_ns

    s = diff.step_time

    def sample(x: Sample) -> str:
        if x.n < 2:
            return f"{fmt_ns(x.mean)} (n={x.n})"
        return f"{fmt_ns(x.mean)} [95% CI {fmt_ns(x.ci_low)} .. {fmt_ns(x.ci_high)}] (n={x.n})"

    p = "p=n/a" if not math.isfinite(s.p_value) else f"p={s.p_value:.3g}"
    lines = [
        f"base {diff.base}: step time {sample(s.base)}",
        f"test {diff.test}: step time {sample(s.test)}",
        f"change: {'+' if s.delta_ns >= 0 else '-'}{fmt_ns(abs(s.delta_ns))} ({s.delta_pct:+.1f}%), {p} → {s.verdict.upper()}",
        "",
        f"largest changes per step (* = significant: p < {ALPHA} and at least {MIN_SHARE_OF_STEP:.0%} of the step)",
    ]
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
