"""Comparing runs: steady-state steps, robust step-time verdicts, ranked deltas, moved source lines, the CI gate."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random
import statistics
from pathlib import Path

import pytest

from neuron_explorer.analyzers import analyze
from neuron_explorer.analyzers.diff import compare, gate, render_text
from neuron_explorer.analyzers.metrics import select_steady_steps, steady_steps
from neuron_explorer.analyzers.stats import (
    _u_counts,
    bootstrap_median_diff_ci,
    cliffs_delta,
    compare_samples,
    describe,
    mann_whitney,
    paired_difference_t,
    paired_ratio_t,
    recording_value,
    run_level_t,
    slow_recordings,
    t_quantile,
    t_sf,
    u_statistic,
    welch,
)
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.fmt import duration
from neuron_explorer.store import open_run

from .conftest import X, cli, write_trace

pytestmark = pytest.mark.slow  # tier: a diff CLI process and bootstrap statistics per test (~80-150 s alone)


def test_statistics_match_textbook_values():
    assert abs(2 * t_sf(2.0, 10) - 0.073388) < 1e-5  # two-sided p of t=2 with 10 df
    assert abs(t_quantile(0.975, 4) - 2.776445) < 1e-5
    t, p = welch([1, 2, 3, 4, 5], [2, 3, 4, 5, 6])
    assert abs(t - 1.0) < 1e-12 and abs(p - 0.346594) < 1e-5
    s = describe([10, 12, 11, 13])
    assert s.mean == 11.5 and abs(s.ci_low - 9.44574) < 1e-4 and abs(s.ci_high - 13.55426) < 1e-4


def _trace(path: Path, src: Path, hot_line: int, step_ms: list[float], slow_ms: float = 0.0) -> Path:
    """Steps of step_ms; in each, `hot` (defined at hot_line of src) runs aten::mm (1 ms) and, if
    slow_ms, aten::slow — the rest of the step is aten::relu outside `hot`."""
    events, t = [], 0.0
    for i, ms in enumerate(step_ms):
        us = ms * 1000
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": t, "dur": us})
        hot_us = 1000 + slow_ms * 1000
        events.append({"ph": "X", "cat": "python_function", "name": f"{src}({hot_line}): hot", "pid": 1, "tid": 1, "ts": t + 1, "dur": hot_us})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 2, "dur": 998})
        if slow_ms:
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::slow", "pid": 1, "tid": 1, "ts": t + 1001, "dur": slow_ms * 1000 - 2})
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::relu", "pid": 1, "tid": 1, "ts": t + hot_us + 5, "dur": us - hot_us - 10})
        t += us + 10
    return write_trace(path, events)


BASE_STEPS = [10.0, 10.3, 9.8, 10.1, 10.0]
SAME_STEPS = [10.1, 9.9, 10.2, 10.0, 9.9]


def _runs(tmp: Path, test_steps: list[float], slow_ms: float, shift: int) -> tuple[Path, Path]:
    src = tmp / "train.py"
    body = ["import torch", "", "", "", "", "", "", "", "", "def hot():", "    return torch.mm(a, b)"]
    src.write_text("\n".join(body) + "\n")
    base = import_traces(_trace(tmp / "base.json", src, 10, BASE_STEPS), tmp / "base").run_dir
    edit = ["# an edit above", *(["x = 1"] * (shift - 1))] if shift else []
    src.write_text("\n".join([*edit, *body]) + "\n")  # `def hot` moves down by `shift` lines
    test = import_traces(_trace(tmp / "test.json", src, 10 + shift, test_steps, slow_ms), tmp / "test").run_dir
    return base, test


def test_the_work_per_step_is_counted_whatever_the_step_times(tmp_path: Path):
    """Operator calls per steady step are a count: the machine's speed does not move them. Here the
    test's steps make one more call (aten::slow, inside `hot`) while their times are the base's."""
    base, test = _runs(tmp_path, SAME_STEPS, slow_ms=0.5, shift=0)
    d = compare(base, test)
    w = d.step_time.work
    assert (w["base_median"], w["test_median"]) == (2, 3) and w["changed"] and w["p_value"] < 0.05
    assert d.step_time.verdict in ("cannot tell", "no significant change")
    assert any(n.startswith("the test's steps make 50.0% more operator calls than the base's (2 → 3 per step") for n in d.notes)
    assert "work per step: operator calls (median) 2 → 3 (+50.0%)" in render_text(d)
    assert json.loads(json.dumps(d.to_dict()))["step_time"]["work"]["test_median"] == 3
    same = compare(base, base).step_time.work
    assert same["changed"] is False and same["p_value"] == 1.0 and same["delta_pct"] == 0
    assert same["cost"]["delta_ns_per_step"] == 0 and same["cost"]["p_value"] == 1.0 and not same["cost"]["significant"]
    # the CI gate passes "cannot tell", and says what the counts show
    unsure = dataclasses.replace(d, step_time=dataclasses.replace(d.step_time, verdict="cannot tell"))
    fail, message = gate(unsure, 5)
    assert not fail and message.endswith("; the test's steps make 50.0% more operator calls than the base's")


def test_a_slow_operation_at_a_known_line_comes_first_and_is_significant(tmp_path: Path):
    base, test = _runs(tmp_path, [s + 3.0 for s in SAME_STEPS], slow_ms=3.0, shift=4)
    d = compare(base, test)
    assert d.step_time.verdict == "slower" and d.step_time.significant and d.step_time.p_value < 0.001
    assert abs(d.step_time.delta_ns - 3.0e6) < 0.3e6
    first = d.deltas[0]
    assert first.type == "source_line" and first.significant and abs(first.delta_ns_per_step - 3.0e6) < 5e3
    lines = [x for x in d.deltas if x.type == "source_line"]
    assert lines[0].key == f"{tmp_path / 'train.py'}:14" and lines[0].base_key == f"{tmp_path / 'train.py'}:10"
    assert lines[0].status == "changed", "a moved line must be matched, not reported as new"
    slow = [x for x in d.deltas if x.type == "operator" and x.key == "aten::slow"]
    assert slow and slow[0].status == "new" and slow[0].significant


def test_two_runs_of_the_same_code_show_no_significant_regression(tmp_path: Path):
    base, test = _runs(tmp_path, SAME_STEPS, slow_ms=0.0, shift=0)
    d = compare(base, test)
    assert d.step_time.verdict == "no significant change" and not d.step_time.significant
    assert not [x for x in d.deltas if x.significant]
    res = cli("diff", base, test, "--fail-if-slower", "5%")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "NO SIGNIFICANT CHANGE" in res.stdout


def test_cli_json_and_gate(tmp_path: Path):
    base, test = _runs(tmp_path, [s + 3.0 for s in SAME_STEPS], slow_ms=3.0, shift=4)
    res = cli("diff", base, test, "--json")
    data = json.loads(res.stdout)
    assert data["step_time"]["verdict"] == "slower" and data["deltas"][0]["significant"] is True
    gate = cli("diff", base, test, "--fail-if-slower", "5%")
    assert gate.returncode == 1 and "SLOWER" in gate.stdout
    lenient = cli("diff", base, test, "--fail-if-slower", "50%")
    assert lenient.returncode == 0
    bad = cli("diff", base, test, "--fail-if-slower", "lots")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_one_step_runs_say_they_cannot_tell(tmp_path: Path):
    src = tmp_path / "x.py"
    src.write_text("def hot():\n    pass\n")
    a = import_traces(_trace(tmp_path / "a.json", src, 1, [10.0]), tmp_path / "a").run_dir
    b = import_traces(_trace(tmp_path / "b.json", src, 1, [20.0]), tmp_path / "b").run_dir
    d = compare(a, b)
    assert d.step_time.verdict == "cannot tell" and d.reason == "too_few_steps"
    assert d.step_time.steps["base"]["used"] == [0] and d.step_time.steps_to_record == 5


# ---- statistics ----------------------------------------------------------------------------------

def test_mann_whitney_is_exact_for_small_samples_and_close_to_it_beyond():
    assert mann_whitney([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == (25.0, pytest.approx(2 / 252))  # the most extreme of C(10,5)
    base, test = [1.0, 3.5, 4.2, 7.0], [2.0, 5.0, 6.1, 8.0, 9.0]
    u, p = mann_whitney(base, test)
    # the permutation distribution by brute force: every way to split the 9 values 4 / 5
    values, centre = base + test, len(base) * len(test) / 2
    as_extreme = [abs(u_statistic([values[i] for i in c], [values[i] for i in range(9) if i not in c]) - centre) >= abs(u - centre)
                  for c in itertools.combinations(range(9), 4)]
    assert u == 15 and p == pytest.approx(sum(as_extreme) / len(as_extreme))
    # 31 + 31 values: the normal approximation, within 0.005 of the exact tail
    rng = random.Random(3)
    a, b = [rng.gauss(0, 1) for _ in range(31)], [rng.gauss(0.5, 1) for _ in range(31)]
    u, p = mann_whitney(a, b)
    counts = _u_counts(31, 31)
    k = int(min(u, 31 * 31 - u))
    assert abs(p - 2 * sum(counts[: k + 1]) / sum(counts)) < 0.005
    assert cliffs_delta([1, 2], [3, 4]) == 1.0 and cliffs_delta([1, 2], [2, 1]) == 0.0 and cliffs_delta([3, 4], [1, 2]) == -1.0


def test_welch_only_where_its_screen_holds_and_a_seeded_bootstrap():
    calm = [10.0, 10.3, 9.8, 10.1, 10.0]
    assert compare_samples(calm, [x + 3 for x in calm]).name == "welch-t"
    spiky = [10.0, 10.3, 9.8, 10.1, 10.0, 31.0]  # one garbage-collection step
    r = compare_samples(spiky, [x + 3 for x in calm])
    assert r.name == "mann-whitney-u" and "robust SDs" in r.reason and r.effect_size == pytest.approx(1 - 2 * 5 / 30)
    assert compare_samples(calm[:4], calm[:4]).name == "mann-whitney-u"  # fewer than 5 values: no screen passes
    ci = bootstrap_median_diff_ci(calm, [x + 3 for x in calm])
    assert ci == bootstrap_median_diff_ci(calm, [x + 3 for x in calm]) and ci[0] <= 3.0 <= ci[1]


# ---- steady-state steps --------------------------------------------------------------------------

def test_step_selection_rules():
    steps = list(range(11))
    # a live run without a schedule: the first and last steps are bounded by the profiler, not by steps
    durs = [95.0, 1.07, 0.75, 0.76, 0.68, 0.74, 0.76, 0.79, 0.85, 0.80, 0.12]
    sel = select_steady_steps(steps, durs, open_ended=True)
    assert sel.used == list(range(2, 10)) and [x["step"] for x in sel.left_out] == [0, 1, 10]
    assert [x["reason"].split(":")[0] for x in sel.left_out] == ["before the first step boundary", "warm-up", "after the last step boundary"]
    # an imported run: a short last step is partial; warm-up is capped at a quarter of the steps
    sel = select_steady_steps(steps, [50.0, 40, 30, 10, 10.1, 9.9, 10, 10.2, 9.8, 10, 3.0])
    assert sel.used == [2, 3, 4, 5, 6, 7, 8, 9] and [x["step"] for x in sel.left_out] == [0, 1, 10]
    # a very steady run keeps its first step (within 10% of the median), and a late spike is kept
    sel = select_steady_steps(steps[:8], [10.6, 10.0, 10.0, 10.0, 10.0, 30.0, 10.0, 10.0])
    assert sel.used == list(range(8)) and sel.left_out == []
    assert select_steady_steps([0, 1, 2], [9.0, 1.0, 1.0]).used == [0, 1, 2]  # too few steps to judge


US = 1.0  # the Kineto unit


def _steps_run(tmp: Path, name: str, step_ms: list[float], slow_ms: float = 0.0, t0_us: float = 0.0) -> Path:
    """Hand-built run: each step is ProfilerStep#i, and in it train.py(10): hot (aten::mm, 1 ms,
    plus aten::slow for slow_ms) then aten::relu for the rest of the step. A step shorter than
    hot + slow holds only aten::relu (a partial step).

        |ProfilerStep#i ..........................................................|
        |hot: aten::mm 1 ms | aten::slow slow_ms |  aten::relu (rest of the step)  |
    """
    return import_traces(write_trace(tmp / f"{name}.json", _step_events(tmp, step_ms, slow_ms, t0_us)), tmp / name).run_dir


def _step_events(tmp: Path, step_ms: list[float], slow_ms: float = 0.0, t0_us: float = 0.0) -> list[dict]:
    """The events of _steps_run's steps (train.py written in `tmp`)."""
    src = tmp / "train.py"
    if not src.exists():
        src.write_text("import torch\n" + "\n" * 8 + "def hot():\n    return torch.mm(a, b)\n")
    ev, t = [], t0_us
    for i, ms in enumerate(step_ms):
        us = ms * 1000
        ev.append(X(f"ProfilerStep#{i}", "user_annotation", t, us))
        rest = t + 1
        if us > 1000 + slow_ms * 1000 + 20:
            hot_us = 1000 + slow_ms * 1000
            ev.append(X(f"{src}(10): hot", "python_function", t + 1, hot_us))
            ev.append(X("aten::mm", "cpu_op", t + 2, 998))
            if slow_ms:
                ev.append(X("aten::slow", "cpu_op", t + 1001, slow_ms * 1000 - 2))
            rest = t + hot_us + 5
        ev.append(X("aten::relu", "cpu_op", rest, t + us - rest - 5))
        t += us + 10
    return ev


