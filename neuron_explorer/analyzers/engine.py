"""The rule engine: open a run, compute the summary, run every rule, rank the findings.

A rule is a module in analyzers/rules/ with RULE_ID, TITLE, CATEGORY, THRESHOLDS, SCOPE
('rank' or 'run') and `check(ctx) -> list[Finding]`; it raises NotApplicable(reason) when the data
cannot answer its question. A rule that raises anything else becomes a warning in the report
while the others still run. A SCOPE='rank' rule may also have `screen(run, summaries) -> ranks`:
one query grouped by rank over many ranks that returns the ranks its check could report on (a
finding, or that it does not apply); the others are reported as having no finding, unchecked.
A rule whose screen costs what its check does on one rank (the check's first query is the
screen's, and it stops there when there is nothing to report) sets SCREEN_ONE_RANK = False: a
batch of one rank then runs the check without the screen. A screen that asks only which ranks have
an event matching a condition declares it in SCREEN_WHERES and asks with `rules._util.ranks_with`:
the engine answers every rule's conditions from one scan of the batch's events.
A rule may also declare RANK_QUERIES (rank_rows.RankQuery): the queries its check runs on each
rank, which the engine runs once per batch of ranks, grouped by rank, and the check reads its
rank's rows of (`rank_rows.rows`); the summary's figures declare theirs the same way.
One cause, one finding: a SCOPE='rank' rule whose findings may name a cause another rule owns
(critical-path's classes: data loading is input-pipeline's; hotspot's operator whose time is the
path's one-off launch; precision's and device-underuse's fp32 matrix work, the path's fp32
GEMM/convolution class) has `leaves_to(finding)`: the owning rule's id, or (rule id, test of its
findings) pairs; such a finding is dropped where an owning finding on the same rank is kept
(`leave_to_owners`). One that may hold a part whose cause is the job's (comm-exposed's wait for a
late rank) has `less_the_job(run, finding, cross_rank, analysed_ns)`: the owning SCOPE='run' rule's
id and the finding without that part (`leave_to_the_job`).
A SCOPE='run' rule may have `prepare(run)`: the run-wide queries its check reads, kept per open run;
while child processes analyse some of the ranks this process runs them instead of waiting.

Must not: render (see render.py) or write files (see outputs.py).
"""

from __future__ import annotations

import contextvars
import errno
import importlib
import os
import pkgutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from ..no_pandas import without_pandas
from ..store import Run, create_views, cursor, hold_events, new_connection, open_run, point_views, release_events, stopping
from . import critical_path, metrics
from . import summary as summary_
from .advice import attach as attach_contents
from .batch_processes import PROCESSES_ENV, analyze_shared
from .model import SEVERITIES, Evidence, Finding, Location, Report
from .rank_rows import prepare as prepare_rank_rows
from .ranks import summary as cross_rank_summary

SEVERITY_SHARES = {"high": 0.20, "medium": 0.05, "low": 0.01}
"""A finding's severity from its impact share: at least this share of the analysed time."""

CONFIDENCE_PENALTIES = {"no_user_frames": 0.25, "data_quality": 0.2, "one_step": 0.2, "no_steps": 0.1}
"""How much each data-quality problem lowers a finding's confidence (from 1.0)."""


class NotApplicable(Exception):
    """The data cannot answer the rule's question (e.g. no device events); the reason is reported."""


def severity_for(share: float) -> str:
    for sev in ("high", "medium", "low"):
        if share >= SEVERITY_SHARES[sev]:
            return sev
    return "info"


