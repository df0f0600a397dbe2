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
import functools
import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..collectors.kineto_names import ARGS_NAMING_INPUTS
from ..errors import InputError
from ..store import Run
from ..vocab import CONV_OPS, is_comm_kernel_name, sql_literal
from . import flops as F
from . import peaks as P
from .metrics import STEPS, device_events_lost, no_device_words, rank_entry
from .rank_rows import RankQuery, prepared_rows
from .rank_rows import rows as rank_rows

_KNOWN_SQL = ", ".join(sql_literal(n) for n in sorted(F.KNOWN))

_OPS_WHERE = (f"""kind = 'cpu_op' AND ((name IN ({_KNOWN_SQL}) AND contains(args, '"Input Dims"')) OR contains(args, '"flops"'))""")
_SHAPE_ARGS = ("Input Dims", "Input type", "Concrete Inputs", "flops")
"""The args an operator's work is computed from (flops.op_work): the rest (ids, call stacks) differs
from call to call, these repeat every step."""
_OPS_SQL = ("SELECT {lead}event_id, coalesce(pid, {none}) AS pid_k, coalesce(tid, {none}) AS tid_k, ts_ns, dur_ns, name, "
            + ", ".join(f"w[{i + 1}]::VARCHAR AS a{i}" for i in range(len(_SHAPE_ARGS)))
            + ", step, source_frame_id, pass FROM (SELECT *, CASE WHEN json_valid(args) THEN json_extract(args, ["
            + ", ".join(sql_literal(f'$."{k}"') for k in _SHAPE_ARGS)
            + f"]) END AS w FROM events WHERE {{where}}{_OPS_WHERE}) ORDER BY {{lead}}pid, tid, ts_ns, dur_ns DESC, event_id")
_NONE = -(2**62)
"""A null pid or tid in OPS and KERNELS (a thread is the pair, nulls equal)."""
OPS = RankQuery("work_ops", _OPS_SQL.format(lead="", where="rank = ? AND ", none=_NONE),
                _OPS_SQL.format(lead="rank, ", where="", none=_NONE), arrow=True)
"""Operators that can have work (`_rank_work`), in each thread's time order, outer operator first,
with the args their work is computed from (`_SHAPE_ARGS`, as JSON text; null when absent)."""
KERNELS = RankQuery(
    "work_kernels", f"SELECT k.event_id, k.name, k.dur_ns, k.device, coalesce(r.pid, {_NONE}) AS pid_k, coalesce(r.tid, {_NONE}) AS tid_k, "
                    "r.ts_ns, k.step FROM events k JOIN events r ON r.event_id = k.launch_id AND r.rank = k.rank "
                    "WHERE k.rank = ? AND k.kind = 'kernel' ORDER BY k.event_id",
    f"SELECT k.rank, k.event_id, k.name, k.dur_ns, k.device, coalesce(r.pid, {_NONE}) AS pid_k, coalesce(r.tid, {_NONE}) AS tid_k, "
    "r.ts_ns, k.step FROM events k JOIN events r ON r.event_id = k.launch_id AND r.rank = k.rank "
    "WHERE k.kind = 'kernel' ORDER BY k.rank, k.event_id", arrow=True)
"""Kernels with their launch's thread and time (`_kernels_of`)."""
def _arch_unknown(run: Run, ranks: list[int]) -> bool:
    """Whether `detect_device` needs the kernel names of any of `ranks`: the device's name and
    properties in the manifest tell some rank's architecture nothing."""
    return any(_detect_from_manifest(run, r, device_name(run, r))[0].arch is None and rank_entry(run, r).get("devices") for r in ranks)


KERNEL_NAMES = RankQuery(
    "arch_kernel_names", f"WITH k AS MATERIALIZED (SELECT name, count(*) AS calls FROM events WHERE rank = ? AND kind = 'kernel' GROUP BY name) "
                         f"SELECT name, calls FROM k WHERE regexp_matches(name, {sql_literal(P.KERNELS_PATTERN)}) ORDER BY 2 DESC, name",
    f"WITH k AS MATERIALIZED (SELECT rank, name, count(*) AS calls FROM events WHERE kind = 'kernel' GROUP BY rank, name) "
    f"SELECT rank, name, calls FROM k WHERE regexp_matches(name, {sql_literal(P.KERNELS_PATTERN)}) ORDER BY rank, 3 DESC, name",
    when=_arch_unknown)