def _noisy(rng: random.Random, n: int, ms: float = 10.0) -> list[float]:
    """Step times with a heavy right tail: most within ±2%, one in six a 1.5x-4x spike (GC, allocator)."""
    return [ms * (rng.uniform(1.5, 4.0) if rng.random() < 1 / 6 else rng.gauss(1.0, 0.01)) for _ in range(n)]


def test_warm_up_and_partial_steps_are_left_out_and_a_real_regression_is_slower(tmp_path: Path):
    #           warm-up    steady steps (7)                         partial
    base_ms = [40.0, 25.0, 10.0, 10.3, 9.8, 10.1, 10.0, 10.2, 9.9, 2.0]
    test_ms = [80.0, 30.0, *(x + 3.0 for x in base_ms[2:9]), 0.5]
    base = _steps_run(tmp_path, "base", base_ms)
    test = _steps_run(tmp_path, "test", test_ms, slow_ms=3.0)
    d = compare(base, test)
    s = d.step_time
    assert s.verdict == "slower" and s.significant and s.delta_ns == pytest.approx(3.0e6)
    assert s.steps["base"]["used"] == s.steps["test"]["used"] == list(range(2, 9))
    assert [x["step"] for x in s.steps["test"]["left_out"]] == [0, 1, 9]
    assert s.test_name == "welch-t" and s.effect_size == 1.0
    first = d.deltas[0]
    assert first.type == "source_line" and first.significant and first.delta_ns_per_step == pytest.approx(3.0e6, rel=1e-3)
    text = render_text(d)
    assert "7 of 10 steps used (2..8)" in text and "left out step 9" in text and "warm-up" in text
    assert "\nverdict: SLOWER by about +30.0%: the step time's change is significant\n" in text
    data = json.loads(cli("diff", base, test, "--json").stdout)["step_time"]
    assert data["steps"]["base"]["used"] == list(range(2, 9)) and data["test_name"] == "welch-t"
    assert data["steps"]["base"]["left_out"][0]["reason"].startswith("warm-up")
    # analyze's report says the same steps, by step number and why (it read 'left out 0, 1, 9')
    from neuron_explorer.analyzers import render

    assert "10 steps (7 steady; steps 0, 1 left out: warm-up; step 9 left out: partial), mean " in render.text(analyze(test), width=400)


def test_a_longer_warm_up_alone_is_no_change(tmp_path: Path):
    """The same steady steps after warm-ups of very different length: with every step (the old
    comparison) the means differ by ~25%; over the steady steps nothing changed."""
    steady = [10.0, 10.3, 9.8, 10.1, 10.0, 10.2, 9.9, 10.1]
    base = _steps_run(tmp_path, "base", [30.0, 20.0, *steady])
    test = _steps_run(tmp_path, "test", [60.0, 40.0, *reversed(steady)])
    s = compare(base, test).step_time
    assert s.verdict == "no significant change" and s.steps["base"]["used"] == s.steps["test"]["used"] == list(range(2, 10))
    assert cli("diff", base, test, "--fail-if-slower", "5%").returncode == 0
    with open_run(test) as run:
        every = [d for (d,) in run.sql("SELECT dur_ns FROM steps ORDER BY step").fetchall()]
    with open_run(base) as run:
        every_base = [d for (d,) in run.sql("SELECT dur_ns FROM steps ORDER BY step").fetchall()]
    assert statistics.mean(every) / statistics.mean(every_base) > 1.2  # what including warm-up would have compared