@dataclass
class Context:
    """What a rule sees: the open run, one rank (for SCOPE='rank'), and the summary numbers."""

    run: Run
    rank: int | None
    summaries: dict[int, dict]
    quality: dict[int, list[str]] = field(default_factory=dict)
    rule: ModuleType | None = None  # the rule being run (set by the engine)

    @property
    def summary(self) -> dict:
        return self.summaries[self.rank]

    @property
    def analysed_ns(self) -> int:
        """Denominator of impact shares: total step time, or the span when there are no steps."""
        if self.rank is None:
            return max((s["analysed_ns"] for s in self.summaries.values()), default=0)
        return self.summary["analysed_ns"]

    def has_device(self, rank: int | None = None) -> bool:
        return bool(self.summaries[self.rank if rank is None else rank]["devices"])

    def require_device(self) -> None:
        if not self.has_device():
            raise NotApplicable(metrics.no_device_reason(self.summary.get("device_events_lost")))

    def trains(self, rank: int | None = None) -> bool:
        """Whether the rank does training work (backward or optimizer: metrics.trains); without it
        rules give no training advice."""
        s = self.summaries[self.rank if rank is None else rank]
        return s["training"] if "training" in s else metrics.trains(self.run, self.rank if rank is None else rank)

    @property
    def steady_steps(self) -> list[int] | None:
        """The rank's steady steps (metrics.steady_steps), the denominator of every per-step count;
        None without steps (counts are then over the analysed window)."""
        st = self.summary["steps"]
        return list(st.get("steady_steps") or []) if st["count"] else None

    def has_user_frames(self, rank: int | None = None) -> bool:
        return self.summaries[self.rank if rank is None else rank]["source_lines"]["has_frames"]

    def source_of(self, frame_id: int | None) -> str | None:
        if frame_id is None:
            return None
        row = self.run.sql("SELECT file, line FROM frames WHERE frame_id = ?", [frame_id]).fetchone()
        return f"{row[0]}:{row[1]}" if row else None

    def finding(self, *, title: str, impact_ns: int, saving_bound_ns: int, location: Location,
                sql: str, values: dict, recommendation: str, sample_event_ids=(), severity: str | None = None,
                uses_source: bool = False, rank: int | None = None) -> Finding:
        rank = self.rank if rank is None else rank
        if location.rank is None:
            location.rank = rank
        denom = self.summaries[rank]["analysed_ns"] if rank is not None else self.analysed_ns
        share = (impact_ns / denom) if denom else 0.0
        confidence, notes = 1.0, []
        if uses_source and not self.has_user_frames(rank):
            confidence -= CONFIDENCE_PENALTIES["no_user_frames"]
            notes.append("no user source frames recorded (record with with_stack=True or the live collector)")
        for note in self.quality.get(rank, []):
            confidence -= CONFIDENCE_PENALTIES["data_quality"]
            notes.append(note)
        steps = self.summaries[rank]["steps"]["count"]
        if steps == 1:
            confidence -= CONFIDENCE_PENALTIES["one_step"]
            notes.append("one profiler step only: no repetition to confirm the pattern")
        elif steps == 0:
            confidence -= CONFIDENCE_PENALTIES["no_steps"]
            notes.append("no profiler steps: shares are of the whole span")
        rule = self.rule
        return Finding(
            rule_id=rule.RULE_ID, title=title, category=rule.CATEGORY,
            severity=severity or severity_for(share), impact_ns=int(impact_ns), impact_share=round(min(share, 1.0), 6),
            saving_bound_ns=int(min(saving_bound_ns, impact_ns) if saving_bound_ns is not None else impact_ns),
            location=location, evidence=Evidence(sql=sql.strip(), sample_event_ids=[int(i) for i in sample_event_ids][:5], values=values),
            recommendation=recommendation, confidence=round(max(confidence, 0.1), 2), confidence_notes=notes)


def all_rules() -> list[ModuleType]:
    """Every rule module in analyzers/rules/, ordered by RULE_ID."""
    from . import rules

    mods = [importlib.import_module(f"{rules.__name__}.{m.name}") for m in pkgutil.iter_modules(rules.__path__) if not m.name.startswith("_")]
    return sorted(mods, key=lambda m: m.RULE_ID)


QUALITY_NOTES = {"device_events_without_launch": "device events with no launch (dropped events?)",
                 "device_before_launch": "device events before their launch (clock anomaly)",
                 "overlapping_slices": "overlapping slices on one thread (events dropped or clocks skewed)"}
"""The data-quality counts (manifest `data_quality`) that lower a finding's confidence, in words."""


def _quality_note(key: str, label: str, dq: dict) -> str:
    """One data-quality count in words; device events with no launch some of which were launched
    before the trace began (kineto_names.launched_before_trace) say so: queued
    work, not dropped events."""
    early = dq.get("device_launched_before_trace") or 0
    if key != "device_events_without_launch" or not early:
        return f"{dq[key]} {label}"
    n = dq[key]
    return f"{n} device events with no launch ({'all' if early == n else early} launched before the trace began" + (
        f"; {n - early} dropped?)" if early < n else ")")