"""Kernel names that tell the architecture (`detect_device`), the most called first (peaks.detect
quotes the first of the architecture it finds as its example); read for a batch only where some
rank needs them. The pattern is matched once per distinct name of a rank, not once per kernel
(MATERIALIZED keeps DuckDB from pushing it below the grouping): 119 -> 57 ms for 128 ranks."""
RANK_QUERIES = (OPS, KERNELS, KERNEL_NAMES)
"""The per-rank queries of the utilisation figures, which the engine runs once per batch of ranks (rank_rows.py)."""

_ARGS_NAMED = ("SELECT count(*) FROM (SELECT 1 FROM events WHERE rank = ? AND kind = 'cpu_op' AND ("
               + " OR ".join(f"contains(args, {sql_literal(k)})" for k in ARGS_NAMING_INPUTS) + ") LIMIT 1)")
"""An operator's args name its inputs (`Input Dims`, `Input type`, ...) or its flops
(kineto_names.ARGS_NAMING_INPUTS): the first found ends the read."""


def args_named(run: Run, rank: int) -> bool:
    """Whether any operator of the rank has args naming its inputs or flops, as the importer and the
    collector found it (the rank's `op_args_named` in the manifest), else read (`_ARGS_NAMED`, a run
    written before they did), once and kept on `run`. False (a trace recorded without shapes, as
    torch.profiler records by default) answers at once what OPS, `mfu_missing` and precision's TYPED
    would each read every operator's args for (0.2 s of CPU each on a 1M-event rank); the read it
    takes, where the manifest does not say, is every operator's args (64 ms on a 1.45M-event rank)."""
    kept = run.prepared.setdefault("op_args_named", {})
    if int(rank) not in kept:
        known = args_named_known(run, rank)
        kept[int(rank)] = known if known is not None else bool(run.sql(_ARGS_NAMED, [int(rank)]).fetchone()[0])
    return kept[int(rank)]


def args_named_known(run: Run, rank: int) -> bool | None:
    """`args_named`'s answer for the rank where it is known without a read (the manifest's, or this
    analysis's), else None (nothing is read)."""
    got = run.prepared.get("op_args_named", {}).get(int(rank)) if run.prepared is not None else None
    if got is None:
        got = rank_entry(run, rank).get("op_args_named")
    return got if isinstance(got, bool) else None


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


class RankWork:
    """The work of one rank: counted operators and the kernels that inherit their work, as columns,
    and the device's peak.

    `op` and `kernel` are NumPy columns, one row per counted operator (in OPS's order) and per kernel
    inside one (in event id order): `op` has event_id, pid, tid, ts_ns, dur_ns, step and
    source_frame_id (`_NONE`: null), flops, bytes, device_ns (its kernels' summed duration), kernels
    (how many), and `name`, `dtype`, `how` and `pass` as codes into `text` (-1: null); `kernel` has
    event_id, dur_ns, device, step, `op` (its operator's row), flops, bytes (its share) and `name`
    (a code into `text`). `ops` and `kernels` give the same as one dict a row (for reading a few).
    `kernel_work`: `_kernel_totals` of the rank's launched kernels, "all" and "stepped" (launched in
    a profiler step)."""

    def __init__(self, op: dict, kernel: dict, text: list, peak: P.Peak | None, device_name: str | None,
                 detected: P.Detected | None = None, kernel_work: dict | None = None):
        self.op, self.kernel, self.text = op, kernel, text
        self.peak, self.device_name, self.detected = peak, device_name, detected
        self.kernel_work = kernel_work or _NO_KERNEL_WORK

    def _str(self, code: int) -> str | None:
        return self.text[code] if code >= 0 else None

    @property
    def ops(self) -> list[dict]:
        o = self.op
        return [{"event_id": int(o["event_id"][i]), "pid": _null(o["pid"][i]), "tid": _null(o["tid"][i]),
                 "ts_ns": int(o["ts_ns"][i]), "dur_ns": int(o["dur_ns"][i]), "name": self._str(o["name"][i]),
                 "flops": float(o["flops"][i]), "bytes": float(o["bytes"][i]), "dtype": self._str(o["dtype"][i]),
                 "how": self._str(o["how"][i]), "step": _null(o["step"][i]), "source_frame_id": _null(o["source_frame_id"][i]),
                 "pass": self._str(o["pass"][i]), "device_ns": int(o["device_ns"][i]), "kernels": int(o["kernels"][i])}
                for i in range(len(o["event_id"]))]

    @property
    def kernels(self) -> list[dict]:
        k, o = self.kernel, self.op
        return [{"event_id": int(k["event_id"][i]), "name": self._str(k["name"][i]), "dur_ns": int(k["dur_ns"][i]),
                 "device": _null(k["device"][i]), "op": int(k["op"][i]), "step": _null(k["step"][i]),
                 "flops": float(k["flops"][i]), "bytes": float(k["bytes"][i]),
                 "op_name": self._str(o["name"][k["op"][i]]), "dtype": self._str(o["dtype"][k["op"][i]])}
                for i in range(len(k["event_id"]))]

    def first_kernel(self, name: str) -> dict | None:
        """The first kernel called `name` (event_id) and its operator (op_event_id, how), if any."""
        at = np.flatnonzero(np.isin(self.kernel["name"], [i for i, t in enumerate(self.text) if t == name]))
        if not len(at):
            return None
        i = int(at[0])
        o = int(self.kernel["op"][i])
        return {"event_id": int(self.kernel["event_id"][i]), "op_event_id": int(self.op["event_id"][o]), "how": self._str(self.op["how"][o])}


