"""The agent tools as plain functions over a set of runs: what the MCP server exposes.

Every function returns a JSON-ready dict with `ok` (and `error` when not ok); nothing raises for
an agent's mistake. Every result is bounded in rows and in characters and says when it was cut
(`truncated: true` plus a `note`). Every SQL text an agent can write or see runs in each run's
Sandbox (a separate process with time, memory and row limits): `query`, the report's evidence
queries, `hot_source_lines`, `event_context`. The analyzer-backed tools run the project's own code
in this process and take only names and numbers from the agent, never SQL: `summary` (info's
`run_info`), the report behind `findings` and `explain_finding` (imported only when first needed,
and kept per run for the life of the AgentRuns), `compare` (diff), and `critical_path` and
`utilisation`, which open the run read-only with `store.open_run`. Nothing here writes to a run.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

from ..analyzers.lines import LINE_DEFINITIONS, line_times_sql
from ..errors import NeuronExplorerError
from ..fmt import kernel_name, summarise_warnings
from ..fmt import shapes as shapes_text
from ..vocab import charged_op, charged_top_op, line_key_sql
from . import catalog
from .sandbox import DEFAULT_MEMORY_LIMIT_MB, DEFAULT_TIMEOUT_S, Sandbox

log = logging.getLogger("neuron_explorer.agent")

MAX_CHARS = 20_000
"""Upper bound on the JSON size of one tool result (about 5k tokens)."""
MAX_ROWS = 200
"""Upper bound on the rows one tool result carries."""

SEVERITY_ORDER = ("high", "medium", "low", "info")

TOOLS = ("list_runs", "summary", "findings", "explain_finding", "query", "hot_source_lines", "event_context", "compare",
         "critical_path", "utilisation", "memory_range")
"""The AgentRuns methods that are agent tools: each method's signature and docstring are the tool's
one definition (the MCP server registers them as they are)."""


def error(message: str, **extra) -> dict:
    return {"ok": False, "error": message, **extra}


def bound(payload: dict, max_chars: int = MAX_CHARS) -> dict:
    """Cut the longest lists in payload until its JSON fits max_chars; mark what was cut."""
    def size(obj) -> int:
        return len(json.dumps(obj, default=str))  # as the MCP server sends it (ASCII, escapes counted)

    if size(payload) <= max_chars:
        return payload
    payload = json.loads(json.dumps(payload, default=str))  # a private copy we may cut

    def lists(obj, path=()):
        if isinstance(obj, list):
            yield path, obj
            for i, x in enumerate(obj):
                yield from lists(x, path + (i,))
        elif isinstance(obj, dict):
            for k, v in obj.items():
                yield from lists(v, path + (k,))

    while size(payload) > max_chars:
        # halve the largest list that has more than one item; empty a one-item list (e.g. the one rank
        # of a run) only when nothing else is left to cut, so the cut keeps every kind of figure
        candidates = ([(size(lst), p, lst) for p, lst in lists(payload) if len(lst) > 1]
                      or [(size(lst), p, lst) for p, lst in lists(payload) if lst])
        if not candidates:
            return error(f"the result is larger than {max_chars} characters even with every list emptied; narrow the request")
        _, _, longest = max(candidates, key=lambda c: c[0])
        del longest[max(1, len(longest) // 2) if len(longest) > 1 else 0:]
        payload["truncated"] = True
        payload["note"] = f"cut to fit {max_chars} characters: some lists hold only their first items; ask for fewer rows"
    if isinstance(payload.get("rows"), list) and "row_count" in payload:
        payload["row_count"] = len(payload["rows"])
    return payload


class AgentRuns:
    """The runs an agent may see, by name (the directory name, made unique), each with its Sandbox.
    (Not the dashboard's `dashboard.runs.RunSet`, which holds open runs for the web views.)"""

    def __init__(self, paths: list[Path | str], *, memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB):
        if not paths:
            raise NeuronExplorerError("give at least one run directory")
        self._runs: dict[str, Path] = {}
        self._boxes: dict[str, Sandbox] = {}
        self._reports: dict[str, Any] = {}
        self._lock = threading.Lock()
        for p in paths:
            path = Path(p).resolve()
            box = Sandbox(path, memory_limit_mb=memory_limit_mb)  # fails now, with a one-line InputError, on a bad run
            name = path.name or "run"
            n = 2
            while name in self._runs:
                name = f"{path.name}#{n}"
                n += 1
            self._runs[name] = path
            self._boxes[name] = box

    @property
    def names(self) -> list[str]:
        return list(self._runs)

    def close(self) -> None:
        for box in self._boxes.values():
            box.close()

    # --- helpers -------------------------------------------------------------------------
    def _resolve(self, run: str | None) -> str:
        if run in (None, "") and len(self._runs) == 1:
            return next(iter(self._runs))
        if run in self._runs:
            return run
        for name, path in self._runs.items():  # a path is accepted too
            if run and Path(run).resolve() == path:
                return name
        raise KeyError(f"unknown run {run!r}; call list_runs (runs: {', '.join(self._runs)})")

    def _sql(self, name: str, sql: str, max_rows: int = MAX_ROWS) -> list[dict]:
        res = self._boxes[name].query(sql, max_rows=max_rows, timeout_s=DEFAULT_TIMEOUT_S)
        if not res.ok:
            raise RuntimeError(res.error)
        return res.records()

    def _codes(self, name: str, sources: set[str]) -> dict[str, str]:
        """'file:line' → the line's code text, where the run's frames hold it."""
        if not sources:
            return {}
        wanted = ", ".join("'" + x.replace("'", "''") + "'" for x in sorted(sources))
        rows = self._sql(name, f"SELECT {line_key_sql('')} AS source, any_value(code) AS code FROM frames "
                               f"WHERE {line_key_sql('')} IN ({wanted}) AND code IS NOT NULL GROUP BY 1")
        return {r["source"]: r["code"] for r in rows}

    def report(self, name: str) -> dict:
        """The analyzer's report for a run as a dict (computed once; never written to the run)."""
        with self._lock:
            if name in self._reports:
                return self._reports[name]
        try:
            from ..analyzers import analyze
        except ImportError as e:
            raise RuntimeError(f"the analyzer is not available in this installation ({e})") from None
        try:
            rep = analyze(self._runs[name], write=False)
        except TypeError:  # an analyze() without the write switch
            rep = analyze(self._runs[name])
        data = rep.to_dict() if hasattr(rep, "to_dict") else dict(rep)
        with self._lock:
            self._reports[name] = data
        return data

    def _call(self, fn, *args, **kw) -> dict:
        try:
            return bound(fn(*args, **kw))
        except KeyError as e:
            return error(str(e.args[0]) if e.args else str(e))
        except (RuntimeError, ValueError, NeuronExplorerError) as e:
            return error(str(e))
        except Exception as e:  # noqa: BLE001 - an agent gets an envelope, the log gets the traceback
            log.exception("tool failed")
            return error(f"internal error: {type(e).__name__}: {e}")

    # --- tools ---------------------------------------------------------------------------
    def list_runs(self) -> dict:
        """The runs this server serves: name, path, ranks, event count. Pass `run` (a name) to the other tools."""
        def go():
            runs = []
            for name, path in self._runs.items():
                m = self._boxes[name].manifest
                ranks = m.get("ranks", [])
                runs.append({"run": name, "path": str(path), "source": m.get("source"), "created": m.get("created"),
                             "format_version": m.get("format_version"), "ranks": [r.get("rank") for r in ranks],
                             "events": sum(int(r.get("events", 0)) for r in ranks)})
            return {"ok": True, "runs": runs}
        return self._call(go)

    def summary(self, run: str | None = None, detail: str = "short") -> dict:
        """A run's summary in under 4,000 characters: per rank its events, steps (count, p50/mean/max, cv), devices
        (busy, kernel, memcpy and communication totals; idle and exposed communication over the rank's analysed window,
        the findings' figures, `window`: 'analysed'; the 2 heaviest kernels), what bounds the steps,
        utilisation (MFU, the share of kernel time with counted FLOPs, the heaviest kernels with FLOPs), top operators
        and source lines; the number of findings and the top 3; warnings.
        Figures are the analyzer's summary (docs/METRICS.md), fields without a value are left out. detail='full':
        every field of the run's info and of the analyzer's summary, with full kernel names."""
        def go():
            from ..info import run_info

            name = self._resolve(run)
            if detail not in ("short", "full"):
                raise ValueError(f"unknown detail {detail!r}; 'short' (default) or 'full'")
            if detail == "short":
                return self._short_summary(name, run_info(self._runs[name]))
            out = {"ok": True, "run": name, "info": run_info(self._runs[name])}
            try:
                rep = self.report(name)
                out["report_summary"] = rep.get("summary")
                out["findings"] = len(rep.get("findings", []))
                out["report_warnings"] = rep.get("warnings", [])
            except Exception as e:  # noqa: BLE001 - the run's own numbers are still worth returning
                out["analysis_error"] = str(e)
            return out
        return self._call(go)

    def _short_summary(self, name: str, info: dict) -> dict:
        """`summary`'s default: the figures of run_info and the analyzer's summary an agent reads first, picked (never
        recomputed) and shortened (kernel names), without null fields, bounded to SUMMARY_MAX_CHARS."""
        out: dict = {"ok": True, "run": name, "detail": "short", "format_version": info.get("format_version"),
                     "source": info.get("source")}
        try:
            rep = self.report(name)
        except Exception as e:  # noqa: BLE001 - the run's own numbers are still worth returning
            rep, out["analysis_error"] = None, str(e)
        by_rank = {r["rank"]: r for r in ((rep or {}).get("summary") or {}).get("ranks", [])}
        infos = info.get("ranks", [])
        shown = infos if len(infos) <= SUMMARY_RANKS else _slowest_and_fastest(infos, by_rank)
        if len(shown) < len(infos):
            out["ranks_total"] = len(infos)
            out["ranks_note"] = f"the {len(shown) - 1} slowest ranks by median step time and the fastest; rank=... in other tools"
        out["ranks"] = [_short_rank(i, by_rank.get(i.get("rank"))) for i in shown]
        if rep is not None:
            found = rep.get("findings", [])
            out["findings"] = len(found)
            out["top_findings"] = [{"finding": i, "rule_id": f["rule_id"], "severity": f["severity"], "impact_ns": f["impact_ns"],
                                    "title": f["title"][:120]} for i, f in enumerate(found[:3])]
            waits = [r for r in ((rep.get("summary") or {}).get("cross_rank") or {}).get("ranks", []) if r.get("instances")]
            if waits:
                out["collective_wait"] = [{k: w.get(k) for k in ("rank", "wait_ns", "wait_share", "instances", "times_last")}
                                          for w in sorted(waits, key=lambda w: -(w.get("wait_ns") or 0))[:3]]
        warnings = summarise_warnings(list(info.get("warnings", [])) + [w for w in (rep or {}).get("warnings", [])
                                                                       if w not in info.get("warnings", [])])
        out["warnings"] = [w[:200] for w in warnings[:5]]
        out["more"] = ("summary(detail='full'): every field and full kernel names; findings: what is inside each finding; "
                       "definitions: docs/METRICS.md")
        return bound(_no_nulls(out), max_chars=SUMMARY_MAX_CHARS)

    def findings(self, run: str | None = None, k: int = 10, category: str | None = None, severity: str | None = None) -> dict:
        """The analyzer's findings ranked by impact: top `k`, optionally only one `category` or `severity` at or above
        a level (high > medium > low > info). Each has a number `finding` for explain_finding, its source line and that
        line's code, the figures behind it (for source lines: the forward and backward split), and what is inside it:
        `inside` (what its roots are, their calls and time) with its heaviest `children` (operators, runtime calls,
        kernels: short name, input shapes and dtypes, count, total_ns) and `advice` chosen from them. Full names and
        every child: explain_finding."""
        def go():
            name = self._resolve(run)
            all_f = self.report(name).get("findings", [])  # first: says so when the analyzer is missing
            from ..analyzers.model import CATEGORIES

            if category and category not in CATEGORIES:
                raise ValueError(f"unknown category {category!r}; one of: {', '.join(CATEGORIES)}")
            if severity and severity not in SEVERITY_ORDER:
                raise ValueError(f"unknown severity {severity!r}; one of: {', '.join(SEVERITY_ORDER)}")
            picked = []
            for i, f in enumerate(all_f):
                if category and f.get("category") != category:
                    continue
                if severity and SEVERITY_ORDER.index(f.get("severity", "info")) > SEVERITY_ORDER.index(severity):
                    continue
                picked.append({"finding": i, **{key: f.get(key) for key in (
                    "rule_id", "title", "category", "severity", "impact_ns", "impact_share", "saving_bound_ns", "confidence")},
                    "source": (f.get("location") or {}).get("source"), "recommendation": f.get("recommendation"),
                    "values": (f.get("evidence") or {}).get("values"), **_inside(f.get("contents"))})
            codes = self._codes(name, {p["source"] for p in picked if p["source"]})
            for p in picked:
                p["code"] = codes.get(p["source"])
            kk = max(0, min(int(k), MAX_ROWS))
            return {"ok": True, "run": name, "total_findings": len(all_f), "matching": len(picked),
                    "findings": picked[:kk], "truncated": len(picked) > kk}
        return self._call(go)

    def explain_finding(self, run: str | None = None, finding: int = 0, max_rows: int = 20) -> dict:
        """One finding in full, with its evidence query run in the sandbox (its rows, up to `max_rows`) and its sample
        events: check the claim against the data."""
        def go():
            name = self._resolve(run)
            all_f = self.report(name).get("findings", [])
            if not 0 <= int(finding) < len(all_f):
                raise ValueError(f"no finding {finding}; the report has {len(all_f)} (numbered from 0, see findings)")
            f = all_f[int(finding)]
            rows = max(0, min(int(max_rows), MAX_ROWS))
            ev = f.get("evidence") or {}
            sql = ev.get("sql") or ""
            res = self._boxes[name].query(sql, max_rows=rows) if sql else None
            note = None
            if res is not None and not res.ok and "analysis" in sql and not (self._runs[name] / "analysis").is_dir():
                # some evidence reads what `analyze` writes (the critical path); this server writes nothing
                note = ("this evidence reads RUN/analysis/, which `neuron-explorer analyze RUN` writes; run it once, then ask again "
                        "(this server never writes to a run)")
            samples = [int(x) for x in (ev.get("sample_event_ids") or [])][:20]
            sample_rows = self._sql(name, "SELECT event_id, rank, kind, name, ts_ns, dur_ns, device, stream, step FROM events "
                                    f"WHERE event_id IN ({', '.join(map(str, samples))}) ORDER BY ts_ns") if samples else []
            out = {"ok": True, "run": name, "finding": int(finding), "detail": f,
                   "evidence_result": res.to_dict() if res else None, "sample_events": sample_rows,
                   "truncated": bool(res and res.truncated)}
            if note:
                out["note"] = note
            return out
        return self._call(go)

    def query(self, run: str | None = None, sql: str = "", max_rows: int = 50, timeout_s: float = DEFAULT_TIMEOUT_S) -> dict:
        """Run ONE read-only SELECT (DuckDB SQL) on a run. Views: events, frames, flows, memory, counters, steps, ranks,
        devices, schema_fields (read it to learn the columns). Returns {ok, error, columns, types, rows, row_count,
        truncated}; at most max_rows (<= 200) rows; the query is stopped after timeout_s (<= 60)."""
        def go():
            name = self._resolve(run)
            rows = max(0, min(int(max_rows), MAX_ROWS))
            t = max(0.1, min(float(timeout_s), 60.0))
            return {"run": name, **self._boxes[name].query(sql, max_rows=rows, timeout_s=t).to_dict()}
        return self._call(go)

    def hot_source_lines(self, run: str | None = None, k: int = 20, rank: int | None = None) -> dict:
        """User statements ranked by device time, then CPU time in outermost operators, with their code, calls per
        step, the backward part (backward work counts on the forward statement that built it) and Python-level time.
        Empty when the run has no Python stacks."""
        def go():
            name = self._resolve(run)
            kk = max(1, min(int(k), MAX_ROWS))
            sql = (f"SELECT *, cpu_ns AS cpu_op_ns FROM ({line_times_sql(None if rank is None else int(rank))})\n"
                   "ORDER BY device_ns DESC, cpu_ns DESC, source")
            rows = self._sql(name, sql, max_rows=kk + 1)
            out = {"ok": True, "run": name, "lines": rows[:kk], "truncated": len(rows) > kk, "definitions": LINE_DEFINITIONS}
            if not rows:
                out["note"] = "no event of this run links to a source frame (traces recorded without with_stack=True have none)"
            return out
        return self._call(go)

    def event_context(self, run: str | None = None, event_id: int = 0, neighbours: int = 3) -> dict:
        """An event's chain: source line, module path, outermost and innermost CPU operator, the runtime launch, the
        device events it led to; `charged_to`: the names of the outermost and innermost operators its time counts on in
        every per-operator figure (a graph replay imported with its capture: its operators at capture, else those of
        the chain); and its neighbours in time on the same track with the gaps between."""
        def go():
            name = self._resolve(run)
            eid = int(event_id)
            n = max(0, min(int(neighbours), 20))
            cols = "event_id, rank, kind, name, ts_ns, dur_ns, pid, tid, device, stream, depth, step, module_path"
            ev = self._sql(name, f"SELECT {cols}, op_id, top_op_id, launch_id, frame_id FROM events WHERE event_id = {eid}")
            if not ev:
                raise ValueError(f"no event with event_id {eid} in run {name}")
            e = ev[0]

            def one(eid2) -> dict | None:
                if eid2 is None:
                    return None
                r = self._sql(name, f"SELECT {cols} FROM events WHERE event_id = {int(eid2)}")
                return r[0] if r else None

            source = None
            if e["frame_id"] is not None:
                fr = self._sql(name, f"SELECT file, line, function, is_user, line_kind FROM frames WHERE frame_id = {int(e['frame_id'])}")
                source = fr[0] if fr else None
            launch = e if e["kind"] == "runtime" else one(e["launch_id"])
            if launch is not None:
                device_sql = f"launch_id = {int(launch['event_id'])}"
            elif e["kind"] == "cpu_op":
                device_sql = f"(op_id = {eid} OR top_op_id = {eid}) AND device IS NOT NULL"
            else:
                device_sql = None
            device_events, device_total = [], 0
            if device_sql:
                device_events = self._sql(name, f"SELECT {cols} FROM events WHERE {device_sql} ORDER BY ts_ns", max_rows=20)
                device_total = self._sql(name, f"SELECT count(*) AS n FROM events WHERE {device_sql}")[0]["n"]
            track = (f"rank = {int(e['rank'])} AND pid IS NOT DISTINCT FROM {_lit(e['pid'])} "
                     f"AND tid IS NOT DISTINCT FROM {_lit(e['tid'])} AND depth IS NOT DISTINCT FROM {_lit(e['depth'])}")
            before = self._sql(name, f"SELECT {cols}, {int(e['ts_ns'])} - (ts_ns + dur_ns) AS gap_ns FROM events WHERE {track} "
                               f"AND (ts_ns, event_id) < ({int(e['ts_ns'])}, {eid}) ORDER BY ts_ns DESC, event_id DESC", max_rows=n)
            after = self._sql(name, f"SELECT {cols}, ts_ns - {int(e['ts_ns']) + int(e['dur_ns'] or 0)} AS gap_ns FROM events "
                              f"WHERE {track} AND (ts_ns, event_id) > ({int(e['ts_ns'])}, {eid}) ORDER BY ts_ns, event_id", max_rows=n)
            charged = self._sql(name, f"SELECT {charged_top_op('k', 't')} AS top_op, {charged_op('k', 'o')} AS op FROM events k "
                                f"LEFT JOIN events o ON o.event_id = k.op_id LEFT JOIN events t ON t.event_id = k.top_op_id "
                                f"WHERE k.event_id = {eid}")[0]
            chain = {"source": source, "module_path": e["module_path"], "top_op": one(e["top_op_id"]),
                     "op": one(e["op_id"]), "charged_to": charged, "launch": launch, "device_events": device_events,
                     "device_events_total": device_total}
            return {"ok": True, "run": name, "event": {k: v for k, v in e.items()}, "chain": chain,
                    "neighbours": {"track": "same rank, pid, tid (device, stream for device events) and depth",
                                   "gap_ns": "before: the event's start minus the neighbour's end; after: the neighbour's "
                                   "start minus the event's end (negative when they overlap)",
                                   "before": list(reversed(before)), "after": after},
                    "truncated": device_total > len(device_events)}
        return self._call(go)

    def compare(self, base: str, test: str, k: int = 20, significant_only: bool = False) -> dict:
        """Compare two runs (base, test): the steady-state step-time verdict (slower, faster, no significant change,
        cannot tell; the test used and the steps compared; `basis`: whether the step times or the work per step,
        priced at the base's time per call, decided; `reason`: the decision table's reason code), the work per step
        (`step_time.work`), and the top `k` changes per step by source line, module, operator and kernel, ranked by
        absolute change (definitions: docs/COMPARE.md)."""
        def go():
            b, t = self._resolve(base), self._resolve(test)
            try:
                from ..analyzers.diff import compare
            except ImportError as e:
                raise RuntimeError(f"run comparison is not available in this installation ({e})") from None
            diff = compare(self._runs[b], self._runs[t]).to_dict()
            deltas = [d for d in diff["deltas"] if d.get("significant") or not significant_only]
            kk = max(0, min(int(k), MAX_ROWS))
            return {"ok": True, "base": b, "test": t, "reason": diff.get("reason"), "step_time": diff["step_time"], "notes": diff.get("notes", []),
                    "total_deltas": len(deltas), "deltas": deltas[:kk], "truncated": len(deltas) > kk}
        return self._call(go)

    def critical_path(self, run: str | None = None, k: int = 10, rank: int | None = None, step: int | None = None) -> dict:
        """What bounds the steps, from each step's critical path (every ns of a step charged to one kernel, copy,
        collective, host operator or Python line, launch, or device idle gap): per rank the verdict in words
        ("device-bound (88%): device compute") with the share of step time per category, each step's verdict, and the
        top `k` items on the path by charged ns with their category, operator, kernel, source line and code. `rank`
        and `step` narrow it (default: every rank, every step). A run with no profiler steps (an inference server's
        trace): one path per rank over its span, `over` "window". Model: docs/METRICS.md "Critical path"."""
        def go():
            from ..analyzers.critical_path import bound, path_items, path_of, window_path
            from ..store import open_run

            name = self._resolve(run)
            kk = max(1, min(int(k), 50))
            out_ranks = []
            with open_run(self._runs[name]) as r:
                all_ranks = [x for (x,) in r.sql("SELECT DISTINCT rank FROM steps ORDER BY 1").fetchall()]
                windows = not all_ranks  # no profiler steps anywhere: each rank's path over its span
                if windows:
                    if step is not None:
                        raise ValueError("this run has no profiler steps: its paths are over each rank's span (leave out step)")
                    all_ranks = [x for (x,) in r.sql("SELECT DISTINCT rank FROM events ORDER BY 1").fetchall()]
                if rank is not None and int(rank) not in all_ranks:
                    raise ValueError(f"rank {rank} is not in this run (ranks: {all_ranks})" if windows else
                                     f"rank {rank} has no profiler steps (ranks with steps: {all_ranks})")
                for rk in ([int(rank)] if rank is not None else all_ranks):
                    path = window_path(r, rk) if windows else path_of(r, rk)  # columns: a dict per segment costs seconds on a 1M-event rank
                    b = bound(r, rk)
                    if windows and not len(path):
                        continue  # no device work (or no launches): no window to walk
                    steps = b["steps"]
                    if step is not None:
                        path = path.select(path.step == int(step))
                        steps = [s for s in steps if s["step"] == int(step)]
                        if not steps:
                            raise ValueError(f"no step {step} on rank {rk} (steps: {[s['step'] for s in b['steps']]})")
                    total = int(path.ns.sum())
                    items = path_items(r, path)
                    frames = {fid: (f"{f}:{ln}", code) for fid, f, ln, code in r.sql(
                        "SELECT frame_id, file, line, code FROM frames WHERE frame_id IN (SELECT unnest(?::BIGINT[]))",
                        [sorted({i["frame_id"] for i in items[:kk] if i["frame_id"] is not None})]).fetchall()}
                    overall = b["overall"] if step is None else steps[0]
                    out_ranks.append({
                        "rank": rk, "bound": overall["words"], "over": "window" if windows else "steps", "step_ns": total,
                        "shares": {c: v for c, v in overall["shares"].items() if v},
                        "steps": [{"step": s["step"], "dur_ns": s["dur_ns"], "bound": s["words"]} for s in steps],
                        "items": [{"category": i["category"], "item": i["item"], "op": i["op"], "cause": i["cause"],
                                   "source": frames.get(i["frame_id"], (None, None))[0], "code": frames.get(i["frame_id"], (None, None))[1],
                                   "module_path": i["module_path"], "charged_ns": i["charged_ns"],
                                   "share": round(i["charged_ns"] / total, 4) if total else 0.0, "events": i["events"],
                                   "steps": i["steps"], "sample_event_id": i["sample_id"]} for i in items[:kk]],
                        "items_total": len(items)})
            out = {"ok": True, "run": name, "ranks": out_ranks, "truncated": any(x["items_total"] > kk for x in out_ranks),
                   "definitions": {"charged_ns": "ns of step time charged to the item on the critical path; per step they add "
                                                 "up to the step's duration", "share": "charged_ns / step time (the steps asked for)",
                                   "item": "device work and idle: the device event's name; host: the top-level operator "
                                           "(or the event's own name); null: host time outside every traced call"}}
            if windows:
                out["note"] = ("no profiler steps (ProfilerStep#N) in this run: each rank's path is walked over its span (its analysed "
                               "window), from the thread that launched the device work; step_ns and share are of the span")
            if not out_ranks:
                out["note"] = "no profiler steps (ProfilerStep#N) and no device work in this run: no critical path"
            return out
        return self._call(go)

    def memory_range(self, run: str | None = None, t0_ns: int | None = None, t1_ns: int | None = None, rank: int | None = None,
                     k: int = 20) -> dict:
        """Memory in the time range [t0_ns, t1_ns) (ns on the run clock, as events.ts_ns; default: the whole run),
        as the dashboard's Memory tab shows it: allocations and bytes allocated and freed, per device the peak of
        allocated bytes and when, the `k` largest allocations (size, address, when freed in the range, bytes alive at
        the peak, operator, top-level operator, source line) and the lines and top-level operators that allocated
        most. Needs allocator events (profile_memory=True). Definitions: docs/METRICS.md "Memory in a time range"."""
        def go():
            from ..analyzers.memory_range import memory_range_of

            name = self._resolve(run)
            kk = max(1, min(int(k), MAX_ROWS))
            if t0_ns is None or t1_ns is None:
                (span,) = self._sql(name, "SELECT min(ts_ns) AS t0, max(ts_ns + dur_ns) + 1 AS t1 FROM events")
            a = int(t0_ns) if t0_ns is not None else span["t0"]
            b = int(t1_ns) if t1_ns is not None else span["t1"]
            if b <= a:
                raise ValueError(f"t1_ns must be after t0_ns (got {a} .. {b})")
            m = memory_range_of(lambda sql: self._sql(name, sql, max_rows=MAX_ROWS + 1), a, b, None if rank is None else int(rank), kk)
            out = {"ok": True, "run": name, **m}
            if not m["devices"]:
                out["note"] = "no allocator events in this run (record with profile_memory=True)"
            return out
        return self._call(go)

    def utilisation(self, run: str | None = None, k: int = 10, rank: int | None = None) -> dict:
        """How hard the device works: per rank the device and its matched peak (null for unknown devices and CPUs,
        never guessed), the dtype carrying most FLOPs, counted FLOPs and bytes, MFU per step (FLOPs / (step time x
        peak)) and its median, and the top `k` kernels by time with achieved TFLOP/s, GB/s, arithmetic intensity, the
        roofline bound and efficiency. FLOPs per operator and kernel are in `analysis/work.parquet` (query it with
        `query` after `analyze`). Definitions: docs/METRICS.md "Utilisation"."""
        def go():
            from ..analyzers.utilisation import rank_utilisation
            from ..store import open_run

            name = self._resolve(run)
            kk = max(1, min(int(k), 50))
            out_ranks = []
            with open_run(self._runs[name]) as r:
                all_ranks = [x for (x,) in r.sql("SELECT DISTINCT rank FROM events ORDER BY 1").fetchall()]
                if rank is not None and int(rank) not in all_ranks:
                    raise ValueError(f"no rank {rank} in this run (ranks: {all_ranks[:20]})")
                for rk in ([int(rank)] if rank is not None else all_ranks[:MAX_ROWS]):
                    u = rank_utilisation(r, rk)
                    steps = u["steps"]
                    out_ranks.append({
                        "rank": rk, "device_name": u["device_name"], "peak": u["peak"], "dtype": u["dtype"],
                        "flops": u["flops"], "bytes": u["bytes"], "ops_counted": u["ops_counted"], "ops_estimated": u["ops_estimated"],
                        "mfu_median": u["mfu_median"],
                        "steps": [{k2: s[k2] for k2 in ("step", "dur_ns", "flops", "tflops_per_s", "mfu")} for s in steps[:MAX_ROWS]],
                        "top_kernels": u["top_kernels"][:kk]})
            out = {"ok": True, "run": name, "ranks": out_ranks,
                   "definitions": {"mfu": "counted FLOPs of the step / (step duration x the device's peak FLOP/s for `dtype`); "
                                          "null when the device's peak is unknown",
                                   "tflops_per_s": "FLOPs / duration", "intensity_flops_per_byte": "FLOPs / bytes",
                                   "bound_tflops_per_s": "min(peak FLOP/s, intensity x peak bandwidth): the roofline",
                                   "efficiency": "achieved / bound"}}
            if rank is None and len(all_ranks) > MAX_ROWS:
                out["truncated"] = True
            return out
        return self._call(go)

    def schema_text(self, run: str | None = None) -> str:
        name = self._resolve(run)
        return catalog.render_text(catalog.describe(self._runs[name]))

    def report_json(self, run: str | None = None) -> str:
        try:
            name = self._resolve(run)
            return json.dumps(bound({"ok": True, "run": name, "report": self.report(name)}, max_chars=200_000), default=str)
        except Exception as e:  # noqa: BLE001
            return json.dumps(error(str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)))


