"""Utilisation: FLOPs and bytes per operator, kernel, line and step; achieved FLOP/s, MFU, roofline.

Definitions (docs/METRICS.md, "Utilisation"):
- An operator's work (flops, bytes) comes from analyzers/flops.py (recorded, else estimated).
- Work is counted once, at the outermost operator that has any on its thread (`aten::linear`,
  not also the `aten::addmm` inside it): `counted = true`.
- Device work inherits its counted operator's FLOPs and bytes, split across the operator's
  kernels by duration; memcpy and memset carry none.
- Achieved FLOP/s of a kernel name: its FLOPs over its summed duration; of a step: the step's
  counted FLOPs over the step's duration.
- MFU of a step: the step's counted FLOPs / (step duration x the device's peak for the dtype that
  carries most FLOPs). Unknown devices and CPUs have no peak: MFU is null, never guessed, and
  `mfu_missing` says why (no shapes recorded, device not named or not in the table, no steps).
- Device: the architecture the rank ran on, and how the trace shows it (peaks.detect: the device
  name, else the compute capability in deviceProperties, else the kernel names).
- Arithmetic intensity: FLOPs / bytes; roofline bound: min(peak FLOP/s, intensity x peak bytes/s);
  efficiency: achieved / bound.

Must not: decide what is a problem (rules/device_underuse.py does) or render anything.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from bisect import bisect_right
from dataclasses import dataclass, field

from ..errors import InputError
from ..store import Run
from ..vocab import CONV_OPS, sql_literal
from . import flops as F
from . import peaks as P
from .metrics import STEPS, device_events_lost, no_device_words, rank_entry
from .rank_rows import RankQuery, prepared_rows
from .rank_rows import rows as rank_rows

_KNOWN_SQL = ", ".join(sql_literal(n) for n in sorted(F.KNOWN))

_OPS_WHERE = (f"""kind = 'cpu_op' AND ((name IN ({_KNOWN_SQL}) AND contains(args, '"Input Dims"')) OR contains(args, '"flops"'))""")
OPS = RankQuery(
    "work_ops", f"SELECT event_id, pid, tid, ts_ns, dur_ns, name, args, step, source_frame_id, pass FROM events WHERE rank = ? AND {_OPS_WHERE} "
                "ORDER BY pid, tid, ts_ns, dur_ns DESC, event_id",
    f"SELECT rank, event_id, pid, tid, ts_ns, dur_ns, name, args, step, source_frame_id, pass FROM events WHERE {_OPS_WHERE} "
    "ORDER BY rank, pid, tid, ts_ns, dur_ns DESC, event_id")
"""Operators that can have work (`_rank_work`), in each thread's time order, outer operator first."""
KERNELS = RankQuery(
    "work_kernels", "SELECT k.event_id, k.name, k.dur_ns, k.device, r.pid, r.tid, r.ts_ns, k.step FROM events k "
                    "JOIN events r ON r.event_id = k.launch_id AND r.rank = k.rank WHERE k.rank = ? AND k.kind = 'kernel' ORDER BY k.event_id",
    "SELECT k.rank, k.event_id, k.name, k.dur_ns, k.device, r.pid, r.tid, r.ts_ns, k.step FROM events k "
    "JOIN events r ON r.event_id = k.launch_id AND r.rank = k.rank WHERE k.kind = 'kernel' ORDER BY k.rank, k.event_id")
"""Kernels with their launch's thread and time (`_kernels_of`)."""
KERNEL_NAMES = RankQuery(
    "arch_kernel_names", f"SELECT name, count(*) FROM events WHERE rank = ? AND kind = 'kernel' "
                         f"AND regexp_matches(name, {sql_literal(P.KERNELS_PATTERN)}) GROUP BY name ORDER BY 2 DESC, name",
    f"SELECT rank, name, count(*) FROM events WHERE kind = 'kernel' "
    f"AND regexp_matches(name, {sql_literal(P.KERNELS_PATTERN)}) GROUP BY rank, name ORDER BY rank, 3 DESC, name")