def test_heavy_tailed_noise_is_no_change_and_a_regression_under_it_is_slower(tmp_path: Path):
    rng = random.Random(19)
    base = _steps_run(tmp_path, "base", _noisy(rng, 16))
    same = _steps_run(tmp_path, "same", _noisy(rng, 16))
    slow = _steps_run(tmp_path, "slow", _noisy(rng, 16, ms=12.0), slow_ms=2.0)  # +20%
    s = compare(base, same).step_time
    assert s.verdict == "no significant change" and s.test_name == "mann-whitney-u"
    assert len(s.steps["base"]["used"]) >= 12 and len(s.steps["test"]["used"]) >= 12  # spikes later in a run are kept
    r = compare(base, slow).step_time
    assert r.verdict == "slower" and r.test_name == "mann-whitney-u" and r.effect_size > 0.5
    assert r.delta_pct == pytest.approx(20, abs=3) and r.delta_ci_low_ns > 0
    assert r.steps["test"]["used"] == [s for s in range(16) if s not in {x["step"] for x in r.steps["test"]["left_out"]}]
    assert cli("diff", base, slow, "--fail-if-slower", "5%").returncode == 1


def test_significant_deltas_larger_than_the_noise_floor_are_never_no_change(tmp_path: Path):
    """Step times too noisy to show a +2 ms line (aten::relu fills 4..29 ms of every step), but the
    line itself is steady: the verdict cannot be a confident "no significant change". The line's
    aten::slow became slower (0.05 → 2.05 ms) with the same calls, so the work per step, priced at
    the base's time per call, is the same: the work does not decide."""
    rest = [5.0, 25.0, 8.0, 29.0, 12.0, 20.0, 6.0, 27.0, 15.0, 10.0]
    base = _steps_run(tmp_path, "base", [1.05 + r for r in rest], slow_ms=0.05)
    test = _steps_run(tmp_path, "test", [3.05 + r for r in [rest[i] for i in (3, 0, 5, 1, 8, 2, 9, 4, 7, 6)]], slow_ms=2.05)
    d = compare(base, test)
    s = d.step_time
    assert s.p_value > 0.05 and s.verdict == "cannot tell" and s.basis == "step time", s
    assert d.reason == "steps_cannot_tell"
    assert s.work["cost"]["delta_ns_per_step"] == 0 and s.work["cost"]["p_value"] == 1.0
    assert s.significant_deltas["delta_ns_per_step"] == pytest.approx(2e6, rel=0.01)
    assert s.steps["base"]["used"] == list(range(10))
    assert [x.key.endswith("train.py:10") for x in d.deltas if x.significant and x.type == "source_line"] == [True]
    failed, why = gate(d, 5.0)
    assert not failed and "cannot tell whether" in why  # the gate fails only on "slower"
    res = cli("diff", base, test, "--fail-if-slower", "5%")
    assert res.returncode == 0 and "CANNOT TELL" in res.stdout and "cannot tell whether" in res.stderr


def test_added_work_decides_when_the_step_times_cannot(tmp_path: Path):
    """The test's steps run one more operation (aten::slow, 2 ms, inside `hot`) while the rest of the
    step (aten::relu) scatters from 5 to 29 ms: the step times cannot size +2 ms, but the work is a
    count. Priced at the base's time per call (aten::slow, which only the test makes, at its own
    time: both sides run aten::mm and aten::relu at the same speed), the test's steps do 1.998 ms
    more, 11.96% of the base's mean step (16.7 ms): slower, on the work."""
    rest = [5.0, 25.0, 8.0, 29.0, 12.0, 20.0, 6.0, 27.0, 15.0, 10.0]
    base = _steps_run(tmp_path, "base", [1.0 + r for r in rest])
    test = _steps_run(tmp_path, "test", [3.0 + r for r in [rest[i] for i in (3, 0, 5, 1, 8, 2, 9, 4, 7, 6)]], slow_ms=2.0)
    d = compare(base, test)
    s, cost = d.step_time, d.step_time.work["cost"]
    assert cost["test_speed"] == pytest.approx(1.0) and cost["metric"] == "cpu"
    assert cost["delta_ns_per_step"] == pytest.approx(1.998e6) and cost["delta_pct"] == pytest.approx(100 * 1.998 / 16.7, rel=1e-6)
    assert cost["significant"] and cost["p_value"] < 1e-3
    assert s.p_value > 0.05 and not s.significant  # the step times alone: no
    assert s.verdict == "slower" and s.basis == "work" and s.estimate_pct == pytest.approx(cost["delta_pct"])
    assert d.reason == "work_slower"
    assert "host work priced at the base's time per call: " in render_text(d)
    assert not any("one recording per side" in n for n in d.notes)  # a count, not a sample of the machine's speed
    assert gate(d, 5.0) == (True, "the step does about 12.0% more work (priced at the base's time per call, "
                                  f"p={cost['p_value']:.2g}), over the 5% limit")
    assert gate(d, 15.0) == (False, "")
    res = cli("diff", base, test, "--fail-if-slower", "5%")
    assert res.returncode == 1 and "\nverdict: SLOWER by about +12.0%, on the work per step: " in res.stdout
    # the other way round, the work is less: faster
    back_diff = compare(test, base)
    back = back_diff.step_time
    assert back_diff.reason == "work_faster" and back.verdict == "faster" and back.basis == "work" and back.work["cost"]["delta_pct"] < -5


def _spread_run(tmp: Path, name: str, step_ms: list[float], extra: int = 0) -> Path:
    """Steps of aten::mm (1 ms) and 20 tiny operators (10 us each: the model's other operators), then
    `extra` small operators of 0.2 ms each (aten::op0, aten::op1, ...: no one of them is 5% of a
    10 ms step), then no operator for the rest of the step (the host waits, as on a device that
    bounds the step)."""
    ev, t = [], 0.0
    for i, ms in enumerate(step_ms):
        ev += [X(f"ProfilerStep#{i}", "user_annotation", t, ms * 1000), X("aten::mm", "cpu_op", t + 1, 998)]
        ev += [X(f"aten::k{k}", "cpu_op", t + 1000 + 11 * k, 10) for k in range(20)]
        at = t + 1300
        for k in range(extra):
            ev.append(X(f"aten::op{k}", "cpu_op", at, 200))
            at += 201
        t += ms * 1000 + 10
    return import_traces(write_trace(tmp / f"{name}.json", ev), tmp / name).run_dir


def test_step_times_that_rule_the_added_work_out_keep_their_verdict(tmp_path: Path):
    """The test runs ten small operators more (2 ms in all, none 5% of the step) but its steps take
    as long as the base's (it hides in the step's wait, as host work hides behind a busy device).
    Four recordings per side whose values vary by under 1%: the interval, which sees the
    variation between recordings, rules a 5% change out, so the step times decide and a note names
    the work. One recording per side: its steps cannot show how fast each recording's machine ran,
    so they cannot rule the work out: cannot tell."""
    for side, medians, extra in (("base", [10.0, 10.05, 9.95, 10.02], 0), ("test", [9.97, 10.03, 10.0, 9.96], 10)):
        (tmp_path / side).mkdir()
        for i, m in enumerate(medians, 1):
            run = _spread_run(tmp_path, f"{side}-{i}", [3 * m] + [m * f for f in (1.0, 1.004, 0.997, 1.002, 0.996, 1.005, 0.999, 1.001, 0.998)],
                              extra)
            run.rename(tmp_path / side / str(i))
    base, test = tmp_path / "base", tmp_path / "test"
    d = compare(base, test)
    s = d.step_time
    assert s.test_name == "t-on-run-values" and s.work["cost"]["significant"] and s.significant_deltas is None
    assert d.reason == "steps_within_floor"
    assert -0.05 * s.base.median < s.delta_ci_low_ns and s.delta_ci_high_ns < 0.05 * s.base.median
    assert s.verdict == "no significant change" and s.basis == "step time" and math.isnan(s.estimate_pct)
    assert any("priced at the base's time per call, +" in n and "though the step time is 'no significant change'" in n
               for n in d.notes), d.notes
    assert cli("diff", base, test, "--fail-if-slower", "5%").returncode == 0
    one_diff = compare(base / "1", test / "1")
    one = one_diff.step_time
    assert one.delta_ci_high_ns < 0.05 * one.base.median and one.verdict == "cannot tell" and one.basis == "step time"
    assert one_diff.reason == "one_recording_cannot_rule_out" and one.work["cost"]["test_speed"] == pytest.approx(1.0, abs=0.01)