def _null(v) -> int | None:
    v = int(v)
    return None if v == _NONE else v


_OP_INT = ("event_id", "pid", "tid", "ts_ns", "dur_ns", "step", "source_frame_id", "device_ns", "kernels", "name", "dtype", "how", "pass")
_KERNEL_INT = ("event_id", "dur_ns", "device", "step", "op", "name")


def _empty(names: tuple, floats: tuple = ("flops", "bytes")) -> dict:
    return {**{n: np.zeros(0, dtype=np.int64) for n in names}, **{n: np.zeros(0) for n in floats}}


def device_name(run: Run, rank: int) -> str | None:
    """The name of the device the rank's device work ran on, as the manifest names it (the
    importer's `devices_used`, else the device properties with the same id)."""
    entry = rank_entry(run, rank)
    props = [p for p in (entry.get("device_properties") or []) if isinstance(p, dict)]
    named = {p.get("id"): p.get("name") for p in props if p.get("name")}
    used = entry.get("devices_used") or [{"device": d, "name": named.get(d)} for d in entry.get("devices") or []]
    for d in used:
        if d.get("name"):
            return d["name"]
    if used and len(set(named.values())) == 1:  # one device model listed: the job's
        return next(iter(named.values()))
    return None


def _detect_from_manifest(run: Run, rank: int, name: str | None) -> tuple[P.Detected, list[dict]]:
    """peaks.detect from the device's name and the rank's deviceProperties alone, with those properties."""
    entry = rank_entry(run, rank)
    used = {d.get("device") for d in entry.get("devices_used") or []} | set(entry.get("devices") or [])
    props = [p for p in (entry.get("device_properties") or []) if isinstance(p, dict)]
    props = [p for p in props if p.get("id") in used] or props
    return P.detect(name, props, categories=entry.get("category_counts")), props


def detect_device(run: Run, rank: int, name: str | None) -> P.Detected:
    """The rank's architecture (peaks.detect) from its device name, deviceProperties and, only when
    those tell nothing, the names of its kernels."""
    found, props = _detect_from_manifest(run, rank, name)
    if found.arch is None and rank_entry(run, rank).get("devices"):
        counts = dict(rank_rows(run, KERNEL_NAMES, rank))
        found = P.detect(name, props, counts) if counts else found  # (the categories told nothing: _detect_from_manifest)
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
    # recorded without record_shapes has none, and reading every operator's args costs seconds)
    got = rows_if_args_named(run, OPS, rank)
    text: list = []
    op = _counted_ops(got, text) if len(got) else _empty(_OP_INT)
    kernel, kernel_work = _kernels_of(run, rank, op, text)
    name = device_name(run, rank)
    peak = P.match(name, settings.table) if name else None
    if settings.override:
        peak = P.override(peak, **settings.override)
    return RankWork(op=op, kernel=kernel, text=text, peak=peak, device_name=name, detected=detect_device(run, rank, name),
                    kernel_work=kernel_work)