"""Kernel names that tell the architecture (`detect_device`), the most called first (peaks.detect
quotes the first of the architecture it finds as its example)."""
RANK_QUERIES = (OPS, KERNELS, KERNEL_NAMES)
"""The per-rank queries of the utilisation figures, which the engine runs once per batch of ranks (rank_rows.py)."""

_ARGS_NAMED = ("SELECT count(*) FROM (SELECT 1 FROM events WHERE rank = ? AND kind = 'cpu_op' "
               """AND (contains(args, '"Input') OR contains(args, '"flops"')) LIMIT 1)""")
"""An operator's args name its inputs (`Input Dims`, `Input type`, ...) or its flops: the first
found ends the read."""


def args_named(run: Run, rank: int) -> bool:
    """Whether any operator of the rank has args naming its inputs or flops (`_ARGS_NAMED`), read
    once and kept on `run`. False (a trace recorded without shapes) answers at once what OPS,
    `mfu_missing` and precision's TYPED would each read every operator's args for (0.2 s of CPU
    each on a 1M-event rank); True costs a read up to the first such operator, and they read as before."""
    kept = run.prepared.setdefault("op_args_named", {})
    if int(rank) not in kept:
        kept[int(rank)] = bool(run.sql(_ARGS_NAMED, [int(rank)]).fetchone()[0])
    return kept[int(rank)]


def rows_if_args_named(run: Run, query: RankQuery, rank: int) -> list:
    """The rank's rows of `query`, a read of the operators' args (OPS, precision's TYPED): the rows a
    batch prepared, else none where no operator's args name inputs or flops (`args_named`)."""
    if prepared_rows(run, query, rank) is None and not args_named(run, rank):
        return []
    return rank_rows(run, query, rank)


@dataclass
class PeakSettings:
    """The peak table and the user's overrides in force for one analysis (see `peaks_in_force`)."""

    table: tuple[P.Peak, ...] = P.PEAKS
    override: dict = field(default_factory=dict)  # tflops, gbps, dtype
    cache: dict = field(default_factory=dict)  # (run path, rank) -> RankWork


_SETTINGS: contextvars.ContextVar[PeakSettings | None] = contextvars.ContextVar("neuron_explorer_peaks", default=None)


@contextlib.contextmanager
def peaks_in_force(table: tuple[P.Peak, ...] = P.PEAKS, override: dict | None = None):
    """Within the block, the summary and the rules use this peak table and these overrides (the
    CLI's --peak-tflops, --peak-gbps, --peaks FILE), and compute each rank's work once."""
    token = _SETTINGS.set(PeakSettings(table, {k: v for k, v in (override or {}).items() if v is not None}))
    try:
        yield
    finally:
        _SETTINGS.reset(token)


def peaks_from_options(*, tflops: float | None = None, gbps: float | None = None, dtype: str | None = None, file=None):
    """`peaks_in_force` from the CLI's options, checked first (a bad value is a one-line error)."""
    if dtype is not None and dtype not in ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8"):
        raise InputError("--peak-dtype", f"must be one of fp64, fp32, tf32, bf16, fp16, fp8, not {dtype!r}")
    table = P.load_file(file) if file is not None else P.PEAKS
    P.override(None, tflops=tflops, gbps=gbps, dtype=dtype)  # validates the figures
    return peaks_in_force(table, {"tflops": tflops, "gbps": gbps, "dtype": dtype if tflops is not None else None})


_DEFAULT = PeakSettings()  # the built-in table, no overrides: shared by every analysis that sets none


def _settings() -> PeakSettings:
    return _SETTINGS.get() or _DEFAULT


@dataclass
class RankWork:
    """The work of one rank: counted operators with their kernels, and the device's peak."""

    ops: list[dict]
    kernels: list[dict]
    peak: P.Peak | None
    device_name: str | None
    detected: P.Detected | None = None