def _mm_run(tmp: Path, name: str, step_ms: list[float], big_ms: float = 0.0) -> Path:
    """Steps of two small matmuls (aten::mm, 64x128 by 128x64, 1 ms each), aten::relu for the rest;
    with big_ms also a 384x384 aten::mm of that long."""
    small = {"Input Dims": [[64, 128], [128, 64]], "Input type": ["float", "float"]}
    ev, t = [], 0.0
    for i, ms in enumerate(step_ms):
        ev.append(X(f"ProfilerStep#{i}", "user_annotation", t, ms * 1000))
        ev += [X("aten::mm", "cpu_op", t + 1, 1000, **small), X("aten::mm", "cpu_op", t + 1002, 1000, **small)]
        at = t + 2003
        if big_ms:
            ev.append(X("aten::mm", "cpu_op", at, big_ms * 1000, **{"Input Dims": [[384, 384], [384, 384]], "Input type": ["float", "float"]}))
            at += big_ms * 1000 + 1
        ev.append(X("aten::relu", "cpu_op", at, t + ms * 1000 - at - 5))
        t += ms * 1000 + 10
    return import_traces(write_trace(tmp / f"{name}.json", ev), tmp / name).run_dir


def test_a_call_is_priced_by_its_inputs_not_only_its_name(tmp_path: Path):
    """An added 384x384 aten::mm of 3 ms is priced at 3 ms, not at the 1 ms of the base's small
    aten::mm calls of the same name."""
    rest = [6.0, 26.0, 9.0, 30.0, 13.0, 21.0, 7.0, 28.0, 16.0, 11.0]
    base = _mm_run(tmp_path, "base", rest)
    test = _mm_run(tmp_path, "test", [r + 3.0 for r in rest], big_ms=3.0)
    cost = compare(base, test).step_time.work["cost"]
    assert cost["delta_ns_per_step"] == pytest.approx(3.0e6, rel=1e-3) and cost["significant"]  # by name: 1 ms


def test_the_priced_work_is_per_rank_as_the_step_is(tmp_path: Path):
    """Two ranks, each adding aten::slow (2 ms) to every step: the job's step grows by 2 ms, not 4,
    so the priced work per step is the sum over ranks divided by the ranks."""
    rest = [5.0, 25.0, 8.0, 29.0, 12.0, 20.0, 6.0, 27.0, 15.0, 10.0]

    def run(name: str, slow_ms: float) -> Path:
        for r in (0, 1):
            write_trace(tmp_path / name / f"rank{r}.json", _step_events(tmp_path, [1.0 + slow_ms + ms for ms in rest], slow_ms),
                        distributedInfo={"rank": r, "world_size": 2})
        return import_traces(tmp_path / name, tmp_path / f"{name}-run").run_dir

    cost = compare(run("base", 0.0), run("test", 2.0)).step_time.work["cost"]
    assert cost["delta_ns_per_step"] == pytest.approx(1.998e6, rel=1e-3) and cost["significant"]


def test_too_few_steady_steps_say_how_many_to_record(tmp_path: Path):
    calm = _steps_run(tmp_path, "calm", [30.0, 10.0, 10.2, 9.9, 10.1])  # 1 warm-up + 4 steady steps
    calm2 = _steps_run(tmp_path, "calm2", [30.0, 13.0, 13.2, 12.9, 13.1])
    noisy = _steps_run(tmp_path, "noisy", [30.0, 8.0, 13.0, 9.0, 12.0])
    d = compare(calm, calm2)
    s = d.step_time
    assert s.verdict == "cannot tell" and s.steps["base"]["used"] == [1, 2, 3, 4] and not s.significant
    assert d.reason == "too_few_steps" and s.steps_to_record >= 6  # 5 steady + the warm-up
    loud = compare(calm, noisy).step_time
    assert loud.verdict == "cannot tell" and loud.steps_to_record > s.steps_to_record
    # asking to detect a smaller change needs more steps
    assert compare(calm, noisy, detect_pct=2).step_time.steps_to_record > loud.steps_to_record
    res = cli("diff", calm, calm2, "--fail-if-slower", "5%")
    assert res.returncode == 0 and "CANNOT TELL" in res.stdout and "cannot tell" in res.stderr


def test_the_analyzer_uses_the_same_steady_steps(tmp_path: Path):
    """Summary step statistics and step-outliers read the steps that diff compares: the warm-up
    step (40 ms) and the partial one are not outliers; the periodic 25 ms step is."""
    durs = [40.0, 10.0, 10.2, 9.9, 10.1, 10.0, 25.0, 10.0, 9.8, 10.1, 10.0, 3.0]
    run = _steps_run(tmp_path, "run", durs)
    with open_run(run) as r:
        sel = steady_steps(r, 0)
        job = steady_steps(r)
    assert sel.used == job.used == list(range(1, 11)) == compare(run, run).step_time.steps["base"]["used"]
    report = analyze(run, write=False)
    st = report.summary["ranks"][0]["steps"]
    used_ms = durs[1:11]
    assert st["count"] == 12 and st["steady_count"] == 10 and st["steady_steps"] == sel.used
    assert st["p50_ns"] == pytest.approx(statistics.median(used_ms) * 1e6) and st["max_ns"] == pytest.approx(25e6)
    assert st["cv"] == pytest.approx(statistics.pstdev(used_ms) / statistics.mean(used_ms), rel=1e-3)
    assert [x["step"] for x in st["left_out"]] == [0, 11]
    (out,) = [f for f in report.findings if f.rule_id == "step-outliers"]
    assert out.location.steps == [6] and "of 10 steady steps" in out.title


def test_compare_md_states_every_threshold_with_its_value():
    from neuron_explorer.analyzers import diff, metrics, stats

    from .conftest import REPO

    text = (REPO / "docs" / "COMPARE.md").read_text()
    for mod, names in ((diff, ("ALPHA", "MIN_SHARE_OF_STEP", "MIN_STEADY_STEPS", "POWER")),
                       (metrics, ("WARMUP_ROBUST_SDS", "WARMUP_MIN_SHARE", "WARMUP_MAX_SHARE", "PARTIAL_MAX_SHARE", "MIN_STEPS_TO_SELECT")),
                       (stats, ("OUTLIER_SDS", "EXACT_U_MAX_N", "BOOTSTRAP_RESAMPLES", "BOOTSTRAP_SEED", "RECORDING_QUANTILE",
                                "SLOW_RECORDING_SHARE"))):
        for name in names:
            assert f"`{name}` = {getattr(mod, name)}" in text, f"docs/COMPARE.md must state {name} = {getattr(mod, name)}"


def test_one_chance_row_among_many_does_not_overrule_the_step_times():
    """The consistency check counts a delta row only when it stays significant under Holm's
    correction for the rows tested in its list: among 20 rows, p = 0.04 is what chance gives."""
    from neuron_explorer.analyzers.diff import Delta
    from neuron_explorer.analyzers.diff.compare import _largest_significant_total

    def row(key, p, ns=2e6):
        return Delta("source_line", key, "cpu", 10e6, 10e6 + ns, ns, 20.0, p, p < 0.05, "changed")

    noise = [row(f"train.py:{i}", 0.5) for i in range(19)]
    assert _largest_significant_total([row("train.py:99", 0.04), *noise]) is None
    big = _largest_significant_total([row("train.py:99", 1e-4), row("train.py:98", 0.002, ns=1e6), *noise])
    assert big == {"type": "source_line", "metric": "cpu", "delta_ns_per_step": 3e6, "rows": 2}


def test_a_change_whose_interval_straddles_the_floor_is_cannot_tell(tmp_path: Path):
    """+7% on steps that vary by ±10%: the median moved past 5%, but the 95% interval of the change
    also holds changes under 5% (and none at all), so neither "slower" nor "no change" is earned."""
    base_ms = [10.0, 11.0, 9.0, 10.5, 9.5, 10.2, 9.8, 10.8, 9.2, 10.0]
    base = _steps_run(tmp_path, "base", base_ms)
    test = _steps_run(tmp_path, "test", [1.07 * base_ms[i] for i in (4, 1, 7, 0, 9, 2, 5, 8, 3, 6)])
    d = compare(base, test)
    s = d.step_time
    lo, hi = s.delta_ci_low_ns / s.base.median, s.delta_ci_high_ns / s.base.median
    assert s.delta_pct == pytest.approx(7.0, abs=0.5) and lo < 0.05 < hi
    assert s.verdict == "cannot tell" and not s.significant and d.reason == "steps_cannot_tell"
    assert s.steps["base"]["used"] == s.steps["test"]["used"] == list(range(10))
    res = cli("diff", base, test, "--fail-if-slower", "5%")
    assert res.returncode == 0 and "cannot tell whether" in res.stderr