def quality_notes(run: Run) -> dict[int, list[str]]:
    """Per rank, the data-quality problems the importer counted, in words (each lowers a
    finding's confidence; the dashboard's overview lists them)."""
    from ..collectors.rank_entry import clock_shift_words, first_work_wait_words

    out: dict[int, list[str]] = {}
    for entry in run.manifest.get("ranks", []):
        dq = entry.get("data_quality") or {}
        notes = [_quality_note(k, label, dq) for k, label in QUALITY_NOTES.items() if dq.get(k)]
        if (waited := first_work_wait_words(dq)) is not None:  # (rank_entry.first_work_wait_warnings says it at length)
            notes.append(f"{waited} (a device clock offset from the host's?)")
        if (moved := clock_shift_words(dq)) is not None:
            notes.append(moved)
        out[int(entry.get("rank", 0))] = notes
    return out


_quality_notes = quality_notes  # the earlier private name


RANK_BATCH = 128
"""Ranks whose summary numbers and rule screening are computed together, by queries grouped by rank..."""
BATCH_EVENTS = 2_000_000
"""...and at most this many events in a batch (a larger rank is a batch of its own), so that the
grouped queries hold no more than one large rank's worth at a time."""


def _events_by_rank(run: Run) -> dict[int, int]:
    """The manifest's count of events per rank."""
    return {int(e.get("rank", 0)): int(e.get("events", 0) or 0) for e in run.manifest.get("ranks", [])}


def rank_batches(run: Run, ranks: list[int]) -> list[list[int]]:
    """Consecutive ranks in batches of at most RANK_BATCH ranks and BATCH_EVENTS events (the
    manifest's count per rank)."""
    events = _events_by_rank(run)
    out, batch, n = [], [], 0
    for r in ranks:
        if batch and (len(batch) >= RANK_BATCH or n + events.get(r, 0) > BATCH_EVENTS):
            out.append(batch)
            batch, n = [], 0
        batch.append(r)
        n += events.get(r, 0)
    return out + ([batch] if batch else [])


def _analyze_rank(run: Run, rank: int, rank_rules: list[ModuleType], quality: dict,
                  summary: dict | None = None, skip: frozenset = frozenset(), contents: bool = True) -> tuple[dict, dict]:
    """The summary of one rank and its per-rank rules' results, on `run` (views over that rank).
    `summary`: its set-based part, already computed (`summary.rank_summaries`); `skip`: the rules
    whose screening found nothing to report on this rank (they report no finding, unrun);
    `contents`: give the findings their contents here (else the caller does, for many ranks at once)."""
    summary = summary_.rank_summary(run, rank) if summary is None else summary_.complete_summary(run, summary)
    results = {}
    for rule in rank_rules:
        if stopping():
            raise InterruptedError("the interpreter is exiting: analysis stopped")
        if rule.RULE_ID in skip:
            results[rule.RULE_ID] = ("findings", [])
            continue
        ctx = Context(run, rank, {rank: summary}, quality, rule)
        try:
            results[rule.RULE_ID] = ("findings", rule.check(ctx))
        except NotApplicable as e:
            results[rule.RULE_ID] = ("not_applicable", str(e))
        except Exception as e:  # noqa: BLE001 - one rule failing on odd data must not stop the report
            results[rule.RULE_ID] = ("failed", f"{type(e).__name__}: {e}")
    leave_to_owners(rank_rules, results)
    if contents:  # while this rank's views are open: what is inside each finding
        attach_contents(run, [f for what, value in results.values() if what == "findings" for f in value])
    return summary, results