def _codes(col, text: list) -> np.ndarray:
    """A text column's values as codes into `text` (appended to; -1: null)."""
    enc = col.combine_chunks().dictionary_encode() if hasattr(col, "combine_chunks") else col.dictionary_encode()
    base = len(text)
    text.extend(enc.dictionary.to_pylist())
    codes = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    return np.where(codes >= 0, codes + base, -1)


def _ints(col) -> np.ndarray:
    """An integer column as int64 (`_NONE`: null)."""
    return col.cast(pa.int64()).fill_null(_NONE).to_numpy().astype(np.int64, copy=False)


def _counted_ops(t, text: list) -> dict:
    """The counted operators of OPS's rows (`t`, an Arrow table): each distinct (name, shape args)
    is given its work once (`flops.op_work`; a training loop repeats the same few hundred every
    step), and an operator counts when it has work and is not inside one counted before it on its
    thread (the rows are each thread's in time order, outer first)."""
    name = _codes(t.column("name"), text)
    names_end = len(text)
    args = [t.column(f"a{i}").combine_chunks().dictionary_encode() for i in range(len(_SHAPE_ARGS))]
    values = [a.dictionary.to_pylist() for a in args]
    arg_codes = [a.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64) for a in args]
    key = np.zeros(len(name), dtype=np.int64)
    for c, size in [(name, len(text))] + [(c, len(v)) for c, v in zip(arg_codes, values)]:
        if len(key) and (int(key.max()) + 1) * (size + 1) >= 2**62:  # would overflow: renumber first
            key = np.unique(key, return_inverse=True)[1].astype(np.int64)
        key = key * (size + 1) + (c + 1)
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)

    def args_of(r: int) -> dict:
        return {k: json.loads(values[i][arg_codes[i][r]]) for i, k in enumerate(_SHAPE_ARGS) if arg_codes[i][r] >= 0}

    # each distinct operator's name and shape args as text (the codes of its first row, read as lists once)
    first_args = [[v[c] if c >= 0 else None for c in codes[first].tolist()] for v, codes in zip(values, arg_codes)]
    works = [_work_of(text[n], *a) for n, *a in zip(name[first].tolist(), *first_args)]
    has = np.array([w is not None for w in works], dtype=bool)
    ok = [w or (0.0, 0.0, None, "") for w in works]
    w_flops, w_bytes = np.array([w[0] for w in ok], dtype=np.float64), np.array([w[1] for w in ok], dtype=np.float64)
    w_dtype, w_how = _text_codes([w[2] for w in ok], text), _text_codes([w[3] for w in ok], text)
    pid, tid, ts, dur = _ints(t.column("pid_k")), _ints(t.column("tid_k")), _ints(t.column("ts_ns")), _ints(t.column("dur_ns"))
    end = ts + np.maximum(dur, 0)
    cand = np.flatnonzero(has[inv])
    new_track = np.ones(len(cand), dtype=bool)
    new_track[1:] = (pid[cand][1:] != pid[cand][:-1]) | (tid[cand][1:] != tid[cand][:-1])
    keep, open_until = [], -1
    for i, new, s, e in zip(cand.tolist(), new_track.tolist(), ts[cand].tolist(), end[cand].tolist()):
        if new:
            open_until = -1
        if open_until > s:  # inside a counted operator: its work is already there
            continue
        keep.append(i)
        open_until = e
    keep = np.asarray(keep, dtype=np.int64)
    wi = inv[keep]
    op = {"event_id": _ints(t.column("event_id"))[keep], "pid": pid[keep], "tid": tid[keep], "ts_ns": ts[keep], "dur_ns": dur[keep],
          "name": name[keep], "flops": w_flops[wi], "bytes": w_bytes[wi], "dtype": w_dtype[wi], "how": w_how[wi],
          "step": _ints(t.column("step"))[keep], "source_frame_id": _ints(t.column("source_frame_id"))[keep],
          "pass": _codes(t.column("pass").take(keep), text)}
    # a convolution without its stride: its output's shape from the input of what it feeds
    conv = np.array([t_ in CONV_OPS for t_ in text[:names_end]] + [False], dtype=bool)  # per name code (-1: the last)
    assumed = np.array([w[3].startswith("estimated (") for w in ok], dtype=bool)  # per distinct work
    guessed = np.flatnonzero(assumed[wi] & conv[np.where(name[keep] >= 0, name[keep], -1)]).tolist()
    dims_of = functools.lru_cache(maxsize=None)(lambda c: json.loads(values[0][c]) or [])
    fixed: dict = {}  # (the operator's work, the shape it feeds) -> its work with that output
    for j in guessed:
        r = int(keep[j])
        shape = _next_input_shape(r, pid, tid, ts, end[r], arg_codes[0], dims_of)
        if shape is None:
            continue
        at = (int(inv[r]), tuple(shape) if all(isinstance(x, int) for x in shape) else json.dumps(shape))
        if at not in fixed:
            fixed[at] = F.op_work(text[name[r]], args_of(r), shape)
        better = fixed[at]
        if better is not None:
            op["flops"][j], op["bytes"][j] = better[0], better[1]
            op["dtype"][j], op["how"][j] = _text_codes([better[2], better[3]], text)
    return op


