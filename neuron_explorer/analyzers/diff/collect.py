"""Reading one side of a comparison: per steady step of a run (or of each recording of a run set),
the job's step time, the time of each source line, module, operator and kernel, the calls made,
and the utilisation.

Steps are metrics.steady_steps's; device work and steps are vocab.py's; a line's CPU time is
analyzers/lines.py's `cpu_ns` (on its `own_ns_sql`), per step.

Must not: select steps itself, compare the two sides or decide anything.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from ... import vocab
from ...store import Run, open_run
from .. import job
from ..lines import own_ns_sql
from ..metrics import StepSelection, steady_steps
from ..stats import median
from .match import line_keys, rekey_lines

EPOCH_2001_NS = 10**18
"""Step times past this are wall-clock (epoch) nanoseconds, comparable between recordings."""


@dataclass
class Side:
    """One side of a comparison: one run, or several recordings of the same job (a run set)."""
    paths: list[str]
    sels: list[StepSelection]
    times: list[list[float]]  # per recording: the job's time per steady step
    vals: dict  # (type, key, metric) -> time per steady step, recordings one after the other
    disp: dict  # a source line's matching key -> its 'file:line'
    util: dict
    job: dict  # job.identity of the first recording
    hosts: list = field(default_factory=list)  # per recording: the manifest's host (None when unknown)
    spans: list = field(default_factory=list)  # per recording: (first step start, last step end) in epoch ns, or None
    counts: dict = field(default_factory=dict)  # (metric, (name, inputs)) -> calls per steady step (calls_per_step), recordings one after the other
    call_ns: dict = field(default_factory=dict)  # (metric, call) -> their time per steady step, likewise
    step_ranks: list = field(default_factory=list)  # per steady step (recordings one after the other): its recording's ranks

    @property
    def pooled_times(self) -> list[float]:
        return [x for t in self.times for x in t]


def run_set(path: Path | str) -> list[Path]:
    """The runs a diff argument names: a run (or trace) itself, or a folder whose subfolders are
    runs — several recordings of the same job (`neuron-explorer record --runs N`), in name order."""
    p = Path(path)
    if p.is_dir() and not (p / "manifest.json").exists():
        subs = sorted((d for d in p.iterdir() if (d / "manifest.json").is_file()), key=lambda d: (len(d.name), d.name))
        if subs:
            return subs
    return [p]


def read_side(path: Path | str) -> Side:
    """One side of a comparison, every recording that `path` names (run_set), their steady steps
    one after the other; a key absent from a recording is 0 in its steps."""
    paths = run_set(path)
    sels, times, vals, disp, utils, ident, hosts, spans, counts, call_ns, step_ranks = [], [], {}, {}, [], None, [], [], {}, {}, []
    offset = 0
    for rp in paths:
        with open_run(rp) as run:
            hosts.append(run.manifest.get("host") or None)
            spans.append(wall_span(run.manifest))
            sel, step_times = step_samples(run)
            calls, calls_ns = calls_per_step(run, sel.used)
            values, display = rekey_lines(per_step(run, sel.used, calls_ns), line_keys(run))
            utils.append(step_utilisation(run, sel.used))
            ident = ident or job.identity(run)
            ranks = len(run.manifest.get("ranks") or []) or 1
        n = len(step_times)
        for whole, part in ((vals, values), (counts, calls), (call_ns, calls_ns)):  # one vector per key over every recording's steps
            for key in set(whole) | set(part):
                whole[key] = whole.get(key, [0.0] * offset) + part.get(key, [0.0] * n)
        step_ranks += [ranks] * n
        offset += n
        sels.append(sel)
        times.append(step_times)
        disp.update(display)
    util = utils[0] if len(utils) == 1 else merge_util(utils)
    return Side([str(p) for p in paths], sels, times, vals, disp, util, ident, hosts, spans, counts, call_ns, step_ranks)


def step_samples(run: Run) -> tuple[StepSelection, list[float]]:
    """The steady-state selection and the job's time per used step (the slowest rank's duration of
    that step); a run with no steps has one sample, its span."""
    sel = steady_steps(run)
    if sel.steps:
        return sel, sel.used_durations_ns
    span = run.sql("SELECT max(ts_ns + dur_ns) - min(ts_ns) FROM events").fetchone()[0]
    return sel, [float(span or 0)]


def _step_filter(steps: list[int]) -> tuple[str, str, dict[int, int]]:
    """(step column, event filter, step -> index) over `events e` for `steps`; a run without steps
    is one step of index 0, its whole run."""
    if steps:
        return "e.step", vocab.in_steps(steps, "e"), {s: i for i, s in enumerate(steps)}
    return "0", "TRUE", {0: 0}


def line_cpu_ns_sql(steps: list[int]) -> str:
    """Per source line (frame) and step: the line's CPU time as analyzers/lines.py defines it
    (`cpu_ns`: the durations of the line's outermost CPU operators, so an operator inside another
    counts once, in the outer one, and what runs inside an operator without being one, a kernel
    launch, still counts). It is lines.py's `own_ns_sql` over the CPU operators, the part of a
    statement's own time that `cpu_ns` is; the line's Python-level time (`python_ns`) is not
    compared. Rows (frame_id, step, ns).

    analyzers/lines.py should own this per-step form; till then it is written here on its
    `own_ns_sql`, so that the definition stays lines.py's."""
    step_col, where, _ = _step_filter(steps)
    return (f"SELECT e.source_frame_id, {step_col}, sum({own_ns_sql(device=False)}) FROM events e "
            f"WHERE e.kind = 'cpu_op' AND e.source_frame_id IS NOT NULL AND {where} GROUP BY 1, 2")


