"""Jupyter views: `nx.analyze(run)` and `nx.open_run(run)` draw as HTML (`_repr_html_`) with the
summary, the top findings (title, source line) and the dashboard command, every text escaped;
tables come back as pandas DataFrames."""

from __future__ import annotations

import shlex
from html.parser import HTMLParser

import pandas as pd
import pytest

import neuron_explorer as nx
from neuron_explorer.analyzers.model import Evidence, Finding, Location, Report
from neuron_explorer.fmt import duration

from .conftest import REPO

SAMPLE = REPO / "sample_traces" / "cpu_train_step.json.gz"
TAGS = {"style", "div", "b", "span", "table", "tr", "th", "td", "p", "code", "br"}


class _Parsed(HTMLParser):
    """The tags and the text a browser would show."""

    def __init__(self, html: str):
        super().__init__(convert_charrefs=True)
        self.tags, self.text, self._in_style = set(), [], False
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if not self._in_style:
            self.text.append(data)

    @property
    def shown(self) -> str:
        return "".join(self.text)


def _finding(i: int, title: str, source: str | None, severity: str = "medium") -> Finding:
    return Finding(f"rule-{i}", title, "hotspot", severity, 1_000_000 * (10 - i), 0.1 * (10 - i) / 10, 0,
                   Location(rank=0, source=source), Evidence("SELECT 1"), f"do thing {i}", 0.9)


def test_report_html_shows_the_top_findings_escaped():
    evil = "<script>alert('x')</script> & <b>bold</b>"
    report = Report(run="runs/a b<c>", summary={"ranks": [{"rank": 0, "steps": {"count": 4, "mean_ns": 2e6, "p90_ns": 3e6},
                                                            "analysed_ns": 8e6, "devices": []}]},
                    findings=[_finding(0, f"Hotspot {evil}", "train.py:42", "high")]
                    + [_finding(i, f"finding {i}", f"train.py:{50 + i}") for i in range(1, 8)],
                    warnings=["a warning"])
    html = report._repr_html_()
    page = _Parsed(html)
    assert page.tags <= TAGS, page.tags - TAGS  # the title's <script> and <b> stayed text
    assert "<script>" not in html and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in html
    shown = page.shown
    assert f"Hotspot {evil}" in shown and "train.py:42" in shown and "do thing 0" in shown  # title, source line, advice
    assert shown.index("train.py:42") < shown.index("train.py:51") < shown.index("train.py:54")  # ranked by impact
    assert "train.py:55" not in shown and "and 3 more" in shown  # the top five, the rest counted
    assert "8 finding(s) (1 high, 7 medium)" in shown and "1 data-quality warning" in shown
    assert f"4 steps, mean {duration(2e6)}, p90 {duration(3e6)}" in shown
    assert f"neuron-explorer dashboard {shlex.quote('runs/a b<c>')}" in shown


def test_analyze_and_open_run_draw_a_real_run(tmp_path):
    run_dir = nx.import_trace(SAMPLE, tmp_path / "it's <run>")  # a path that needs escaping, in HTML and the shell
    before = _Parsed(nx.open_run(run_dir)._repr_html_())
    assert "Not analysed yet" in before.shown and "3 steps" in before.shown and before.tags <= TAGS

    report = nx.analyze(run_dir)
    top = report.findings[0]
    assert top.source  # the sample was recorded with stacks: the finding names a source line
    for html in (report._repr_html_(), nx.open_run(run_dir)._repr_html_()):  # the open run reads analysis/report.json
        page = _Parsed(html)
        assert page.tags <= TAGS
        assert top.title in page.shown and top.source in page.shown
        assert f"neuron-explorer dashboard {shlex.quote(str(run_dir))}" in page.shown
        assert "it's <run>" in page.shown and "it's <run>" not in html


def test_tables_come_back_as_dataframes(tmp_path):
    run_dir = nx.import_trace(SAMPLE, tmp_path / "run")
    with nx.open_run(run_dir) as run:
        steps = run.sql("SELECT step, dur_ns FROM steps ORDER BY step").df()
    assert isinstance(steps, pd.DataFrame) and list(steps.columns) == ["step", "dur_ns"] and len(steps) == 3


def test_a_report_without_findings_says_so():
    page = _Parsed(Report(run="r", summary={}, findings=[])._repr_html_())
    assert "0 finding(s)" in page.shown and "No findings" in page.shown


@pytest.mark.parametrize("bad", ["{not json", "[]"])
def test_a_damaged_report_file_does_not_break_the_run_view(tmp_path, bad):
    run_dir = nx.import_trace(SAMPLE, tmp_path / "run")
    (run_dir / "analysis").mkdir()
    (run_dir / "analysis" / "report.json").write_text(bad)
    assert "Neuron Explorer run" in _Parsed(nx.open_run(run_dir)._repr_html_()).shown


def test_import_loads_the_notebook_view_only_when_one_is_drawn():
    """`import neuron_explorer` stays light for scripts that only profile (issue 38: start ≤ 50 ms):
    the notebook view and the analyzers' figures load when a run or report is first drawn."""
    import subprocess
    import sys

    code = ("import sys, neuron_explorer as nx\n"
            "print(sorted(m for m in ('neuron_explorer.notebook', 'neuron_explorer.analyzers.metrics') if m in sys.modules))\n"
            "from neuron_explorer.analyzers.model import Report\n"
            "html = Report(run='r', summary={}, findings=[])._repr_html_()\n"
            "print('neuron_explorer.notebook' in sys.modules, 'Neuron Explorer' in html)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["[]", "True True"], r.stdout