def device_name(run: Run, rank: int) -> str | None:
    """The name of the device the rank's device work ran on, as the manifest names it (the
    importer's `devices_used`, else the device properties with the same id)."""
    for entry in run.manifest.get("ranks", []):
        if int(entry.get("rank", 0)) != rank:
            continue
        props = [p for p in (entry.get("device_properties") or []) if isinstance(p, dict)]
        named = {p.get("id"): p.get("name") for p in props if p.get("name")}
        used = entry.get("devices_used") or [{"device": d, "name": named.get(d)} for d in entry.get("devices") or []]
        for d in used:
            if d.get("name"):
                return d["name"]
        if used and len(set(named.values())) == 1:  # one device model listed: the job's
            return next(iter(named.values()))
    return None


def detect_device(run: Run, rank: int, name: str | None) -> P.Detected:
    """The rank's architecture (peaks.detect) from its device name, deviceProperties and, only when
    those tell nothing, the names of its kernels."""
    entry = rank_entry(run, rank)
    used = {d.get("device") for d in entry.get("devices_used") or []} | set(entry.get("devices") or [])
    props = [p for p in (entry.get("device_properties") or []) if isinstance(p, dict)]
    props = [p for p in props if p.get("id") in used] or props
    found = P.detect(name, props)
    if found.arch is None and entry.get("devices"):
        counts = dict(rank_rows(run, KERNEL_NAMES, rank))
        found = P.detect(name, props, counts) if counts else found
    return found


def rank_work(run: Run, rank: int) -> RankWork:
    """Counted operators and kernels of a rank, with the device's peak (computed once per analysis)."""
    settings = _settings()
    key = (str(run.path), run.manifest.get("created"), rank)  # a re-imported run at the same path is new work
    if key not in settings.cache:
        if len(settings.cache) >= 64:
            settings.cache.clear()
        settings.cache[key] = _rank_work(run, rank, settings)
    return settings.cache[key]


def _rank_work(run: Run, rank: int, settings: PeakSettings) -> RankWork:
    # only operators that can have work: flops.op_work estimates from the input shapes (a trace
    # recorded without record_shapes has none, and parsing every operator's args costs seconds)
    rows = rows_if_args_named(run, OPS, rank)
    ops, open_until = [], {}
    for i, (event_id, pid, tid, ts, dur, name, args, step, frame, pass_) in enumerate(rows):
        track = (pid, tid)
        if open_until.get(track, -1) > ts:  # inside a counted operator: its work is already there
            continue
        work = F.op_work(name, args)
        if work is not None and work[3].startswith("estimated (") and name in CONV_OPS:
            work = F.op_work(name, args, _next_input_shape(rows, i)) or work
        if work is None:
            continue
        flops, nbytes, dtype, how = work
        open_until[track] = ts + max(dur, 0)
        ops.append({"event_id": event_id, "pid": pid, "tid": tid, "ts_ns": ts, "dur_ns": dur, "name": name, "flops": flops,
                    "bytes": nbytes, "dtype": dtype, "how": how, "step": step, "source_frame_id": frame, "pass": pass_,
                    "device_ns": 0, "kernels": 0})
    kernels = _kernels_of(run, rank, ops)
    name = device_name(run, rank)
    peak = P.match(name, settings.table) if name else None
    if settings.override:
        peak = P.override(peak, **settings.override)
    return RankWork(ops=ops, kernels=kernels, peak=peak, device_name=name, detected=detect_device(run, rank, name))


