"""The findings view: the analyzer's ranked findings of a run, each with the window that shows
its whole evidence, and the summary of the report they came from (for the Overview). Data only:
plain JSON-able dicts, served at /api/findings.

Must not: draw (no Dash, no plotly), or decide what is a problem (the analyzer's rules do).
"""

from __future__ import annotations

from ...analyzers.render import inside_lines
from ..runs import OpenRun, QueryError, RunSet
from ..timeline import parse_rank


def _load_analyze():
    try:
        from ...analyzers import analyze
    except ImportError:
        return None
    return analyze


def findings(rs: RunSet, run=0, rank=None) -> dict:
    """The analyzer's ranked findings, each with where to look: a time window (ns) covering its
    whole evidence (its sample events and its steps), and the events to highlight. With `rank`,
    the findings of that rank and those of the whole run (no rank); `index` stays the finding's
    place in the run's ranking. The report's summary is kept for the overview (`report_summary`)."""
    r = rs.get(run)
    out = _analysis(r)
    rank = parse_rank(r, rank)
    if rank is None:
        return out
    return {**out, "rows": [f for f in out["rows"] if f["location"].get("rank") in (None, rank)]}


def report_summary(rs: RunSet, run=0) -> dict:
    """The `summary` of the report the findings came from (report.json's: per rank the step
    statistics, devices, `bound` and `utilisation`), computed once with the findings."""
    r = rs.get(run)
    _analysis(r)
    return r.cached("report_summary", lambda: {"ranks": []})


def analysis_state(rs: RunSet, run=0) -> str:
    """Where the run's analysis stands, without waiting for it: "ready" (findings and the report's
    summary are cached), "failed" (it raised; asking for the findings raises again), or
    "computing" (running, or not started: `start_analysis`). The page shows "computing…" for
    the findings and the overview until it is ready; the timeline never waits for it."""
    r = rs.get(run)
    if "findings" in r._facts:
        return "ready"
    return "failed" if "findings_error" in r._facts else "computing"


def start_analysis(rs: RunSet, run=0) -> None:
    """Analyse the run in a background thread named 'nx-findings' (once per run: a second call,
    or a request asking meanwhile, waits for the same analysis, OpenRun.cached). An error is kept
    (`analysis_state` says "failed") and raised again to whoever asks for the findings."""
    import threading

    r = rs.get(run)
    r.cached("analysis_started", lambda: threading.Thread(target=analyse, args=(rs, r.index), name="nx-findings", daemon=True).start() or True)


def analyse(rs: RunSet, run=0) -> None:
    """The run's analysis, here and now (or waiting for the one under way); an error is kept for
    `analysis_state`, not raised."""
    r = rs.get(run)
    try:
        _analysis(r)
    except Exception as e:  # noqa: BLE001  (kept for the request that asks: the panel shows it)
        r._facts["findings_error"] = e


def _analysis(r: OpenRun) -> dict:
    """The run's findings (as `findings` returns them), analysed once per run; the report's summary
    is cached with them (`report_summary`). The analyzer runs in a child process (`_in_child`)
    unless `_load_analyze` was replaced (tests give a stand-in analyzer: run here, in a thread)."""
    def compute() -> dict:
        if IN_CHILD and _load_analyze is _LOAD_ANALYZE:
            payload = _in_child(r)
        else:
            analyze = _load_analyze()
            if analyze is None:
                raise QueryError("the analyzer is not available in this installation")
            payload = _in_named_thread(lambda: report_payload(analyze(r.run.path, write=False)))  # the dashboard only reads the run
        r.cached("report_summary", lambda: payload["summary"])
        return findings_from_payload(r, payload)
    return r.cached("findings", compute)


_LOAD_ANALYZE = _load_analyze
IN_CHILD = True
"""Whether the dashboard's analysis runs in a child process (`_in_child`)."""
CHILD_NICE = 10
"""The analysis child's niceness: it yields the cores to the server's requests and the browser."""


def report_payload(report) -> dict:
    """What the dashboard keeps of a report, as plain data (it crosses from the child process): the
    summary, each finding's dict and its contents' lines (analyzers.render.inside_lines), the warnings."""
    return {"summary": report.summary, "findings": [(f.to_dict(), inside_lines(f)) for f in report.findings],
            "warnings": list(report.warnings)}