FINDING_CHILDREN = 5
"""Children of a finding that `findings` lists (explain_finding has all the report keeps)."""


def _inside(contents: dict | None) -> dict:
    """A finding's contents (analyzers/contents.py) for `findings`: short names, shapes as text, no SQL."""
    c = contents or {}
    roots = c.get("roots")
    if not roots:
        return {}
    top = (roots.get("groups") or [{}])[0]
    names = roots.get("names") or []
    out = {"inside": {"what": roots["what"], "count": roots["count"], "total_ns": roots["total_ns"],
                      "inputs": shapes_text(top.get("shapes"), top.get("dtypes"), "x") or None,
                      "of_them": names if len(names) > 1 else None, "captured": roots.get("captured")},
           "children": [{"kind": ch["kind"], "name": kernel_name(ch["name"], 80), "inputs": shapes_text(ch["shapes"], ch["dtypes"], "x") or None,
                         "count": ch["count"], "total_ns": ch["total_ns"]} for ch in (c.get("children") or [])[:FINDING_CHILDREN]]}
    if c.get("advice"):
        out["advice"] = c["advice"]
    return _no_nulls(out)


SUMMARY_MAX_CHARS = 4_000
"""Upper bound on the JSON size of `summary`'s default (short) result."""
SUMMARY_RANKS = 8
"""With more ranks, the short summary shows the slowest few and the fastest (their count is said)."""


