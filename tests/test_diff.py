"""Comparing runs: step-time significance, ranked deltas, moved source lines, the CI gate."""

from __future__ import annotations

import json
from pathlib import Path

from neuron_explorer.analyzers.diff import compare
from neuron_explorer.analyzers.stats import describe, t_quantile, t_sf, welch
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import cli, write_trace


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
    assert d.step_time.verdict == "cannot tell" and d.notes