@functools.lru_cache(maxsize=65536)
def _work_of(name: str, *shape_args: str | None) -> tuple | None:
    """`flops.op_work` of an operator from its `_SHAPE_ARGS` as JSON text (None: absent), kept
    across ranks: the ranks of a job run the same operators on the same shapes."""
    return F.op_work(name, {k: json.loads(v) for k, v in zip(_SHAPE_ARGS, shape_args) if v is not None})


def _text_codes(strings: list, text: list) -> np.ndarray:
    """Codes into `text` (appended to where new; -1: None) of a few strings."""
    at = {s: i for i, s in enumerate(text)}
    out = []
    for s in strings:
        if s is None:
            out.append(-1)
            continue
        if s not in at:
            at[s] = len(text)
            text.append(s)
        out.append(at[s])
    return np.asarray(out, dtype=np.int64)


def _next_input_shape(i: int, pid, tid, ts, end_i: int, dims_code, dims_of) -> list | None:
    """The first input of 3 or more dimensions of the operators after row i ends on the same
    thread (what a convolution's output feeds, e.g. its batch norm), from OPS's rows (each thread's
    in time order); flops.py uses it only when its batch and channels match the convolution's output."""
    for j in range(i + 1, min(i + 40, len(ts))):
        if pid[j] != pid[i] or tid[j] != tid[i]:
            return None
        if ts[j] >= end_i and dims_code[j] >= 0:
            dims = dims_of(int(dims_code[j]))  # `Input Dims` of row j, parsed
            if isinstance(dims, list) and dims and isinstance(dims[0], list) and len(dims[0]) >= 3:  # skip scalar bookkeeping
                return dims[0]
    return None


def _kernels_of(run: Run, rank: int, op: dict, text: list) -> tuple[dict, dict]:
    """Kernels launched inside a counted operator, with their share of its work (by duration), and
    RankWork's `kernel_work`; adds each operator's kernels' summed duration and count to `op`."""
    n = len(op["event_id"])
    op["device_ns"], op["kernels"] = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    t = rank_rows(run, KERNELS, rank) if n else None
    if t is None or not t.num_rows:
        return _empty(_KERNEL_INT), _NO_KERNEL_WORK
    kpid, ktid, launch = _ints(t.column("pid_k")), _ints(t.column("tid_k")), _ints(t.column("ts_ns"))
    at = np.full(t.num_rows, -1, dtype=np.int64)
    ends = op["ts_ns"] + np.maximum(op["dur_ns"], 0)
    # the operators come thread by thread (OPS's order), each thread's in time order and, being
    # counted, not overlapping: bisect each thread's starts with the launches made on it
    new = np.flatnonzero(np.concatenate([[True], (op["pid"][1:] != op["pid"][:-1]) | (op["tid"][1:] != op["tid"][:-1])]))
    for a, b in zip(new.tolist(), new[1:].tolist() + [n]):
        mine = np.flatnonzero((kpid == op["pid"][a]) & (ktid == op["tid"][a]))
        if not len(mine):
            continue
        pos = np.searchsorted(op["ts_ns"][a:b], launch[mine], side="right") - 1
        inside = (pos >= 0) & (launch[mine] < ends[a:b][np.maximum(pos, 0)])
        at[mine[inside]] = a + pos[inside]
    sel = np.flatnonzero(at >= 0)
    o = at[sel]
    dur = _ints(t.column("dur_ns"))[sel]
    op["device_ns"] = np.rint(np.bincount(o, weights=np.maximum(dur, 0), minlength=n)).astype(np.int64)
    op["kernels"] = np.bincount(o, minlength=n).astype(np.int64)
    dev = op["device_ns"][o]
    share = np.divide(dur, dev, out=1.0 / np.maximum(op["kernels"][o], 1), where=dev != 0)
    flops = op["flops"][o] * share
    return {"event_id": _ints(t.column("event_id"))[sel], "name": _codes(t.column("name").take(sel), text), "dur_ns": dur,
            "device": _ints(t.column("device"))[sel], "step": _ints(t.column("step"))[sel], "op": o,
            "flops": flops, "bytes": op["bytes"][o] * share}, _kernel_totals(t, sel, flops)