def _no_nulls(obj):
    """obj without the dict entries whose value is None, empty or an empty container (at every depth)."""
    if isinstance(obj, dict):
        kept = {k: _no_nulls(v) for k, v in obj.items()}
        return {k: v for k, v in kept.items() if v is not None and v != [] and v != {}}
    if isinstance(obj, list):
        return [_no_nulls(x) for x in obj]
    return obj


def _3(x: float | None) -> float | None:
    """A ratio to 3 significant digits (the summary's own value, shortened for reading)."""
    return None if x is None else float(f"{x:.3g}")


def _p50(s: dict | None) -> float:
    return ((s or {}).get("steps") or {}).get("p50_ns") or 0


def _slowest_and_fastest(infos: list[dict], by_rank: dict[int, dict], slowest: int = 3) -> list[dict]:
    """The `slowest` ranks by median step time and the fastest (by rank order when there are no steps)."""
    order = sorted(infos, key=lambda i: (-_p50(by_rank.get(i.get("rank"))), i.get("rank")))
    return order[:slowest] + order[-1:]


def _device_figures(d: dict, t: dict | None) -> dict:
    """A device's figures in the short summary: its busy time and totals (kernels, copies, collectives:
    the summary's `devices[]`), and its window, idle and exposed communication over the rank's analysed
    window where the summary has the device's time there (`device_time[]`: the window every finding's
    share is of, so `comm_exposed_ns` and `idle_ns` are comm-exposed's and device-idle's figures; else the
    device's own window, first to last device event). `window` says which."""
    out = {k: d.get(k) for k in ("busy_ns", "kernel_ns", "memcpy_ns", "comm_ns") if d.get(k)}
    if t is not None:
        out.update(window="analysed", window_ns=t.get("window_ns"), idle_ns=t.get("idle_ns"), comm_exposed_ns=t.get("communication_ns"))
    else:
        out.update(window="device", window_ns=d.get("window_ns"), idle_ns=d.get("idle_ns"), comm_exposed_ns=d.get("comm_exposed_ns"))
    return {k: v for k, v in out.items() if v}