def _next_input_shape(rows: list, i: int) -> list | None:
    """The first input of 3 or more dimensions of the operators after row i ends on the same
    thread (what a convolution's output feeds, e.g. its batch norm), from rows sorted by thread and
    time; flops.py uses it only when its batch and channels match the convolution's output."""
    _, pid, tid, ts, dur, *_ = rows[i]
    end = ts + max(dur, 0)
    for j in range(i + 1, min(i + 40, len(rows))):
        _, p2, t2, ts2, _, _, args2, *_ = rows[j]
        if (p2, t2) != (pid, tid):
            return None
        if ts2 >= end:
            try:
                dims = (json.loads(args2) or {}).get("Input Dims") or []
            except (TypeError, ValueError):
                continue
            if dims and isinstance(dims[0], list) and len(dims[0]) >= 3:  # skip scalar bookkeeping (num_batches_tracked += 1)
                return dims[0]
    return None


def _kernels_of(run: Run, rank: int, ops: list[dict]) -> list[dict]:
    """Kernels launched inside a counted operator, with their share of its work (by duration)."""
    if not ops:
        return []
    rows = rank_rows(run, KERNELS, rank)
    if not rows or not ops:
        return []
    by_track: dict[tuple, tuple[list[int], list[int], list[int]]] = {}
    for i, o in enumerate(ops):
        by_track.setdefault((o["pid"], o["tid"]), ([], [], []))
        starts, ends, idx = by_track[(o["pid"], o["tid"])]
        starts.append(o["ts_ns"])
        ends.append(o["ts_ns"] + max(o["dur_ns"], 0))
        idx.append(i)
    tracks = by_track  # starts in time order: bisect them
    out = []
    for event_id, name, dur, device, pid, tid, launch_ts, step in rows:
        t = tracks.get((pid, tid))
        if t is None:
            continue
        starts, ends, idx = t
        p = bisect_right(starts, launch_ts) - 1
        if p < 0 or launch_ts >= ends[p]:
            continue
        op = ops[idx[p]]
        op["device_ns"] += max(dur, 0)
        op["kernels"] += 1
        out.append({"event_id": event_id, "name": name, "dur_ns": dur, "device": device, "op": idx[p], "step": step})
    for k in out:
        op = ops[k["op"]]
        share = (k["dur_ns"] / op["device_ns"]) if op["device_ns"] else 1.0 / max(op["kernels"], 1)
        k["flops"], k["bytes"] = op["flops"] * share, op["bytes"] * share
        k["op_name"], k["dtype"] = op["name"], op["dtype"]
    return out


def _main_dtype(ops: list[dict]) -> str | None:
    per: dict[str, float] = {}
    for o in ops:
        if o["dtype"]:
            per[o["dtype"]] = per.get(o["dtype"], 0.0) + o["flops"]
    return max(per, key=per.get) if per else None


def roofline(peak: P.Peak | None, dtype: str | None, flops: float, nbytes: float, dur_ns: int) -> dict:
    """Achieved figures of some work and where it sits under the device's roofline."""
    achieved = flops / (dur_ns / 1e9) if dur_ns > 0 else None
    gbs = nbytes / (dur_ns / 1e9) / 1e9 if dur_ns > 0 else None
    intensity = flops / nbytes if nbytes else None
    peak_f = peak.flops_per_s(dtype) if peak else None
    bound = None
    if peak_f and intensity is not None and peak and peak.gbps:
        bound = min(peak_f, intensity * peak.gbps * 1e9)
    elif peak_f:
        bound = peak_f
    return {"tflops_per_s": achieved / 1e12 if achieved is not None else None, "gb_per_s": gbs,
            "intensity_flops_per_byte": intensity, "bound_tflops_per_s": bound / 1e12 if bound else None,
            "efficiency": (achieved / bound) if (achieved is not None and bound) else None,
            "memory_bound": (intensity is not None and peak_f is not None and peak is not None and peak.gbps is not None
                             and intensity * peak.gbps * 1e9 < peak_f)}