def test_steady_step_times_do_not_overrule_significant_line_deltas(tmp_path: Path):
    """The step time did not move (10 ms ± 1%), yet the user's line takes +1 ms (10% of the step)
    in every step, significantly: what left the step is unattributed time (aten::relu outside any
    line). The step times alone would say "no significant change"; with the line deltas it is
    "cannot tell", never a confident no change."""
    steps = [10.0, 10.1, 9.9, 10.05, 9.95, 10.0, 10.1, 9.9]
    base = _steps_run(tmp_path, "base", steps)
    test = _steps_run(tmp_path, "test", list(reversed(steps)), slow_ms=1.0)
    d = compare(base, test)
    s = d.step_time
    within = abs(s.delta_ci_low_ns) < 0.05 * s.base.median and abs(s.delta_ci_high_ns) < 0.05 * s.base.median
    assert within and s.verdict == "cannot tell" and d.reason == "deltas_past_floor"
    assert s.significant_deltas["delta_ns_per_step"] == pytest.approx(998e3)
    assert s.significant_deltas["type"] == "source_line" and s.steps["test"]["used"] == list(range(8))


def _gemm_run(tmp: Path, name: str, step_ms: float, steps: int = 8, kernel: str = "gemm_bf16") -> Path:
    """Steps of `step_ms` on an H100, each one aten::mm of a recorded 2e9 FLOPs (one kernel, `kernel`)."""
    ev, t = [], 0.0
    for i in range(steps):
        us = step_ms * 1000
        ev.append(X(f"ProfilerStep#{i}", "user_annotation", t, us))
        ev.append(X("aten::mm", "cpu_op", t + 10, 50, **{"External id": i + 1, "flops": 2e9, "Input Dims": [[1024, 1024], [1024, 1024]],
                                                         "Input type": ["c10::BFloat16"] * 2}))
        ev.append(X("cudaLaunchKernel", "cuda_runtime", t + 20, 5, correlation=100 + i, **{"External id": i + 1}))
        ev.append(X(kernel, "kernel", t + 30, us - 100, pid=0, tid=7, correlation=100 + i, stream=7, device=0))
        t += us + 10
    props = [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]
    return import_traces(write_trace(tmp / f"{name}.json", ev, deviceProperties=props), tmp / name).run_dir


def test_diff_compares_mfu_per_steady_step(tmp_path: Path):
    base = _gemm_run(tmp_path, "base", 10.0)
    test = _gemm_run(tmp_path, "test", 12.5)
    d = compare(base, test)
    ub, ut = d.utilisation["base"], d.utilisation["test"]
    # MFU = 2e9 FLOPs / (step time x 989.4 TFLOP/s, the H100's dense bf16 peak)
    assert ub["mfu_median"] == pytest.approx(2e9 / 10e-3 / 989.4e12) and ut["mfu_median"] == pytest.approx(2e9 / 12.5e-3 / 989.4e12)
    assert ub["tflops_per_s_median"] == pytest.approx(2e9 / 10e-3 / 1e12) and ub["devices"] == ["NVIDIA H100 80GB HBM3"]
    text = render_text(d)
    assert "MFU (median over steady steps): 0.0202% → 0.0162% (-0.00404 points)" in text
    assert "achieved TFLOP/s per step (median): 0.2 → 0.16" in text
    assert json.loads(json.dumps(d.to_dict()))["utilisation"]["test"]["mfu_median"] == pytest.approx(ut["mfu_median"])


def test_diff_says_why_a_gpu_run_has_no_mfu_in_the_analysis_words(tmp_path: Path):
    """The same H100 job recorded without deviceProperties (multirank_128's traces name no device):
    the diff said 'no device peak for a CPU run'; it gives the reason `analyze` prints."""
    base = _gemm_run(tmp_path, "base", 10.0)
    path = next(tmp_path.glob("base.json"))
    doc = json.loads(path.read_text())
    doc.pop("deviceProperties")
    path.write_text(json.dumps(doc))
    unnamed = import_traces(path, tmp_path / "unnamed").run_dir
    text = render_text(compare(base, unnamed))
    assert "CPU run" not in text
    assert "MFU: unknown (the trace does not name the device" in text and "give --peak-tflops and --peak-dtype)" in text


Q = 0.998
"""The lower quartile of _recordings' steps over their median."""


def _recordings(tmp: Path, name: str, medians_ms: list[float], starts_s: list[float] | None = None, host: str | None = None,
                slow_ms: float = 0.0) -> Path:
    """A run set: one hand-built run per recording, each 9 steady steps within ±0.5% of its median
    (after a warm-up step), as repeated recordings of one job show: steady within a process, but the
    process as a whole faster or slower (placement, load, memory layout); a recording's value, its
    lower-quartile step (the 3rd fastest of 9), is 0.998 x its median. With starts_s and host:
    recording i starts starts_s[i] seconds into 2026-11-30 on a wall clock, on that host (as live
    recordings are). slow_ms: every step also runs aten::slow for that long (_steps_run)."""
    folder = tmp / name
    folder.mkdir()
    for i, m in enumerate(medians_ms, 1):
        steps = [3 * m] + [m * f for f in (1.0, 1.004, 0.997, 1.002, 0.996, 1.005, 0.999, 1.001, 0.998)]
        t0 = 1_796_000_000e6 + starts_s[i - 1] * 1e6 if starts_s else 0.0
        run = _steps_run(tmp, f"{name}-{i}", steps, slow_ms=slow_ms, t0_us=t0)
        if host:
            manifest = json.loads((run / "manifest.json").read_text())
            (run / "manifest.json").write_text(json.dumps({**manifest, "host": host}))
        run.rename(folder / str(i))
    return folder


def test_run_sets_judge_the_variation_between_recordings(tmp_path: Path):
    # same code: the recordings' medians scatter by ±8% around 10 ms on both sides
    same_base = _recordings(tmp_path, "base", [10.0, 10.8, 9.3, 10.4, 9.6])
    same_test = _recordings(tmp_path, "test", [10.9, 9.5, 10.2, 9.4, 10.6])
    # one recording per side: the steps are tight, so a +16% gap between two processes looks certain
    one = compare(same_base / "3", same_test / "1")
    assert one.step_time.verdict == "slower" and any("one recording per side" in n for n in one.notes)
    both = compare(same_base, same_test)
    s = both.step_time
    assert s.test_name == "t-on-run-values" and s.verdict != "slower"
    assert [r["median_ns"] for r in s.runs["base"]] == pytest.approx([10.0e6, 10.8e6, 9.3e6, 10.4e6, 9.6e6], rel=1e-3)
    assert [r["value_ns"] for r in s.runs["base"]] == pytest.approx([Q * 10.0e6, Q * 10.8e6, Q * 9.3e6, Q * 10.4e6, Q * 9.6e6])
    # those more than 8% over their side's fastest are set aside (base: 10.8, 10.4; test: 10.9, 10.2, 10.6)
    assert [r["set_aside"] for r in s.runs["base"]] == [False, True, False, True, False]
    assert [r["set_aside"] for r in s.runs["test"]] == [True, False, True, False, True]
    assert s.delta_ns == pytest.approx(Q * ((9.5 + 9.4) / 2 - (10.0 + 9.3 + 9.6) / 3) * 1e6, rel=1e-6)
    # a real +30% regression under the same scatter is slower
    slow_test = _recordings(tmp_path, "slow", [13.0, 12.4, 13.7, 12.9, 13.3])
    slow = compare(same_base, slow_test)
    # kept: 13.0, 12.4, 12.9, 13.3 (13.7 is over 1.08 x 12.4) against 10.0, 9.3, 9.6
    assert slow.step_time.verdict == "slower"
    assert slow.step_time.delta_pct == pytest.approx(100 * (51.6 / 4 - 28.9 / 3) / (28.9 / 3), abs=0.1)
    text = render_text(slow)
    assert "5 recordings" in text and "Student's t on the recordings' values" in text
    # the CLI takes the folders; the gate fails on the regression and passes on the same code
    assert cli("diff", same_base, slow_test, "--fail-if-slower", "5%").returncode == 1
    assert cli("diff", same_base, same_test, "--fail-if-slower", "5%").returncode == 0