def leave_to_owners(rank_rules: list[ModuleType], results: dict) -> None:
    """One cause, one finding: a rule's finding whose cause another rule's finding names is dropped
    where that rule reported this rank. A rule's `leaves_to(finding)` gives the owners: a rule id,
    or (rule id, test) pairs, where the owner is that rule's finding the test holds for (None: any
    of its findings). A finding leaves only to an owner that is kept itself, so a chain of owners
    never drops every finding of a cause. `results`: one rank's, by rule id, changed in place."""
    found = {rid: value for rid, (what, value) in results.items() if what == "findings" and value}
    owners_of = {rule.RULE_ID: rule.leaves_to for rule in rank_rules if getattr(rule, "leaves_to", None) is not None}
    dropped: dict[int, bool] = {}

    def is_dropped(rid: str, f, seen: frozenset = frozenset()) -> bool:
        if id(f) not in dropped:
            owners = owners_of[rid](f) if rid in owners_of else None
            owners = [(owners, None)] if isinstance(owners, str) else list(owners or [])
            dropped[id(f)] = any(not (id(g) in seen or is_dropped(orid, g, seen | {id(f)}))
                                 for orid, test in owners for g in found.get(orid, ()) if test is None or test(g))
        return dropped[id(f)]

    for rid, value in list(found.items()):
        if rid in owners_of:
            results[rid] = ("findings", [f for f in value if not is_dropped(rid, f)])


def leave_to_the_job(run: Run, rank_rules: list[ModuleType], findings: list[Finding], cross_rank: dict,
                     analysed_ns: dict[int, int]) -> list[Finding]:
    """One cause, one finding across ranks: where a rank's finding holds a part whose cause is the
    job's, a SCOPE='rank' rule's `less_the_job(run, finding, cross_rank, analysed_ns)` gives the owning
    SCOPE='run' rule's id and the finding without that part (None: dropped), read from the report's
    `cross_rank` summary (each rank's wait for the last arrival); where that rule reported, the
    finding is replaced by it. comm-exposed's time waiting for a late rank: collective-wait's.
    `analysed_ns`: each rank's analysed time. In the order given (a smaller impact may need `ranked` again)."""
    owners = {r.RULE_ID: r.less_the_job for r in rank_rules if getattr(r, "less_the_job", None) is not None}
    if not owners or not cross_rank.get("ranks"):
        return findings
    reported = {f.rule_id for f in findings}
    out = []
    for f in findings:
        got = owners[f.rule_id](run, f, cross_rank, analysed_ns.get(f.location.rank, 0)) if f.rule_id in owners else None
        if got is None or got[0] not in reported:
            out.append(f)
        elif got[1] is not None:
            out.append(got[1])
    return out


def ranked(findings: list[Finding]) -> list[Finding]:
    """Findings in the report's order: impact first, then severity, then rule id."""
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(findings, key=lambda f: (-f.impact_ns, order[f.severity], f.rule_id))


def default_workers(ranks: int) -> int:
    """Threads for per-rank analysis: one per core (DuckDB runs each query outside the GIL), at
    most one per rank."""
    return max(1, min(os.cpu_count() or 1, ranks))