def per_step(run: Run, steps: list[int], call_ns: dict) -> dict[tuple[str, str, str], list[float]]:
    """(type, key, metric) → time per step, one value per step of the run (0 where absent).
    Source lines: their CPU time (line_cpu_ns_sql, analyzers/lines.py's `cpu_ns`) and device work; modules: the self
    time of their operators and their device work; operators' device time: the device work they
    launched; operators' self time and kernels' device time: the calls' (`call_ns`, from
    calls_per_step over the same steps) summed by name."""
    step_col, where, index = _step_filter(steps)
    n = len(index)
    self_ns = (f"SELECT {{key}}, {step_col}, sum(e.self_ns) FROM events e "
               f"WHERE e.kind = 'cpu_op' AND {{key}} IS NOT NULL AND {where} GROUP BY 1, 2")
    device_ns = (f"SELECT {{key}}, {step_col}, sum(e.dur_ns) FROM events e {{join}} "
                 f"WHERE {vocab.device_work('e')} AND {{key}} IS NOT NULL AND {where} GROUP BY 1, 2")
    queries = {
        ("operator", "device"): device_ns.format(key=vocab.charged_op("e", "o"), join="LEFT JOIN events o ON e.op_id = o.event_id"),
        ("module", "cpu"): self_ns.format(key="e.module_path"),
        ("module", "device"): device_ns.format(key="e.module_path", join=""),
        # lines by the statement the time belongs to (analyzers/lines.py: backward work on its forward statement)
        ("source_line", "cpu"): line_cpu_ns_sql(steps),
        ("source_line", "device"): device_ns.format(key="e.source_frame_id", join=""),
    }
    out: dict[tuple[str, str, str], list[float]] = {}
    for (type_, metric), sql in queries.items():
        for key, step, ns in run.sql(sql).fetchall():
            if step not in index:
                continue
            vec = out.setdefault((type_, str(key), metric), [0.0] * n)
            vec[index[step]] += float(ns)
    for (metric, (name, _)), ns in call_ns.items():
        vec = out.setdefault(("operator" if metric == "cpu" else "kernel", name, metric), [0.0] * n)
        for i, x in enumerate(ns):
            vec[i] += x
    return out


def calls_per_step(run: Run, steps: list[int]) -> tuple[dict, dict]:
    """(metric, (name, inputs)) → in each of `steps`, in their order, every rank: how many such
    calls, and their time. A call is an operator (metric 'cpu', kind 'cpu_op', timed by its self
    time) or device work ('device', its device time) of one name with the same inputs
    (vocab.call_inputs: an operator's input shapes and types, a kernel's grid and block). A run without steps gives
    one value per call, its whole run (as step_samples gives one time, its span)."""
    step_col, where, index = _step_filter(steps)
    inputs = vocab.call_inputs('e')
    sql = (f"SELECT CASE WHEN e.kind = 'cpu_op' THEN 'cpu' ELSE 'device' END, e.name, {inputs}, {step_col}, count(*), "
           f"sum(CASE WHEN e.kind = 'cpu_op' THEN e.self_ns ELSE e.dur_ns END) FROM events e "
           f"WHERE (e.kind = 'cpu_op' OR {vocab.device_work('e')}) AND e.name IS NOT NULL AND {where} GROUP BY 1, 2, 3, 4")
    counts: dict[tuple[str, tuple[str, str]], list[float]] = {}
    times: dict[tuple[str, tuple[str, str]], list[float]] = {}
    for metric, name, call_inputs, step, n, ns in run.sql(sql).fetchall():
        if step in index:
            call = (metric, (str(name), call_inputs))
            counts.setdefault(call, [0.0] * len(index))[index[step]] += float(n)
            times.setdefault(call, [0.0] * len(index))[index[step]] += float(ns or 0)
    return counts, times