def test_paired_t_on_ratios_matches_a_hand_computation():
    # ratios 1.2, 1.1, 1.3: log mean m, sd s, se = s / sqrt(3), t = m / se with 2 df
    base, test = [10.0, 20.0, 30.0], [12.0, 22.0, 39.0]
    logs = [math.log(1.2), math.log(1.1), math.log(1.3)]
    m = sum(logs) / 3
    sd = math.sqrt(sum((x - m) ** 2 for x in logs) / 2)
    r = paired_ratio_t(base, test)
    assert r.df == 2 and r.t == pytest.approx(m / (sd / math.sqrt(3)))
    assert r.delta == pytest.approx(20.0 * (math.exp(m) - 1))
    half = t_quantile(0.975, 2) * sd / math.sqrt(3)
    assert (r.ci_low, r.ci_high) == pytest.approx((20.0 * (math.exp(m - half) - 1), 20.0 * (math.exp(m + half) - 1)))
    assert r.p_value == pytest.approx(2 * t_sf(abs(r.t), 2))
    assert math.isnan(paired_ratio_t([10.0], [12.0]).p_value)  # one pair: no spread to judge


def test_recordings_made_in_pairs_cancel_what_the_machine_did(tmp_path: Path):
    """The machine's speed drifts between pairs (a recording's median 10 → 13 → 9 ms) but the two
    sides of a pair, recorded at the same time on one host, see the same machine: the test side is
    1.2x its partner every time. Unpaired, the drift hides the regression; paired, it is plain."""
    base_ms, test_ms = [10.0, 13.0, 9.0], [12.0, 15.6, 10.8]
    starts = [0.0, 60.0, 120.0]  # pair k: base and test start within a second of each other
    base = _recordings(tmp_path, "base", base_ms, starts, host="ci-1")
    test = _recordings(tmp_path, "test", test_ms, [s + 0.5 for s in starts], host="ci-1")
    s = compare(base, test).step_time
    assert s.test_name == "paired-t-on-run-ratios" and s.verdict == "slower"
    assert s.delta_pct == pytest.approx(20.0, abs=0.3)
    assert "paired t on the ratios of recordings made in pairs" in render_text(compare(base, test))
    # the same recordings, unpaired (no host recorded, as for imported traces): cannot tell
    plain_b = _recordings(tmp_path, "plain_b", base_ms, starts)
    plain_t = _recordings(tmp_path, "plain_t", test_ms, [s + 0.5 for s in starts])
    u = compare(plain_b, plain_t).step_time
    assert u.test_name == "t-on-run-values" and u.verdict == "cannot tell"
    # recorded one side after the other (AAA then BBB): not pairs, whatever the host
    late = _recordings(tmp_path, "late", test_ms, [s + 500.0 for s in starts], host="ci-1")
    assert compare(base, late).step_time.test_name == "t-on-run-values"
    # alternating ABBA pairs too; same code recorded in pairs is not slower
    abba = _recordings(tmp_path, "abba", [10.1, 12.9, 9.1], [1.0, 59.0, 121.0], host="ci-1")
    same = compare(base, abba).step_time
    assert same.test_name == "paired-t-on-run-ratios" and same.verdict != "slower"
    # on another host the pairs did not share a machine
    other = _recordings(tmp_path, "other", test_ms, [s + 0.5 for s in starts], host="ci-2")
    assert compare(base, other).step_time.test_name == "t-on-run-values"
    assert cli("diff", base, test, "--fail-if-slower", "5%").returncode == 1


def test_slow_recordings_are_those_above_a_gap():
    # one recording in the slow mode of its process (+17%), the rest within 2%
    assert slow_recordings([18.5, 18.6, 21.7, 18.4, 18.7]) == [2]
    # two slow ones, whatever their order
    assert slow_recordings([14.0, 10.0, 14.1, 10.2]) == [0, 2]
    # scattered: those more than 8% over the fastest (9.3 ms: over 10.044 ms) go
    assert slow_recordings([10.0, 10.8, 9.3, 10.4, 9.6]) == [1, 3]
    # the fastest alone at full speed, the rest +19-22%: the second fastest is kept with it
    assert slow_recordings([18.5, 22.0, 22.3, 22.5]) == [2, 3]
    # exactly 8% over is kept
    assert slow_recordings([10.0, 10.8, 10.1]) == []
    # one or two recordings: nothing to compare them with
    assert slow_recordings([10.0, 20.0]) == []


def test_a_recording_slowed_as_a_whole_does_not_hide_a_regression(tmp_path: Path):
    """What five pairs of recordings of a +20% regression look like on a small VM: most processes
    run at one speed, but one in four or five runs 15-20% slower from its start to its end (its
    speed mode). The paired ratios then scatter (1.02 to 1.41), too much for 5 pairs to call; the
    recordings slowed as a whole stand above a gap on their side, and without them it is plain."""
    starts = [0.0, 10.0, 20.0, 30.0, 40.0]
    base_ms, test_ms = [18.5, 21.7, 18.4, 18.6, 18.7], [22.2, 22.1, 26.1, 22.4, 22.3]
    base = _recordings(tmp_path, "base", base_ms, starts, host="ci-1")
    test = _recordings(tmp_path, "test", test_ms, [s + 5.0 for s in starts], host="ci-1")
    d = compare(base, test)
    s = d.step_time
    assert s.test_name == "t-on-run-values" and s.verdict == "slower"
    assert [r["set_aside"] for r in s.runs["base"]] == [False, True, False, False, False]
    assert [r["set_aside"] for r in s.runs["test"]] == [False, False, True, False, False]
    # the change of the kept recordings' means: (22.25 - 18.55) / 18.55
    assert s.delta_pct == pytest.approx(100 * (22.25 - 18.55) / 18.55, abs=0.1)
    assert "set aside as disturbed" in s.test_reason and "base 2; test 3" in s.test_reason
    text = render_text(d)
    aside = s.runs["base"][1]
    assert aside["median_ns"] == pytest.approx(21.7e6, rel=1e-3) and aside["value_ns"] == pytest.approx(Q * 21.7e6, rel=1e-3)
    assert f"2. {aside['path']}: value {duration(aside['value_ns'])} (median {duration(aside['median_ns'])}), 9 of 10 steps used, " \
           "set aside as disturbed" in text
    # all ten recordings in pairs, as before: the scatter of the ratios leaves it undecided
    every = paired_ratio_t(base_ms, test_ms)
    assert every.ci_low < 0.05 * statistics.mean(base_ms)
    assert cli("diff", base, test, "--fail-if-slower", "5%").returncode == 1
    # the same code with the same kind of disturbance is not slower, and the gate passes
    same = _recordings(tmp_path, "same", [18.6, 18.5, 18.4, 21.9, 18.7], [s + 5.0 for s in starts], host="ci-1")
    s2 = compare(base, same).step_time
    assert s2.verdict == "no significant change" and [r["set_aside"] for r in s2.runs["test"]] == [False, False, False, True, False]
    assert cli("diff", base, same, "--fail-if-slower", "5%").returncode == 0


def _phased_recordings(tmp: Path, name: str, full_ms: float, slow_steps: list[int], seed: int) -> Path:
    """A run set of 5 recordings with 12 steady steps each (after a warm-up step), as this project's
    2-core VM records them (bench/README.md "diff error rates"): the machine runs at full speed or,
    for seconds at a time, at a slow level 1.4x slower, so recording i spends its first
    slow_steps[i] steps at the slow level and the rest at full speed (±0.5% between steps)."""
    rng = random.Random(seed)
    folder = tmp / name
    folder.mkdir()
    for i, n_slow in enumerate(slow_steps, 1):
        steady = [full_ms * (1.4 if k < n_slow else 1.0) * rng.uniform(0.995, 1.005) for k in range(12)]
        run = _steps_run(tmp, f"{name}-{i}", [3 * full_ms] + steady)
        run.rename(folder / str(i))
    return folder


