"""How runs and reports look in Jupyter: the HTML behind `Report._repr_html_` and `Run._repr_html_`.

Importing this module gives `store.Run` and `analyzers.model.Report` their `_repr_html_` (the
package's __init__ imports it), so that storage and the finding contract know nothing of
notebooks: they sit near the bottom of the layers (tests/test_layers.py), this at the top.

Both render plain data: a report in its JSON form (`Report.to_dict()`, or RUN/analysis/report.json
as `analyze` wrote it) and a run's manifest, so a notebook shows what the CLI and agents read.
Every piece of text from a run (names, paths, titles, source lines) is HTML-escaped here.

Must not: run queries or the analyzer (a repr is drawn whenever a cell shows the object; it only
reads what is already there), or load anything from the network.
"""

from __future__ import annotations

import html
import json
import shlex
from collections import Counter
from pathlib import Path

from . import store
from .analyzers.metrics import device_events_lost, no_device_words
from .analyzers.model import Report
from .fmt import duration, kernel_name, share

TOP_FINDINGS = 5
"""Findings listed in a notebook view; the rest are counted."""

_STYLE = ("<style>.nx-nb{font-family:inherit;font-size:13px;line-height:1.4}.nx-nb table{border-collapse:collapse;margin:4px 0}"
          ".nx-nb th,.nx-nb td{text-align:left;padding:2px 10px 2px 0;vertical-align:top}.nx-nb th{color:#607D8B;font-weight:500}"
          ".nx-nb code{background:#ECEFF1;padding:1px 4px;border-radius:3px}.nx-sev-high{color:#B71C1C;font-weight:600}"
          ".nx-sev-medium{color:#E65100;font-weight:600}.nx-nb .nx-dim{color:#78909C}</style>")


def _e(x) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def dashboard_command(run_path) -> str:
    """The shell command that opens a run in the dashboard (the path quoted for the shell)."""
    return f"neuron-explorer dashboard {shlex.quote(str(run_path))}"


def _findings_table(findings: list[dict]) -> str:
    if not findings:
        return "<p>No findings: no rule found a problem in this run.</p>"
    rows = ["<tr><th>severity</th><th>finding</th><th>impact</th><th>where</th><th>rule</th></tr>"]
    for f in findings[:TOP_FINDINGS]:
        loc = f.get("location") or {}
        where = loc.get("source") or loc.get("op") or kernel_name(loc.get("kernel")) or ""
        impact = f"{duration(f.get('impact_ns'))} ({share(f.get('impact_share') or 0)})"
        sev = f.get("severity")
        rows.append(f"<tr><td class=\"nx-sev-{_e(sev)}\">{_e(sev)}</td><td>{_e(f.get('title'))}"
                    f"<br><span class=\"nx-dim\">{_e(f.get('recommendation'))}</span></td><td>{_e(impact)}</td>"
                    f"<td><code>{_e(where)}</code></td><td>{_e(f.get('rule_id'))}</td></tr>")
    more = len(findings) - TOP_FINDINGS
    tail = f"<p class=\"nx-dim\">… and {more} more (<code>report.findings</code>)</p>" if more > 0 else ""
    return f"<table>{''.join(rows)}</table>{tail}"


def _footer(run_path) -> str:
    as_frame = "nx.open_run(" + repr(str(run_path)) + ').sql("SELECT * FROM steps").df()'
    return (f"<p>Open it in the dashboard: <code>{_e(dashboard_command(run_path))}</code><br>"
            f"Tables as pandas DataFrames: <code>{_e(as_frame)}</code></p>")