def wall_span(manifest: dict) -> tuple[int, int] | None:
    """(start of the first step, end of the last) of a recording, in epoch ns; None when its steps
    are not on a wall clock."""
    bounds = [(int(s["ts_ns"]), int(s["ts_ns"]) + int(s.get("dur_ns") or 0)) for r in manifest.get("ranks", [])
              for s in r.get("steps", []) if s.get("ts_ns") is not None]
    start = min((a for a, _ in bounds), default=None)
    if start is None or start < EPOCH_2001_NS:
        return None
    return start, max(b for _, b in bounds)


def step_utilisation(run: Run, steps: list[int]) -> dict:
    """MFU and achieved TFLOP/s over the given (steady) steps, from analyzers/utilisation.py's per-rank
    step figures: per step the mean over ranks (ranks without a device peak have no MFU), then the
    median over steps. `mfu_median` is null when no rank's device has a known peak; `mfu_missing`:
    the ranks' reasons for no MFU (utilisation.mfu_missing), distinct."""
    from ..utilisation import rank_utilisation

    keep = set(steps)
    mfu: dict[int, list[float]] = defaultdict(list)
    tflops: dict[int, list[float]] = defaultdict(list)
    devices, dtypes, missing = set(), set(), set()
    for (rank,) in run.sql("SELECT DISTINCT rank FROM steps ORDER BY 1").fetchall():
        u = rank_utilisation(run, rank)
        devices.add(u["device_name"])
        dtypes.add(u["dtype"])
        missing.add(u.get("mfu_missing"))
        for s in u["steps"]:
            if s["step"] in keep:
                if s["mfu"] is not None:
                    mfu[s["step"]].append(s["mfu"])
                if s["tflops_per_s"] is not None:
                    tflops[s["step"]].append(s["tflops_per_s"])

    def median_of_means(per_step: dict[int, list[float]]) -> float | None:
        vals = sorted(sum(v) / len(v) for v in per_step.values() if v)
        return None if not vals else (vals[len(vals) // 2] if len(vals) % 2 else (vals[len(vals) // 2 - 1] + vals[len(vals) // 2]) / 2)

    return {"mfu_median": median_of_means(mfu), "tflops_per_s_median": median_of_means(tflops), "steps": len(keep),
            "devices": sorted(d for d in devices if d), "dtypes": sorted(d for d in dtypes if d),
            "mfu_missing": sorted(m for m in missing if m)}


def merge_util(utils: list[dict]) -> dict:
    """Several recordings' utilisation: the median over recordings of each one's medians."""
    def med(key):
        vals = [u[key] for u in utils if u.get(key) is not None]
        return median(vals) if vals else None
    return {"mfu_median": med("mfu_median"), "tflops_per_s_median": med("tflops_per_s_median"),
            "steps": sum(u["steps"] for u in utils), "devices": sorted({d for u in utils for d in u["devices"]}),
            "dtypes": sorted({d for u in utils for d in u["dtypes"]}),
            "mfu_missing": sorted({m for u in utils for m in u.get("mfu_missing", [])})}


def recording_pairs(base: Side, test: Side) -> list[tuple[int, int]] | None:
    """Pairs (base index, test index) when the two run sets were recorded in pairs: as many
    recordings on each side (at least 2), all on one host, and in the order of their start times
    every two consecutive recordings are one base and one test (recorded side by side, or one
    right after the other: ABAB, ABBA...). None otherwise. Pairing cancels what the machine did
    while each pair ran (docs/COMPARE.md "Recordings made in pairs")."""
    n = len(base.paths)
    if n < 2 or n != len(test.paths) or None in base.spans + test.spans:
        return None
    if {os.path.realpath(p) for p in base.paths} & {os.path.realpath(p) for p in test.paths}:
        return None  # a run compared with itself is not a pair of recordings
    hosts = set(base.hosts + test.hosts)
    if len(hosts) != 1 or None in hosts:
        return None
    order = sorted([(span[0], "base", i) for i, span in enumerate(base.spans)]
                   + [(span[0], "test", i) for i, span in enumerate(test.spans)])
    pairs = []
    for k in range(0, 2 * n, 2):
        first, second = order[k], order[k + 1]
        if first[1] == second[1]:
            return None
        pairs.append((first[2], second[2]) if first[1] == "base" else (second[2], first[2]))
    return pairs