_NO_KERNEL_WORK = {scope: {"kernel_flops": 0.0, "kernel_ns": 0, "compute_kernel_ns": 0} for scope in ("all", "stepped")}


def _kernel_totals(t: pa.Table, sel: np.ndarray, flops: np.ndarray) -> dict:
    """Of the launched kernels `t` (KERNELS) that are not a collective's, in two scopes, "all" and
    "stepped" (launched in a profiler step): `kernel_flops` (the FLOPs carried by those of them that
    a counted operator launched, rows `sel` of `t` with `flops`), `kernel_ns` (their summed
    duration) and `compute_kernel_ns` (the summed duration of every one, counted or not:
    kernel_ns is part of it)."""
    import pyarrow.compute as pc

    names = pc.dictionary_encode(t.column("name")).combine_chunks()
    comm_of = np.array([is_comm_kernel_name(v) for v in names.dictionary.to_pylist()] + [False], dtype=bool)
    compute = ~comm_of[names.indices.fill_null(len(comm_of) - 1).to_numpy(zero_copy_only=False)]
    dur = np.maximum(_ints(t.column("dur_ns")), 0)
    counted = np.zeros(t.num_rows, dtype=bool)
    counted[sel] = True
    row_flops = np.zeros(t.num_rows)
    row_flops[sel] = flops
    out = {}
    for scope, rows in (("all", compute), ("stepped", compute & (_ints(t.column("step")) != _NONE))):
        mine = rows & counted
        out[scope] = {"kernel_flops": float(_seq_sum(row_flops[mine])[0]), "kernel_ns": int(dur[mine].sum()),
                      "compute_kernel_ns": int(dur[rows].sum())}
    return out


def _seq_sum(values: np.ndarray, codes: np.ndarray | None = None, size: int = 1) -> np.ndarray:
    """Sums by code, each added in row order (what a Python loop's `+=` gives, to the last bit)."""
    return np.bincount(np.zeros(len(values), dtype=np.int64) if codes is None else codes, weights=values, minlength=size)


def _main_dtype(work: RankWork) -> str | None:
    """The dtype that carries most FLOPs (the first seen on a tie)."""
    d = work.op["dtype"]
    has = d >= 0
    if not has.any():
        return None
    codes, first, inv = np.unique(d[has], return_index=True, return_inverse=True)
    per = _seq_sum(work.op["flops"][has], inv.reshape(-1), len(codes))
    order = np.argsort(first, kind="stable")
    best = max(order.tolist(), key=lambda c: per[c])  # in first-seen order: max keeps the first of equals
    return work.text[int(codes[best])]


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