def kernel_table(work: RankWork, limit: int = 20) -> list[dict]:
    """Per kernel name: FLOPs, bytes, time, achieved TFLOP/s and GB/s, intensity, roofline bound."""
    per: dict[str, dict] = {}
    for k in work.kernels:
        r = per.setdefault(k["name"], {"kernel": k["name"], "op": k["op_name"], "dtype": k["dtype"], "calls": 0, "flops": 0.0,
                                       "bytes": 0.0, "dur_ns": 0})
        r["calls"] += 1
        r["flops"] += k["flops"]
        r["bytes"] += k["bytes"]
        r["dur_ns"] += max(k["dur_ns"], 0)
    rows = sorted(per.values(), key=lambda r: (-r["dur_ns"], r["kernel"]))[:limit]
    for r in rows:
        r.update(roofline(work.peak, r["dtype"], r["flops"], r["bytes"], r["dur_ns"]))
    return rows


def _op_time(o: dict) -> int:
    """The time an operator's work took: its kernels' summed duration when it launched any, else its
    own (CPU) duration."""
    return int(o["device_ns"]) if o["kernels"] else max(int(o["dur_ns"]), 0)


def group_table(work: RankWork, key: str, limit: int = 10) -> list[dict]:
    """Counted operators grouped by `key` ("name": per operator name; "source_frame_id": per source
    line): calls, FLOPs, bytes, time (`_op_time` summed), achieved TFLOP/s and GB/s, intensity and
    the roofline bound; heaviest time first."""
    per: dict = {}
    for o in work.ops:
        k = o[key]
        if k is None:
            continue
        r = per.setdefault(k, {key: k, "dtype": o["dtype"], "calls": 0, "flops": 0.0, "bytes": 0.0, "dur_ns": 0, "on_device": False})
        r["calls"] += 1
        r["flops"] += o["flops"]
        r["bytes"] += o["bytes"]
        r["dur_ns"] += _op_time(o)
        r["on_device"] = r["on_device"] or bool(o["kernels"])
    rows = sorted(per.values(), key=lambda r: (-r["dur_ns"], str(r[key])))[:limit]
    for r in rows:
        r.update(roofline(work.peak if r["on_device"] else None, r["dtype"], r["flops"], r["bytes"], r["dur_ns"]))
    return rows


def step_table(run: Run, rank: int, work: RankWork) -> list[dict]:
    """Per profiler step: counted FLOPs, achieved TFLOP/s over the step's duration, and MFU."""
    steps = [(step, dur) for step, _, dur in rank_rows(run, STEPS, rank)]
    dtype = _main_dtype(work.ops)
    peak_f = work.peak.flops_per_s(dtype) if work.peak else None
    per = {}
    for o in work.ops:
        if o["step"] is not None:
            per[o["step"]] = per.get(o["step"], 0.0) + o["flops"]
    out = []
    for step, dur in steps:
        f = per.get(step, 0.0)
        achieved = f / (dur / 1e9) if dur else None
        out.append({"step": step, "dur_ns": dur, "flops": f, "tflops_per_s": achieved / 1e12 if achieved is not None else None,
                    "mfu": (achieved / peak_f) if (achieved is not None and peak_f) else None})
    return out