def test_slow_phases_of_the_machine_within_recordings(tmp_path: Path):
    """The machine slows by 1.4x for a while, in the middle of recordings: in three of the five base
    recordings and in every test one, most steps ran slow. Each recording's median is then the slow
    level, but two base recordings ran at full speed throughout, so comparing medians (the fastest
    kept, the slow ones set aside) finds the same code +40% slower. The lower quartile of each
    recording is its steps at full speed: the same code is no change, and a +20% regression under
    the same phases is +20%."""
    base = _phased_recordings(tmp_path, "base", 20.0, [0, 8, 9, 0, 8], seed=1)
    same = _phased_recordings(tmp_path, "same", 20.0, [8, 7, 9, 8, 7], seed=2)
    slower_ = _phased_recordings(tmp_path, "slower", 24.0, [9, 8, 0, 7, 8], seed=3)
    s = compare(base, same).step_time
    values = [r["value_ns"] / 1e6 for r in s.runs["base"] + s.runs["test"]]
    assert all(19.9 <= v <= 20.1 for v in values), values
    assert [r["median_ns"] > 27e6 for r in s.runs["base"]] == [False, True, True, False, True]
    # the recordings' values do not move (their 95% CI within ±5%); the test side spent more steps slow
    # (39 of 60 against 25), which the operators' mean time per step shows, so the consistency rule
    # may say "cannot tell" — never "slower"
    assert s.verdict in ("no significant change", "cannot tell") and abs(s.delta_pct) < 1, (s.verdict, s.reason)
    assert -0.05 * 20e6 < s.delta_ci_low_ns < s.delta_ci_high_ns < 0.05 * 20e6
    assert not any(r["set_aside"] for r in s.runs["base"] + s.runs["test"])
    # what comparing the recordings' medians would say: the one full-speed base recording against slow ones
    medians_b = [r["median_ns"] for r in s.runs["base"]]
    medians_t = [r["median_ns"] for r in s.runs["test"]]
    kept_b = [m for i, m in enumerate(medians_b) if i not in slow_recordings(medians_b)]
    by_medians = run_level_t(kept_b, medians_t)
    assert by_medians.p_value < 0.05 and by_medians.ci_low > 0.3 * kept_b[0]
    r = compare(base, slower_).step_time
    assert r.verdict == "slower" and r.delta_pct == pytest.approx(20.0, abs=0.5)
    assert cli("diff", base, slower_, "--fail-if-slower", "5%").returncode == 1
    assert cli("diff", base, same, "--fail-if-slower", "5%").returncode == 0


def test_a_recordings_value_is_its_lower_quartile_step():
    # nearest rank: the ⌈n/4⌉-th fastest
    assert recording_value([5.0, 1.0, 4.0, 2.0, 3.0]) == 2.0  # n=5: the 2nd fastest
    assert recording_value([9.0, 7.0, 8.0, 6.0]) == 6.0  # n=4: the fastest
    assert recording_value([float(v) for v in range(29, 0, -1)]) == 8.0  # n=29: the 8th
    assert recording_value([3.0]) == 3.0
    assert math.isnan(recording_value([]))



def test_the_two_fastest_recordings_of_a_side_are_kept(tmp_path: Path):
    """Seven of eight test recordings ran slow throughout (+50%), the eighth only partly at full
    speed; three base recordings ran at full speed. Kept alone, that one test recording would make
    the same code look 16% slower against the tight base recordings. The test side keeps its two
    fastest, and the verdict is that these recordings cannot tell."""
    base = _recordings(tmp_path, "base", [22.0, 33.0, 33.1, 22.1, 32.9, 33.2, 22.0, 33.0])
    test = _recordings(tmp_path, "test", [33.0, 33.4, 32.8, 33.1, 32.9, 33.2, 33.0, 25.7])
    s = compare(base, test).step_time
    assert [r["set_aside"] for r in s.runs["test"]] == [True, True, False, True, True, True, True, False]
    assert [r["set_aside"] for r in s.runs["base"]] == [False, True, True, False, True, True, False, True]
    assert s.verdict == "cannot tell" and "the two fastest are kept" in s.test_reason
    assert cli("diff", base, test, "--fail-if-slower", "5%").returncode == 0


def _row(d, type_: str, key: str):
    return next(r for r in d.deltas if r.type == type_ and r.key == key and r.metric == "cpu")


def test_with_run_sets_the_delta_rows_are_judged_between_recordings(tmp_path: Path):
    """Same code, recorded five times per side on a machine that runs some recordings 30% slower as
    wholes: the test side happened to get three such recordings, the base one. Every step of a
    recording is within ±0.5% of its median, so the pooled steps would call aten::relu (the rest of
    the step) 16% slower with p < 1e-6, a hot line of nothing. Judged like the step time, one value
    per recording and the disturbed recordings set aside, the row is noise; a 2 ms operator added
    to every step of the test recordings is still significant."""
    base = _recordings(tmp_path, "base", [10.0, 10.2, 13.0, 10.1, 10.3])
    same = _recordings(tmp_path, "same", [13.1, 10.1, 13.0, 12.9, 13.2])
    d = compare(base, same)
    relu = _row(d, "operator", "aten::relu")
    assert relu.test_name == "t-on-run-values" and not relu.significant and relu.p_value > 0.05
    # what the pooled steps say about the same row: certain, and wrong
    key = ("operator", "aten::relu", "cpu")
    pooled = compare_samples(_side_of(base).vals[key], _side_of(same).vals[key])
    assert pooled.p_value < 1e-6
    # the row's means are those of the recordings the step time kept (base 3 and test 1, 3, 4 set aside)
    s = d.step_time
    assert [r["set_aside"] for r in s.runs["base"]] == [False, False, True, False, False]
    assert [r["set_aside"] for r in s.runs["test"]] == [True, False, True, False, True]
    relu_ms = [m - 1.010 for m in (10.0, 10.2, 10.1, 10.3)]  # the step less hot (1 ms) and the 10 us of gaps
    assert relu.base_ns_per_step == pytest.approx(1e6 * statistics.mean(relu_ms), rel=2e-3)
    assert d.step_time.verdict != "slower" and s.significant_deltas is None
    assert "each recording's mean per step is one value" in render_text(d)
    # a real change in every test recording: aten::slow, 2 ms per step, new
    slow = compare(base, _recordings(tmp_path, "slow", [12.0, 12.3, 15.6, 12.1, 12.2], slow_ms=2.0))
    new = _row(slow, "operator", "aten::slow")
    assert new.status == "new" and new.significant and new.test_name == "t-on-run-values"
    assert new.delta_ns_per_step == pytest.approx(2e6 - 2e3, rel=1e-3)
    assert slow.step_time.verdict == "slower"


def _side_of(folder: Path):
    from neuron_explorer.analyzers.diff.collect import read_side

    return read_side(folder)


def test_rows_of_recordings_made_in_pairs_are_paired_differences(tmp_path: Path):
    """The machine's speed drifts between pairs (10 → 13 → 9 ms); each test recording is 1.2x its
    partner. aten::relu, most of the step, grows by 1.8-2.6 ms in every pair: paired, that is plain,
    though the drift spreads each side's values by 4 ms."""
    starts = [0.0, 60.0, 120.0]
    base = _recordings(tmp_path, "base", [10.0, 13.0, 9.0], starts, host="ci-1")
    test = _recordings(tmp_path, "test", [12.0, 15.6, 10.8], [x + 0.5 for x in starts], host="ci-1")
    d = compare(base, test)
    assert d.step_time.test_name == "paired-t-on-run-ratios"
    relu = _row(d, "operator", "aten::relu")
    assert relu.test_name == "paired-t-on-run-differences" and relu.significant
    diffs = [1e6 * (t - b) for b, t in ((10.0, 12.0), (13.0, 15.6), (9.0, 10.8))]
    assert relu.delta_ns_per_step == pytest.approx(statistics.mean(diffs), rel=2e-3)
    assert relu.p_value < 0.05
    # unpaired, the same rows would be noise: Student's t on the two sides' values
    assert run_level_t([9.0, 12.0, 8.0], [11.0, 14.6, 9.8]).p_value > 0.05


def test_paired_difference_t_matches_a_hand_computation():
    base, test = [10.0, 20.0, 30.0], [12.0, 21.0, 33.0]  # differences 2, 1, 3
    r = paired_difference_t(base, test)
    assert r.df == 2 and r.delta == pytest.approx(2.0) and r.sd == pytest.approx(1.0)
    assert r.t == pytest.approx(2.0 / (1.0 / math.sqrt(3)))
    half = t_quantile(0.975, 2) / math.sqrt(3)
    assert (r.ci_low, r.ci_high) == pytest.approx((2.0 - half, 2.0 + half))
    assert r.p_value == pytest.approx(2 * t_sf(r.t, 2))
    assert math.isnan(paired_difference_t([1.0], [2.0]).p_value)


# ---- time per source line: analyzers/lines.py's definition ---------------------------------------