def _groups(codes: np.ndarray, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(distinct codes, each one's first row, each row's group) of `codes` (the rows `rows` of it)."""
    c = codes if rows is None else codes[rows]
    u, first, inv = np.unique(c, return_index=True, return_inverse=True)
    return u, first, inv.reshape(-1)


def kernel_table(work: RankWork, limit: int = 20) -> list[dict]:
    """Per kernel name: FLOPs, bytes, time, achieved TFLOP/s and GB/s, intensity, roofline bound."""
    k, o = work.kernel, work.op
    if not len(k["event_id"]):
        return []
    u, first, g = _groups(k["name"])
    calls = np.bincount(g, minlength=len(u))
    flops, nbytes = _seq_sum(k["flops"], g, len(u)), _seq_sum(k["bytes"], g, len(u))
    dur = np.rint(np.bincount(g, weights=np.maximum(k["dur_ns"], 0), minlength=len(u))).astype(np.int64)
    per = [{"kernel": work._str(int(u[i])), "op": work._str(int(o["name"][k["op"][first[i]]])),
            "dtype": work._str(int(o["dtype"][k["op"][first[i]]])), "calls": int(calls[i]), "flops": float(flops[i]),
            "bytes": float(nbytes[i]), "dur_ns": int(dur[i])} for i in range(len(u))]
    rows = sorted(per, key=lambda r: (-r["dur_ns"], r["kernel"]))[:limit]
    for r in rows:
        r.update(roofline(work.peak, r["dtype"], r["flops"], r["bytes"], r["dur_ns"]))
    return rows


def op_time(work: RankWork) -> np.ndarray:
    """The time each counted operator's work took: its kernels' summed duration when it launched
    any, else its own (CPU) duration."""
    o = work.op
    return np.where(o["kernels"] > 0, o["device_ns"], np.maximum(o["dur_ns"], 0))


def group_table(work: RankWork, key: str, limit: int = 10) -> list[dict]:
    """Counted operators grouped by `key` ("name": per operator name; "source_frame_id": per source
    line): calls, FLOPs, bytes, time (`op_time` summed), achieved TFLOP/s and GB/s, intensity and
    the roofline bound; heaviest time first."""
    o = work.op
    keyed = np.flatnonzero(o[key] != (-1 if key == "name" else _NONE))
    if not len(keyed):
        return []
    u, first, g = _groups(o[key], keyed)
    first = keyed[first]
    calls = np.bincount(g, minlength=len(u))
    flops, nbytes = _seq_sum(o["flops"][keyed], g, len(u)), _seq_sum(o["bytes"][keyed], g, len(u))
    dur = np.rint(np.bincount(g, weights=op_time(work)[keyed], minlength=len(u))).astype(np.int64)
    on_device = np.bincount(g, weights=(o["kernels"][keyed] > 0), minlength=len(u)) > 0
    name = (lambda c: work._str(int(c))) if key == "name" else int
    per = [{key: name(u[i]), "dtype": work._str(int(o["dtype"][first[i]])), "calls": int(calls[i]), "flops": float(flops[i]),
            "bytes": float(nbytes[i]), "dur_ns": int(dur[i]), "on_device": bool(on_device[i])} for i in range(len(u))]
    rows = sorted(per, key=lambda r: (-r["dur_ns"], str(r[key])))[:limit]
    for r in rows:
        r.update(roofline(work.peak if r["on_device"] else None, r["dtype"], r["flops"], r["bytes"], r["dur_ns"]))
    return rows


def step_table(run: Run, rank: int, work: RankWork) -> list[dict]:
    """Per profiler step: counted FLOPs, achieved TFLOP/s over the step's duration, and MFU."""
    steps = [(step, dur) for step, _, dur in rank_rows(run, STEPS, rank)]
    dtype = _main_dtype(work)
    peak_f = work.peak.flops_per_s(dtype) if work.peak else None
    o = work.op
    stepped = np.flatnonzero(o["step"] != _NONE)
    u, _, g = _groups(o["step"], stepped) if len(stepped) else (np.zeros(0, dtype=np.int64), None, None)
    sums = _seq_sum(o["flops"][stepped], g, len(u)) if len(stepped) else np.zeros(0)
    per = dict(zip(u.tolist(), sums.tolist()))
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
    dtype = _main_dtype(work)
    mfu_median = mfus[len(mfus) // 2] if mfus else None
    o = work.op
    recorded = work.text.index("recorded") if "recorded" in work.text else -2
    return {
        "device_name": work.device_name,
        "device": work.detected.to_dict() if work.detected else None,
        "peak": work.peak.to_dict() if work.peak else None,
        "dtype": dtype,
        "flops": float(_seq_sum(o["flops"])[0]),
        "bytes": float(_seq_sum(o["bytes"])[0]),
        "ops_counted": len(o["event_id"]),
        "ops_estimated": int((o["how"] != recorded).sum()),
        **_kernel_work(work, stepped=bool(steps)),
        "steps": steps,
        "mfu_median": mfu_median,
        "mfu_missing": None if mfu_median is not None else mfu_missing(run, rank, work, steps, dtype),
        "top_kernels": kernel_table(work, limit=10),
        "top_ops": [{"op": r.pop("name"), **r} for r in group_table(work, "name")],
        "top_lines": group_table(work, "source_frame_id"),
    }


def _kernel_work(work: RankWork, stepped: bool) -> dict:
    """The counted work that ran as kernels (`_kernel_totals`), in the scope of `achieved.flops`
    (the profiler steps' when there are steps)."""
    return dict(work.kernel_work["stepped" if stepped else "all"])


def mfu_missing(run: Run, rank: int, work: RankWork, steps: list[dict], dtype: str | None) -> str:
    """Why a rank has no MFU, every reason that applies, with what to do about each."""
    entry = rank_entry(run, rank)
    if not entry.get("devices"):
        lost = device_events_lost(entry)
        if lost:
            return f"{no_device_words(lost)}: MFU compares device work with a device's peak"
        return "a CPU-only run: MFU compares device work with a device's peak"
    reasons = []
    if not len(work.op["event_id"]):
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
            seen = f" (its events show {arch.name}, whose models' peaks differ)" if arch else ""
            reasons.append(f"the trace does not name the device{seen}: give --peak-tflops and --peak-dtype")
    elif dtype and not work.peak.flops_per_s(dtype):
        reasons.append(f"the peak in force has no {dtype} figure, the dtype of most FLOPs (give --peak-tflops with --peak-dtype {dtype})")
    if not steps:
        reasons.append("no profiler steps (ProfilerStep#N ranges), and MFU is a median over steps: "
                       "the achieved TFLOP/s over the analysed window stands in for it, where it is given")
    return "; ".join(reasons) or "no step has counted FLOPs"


WORK_COLUMNS = ("rank", "event_id", "kind", "name", "op_event_id", "step", "source_frame_id", "dur_ns", "flops", "bytes",
                "dtype", "how")
"""Columns of `analysis/work.parquet` (docs/METRICS.md "Utilisation"): one row per counted operator
(`kind = 'op'`) and per kernel that inherits its work (`kind = 'kernel'`, `op_event_id` its operator)."""


def work_table(work: RankWork, rank: int, schema: pa.Schema) -> pa.Table:
    """The rank's counted operators and the kernels that inherit their work, as WORK_COLUMNS rows
    (`schema`: the file's): the same figures the summary sums, so SQL over `analysis/work.parquet`
    adds up to them."""
    o, k = work.op, work.kernel
    n, m = len(o["event_id"]), len(k["event_id"])
    text = pa.array(work.text + [None], type=pa.string())

    def strings(codes: np.ndarray):
        return text.take(pa.array(np.where(codes >= 0, codes, len(work.text))))

    def nullable(a: np.ndarray):
        return pa.array(a, mask=a == _NONE, type=pa.int64())

    kop = k["op"]
    cols = {"rank": pa.array(np.full(n + m, rank, dtype=np.int32)),
            "event_id": pa.array(np.concatenate([o["event_id"], k["event_id"]])),
            "kind": pa.array(["op"] * n + ["kernel"] * m, type=pa.string()),
            "name": strings(np.concatenate([o["name"], k["name"]])),
            "op_event_id": pa.array(np.concatenate([o["event_id"], o["event_id"][kop]])),
            "step": nullable(np.concatenate([o["step"], k["step"]])),
            "source_frame_id": nullable(np.concatenate([o["source_frame_id"], o["source_frame_id"][kop]])),
            "dur_ns": pa.array(np.concatenate([o["dur_ns"], k["dur_ns"]])),
            "flops": pa.array(np.concatenate([o["flops"], k["flops"]]).astype(np.float64)),
            "bytes": pa.array(np.concatenate([o["bytes"], k["bytes"]]).astype(np.float64)),
            "dtype": strings(np.concatenate([o["dtype"], o["dtype"][kop]])),
            "how": strings(np.concatenate([o["how"], o["how"][kop]]))}
    return pa.Table.from_arrays([cols[f.name].cast(f.type) for f in schema], schema=schema)