def _short_rank(info: dict, s: dict | None) -> dict:
    """One rank of the short summary: run_info's counts and the analyzer summary's figures (`s`), picked."""
    names = {d.get("device"): d.get("name") for d in info.get("devices") or []}
    out: dict = {"rank": info.get("rank"), "world_size": info.get("world_size"), "events": info.get("events"),
                 "span_ns": info.get("span_ns")}
    dq = {k: v for k, v in (info.get("data_quality") or {}).items() if v and not k.startswith("backward")}
    if dq:
        out["data_quality"] = dq
    if s is None:
        out["devices"] = [{"device": d, "name": n} for d, n in names.items()]
        return out
    st = s.get("steps") or {}
    out["span_ns"], out["analysed_ns"] = s.get("span_ns"), s.get("analysed_ns")
    if st.get("count"):
        out["steps"] = {k: st.get(k) for k in ("count", "steady_count", "p50_ns", "mean_ns", "max_ns")}
        out["steps"]["cv"] = round(st["cv"], 3) if st.get("cv") is not None else None
        out["steps"]["left_out"] = [x.get("step") for x in st.get("left_out") or []]
    in_window = {d["device"]: d for d in s.get("device_time") or []}
    out["devices"] = [{"device": d["device"], "name": names.get(d["device"]), **_device_figures(d, in_window.get(d["device"])),
                       "top_kernels": [{"kernel": k.get("kernel"), "dur_ns": k.get("dur_ns")}
                                       for k in (in_window.get(d["device"]) or {}).get("top_kernels", [])[:2]]}
                      for d in s.get("devices") or []]
    if s.get("comm_cpu_ns"):
        out["comm_cpu_ns"] = s["comm_cpu_ns"]
        if not s.get("devices"):  # a CPU rank's exposed communication (a device rank's is its devices')
            out["comm_cpu_exposed_ns"] = s.get("comm_cpu_exposed_ns") or 0
    overall = (s.get("bound") or {}).get("overall")
    if overall:
        out["bound"] = {"words": overall.get("words"), **({"over": "window"} if overall.get("over") == "window" else {}),
                        "shares": {k: v for k, v in (overall.get("shares") or {}).items() if v >= 0.005}}
        odd = [x for x in (s.get("bound") or {}).get("steps", []) if x.get("bound") != overall.get("bound")]
        out["bound"]["other_steps"] = [{"step": x["step"], "words": x["words"]} for x in odd[:3]]
        if overall.get("heaviest"):  # (a window's path: no critical-path finding names its items)
            out["bound"]["heaviest"] = [{"category": h["category"], "item": kernel_name(h["item"], 60) if h["item"] else None,
                                         "cause": h["cause"], "ns": h["ns"]} for h in overall["heaviest"]]
    u = s.get("utilisation") or {}
    if u.get("flops"):
        out["utilisation"] = {"dtype": u.get("dtype"), "flops": u.get("flops"), "mfu_median": _3(u.get("mfu_median")),
                              "peak": (u.get("peak") or {}).get("name"),
                              "counted_share": _3((s.get("achieved") or {}).get("counted_share")),
                              "top_counted_kernels": [{"kernel": kernel_name(k.get("kernel"), 60), "op": k.get("op"), "calls": k.get("calls"),
                                               "dur_ns": k.get("dur_ns"), "efficiency": _3(k.get("efficiency"))}
                                              for k in (u.get("top_kernels") or [])[:2]]}
    out["top_level_ops"] = [{"name": o["name"][:80], "calls": o["calls"], "cpu_ns": o["cpu_ns"]} for o in (s.get("top_level_ops") or [])[:3]]
    if s.get("compile_ns"):  # torch.compile's compiling, which the operators' cpu_ns leave out
        out["compile_ns"] = s["compile_ns"]
    lines = s.get("source_lines") or {}
    side = "device" if lines.get("device") else "cpu"
    if lines.get(side):
        out[f"source_lines_{side}"] = [{"source": x["source"], "self_ns": x["self_ns"], "total_ns": x["total_ns"]} for x in lines[side][:3]]
    return out


def _lit(v) -> str:
    return "NULL" if v is None else str(int(v))