def rank_utilisation(run: Run, rank: int) -> dict:
    """The `utilisation` entry of a rank's summary (report.json): see the module docstring."""
    work = rank_work(run, rank)
    steps = step_table(run, rank, work)
    mfus = sorted(s["mfu"] for s in steps if s["mfu"] is not None)
    dtype = _main_dtype(work.ops)
    mfu_median = mfus[len(mfus) // 2] if mfus else None
    return {
        "device_name": work.device_name,
        "device": work.detected.to_dict() if work.detected else None,
        "peak": work.peak.to_dict() if work.peak else None,
        "dtype": dtype,
        "flops": float(sum(o["flops"] for o in work.ops)),
        "bytes": float(sum(o["bytes"] for o in work.ops)),
        "ops_counted": len(work.ops),
        "ops_estimated": sum(1 for o in work.ops if o["how"] != "recorded"),
        "steps": steps,
        "mfu_median": mfu_median,
        "mfu_missing": None if mfu_median is not None else mfu_missing(run, rank, work, steps, dtype),
        "top_kernels": kernel_table(work, limit=10),
        "top_ops": [{"op": r.pop("name"), **r} for r in group_table(work, "name")],
        "top_lines": group_table(work, "source_frame_id"),
    }


def mfu_missing(run: Run, rank: int, work: RankWork, steps: list[dict], dtype: str | None) -> str:
    """Why a rank has no MFU, every reason that applies, with what to do about each."""
    entry = rank_entry(run, rank)
    if not entry.get("devices"):
        lost = device_events_lost(entry)
        if lost:
            return f"{no_device_words(lost)}: MFU compares device work with a device's peak"
        return "a CPU-only run: MFU compares device work with a device's peak"
    reasons = []
    if not work.ops:
        # whether any operator has shapes: the first one found ends the read of the args (a JSON column)
        shapes = args_named(run, rank) and run.sql("SELECT count(*) FROM (SELECT 1 FROM events WHERE rank = ? AND kind = 'cpu_op' "
                                                   "AND contains(args, '\"Input Dims\"') LIMIT 1)", [rank]).fetchone()[0]
        reasons.append("no operator shapes recorded (record with torch.profiler.profile(record_shapes=True))" if not shapes else
                       "no operator whose FLOPs are known (matmul, convolution, attention) has recorded shapes")
    if work.peak is None:
        arch = work.detected.arch if work.detected else None
        if work.device_name:
            reasons.append(f"no peak known for {work.device_name} (give --peak-tflops and --peak-dtype, or --peaks FILE)")
        else:
            seen = f" (its kernels show {arch.name}, whose models' peaks differ)" if arch else ""
            reasons.append(f"the trace does not name the device{seen}: give --peak-tflops and --peak-dtype")
    elif dtype and not work.peak.flops_per_s(dtype):
        reasons.append(f"the peak in force has no {dtype} figure, the dtype of most FLOPs (give --peak-tflops with --peak-dtype {dtype})")
    if not steps:
        reasons.append("no profiler steps (ProfilerStep#N ranges), and MFU is a median over steps: "
                       "the achieved TFLOP/s over the analysed window stands in for it")
    return "; ".join(reasons) or "no step has counted FLOPs"


WORK_COLUMNS = ("rank", "event_id", "kind", "name", "op_event_id", "step", "source_frame_id", "dur_ns", "flops", "bytes",
                "dtype", "how")
"""Columns of `analysis/work.parquet` (docs/METRICS.md "Utilisation"): one row per counted operator
(`kind = 'op'`) and per kernel that inherits its work (`kind = 'kernel'`, `op_event_id` its operator)."""


def work_rows(work: RankWork, rank: int) -> list[dict]:
    """The rank's counted operators and the kernels that inherit their work, as WORK_COLUMNS rows:
    the same figures the summary sums, so SQL over `analysis/work.parquet` adds up to them."""
    rows = [{"rank": rank, "event_id": o["event_id"], "kind": "op", "name": o["name"], "op_event_id": o["event_id"],
             "step": o["step"], "source_frame_id": o["source_frame_id"], "dur_ns": o["dur_ns"], "flops": float(o["flops"]),
             "bytes": float(o["bytes"]), "dtype": o["dtype"], "how": o["how"]} for o in work.ops]
    for k in work.kernels:
        op = work.ops[k["op"]]
        rows.append({"rank": rank, "event_id": k["event_id"], "kind": "kernel", "name": k["name"], "op_event_id": op["event_id"],
                     "step": k["step"], "source_frame_id": op["source_frame_id"], "dur_ns": k["dur_ns"],
                     "flops": float(k["flops"]), "bytes": float(k["bytes"]), "dtype": op["dtype"], "how": op["how"]})
    return rows