def analyze_run(run: Run, rules: list[ModuleType] | None = None, *, workers: int | None = None, ray: str | None = None,
                keep_parts: bool = False) -> Report:
    """Run the rules over an open run and return the ranked Report.

    Ranks go in batches (`rank_batches`): the summary numbers of all ranks of a batch, and each
    rule's screening, are queries grouped by rank, so a job of many small ranks pays each query's
    fixed cost once per batch, not once per rank. The rest of the per-rank work (the figures
    computed rank by rank, and the checks the screening selected) reads only its own rank's
    partition: a connection's views are re-pointed at `rank=<r>/` before that rank's queries, so
    the cost grows with events, not with ranks x events. Ranks are analysed by `workers` threads
    (default: one per core), each with its own DuckDB connection. SCOPE='run' rules then read the whole run
    once, with every rank's summary. Evidence SQL keeps its `rank = N` filters, so it reproduces
    the numbers on the full run's views. With `ray` (a cluster address, 'auto' or 'local'), each
    rank is a Ray task instead (ray_tasks.py; the run must be on a filesystem every node shares),
    and only the cross-rank rules run here. With `keep_parts`, each rank's rows of the Parquet
    outputs are kept as its analysis ends (`Report.rank_parts`, `outputs.rank_parts`).
    """
    rules = all_rules() if rules is None else rules
    rank_rules = [r for r in rules if getattr(r, "SCOPE", "rank") != "run"]
    ranks = metrics.ranks(run)
    quality = quality_notes(run)
    per_rank: dict[int, tuple[dict, dict]] = {}
    parts: dict[int, dict[str, bytes]] = {}
    n_workers = default_workers(len(ranks)) if workers is None else max(1, min(workers, len(ranks) or 1))
    if ray is not None:
        from ..errors import InputError
        from ..ray_tasks import map_settled

        rule_ids = [r.RULE_ID for r in rank_rules]
        failed = {}
        for rank, ok, result in map_settled(ray, _analyze_rank_task, [(rank, str(run.path), rule_ids, quality) for rank in ranks]):
            if ok:
                per_rank[rank] = result
            else:
                failed[rank] = result
        if failed:
            raise InputError(run.path, f"the analysis of {len(failed)} of {len(ranks)} ranks failed on Ray ("
                             + "; ".join(f"rank {r}: {(str(why).strip().splitlines() or ['?'])[0]}" for r, why in sorted(failed.items())) + ")")
    else:
        per_rank = _analyze_ranks(run, ranks, rank_rules, quality, n_workers, parts if keep_parts else None,
                                  meanwhile=lambda: _prepare_run_rules(run, rules))
    summaries = {rank: per_rank[rank][0] for rank in ranks}
    findings: list[Finding] = []
    not_applicable: list[dict] = []
    warnings = list(run.manifest.get("warnings", []))
    for rule in rules:
        if getattr(rule, "SCOPE", "rank") == "run":
            outcomes = [(None, _run_rule(run, rule, summaries, quality))]
        else:
            outcomes = [(rank, per_rank[rank][1][rule.RULE_ID]) for rank in ranks]
        for rank, (what, value) in outcomes:
            if what == "findings":
                findings += value
            elif what == "not_applicable":
                not_applicable.append({"rule_id": rule.RULE_ID, "rank": rank, "reason": value})
            else:
                warnings.append(f"rule {rule.RULE_ID} failed on rank {rank}: {value}")
    cross_rank = cross_rank_summary(run)
    findings = ranked(leave_to_the_job(run, rank_rules, findings, cross_rank, {r: s["analysed_ns"] for r, s in summaries.items()}))
    summary = {"ranks": list(summaries.values()), "definitions": "docs/METRICS.md", "cross_rank": cross_rank}
    return Report(run=str(run.path), summary=summary, findings=findings,
                  not_applicable=not_applicable, warnings=warnings, rank_parts=parts)


def _analyze_rank_task(rank: int, run_dir: str, rule_ids: list[str], quality: dict) -> tuple[dict, dict]:
    """One rank's analysis where the run is opened anew (a Ray task): views over that rank only."""
    by_id = {r.RULE_ID: r for r in all_rules()}
    missing = [i for i in rule_ids if i not in by_id]
    if missing:
        raise RuntimeError(f"rules {missing} are not installed where this task runs (rules travel by name)")
    with open_run(run_dir, ranks=[rank]) as run:
        return _analyze_rank(run, rank, [by_id[i] for i in rule_ids], quality)


def _prepare_run_rules(run: Run, rules: list[ModuleType]) -> None:
    """The run-wide queries of the SCOPE='run' rules that declare them (`prepare(run)`, kept per open
    run for their checks). A failure is left to the check, which asks again and reports it."""
    for rule in rules:
        fn = getattr(rule, "prepare", None) if getattr(rule, "SCOPE", "rank") == "run" else None
        if fn is not None:
            try:
                fn(run)
            except Exception:  # noqa: BLE001 - the check runs the same queries and reports what fails
                pass


def _run_rule(run: Run, rule: ModuleType, summaries: dict, quality: dict) -> tuple[str, object]:
    ctx = Context(run, None, summaries, quality, rule)
    try:
        findings = rule.check(ctx)
        attach_contents(run, findings)
        return "findings", findings
    except NotApplicable as e:
        return "not_applicable", str(e)
    except Exception as e:  # noqa: BLE001 - one rule failing on odd data must not stop the report
        return "failed", f"{type(e).__name__}: {e}"