def report_html(report: dict) -> str:
    """A report (its JSON form): the run, steps and analysed time per rank, the top findings
    ranked by impact, the warnings count, and the command that opens the run in the dashboard."""
    ranks = (report.get("summary") or {}).get("ranks") or []
    lines = []
    for r in ranks:
        st = r.get("steps") or {}
        steps = (f"{st['count']} steps, mean {duration(st.get('mean_ns'))}, p90 {duration(st.get('p90_ns'))}" if st.get("count")
                 else "no steps recorded")
        devices = len(r.get("devices") or [])
        lines.append(f"<tr><td>rank {_e(r.get('rank'))}</td><td>{_e(steps)}</td><td>{_e(duration(r.get('analysed_ns')))} analysed</td>"
                     f"<td>{_e(f'{devices} device(s)' if devices else no_device_words(r.get('device_events_lost')))}</td></tr>")
    findings = report.get("findings") or []
    counts = ", ".join(f"{sum(f.get('severity') == s for f in findings)} {s}" for s in ("high", "medium", "low", "info")
                       if any(f.get("severity") == s for f in findings))
    warnings = report.get("warnings") or []
    warn = f" · {len(warnings)} data-quality warning(s) (<code>report.warnings</code>)" if warnings else ""
    return (f"{_STYLE}<div class=\"nx-nb\"><b>Neuron Explorer report</b> <span class=\"nx-dim\">{_e(report.get('run'))}</span>"
            f"<table>{''.join(lines)}</table>"
            f"<p><b>{len(findings)} finding(s)</b>{_e(f' ({counts})' if counts else '')}, ranked by impact{warn}</p>"
            f"{_findings_table(findings)}{_footer(report.get('run'))}</div>")


def run_html(path: Path, manifest: dict) -> str:
    """An open run: where it came from, its ranks (events, devices, steps), the top findings when
    `analyze` has written RUN/analysis/report.json, and the dashboard command."""
    rows = []
    for r in manifest.get("ranks") or []:
        steps = r.get("steps") or []
        durs = sorted(s.get("dur_ns", 0) for s in steps)
        step_text = f"{len(steps)} steps, median {duration(durs[len(durs) // 2])}" if durs else "no steps recorded"
        names = Counter(d.get("name") or "device" for d in r.get("device_properties") or []) or \
            Counter("device" for _ in r.get("devices") or [])
        devs = [f"{n} × {name}" if n > 1 else name for name, n in names.items()]
        events = f"{int(r.get('events') or 0):,} events"
        rows.append(f"<tr><td>rank {_e(r.get('rank'))}</td><td>{_e(events)}</td>"
                    f"<td>{_e(step_text)}</td><td>{_e(', '.join(devs) or no_device_words(device_events_lost(r)))}</td></tr>")
    source = manifest.get("source")
    what = [x for x in (source, manifest.get("torch_version") and f"torch {manifest['torch_version']}", manifest.get("created")) if x]
    report_file = Path(path) / "analysis" / "report.json"
    try:
        report = json.loads(report_file.read_text())
    except (OSError, ValueError):
        report = None
    if isinstance(report, dict):
        findings = (f"<p><b>{len(report.get('findings') or [])} finding(s)</b> from <code>analysis/report.json</code>, ranked by "
                    f"impact</p>{_findings_table(report.get('findings') or [])}")
    else:
        findings = f"<p class=\"nx-dim\">Not analysed yet: <code>{_e('nx.analyze(' + repr(str(path)) + ')')}</code> ranks its bottlenecks.</p>"
    warnings = manifest.get("warnings") or []
    warn = f"<p class=\"nx-dim\">{len(warnings)} data-quality warning(s) (<code>neuron-explorer info</code>)</p>" if warnings else ""
    return (f"{_STYLE}<div class=\"nx-nb\"><b>Neuron Explorer run</b> <span class=\"nx-dim\">{_e(path)}</span>"
            f"<p class=\"nx-dim\">{_e(' · '.join(map(str, what)))}</p><table>{''.join(rows)}</table>{warn}"
            f"<p class=\"nx-dim\">views: events, frames, flows, memory, counters, steps, ranks, devices, schema_fields</p>"
            f"{findings}{_footer(path)}</div>")


def _run_repr_html(run: store.Run) -> str:
    """Jupyter's view of an open run: ranks, steps, devices, the findings `analyze` wrote, the dashboard command."""
    return run_html(run.path, run.manifest)


def _report_repr_html(report: Report) -> str:
    """Jupyter's view of a report: the summary, the top findings and the dashboard command."""
    return report_html(report.to_dict())


store.Run._repr_html_ = _run_repr_html
Report._repr_html_ = _report_repr_html