def _nested_run(tmp: Path, name: str, linear_ms: float, steps: int = 8) -> Path:
    """Steps of 10 ms; in each, train.py(10): hot runs aten::linear (linear_ms), which runs
    aten::addmm (linear_ms - 0.5 ms), which launches a kernel (cudaLaunchKernel, 1 ms on the host).
    The line's time (its outermost operator, aten::linear) is linear_ms; the operators' self times
    add up to 1 ms less (the launch is inside them, but no operator's self time)."""
    src = tmp / "train.py"
    if not src.exists():
        src.write_text("import torch\n" + "\n" * 8 + "def hot():\n    return torch.nn.functional.linear(a, w)\n")
    ev, t = [], 0.0
    for i in range(steps):
        lin = linear_ms * 1000
        ev += [X(f"ProfilerStep#{i}", "user_annotation", t, 10_000),
               X(f"{src}(10): hot", "python_function", t + 1, lin + 2),
               X("aten::linear", "cpu_op", t + 2, lin),
               X("aten::addmm", "cpu_op", t + 3, lin - 500),
               X("cudaLaunchKernel", "cuda_runtime", t + 10, 1000),
               X("aten::relu", "cpu_op", t + lin + 10, 10_000 - lin - 20)]
        t += 10_010
    return import_traces(write_trace(tmp / f"{name}.json", ev), tmp / name).run_dir


def test_a_line_time_is_the_time_that_analyzers_lines_defines(tmp_path: Path):
    """diff's CPU time of a source line is lines.py's `cpu_ns` (its outermost operators'
    durations), not the sum of its operators' self times, which leaves out what runs inside an
    operator but is no operator (here a 1 ms kernel launch in aten::addmm)."""
    from neuron_explorer.analyzers.diff.collect import read_side
    from neuron_explorer.analyzers.lines import line_times

    base, test = _nested_run(tmp_path, "base", 3.0), _nested_run(tmp_path, "test", 4.0)
    with open_run(base) as run:
        (line,) = [r for r in line_times(run, 0) if r["source"].endswith("train.py:10")]
        steps = run.sql("SELECT count(*) FROM steps").fetchone()[0]
        self_sum = run.sql("SELECT sum(self_ns) FROM events WHERE kind = 'cpu_op' AND name <> 'aten::relu'").fetchone()[0]
    assert line["cpu_ns"] == steps * 3e6 and self_sum == steps * 2e6  # the two definitions differ by the launch
    side = read_side(base)
    (vec,) = [v for (type_, _, metric), v in side.vals.items() if type_ == "source_line" and metric == "cpu"]
    assert vec == [3e6] * len(side.pooled_times)  # lines.py's figure, per steady step
    row = next(d for d in compare(base, test).deltas if d.type == "source_line" and d.metric == "cpu")
    assert row.key.endswith("train.py:10") and (row.base_ns_per_step, row.test_ns_per_step) == (3e6, 4e6)


# ---- the verdict's decision table -----------------------------------------------------------------

def test_the_decision_table_is_compare_md_in_its_order():
    """Each rule of the table has a reason code, docs/COMPARE.md names every code, and the first
    rule that applies decides: too few steps before a significant change, the step times before the
    work, and a different job overrules whatever the steps said (the step rule is kept)."""
    from neuron_explorer.analyzers.diff import REASONS
    from neuron_explorer.analyzers.diff.verdict import Facts, decide

    from .conftest import REPO

    text = (REPO / "docs" / "COMPARE.md").read_text()
    assert len(set(REASONS)) == len(REASONS) == 11
    assert [code for code in REASONS if f"`{code}`" not in text] == []

    def facts(**kw) -> Facts:
        plain = {"fewest_steady_steps": 10, "few_steps": (), "steps_to_record": 10, "detect_pct": 5.0, "significant": False,
                 "delta_ns": 0.0, "delta_pct": 0.0, "ref_ns": 10e6, "floor_ns": 0.5e6, "p_value": 0.5, "test_name": "mann-whitney-u",
                 "ci_low_ns": -0.2e6, "ci_high_ns": 0.2e6, "between_runs": False, "paired": False, "runs_to_record": None}
        return Facts(**{**plain, **kw})

    slower = {"significant": True, "delta_ns": 1e6, "ci_low_ns": 0.6e6, "ci_high_ns": 1.4e6}
    work = {"significant": True, "delta_pct": 12.0, "test_speed": 1.0}
    assert decide(facts()).reason == "steps_within_floor"
    assert decide(facts(**slower, same_recordings=True, fewest_steady_steps=4)).reason == "same_recordings"
    assert decide(facts(**slower)).reason == "steps_slower"
    assert decide(facts(**{**slower, "delta_ns": -1e6, "ci_low_ns": -1.4e6, "ci_high_ns": -0.6e6})).reason == "steps_faster"
    assert decide(facts(**slower, fewest_steady_steps=4)).reason == "too_few_steps"
    assert decide(facts(**slower, cost=work)).basis == "step time"
    assert decide(facts(cost=work, ci_low_ns=-2e6, ci_high_ns=2e6)).reason == "work_slower"
    assert decide(facts(cost=work)).reason == "one_recording_cannot_rule_out"
    assert decide(facts(cost=work, between_runs=True)).reason == "steps_within_floor"
    big = {"type": "source_line", "metric": "cpu", "delta_ns_per_step": 1e6, "rows": 1}
    assert decide(facts(significant_deltas=big, cost=work)).reason == "deltas_past_floor"
    assert decide(facts(ci_low_ns=-0.2e6, ci_high_ns=0.7e6)).reason == "steps_cannot_tell"
    other = decide(facts(**slower, job_differences=("different script",)))
    assert (other.reason, other.verdict, other.steps_rule.reason) == ("not_same_job", "cannot tell", "steps_slower")


def test_the_json_carries_the_reason_code(tmp_path: Path):
    base, test = _runs(tmp_path, [s + 3.0 for s in SAME_STEPS], slow_ms=3.0, shift=4)
    data = json.loads(cli("diff", base, test, "--json").stdout)
    assert data["reason"] == "steps_slower" and data["step_time"]["verdict"] == "slower"


def test_diff_names_a_kernel_as_every_view_does(tmp_path: Path):
    """diff's text kept a delta's last 70 characters, right for a path (file:line stays) and no
    name for a C++ kernel: 'float, float)::{lambda(float, float)#1}, at::detail::Array<char*, 3>)'.
    A kernel's row is named as the report names it (fmt.kernel_name); the JSON keeps the whole name."""
    kernel = ("void at::native::vectorized_elementwise_kernel<4, at::native::threshold_kernel_impl<float>(at::TensorIteratorBase&, "
              "float, float)::{lambda(float, float)#1}, at::detail::Array<char*, 3> >(int, at::native::threshold_kernel_impl<float>("
              "at::TensorIteratorBase&, float, float)::{lambda(float, float)#1}, at::detail::Array<char*, 3>)")
    d = compare(_gemm_run(tmp_path, "base", 10.0, kernel=kernel), _gemm_run(tmp_path, "test", 12.5, kernel=kernel))
    (row,) = [x for x in d.deltas if x.type == "kernel"]
    assert row.key == kernel
    text = render_text(d)
    assert "device vectorized_elementwise_kernel<4, threshold_kernel_impl<…>, Array<…> >  9.90 ms → 12.40 ms" in text, text
    assert "lambda" not in text


def test_a_kernel_another_torch_build_names_otherwise_is_one_row(tmp_path: Path):
    """torch 1.9 and 1.8 name ReLU's kernel with other template arguments inside
    (`...threshold_kernel_impl<float>(...)::{lambda(float, float)#1}, at::detail::Array<char*, 3>...`):
    diff listed it new in one run and gone in the other (the two ResNet-50 traces: +7.34 ms new, -4.55
    ms gone). A kernel only one side has is matched to the one kernel only the other has under the
    same name as people read it (fmt.kernel_name): one row, changed, base 9.90 → test 12.40 ms."""
    a = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int)"
    b = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<double>, at::detail::Array<char*, 2> >(int)"
    d = compare(_gemm_run(tmp_path, "base", 10.0, kernel=a), _gemm_run(tmp_path, "test", 12.5, kernel=b))
    (row,) = [x for x in d.deltas if x.type == "kernel"]
    assert (row.status, row.key) == ("changed", a)
    assert row.base_ns_per_step == pytest.approx(9.9e6) and row.test_ns_per_step == pytest.approx(12.4e6)
    # a name two kernels of a side share is not matched: which one would it be
    from neuron_explorer.analyzers.diff.match import match_kernels

    c = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, at::detail::Array<char*, 1> >(int)"
    base_vals = {("kernel", a, "device"): [1.0], ("kernel", c, "device"): [1.0]}
    assert match_kernels(base_vals, {("kernel", b, "device"): [2.0]}) == {("kernel", b, "device"): [2.0]}
    assert match_kernels({("kernel", a, "device"): [1.0]}, {("kernel", b, "device"): [2.0]}) == {("kernel", a, "device"): [2.0]}