def screen(run: Run, rule: ModuleType, summaries: dict[int, dict]) -> set[int] | None:
    """The ranks of `summaries` on which a rule needs its per-rank check, from its `screen(run,
    summaries)` (one query grouped by rank over every rank of `run`'s views): a rule's screen
    returns each rank where the check could report a finding or that it does not apply. None
    (check every rank) for a rule without a screen, or whose screen failed (the check then
    reports the failure rank by rank)."""
    fn = getattr(rule, "screen", None)
    if fn is None:
        return None
    try:
        return {int(r) for r in fn(run, summaries)}
    except Exception:  # noqa: BLE001 - the per-rank check runs instead, and reports what is wrong
        return None


def _screen_wheres(run: Run, rules: list[ModuleType]) -> None:
    """The ranks with events matching each condition the rules' screens ask about (`SCREEN_WHERES`),
    one query for all of them (rules._util.ranks_with_many); a failure leaves each screen to ask."""
    from .rules._util import ranks_with_many

    try:
        ranks_with_many(run, [w for rule in rules for w in getattr(rule, "SCREEN_WHERES", ())])
    except Exception:  # noqa: BLE001 - each screen then runs its own query, and reports what is wrong
        pass


def _analyze_ranks(run: Run, ranks: list[int], rank_rules: list[ModuleType], quality: dict,
                   n_workers: int, parts: dict | None = None, meanwhile=None) -> dict[int, tuple[dict, dict]]:
    """Ranks in batches (`rank_batches`), analysed by `analyze_batches`: in this process, or, for a
    run of several batches and PROCESS_EVENTS events or more, shared out to `processes(...)`
    processes, this one and children (batch_processes.py), each analysing its share of the batches;
    then this process runs `meanwhile()` (if any) before it waits for the children."""
    batches = rank_batches(run, ranks)
    n_proc = processes(run, batches, rank_rules)
    if n_proc > 1:
        return analyze_shared(run, batches, rank_rules, quality, n_proc, max(1, n_workers // n_proc), parts,
                              _events_by_rank(run), analyze_batches, meanwhile=meanwhile)
    return analyze_batches(run, batches, rank_rules, quality, n_workers, parts)


PROCESS_EVENTS = 400_000
"""A run of several batches analyses them in several processes from this many events (a child
process costs ~0.5 s of CPU to start, about what 40k events of small ranks cost to analyse)..."""
MAX_PROCESSES = 4
"""...in one per core, at most this many (each holds one batch's rows: a batch's peak memory a process)."""


def processes(run: Run, batches: list[list[int]], rank_rules: list[ModuleType]) -> int:
    """How many processes analyse `batches`: one per core, at most one per batch and MAX_PROCESSES,
    when the run holds PROCESS_EVENTS events or more; else 1. Also 1 where a child could not run
    the same analysis: a rule that is not one of the installed rules (rules travel by id; the peak
    table and overrides in force travel pickled)."""
    cap = os.environ.get(PROCESSES_ENV, "").strip()
    limit = max(1, int(cap)) if cap.isdigit() else MAX_PROCESSES  # (0: this process only, as 1)
    n = min(os.cpu_count() or 1, len(batches), limit)
    if n < 2 or sum(_events_by_rank(run).get(r, 0) for b in batches for r in b) < PROCESS_EVENTS:
        return 1
    installed = {r.RULE_ID: r for r in all_rules()}
    if any(installed.get(getattr(r, "RULE_ID", None)) is not r for r in rank_rules):
        return 1
    return n


def analyze_batches(run: Run, batches: list[list[int]], rank_rules: list[ModuleType], quality: dict,
                    n_workers: int, parts: dict | None = None, duck_threads: int | None = None,
                    compress_parts: bool | None = None) -> dict[int, tuple[dict, dict]]:
    """For each batch, the summary numbers of all its ranks,
    each rule's screening and the rows of the per-rank queries (`batch_rows`) are queries grouped by
    rank over the batch's views (a batch of one rank begins its critical path meanwhile, on a thread
    of its own: `_path_ahead`); then each rank
    adds the figures computed rank by rank and runs the checks its screening selected, on views
    over its own partition, by `n_workers` threads; last, what is inside every finding of the
    batch (`advice.attach`) is two queries grouped by finding over the batch's views. `parts`:
    filled with each rank's `outputs.rank_parts` as its analysis ends. `duck_threads`: DuckDB's
    threads for the batch's queries (default: one per core). `compress_parts`: whether `parts` are
    compressed (`_rank_details`; None: as the run's size says)."""
    out: dict[int, tuple[dict, dict]] = {}
    events = _events_by_rank(run)
    for batch in batches:
        con = new_connection()
        if duck_threads is not None:
            con.execute(f"SET threads = {int(duck_threads)}")
        batch_run = Run(run.path, run.manifest, con)
        ahead = None
        try:
            create_views(batch_run, batch)
            # many small files: the batch's queries read the events once, held in memory
            hold_events(batch_run, sum(events.get(r, 0) for r in batch))
            ahead = _path_ahead(batch_run, batch)
            partial = summary_.rank_summaries(batch_run, batch, per_rank=False)
            screened = [rule for rule in rank_rules if len(batch) > 1 or getattr(rule, "SCREEN_ONE_RANK", True)]
            _screen_wheres(batch_run, screened)
            selected = {rule.RULE_ID: screen(batch_run, rule, partial) if rule in screened else None for rule in rank_rules}
            skips = {rank: frozenset(rid for rid, sel in selected.items() if sel is not None and rank not in sel) for rank in batch}
            # the rows the summary prepared on the batch's run (each device's busy union) and, for many ranks,
            # every per-rank query's
            prepared = batch_rows(batch_run, batch, rank_rules, skips) if len(batch) > 1 else batch_run.prepared
            # a batch of one rank analysed on this thread reads the views the batch's connection already
            # has (each connection costs ~40 ms of CPU to make, and parses the Parquet footers again)
            done = _rank_details(run, batch, rank_rules, quality, n_workers, partial, skips, parts, prepared,
                                 con=con if len(batch) == 1 and n_workers == 1 else None, duck_threads=duck_threads,
                                 compress_parts=compress_parts)
            prepared = None
            # what is inside every finding of the batch: grouped queries over the batch's views
            attach_contents(batch_run, [f for rank in batch for what, value in done[rank][1].values() if what == "findings" for f in value])
        finally:
            if ahead is not None:  # (taken by the summary, unless the batch failed first: then stopped and let go)
                critical_path.settle_ahead(ahead, batch[0])
                ahead.close()
            release_events(batch_run)
            con.close()
        out.update(done)
    return out


def _path_ahead(batch_run: Run, batch: list[int]) -> Run | None:
    """For a batch of one rank: its critical path begun on a thread of its own (critical_path.path_ahead)
    over a cursor of the batch's connection, while the batch's summary and screening queries run; the
    Run it reads from (the caller settles the path and closes it). None for a batch of many ranks (their
    paths are prepared with their other rows)."""
    if len(batch) != 1:
        return None
    ahead = Run(batch_run.path, batch_run.manifest, cursor(batch_run.con), view_ranks=batch_run.view_ranks, listed=batch_run.listed,
                prepared=batch_run.prepared)  # (the rows either reads are kept for both)
    ahead.held, ahead.held_files = batch_run.held, batch_run.held_files
    critical_path.path_ahead(ahead, batch[0])
    return ahead


def batch_rows(batch_run: Run, batch: list[int], rank_rules: list[ModuleType], skips: dict[int, frozenset]) -> dict[str, dict]:
    """The rows of every per-rank query the batch's ranks will run (the summary's RANK_QUERIES, and
    those of each rule some rank of the batch checks), each query run once over the batch's views,
    grouped by rank (rank_rows.prepare)."""
    queries = list(summary_.RANK_QUERIES)
    for rule in rank_rules:
        if any(rule.RULE_ID not in skips[r] for r in batch):
            queries += list(getattr(rule, "RANK_QUERIES", ()))
    return prepare_rank_rows(batch_run, queries, batch)


def _rank_details(run: Run, ranks: list[int], rank_rules: list[ModuleType], quality: dict, n_workers: int,
                  partial: dict[int, dict], skips: dict[int, frozenset], parts: dict | None = None,
                  prepared: dict | None = None, con=None, duck_threads: int | None = None,
                  compress_parts: bool | None = None) -> dict[int, tuple[dict, dict]]:
    """Ranks shared out to `n_workers` threads (the calling thread when 1); each keeps its own
    connection, whose views it re-points at each rank in turn (a connection of its own: cursors
    of one connection share their views). `prepared`: the batch's rows of the per-rank queries
    (`batch_rows`), which each rank reads instead of querying. `con`: a connection the one
    worker (`n_workers` 1) uses instead of making one; the caller closes it. `duck_threads`: DuckDB's
    threads a worker (default: the cores shared out to the workers)."""
    todo = iter(ranks)
    lock = threading.Lock()
    out: dict[int, tuple[dict, dict]] = {}
    errors: list[BaseException] = []
    if duck_threads is None:
        duck_threads = max(1, (os.cpu_count() or 1) // n_workers)  # one big rank keeps every core for DuckDB

    from .outputs import rank_parts

    # every rank's parts are held until the outputs are written: compressed where the run holds more
    # events than one batch may (a rank that large is held as tables: its parts are written next),
    # as tables in a smaller run (256 ranks of 5k events: 0.5 s of CPU compressing and reading back),
    # unless the caller says (a child process, whose parts travel pickled: compressed)
    compress = (len(run.ranks) > 1 and sum(_events_by_rank(run).values()) > BATCH_EVENTS) if compress_parts is None else compress_parts

    def _rank_parts(rank_run: Run, rank: int) -> dict | None:
        try:
            return rank_parts(rank_run, rank, compress)
        except Exception:  # noqa: BLE001 - the outputs then compute this rank again, and report what fails
            return None

    given = con
    if given is not None and n_workers != 1:
        raise ValueError("a connection is shared by one worker only")

    def worker() -> None:
        con = given if given is not None else new_connection()
        con.execute(f"SET threads = {duck_threads}")
        rank_run = Run(run.path, run.manifest, con, prepared=prepared or {})
        try:
            while not errors:
                if stopping():
                    raise InterruptedError("the interpreter is exiting: analysis stopped")
                with lock:
                    rank = next(todo, None)
                if rank is None:
                    return
                point_views(rank_run, [rank])  # made when a query of this rank needs them
                result = _analyze_rank(rank_run, rank, rank_rules, quality, partial[rank], skips[rank], contents=False)
                kept = None if parts is None else _rank_parts(rank_run, rank)
                with lock:
                    out[rank] = result
                    if kept is not None:
                        parts[rank] = kept
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(e)
        finally:
            if given is None:
                con.close()

    if n_workers == 1:
        worker()
    else:
        # each thread runs in a copy of the caller's context: settings held in context variables
        # (e.g. the device peaks `analyze --peak-tflops` sets) apply to every rank
        threads = [threading.Thread(target=contextvars.copy_context().run, args=(worker,), name=f"nx-analyze-{i}", daemon=True)
                   for i in range(n_workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    return out


def analyze(path: Path | str, *, write: bool = True, rules: list[ModuleType] | None = None,
            workers: int | None = None, ray: str | None = None) -> Report:
    """Analyse a run (or a trace, imported into the cache); with write=True also write
    RUN/analysis/{report.json, report.md, findings.parquet} into the run directory. `workers`:
    threads for the per-rank analysis (default: one per core); `ray`: run each rank as a Ray task.
    When analysis/ cannot be written (a read-only place, a full disk) the report is still returned,
    with `report.not_saved` saying why in one line."""
    # nothing here makes or reads a pandas object: pyarrow's first conversion would import it
    # (0.3-0.5 s of CPU) on this thread, the one that analyses a run of one rank
    with without_pandas(), open_run(path) as run:
        report = analyze_run(run, rules, workers=workers, ray=ray, keep_parts=write)
        run_dir = run.path  # the cached run when `path` is a trace
        if write:  # while the run is open: the Parquet outputs read it on the same connection
            from .outputs import write_outputs

            try:
                write_outputs(report, run_dir / "analysis", run)
            except OSError as e:
                reason = "no space left on device" if e.errno == errno.ENOSPC else " ".join((e.strerror or str(e)).split())[:200]
                report.not_saved = f"{run_dir / 'analysis'}: could not save the analysis ({reason})"
    return report
