"""diff's text says what its JSON says (issue #37, item 8): one verdict line worded from the decision,
intervals of the ratio test/base (never below -100%), lines of a renamed file matched by their
function and code, and runs compared with themselves told so."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from neuron_explorer.analyzers.diff import compare, render_text
from neuron_explorer.analyzers.stats import bootstrap_median_diff_ci, bootstrap_median_ratio_ci, log_ratio_t_ci, run_level_t, t_quantile
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import cli
from .test_diff import BASE_STEPS, SAME_STEPS, _steps_run, _trace


def test_a_verdict_on_the_work_says_so_beside_a_change_of_the_other_sign(tmp_path: Path):
    """The test's steps run 2 ms more work (aten::slow) while the rest of the step scatters from 4 to
    29 ms: the median step is 3 ms shorter (-20.7%, not significant), and the priced work decides
    slower. The old text read "-3.00 ms (-20.7%) ... → SLOWER"."""
    rest_base = [5.0, 25.0, 8.0, 29.0, 12.0, 20.0, 6.0, 27.0, 15.0, 10.0]
    rest_test = [5.0, 25.0, 4.0, 29.0, 6.0, 20.0, 5.0, 27.0, 7.0, 10.0]
    base = _steps_run(tmp_path, "base", [1.0 + r for r in rest_base])
    test = _steps_run(tmp_path, "test", [3.0 + r for r in rest_test], slow_ms=2.0)
    res = cli("diff", base, test, "--json")
    s = json.loads(res.stdout)["step_time"]
    assert s["delta_pct"] == pytest.approx(-3 / 14.5 * 100) and not s["significant"]
    assert (s["verdict"], s["basis"]) == ("slower", "work")
    lines = cli("diff", base, test).stdout.splitlines()
    change = next(i for i, line in enumerate(lines) if line.startswith("change of the median step: "))
    assert lines[change].startswith("change of the median step: -3.00 ms (-20.7%) [95% CI ")
    assert "→" not in lines[change] and "SLOWER" not in lines[change]
    assert lines[change + 1] == (f"verdict: SLOWER by about {s['estimate_pct']:+.1f}%, on the work per step: the step time's own "
                                 "change, -20.7%, is not significant, and its 95% CI does not rule this out")


def test_the_interval_of_one_recording_per_side_is_the_ratios(tmp_path: Path):
    """Base steps alternate 10 and 50 ms (median 30 ms), the test's are all 3 ms. The interval of the
    difference of medians reached -47 ms, -157% of the base's median; the ratio 3 / 50 .. 3 / 10
    of the bootstrap's medians is -94% .. -70%."""
    base_ms, test_ms = [10, 10, 10, 50, 50, 50, 10, 50, 10, 50], [3] * 10
    old_low, _ = bootstrap_median_diff_ci([m * 1e6 for m in base_ms], [m * 1e6 for m in test_ms])
    assert 100 * old_low / 30e6 < -100
    d = compare(_steps_run(tmp_path, "base", base_ms), _steps_run(tmp_path, "test", test_ms))
    s = d.step_time
    low, high = bootstrap_median_ratio_ci(base_ms, test_ms)
    assert (s.delta_ci_low_pct, s.delta_ci_high_pct) == (pytest.approx(100 * (low - 1)), pytest.approx(100 * (high - 1)))
    assert s.delta_ci_low_pct == pytest.approx(-94.0) and s.delta_ci_high_pct == pytest.approx(-70.0)
    assert s.delta_ci_low_ns == pytest.approx(30e6 * (low - 1))
    assert "change of the median step: -27.00 ms (-90.0%) [95% CI -94.0% .. -70.0%]," in render_text(d)


def test_the_interval_of_recordings_is_the_ratios_never_below_minus_100():
    """Three base and three test recordings: the t interval of the difference of means reached -141%
    of the base; the interval of the ratio (t on the logs) is a ratio of times, above 0."""
    base, test = [10.0, 12.0, 11.0], [2.0, 14.0, 3.0]
    t = run_level_t(base, test)
    assert 100 * t.ci_low / 11.0 < -100 and t.p_value > 0.05
    low, high = log_ratio_t_ci(base, test)
    assert 0.0 < low < 1.0 < high
    logs_b, logs_t = [math.log(x) for x in base], [math.log(x) for x in test]
    mb, mt = sum(logs_b) / 3, sum(logs_t) / 3
    sd = math.sqrt((sum((x - mb) ** 2 for x in logs_b) + sum((x - mt) ** 2 for x in logs_t)) / 4)
    half = t_quantile(0.975, 4) * sd * math.sqrt(2 / 3)  # by hand: pooled t on the logs
    assert (low, high) == (pytest.approx(math.exp(mt - mb - half)), pytest.approx(math.exp(mt - mb + half)))
    base, test = [10.0, 10.5, 9.8, 10.2], [12.0, 12.4, 11.9, 12.5]
    low, high = log_ratio_t_ci(base, test)
    assert run_level_t(base, test).p_value < 0.05 and 1.0 < low < 12.2 / 10.125 < high


def test_lines_of_a_renamed_file_are_matched_by_function_and_code(tmp_path: Path):
    """The README's CI loop compares base_train.py with train.py: same code, another name. The hot
    line is one line in the delta list, `(was base_train.py:10)`, not a [gone] and a [new] row."""
    body = "import torch\n" + "\n" * 8 + "def hot():\n    return torch.mm(a, b)\n"
    (tmp_path / "base_train.py").write_text(body)
    (tmp_path / "train.py").write_text(body)
    base = import_traces(_trace(tmp_path / "base.json", tmp_path / "base_train.py", 10, BASE_STEPS), tmp_path / "base").run_dir
    test = import_traces(_trace(tmp_path / "test.json", tmp_path / "train.py", 10, [s + 3.0 for s in SAME_STEPS], slow_ms=3.0),
                         tmp_path / "test").run_dir
    d = compare(base, test)
    lines = [x for x in d.deltas if x.type == "source_line"]
    assert [x.status for x in lines] == ["changed"]
    assert lines[0].key.endswith("train.py:10") and lines[0].base_key.endswith("base_train.py:10")
    assert lines[0].delta_ns_per_step == pytest.approx(3e6, rel=1e-3)
    assert "[gone]" not in render_text(d) and "(was " in render_text(d)


def test_a_run_compared_with_itself_says_so(tmp_path: Path):
    base = _steps_run(tmp_path, "base", [1.0 + r for r in [5.0, 25.0, 8.0, 29.0, 12.0, 20.0, 6.0, 27.0, 15.0, 10.0]])
    data = json.loads(cli("diff", base, base, "--json").stdout)
    assert data["reason"] == "same_recordings" and data["step_time"]["verdict"] == "no significant change"
    text = cli("diff", base, base).stdout
    assert "\nverdict: NO SIGNIFICANT CHANGE\n  because base and test are the same recordings (the same steps at the same times)" in text
    assert "record about" not in text and "steps per run" not in text
    copy = tmp_path / "copy"
    import shutil

    shutil.copytree(base, copy)  # a copy of the run is the same recordings too
    assert compare(base, copy).reason == "same_recordings"