def _in_child(r: OpenRun) -> dict:
    """report_payload of the run's analysis, computed in a child Python process at CHILD_NICE
    (`python -m neuron_explorer.dashboard.views.analysis_child RUN NICE`, the payload pickled on its stdout):
    its queries and its Python neither hold the server's GIL nor take the cores from the page's
    requests and the browser's drawing. The whole run's Overview parts (overview.analysed_parts: the
    top lists by critical path, the roofline, the per-rank parts) come back with the payload, and
    the critical paths it walked, which are this process's own from then on
    (critical_path.adopt_paths): the Overview does not compute them again. The child exits when the server does (its stdin closes);
    `OpenRun.close` kills it. An error in the child is raised here (as a QueryError with its message
    where the exception itself cannot be passed back)."""
    import os
    import pickle
    import subprocess
    import sys
    import threading
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[3])  # the folder holding this neuron_explorer package
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    proc = subprocess.Popen([sys.executable, "-m", "neuron_explorer.dashboard.views.analysis_child", str(r.run.path), str(CHILD_NICE)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    r._facts["analysis_child"] = proc
    err: list[bytes] = []
    drain = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)  # never blocks the child on a full pipe
    drain.start()
    out = proc.stdout.read()
    proc.wait()
    drain.join(5)
    try:
        status, value = pickle.loads(out)
    except Exception:  # noqa: BLE001  (killed, or died before it answered)
        tail = b"".join(err).decode(errors="replace").strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        raise QueryError(f"the analysis stopped: {tail[0][:300]}") from None
    if status == "error":
        raise value
    from ...analyzers import critical_path as cp

    cp.adopt_paths(r.run, value.pop("critical_paths", None) or {})  # a rank's Overview does not walk them again (seconds a rank)
    r._facts["overview_parts"] = value.pop("overview_parts", None)  # the whole run's Overview (overview.analysed_parts)
    return value


def _in_named_thread(fn):
    """fn() run in a thread named 'nx-findings', which the store stops cleanly at exit (its queries
    interrupted), and waited for: a request thread is not one the store knows to wait for."""
    import threading

    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the request's thread
            box["error"] = e

    t = threading.Thread(target=run, name="nx-findings", daemon=True)
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def findings_from_report(r: OpenRun, report) -> dict:
    return findings_from_payload(r, report_payload(report))


def findings_from_payload(r: OpenRun, payload: dict) -> dict:
    rows = []
    for i, (d, inside) in enumerate(payload["findings"]):
        rows.append({"index": i, "rule_id": d["rule_id"], "title": d["title"], "severity": d["severity"],
                     "category": d["category"], "impact_ms": d["impact_ns"] / 1e6, "impact_share": d["impact_share"],
                     "saving_bound_ms": d["saving_bound_ns"] / 1e6, "confidence": d["confidence"],
                     "confidence_notes": list(d.get("confidence_notes") or []),
                     "source": d["location"].get("source"), "recommendation": d["recommendation"],
                     "location": d["location"], "evidence_sql": d["evidence"]["sql"],
                     "event_ids": [int(x) for x in d["evidence"].get("sample_event_ids") or []][:200],
                     # what is inside it (analyzers/contents.py): the report's lines, and the data without its SQL
                     "inside": inside, "contents": {k: v for k, v in (d.get("contents") or {}).items() if k != "sql"},
                     **_target(r, d)})
    return {"rows": rows, "warnings": list(payload["warnings"]), "truncated": False}


def _target(r: OpenRun, d: dict) -> dict:
    """The window to zoom to for a finding: its whole evidence, the time range covering all its
    sample events and all its steps (padded by a tenth of its length), not one sample."""
    ids = [int(x) for x in d["evidence"].get("sample_event_ids") or []][:200]
    spans = []
    if ids:
        _, rows = r.query(f"SELECT min(ts_ns), max(ts_ns + dur_ns) FROM events WHERE event_id IN ({', '.join(map(str, ids))})")
        if rows[0][0] is not None:
            spans.append(rows[0])
    if d["location"].get("steps"):
        wanted = set(d["location"]["steps"])
        rk = d["location"].get("rank")
        spans += [(s["ts_ns"], s["ts_ns"] + s["dur_ns"]) for s in r.steps() if s["step"] in wanted and (rk is None or s["rank"] == rk)]
    if not spans:
        return {"t0": None, "t1": None}
    t0, t1 = min(a for a, _ in spans), max(b for _, b in spans)
    pad = max((t1 - t0) // 10, 1000)
    return {"t0": int(t0 - pad), "t1": int(t1 + pad)}
