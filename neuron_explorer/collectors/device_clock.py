"""Clock sanity of the events a device plugin reports: timestamps in the wrong unit, or another epoch.

The profiler's own events (operators, annotations, steps, Python calls) carry the host clock in ns.
A device plugin's events (device work, and its runtime/driver calls) must share that clock; a plugin
that reports microseconds (PyTorch's own reference PrivateUse1 plugin does) puts them about 1,000
times too early: a report's span then reads millions of seconds. Each group of plugin events (device
work; runtime and driver calls) is checked on its own:

- meeting the host's span, widened by 100 times that span or 60 s on each side (device work may
  outlast the host's last event, and plugins' clocks drift): left as it is (µs read as ns, or another epoch, would put the whole group
  far from it, so a group that meets it shares the host's clock);
- outside it, but inside once ×1000 (µs read as ns): scaled, and the run says so;
- outside it either way: `DeviceClockError`, one line the importer turns into a refusal naming the
  file (the live collector writes it as a warning and keeps the run).

A device clock in the right unit can still be offset from the host's by milliseconds (ROCm traces:
mi300x_vllm_hipgraph_piecewise's device ran all its work 146-209 ms after the host launched it, in a
trace whose host side lasts 26 ms). Work starts microseconds after its launch on an idle device, so a
device whose first work (nothing the trace holds before it on the device) started `OFFSET_MIN_NS` or
more after its launch returned, and none of whose launched work (two or more) started sooner than that
after its launch began, has its events moved earlier (`_align_to_launches`): by the least delay from a launch's
start to its work's start over the device's launched work, the most that keeps every launched work at
or after its launch. Work queued behind work launched before the trace (no launch of its own) is not
such a device: its first work has no launch, and its waits are the queue's.

Must not: know about JSON, torch or the run tables; it edits a RawRank's events and flows in place.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..schema import DEVICE_KINDS, KINDS
from .kineto_names import kind_of_category
from .launches import first_call_of
from .raw import RawRank

SCALE = 1000
"""The one factor recognised: microseconds written where nanoseconds belong."""
_LIMIT_NS = 2**62
_K = {k: k for k in KINDS}
"""The run's kinds by name (a KeyError here if the schema drops one these checks read)."""
_HOST_KINDS = frozenset({_K["cpu_op"], _K["user_annotation"], _K["python"]})
_PLUGIN_GROUPS = (("device events", DEVICE_KINDS), ("runtime calls", frozenset({_K["runtime"]})))
_DEVICE_WORK = frozenset({_K["kernel"], _K["memcpy"], _K["memset"]})
"""The device events that are work a launch queues (not annotations or syncs)."""
_NO_TS = np.iinfo(np.int64).min
"""A null time, read as a value (no event starts there: times are within ±2^62 ns)."""


class DeviceClockError(ValueError):
    """Device timestamps that no recognised unit places within the host's span."""


def _text(ns: int) -> str:
    return f"{ns / 1e9:,.3f} s"


OFFSET_MIN_NS = 1_000_000
"""A device's first work starting this long after its launch returned, and every launched work of
it this long after its launch began, reads as a device clock offset (rank_entry warns of the first
wait from the same 1 ms, FIRST_WORK_WAIT_WARN_NS)."""


def check_device_clock(raw: RawRank, align: bool = True) -> list[str]:
    """Scale the plugin event groups of `raw` written in µs, and (with `align`: `import
    --keep-device-clock` leaves it out) move a device's events offset from its launches
    (`_align_to_launches`, recorded in `raw.device_clock_shift`); the warnings to record (one per
    group scaled, one per device moved). Raises DeviceClockError when a group lies outside the
    host's span in any unit."""
    if not raw.events.num_rows:
        return []
    # every decision is made once per distinct category (a handful), then read per row through the codes
    codes, kinds = _kind_codes(raw.events["category"])
    warnings = _check_units(raw, codes, kinds)
    return warnings + (_align_to_launches(raw, codes, kinds) if align else [])


def _check_units(raw: RawRank, codes: np.ndarray, kinds: list[str]) -> list[str]:
    ev = raw.events
    groups = [(what, np.array([k in group_kinds for k in kinds])) for what, group_kinds in _PLUGIN_GROUPS]
    groups = [(what, of_code) for what, of_code in groups if of_code.any()]
    if not groups:  # no device plugin's events (a CPU-only recording): nothing to check
        return []
    present = np.bincount(codes, minlength=len(kinds)) > 0
    host = np.array([k in _HOST_KINDS for k in kinds]) & present
    if not host.any():
        return []
    # each kind's first start and last end (a null start or duration read as 0), one pass over the
    # decode's chunks in place; a span of kinds is read from them
    first = np.full(len(kinds), np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(len(kinds), np.iinfo(np.int64).min, dtype=np.int64)
    at = 0
    for ts_chunk, dur_chunk in zip(*_aligned(ev["ts_ns"], ev["dur_ns"])):
        ts = _filled(ts_chunk) + raw.base_ns
        rows = codes[at:at + len(ts)]
        np.minimum.at(first, rows, ts)
        np.maximum.at(last, rows, ts + np.maximum(_filled(dur_chunk), 0))
        at += len(ts)
    lo, hi = int(first[host].min()), int(last[host].max())
    slack = max(100 * (hi - lo), 60_000_000_000)  # generous: a wrong unit or epoch misses by a factor of 1000 or by years
    lo, hi = lo - slack, hi + slack
    warnings: list[str] = []
    scale = None
    for what, of_code in groups:
        of_code = of_code & present
        if not of_code.any():
            continue
        g_lo, g_hi = int(first[of_code].min()), int(last[of_code].max())
        if g_lo <= hi and lo <= g_hi:
            continue  # it meets the host's (widened) span: one clock; a unit or epoch apart would miss it entirely
        if abs(g_hi) < _LIMIT_NS // SCALE and lo <= g_lo * SCALE and g_hi * SCALE <= hi:
            rows = of_code[codes]
            scale = rows if scale is None else scale | rows
            warnings.append(f"{what}' timestamps were in µs, not ns (they lay {_text(lo + slack - g_lo)} before the host's): "
                            f"scaled ×{SCALE}")
            continue
        clamped = " (they start at the trace's baseTimeNanoseconds: its writer clamped earlier times)" \
            if raw.base_ns and g_lo == raw.base_ns else ""
        raise DeviceClockError(f"{what}' timestamps ({_text(g_lo)} to {_text(g_hi)}) lie outside the host's span "
                               f"({_text(lo + slack)} to {_text(hi - slack)}), in ns and in µs alike{clamped}: a device clock of "
                               "another unit or epoch, which cannot be placed on the host's; not imported")
    if scale is not None:
        ts = np.asarray(ev["ts_ns"].fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64) + raw.base_ns
        dur = np.maximum(np.asarray(ev["dur_ns"].fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64), 0)
        _scale_rows(raw, scale, ts, dur, lo, hi)
    return warnings


def _aligned(*columns: pa.ChunkedArray) -> list[list[pa.Array]]:
    """The chunks of columns of one table, cut alike (each column's own, when they already are)."""
    if len({tuple(len(c) for c in col.chunks) for col in columns}) == 1:
        return [col.chunks for col in columns]
    return [[col.combine_chunks()] for col in columns]


def _filled(values: pa.Array) -> np.ndarray:
    """An int64 column's values, a null as 0 (no copy where there is none)."""
    return np.asarray((values.fill_null(0) if values.null_count else values).to_numpy(zero_copy_only=False), dtype=np.int64)


def _scale_rows(raw: RawRank, scale: np.ndarray, ts: np.ndarray, dur: np.ndarray, lo: int, hi: int) -> None:
    ev = raw.events
    new_ts = np.where(scale, ts * SCALE - raw.base_ns, ts - raw.base_ns)
    new_dur = np.where(scale, dur * SCALE, np.asarray(ev["dur_ns"].fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64))
    ts_mask = ev["ts_ns"].is_null().to_numpy(zero_copy_only=False)
    dur_mask = ev["dur_ns"].is_null().to_numpy(zero_copy_only=False)
    ev = ev.set_column(ev.schema.get_field_index("ts_ns"), "ts_ns", pa.array(new_ts, pa.int64(), mask=ts_mask))
    raw.events = ev.set_column(ev.schema.get_field_index("dur_ns"), "dur_ns", pa.array(new_dur, pa.int64(), mask=dur_mask))
    # flow endpoints in µs too (the ends of an ac2g flow at the scaled events): those outside the host's
    # span that ×1000 places inside it
    fl = raw.flows
    if fl.num_rows:
        f_ts = np.asarray(fl["ts_ns"].fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64) + raw.base_ns
        move = ((f_ts < lo) | (f_ts > hi)) & (np.abs(f_ts) < _LIMIT_NS // SCALE)
        move &= (f_ts * SCALE >= lo) & (f_ts * SCALE <= hi)
        if move.any():
            f_ts = np.where(move, f_ts * SCALE, f_ts) - raw.base_ns
            raw.flows = fl.set_column(fl.schema.get_field_index("ts_ns"), "ts_ns",
                                      pa.array(f_ts, pa.int64(), mask=fl["ts_ns"].is_null().to_numpy(zero_copy_only=False)))


def _kind_codes(categories: pa.ChunkedArray) -> tuple[np.ndarray, list[str]]:
    """Per row, the code of its kind in the returned list of kinds (the last, 'other', for no category)."""
    cats = categories.combine_chunks()
    kinds = [kind_of_category(v or "") for v in cats.dictionary.to_pylist()] + ["other"]
    return cats.indices.fill_null(len(kinds) - 1).to_numpy(zero_copy_only=False), kinds


def _align_to_launches(raw: RawRank, codes: np.ndarray, kinds: list[str]) -> list[str]:
    """Move each device's events (and the flow endpoints on its tracks) earlier by its clock's offset
    from the host's, where its launches show one (module docstring); record the moves in
    `raw.device_clock_shift` ({device: ns}) and return one warning per device moved. Reads only the
    device work's and the runtime calls' rows, and sorts the calls only where a device's first work
    waited (most traces stop at that test)."""
    ev = raw.events
    if "correlation" not in ev.column_names:
        return []
    is_work = np.array([k in _DEVICE_WORK for k in kinds])
    is_call = np.array([k == _K["runtime"] for k in kinds])
    if not is_work.any() or not is_call.any():
        return []
    is_work, is_call = is_work[codes], is_call[codes]
    if not is_work.any() or not is_call.any():
        return []

    def columns(mask: np.ndarray, names: tuple) -> list[np.ndarray]:
        # the rows of `mask`, filtered chunk by chunk (a take would join the decode's chunks first); nulls: -1, times: _NO_TS
        rows = ev.select(list(names)).filter(pa.array(mask))
        return [rows[c].fill_null(_NO_TS if c == "ts_ns" else -1).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
                for c in names]

    w_ts, w_dur, w_pid, w_corr = columns(is_work, ("ts_ns", "dur_ns", "pid", "correlation"))
    w_dur = np.maximum(w_dur, 0)
    ok = (w_ts != _NO_TS) & (w_pid >= 0)
    warnings: list[str] = []
    shifts: dict[int, int] = {}
    calls = None  # (the runtime calls' correlation ids and starts, in time order): made for the first device whose first work waited
    for device in np.unique(w_pid[ok]).tolist():
        rows = np.flatnonzero(ok & (w_pid == device))
        at_start = rows[w_ts[rows] == w_ts[rows].min()]
        first = at_start[np.argmax(w_dur[at_start])]  # (the build's order: by start, longer first)
        if w_corr[first] < 0:
            continue  # its first work has no launch (queued before the trace, or dropped): its waits are a queue's
        mine = is_call & pc.equal(ev["correlation"], int(w_corr[first])).fill_null(False).to_numpy(zero_copy_only=False)
        if not mine.any():
            continue
        c_ts, c_dur = columns(mine, ("ts_ns", "dur_ns"))
        c_ok = c_ts != _NO_TS
        if not c_ok.any():
            continue
        call = np.flatnonzero(c_ok)[np.argmin(c_ts[c_ok])]  # (of several calls with one id, the first: launches.first_call_of)
        first_wait = int(w_ts[first] - (c_ts[call] + max(int(c_dur[call]), 0)))
        if first_wait < OFFSET_MIN_NS:
            continue
        if calls is None:
            r_ts, r_corr = columns(is_call, ("ts_ns", "correlation"))
            r_ok = (r_ts != _NO_TS) & (r_corr >= 0)
            o = np.argsort(r_ts[r_ok], kind="stable")
            calls = r_corr[r_ok][o], r_ts[r_ok][o]  # (in time order)
        launched = rows[w_corr[rows] >= 0]
        at = first_call_of(calls[0], w_corr[launched])
        hit = at >= 0
        if np.count_nonzero(hit) < 2:
            continue  # (one launched work: its wait alone, which the first-work warning tells)
        shift = int((w_ts[launched[hit]] - calls[1][at[hit]]).min())
        if shift < OFFSET_MIN_NS:
            continue
        shifts[device] = shift
        warnings.append(f"device {device}'s clock is offset from the host's: its first work, with nothing the trace holds before it on "
                        f"the device, started {first_wait / 1e6:,.2f} ms after its launch returned, and none of its "
                        f"{int(np.count_nonzero(hit)):,} launched kernels and copies started sooner than {shift / 1e6:,.2f} ms after its "
                        f"launch began (work starts microseconds after its launch on an idle device); its events were moved "
                        f"{shift / 1e6:,.2f} ms earlier (data_quality.device_clock_shift_ns; import --keep-device-clock keeps them)")
    if not shifts:
        return []
    device_rows = np.array([k in DEVICE_KINDS for k in kinds])[codes]
    pid = ev["pid"].fill_null(-1).to_numpy(zero_copy_only=False)
    tid_ok = ~ev["tid"].is_null().to_numpy(zero_copy_only=False)
    tid = ev["tid"].fill_null(0).to_numpy(zero_copy_only=False)
    by_row = np.zeros(ev.num_rows, dtype=np.int64)
    tracks = {}
    for device, shift in shifts.items():
        rows = device_rows & (pid == device)
        by_row[rows] = shift
        tracks[device] = (shift, np.unique(tid[rows & tid_ok]))
    ts_null = ev["ts_ns"].is_null().to_numpy(zero_copy_only=False)
    new_ts = ev["ts_ns"].fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64) - by_row
    raw.events = ev.set_column(ev.schema.get_field_index("ts_ns"), "ts_ns", pa.array(new_ts, pa.int64(), mask=ts_null))
    fl = raw.flows
    if fl.num_rows:  # the ends of the launch flows on the device's tracks (its streams): bound to its events by time
        f_ts = fl["ts_ns"].fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        f_pid = fl["pid"].fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        f_tid = fl["tid"].fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        f_ok = ~fl["pid"].is_null().to_numpy(zero_copy_only=False) & ~fl["tid"].is_null().to_numpy(zero_copy_only=False)
        f_shift = np.zeros(len(f_ts), dtype=np.int64)
        for device, (shift, tids) in tracks.items():
            f_shift[f_ok & (f_pid == device) & np.isin(f_tid, tids)] = shift
        if f_shift.any():
            raw.flows = fl.set_column(fl.schema.get_field_index("ts_ns"), "ts_ns",
                                      pa.array(f_ts - f_shift, pa.int64(), mask=fl["ts_ns"].is_null().to_numpy(zero_copy_only=False)))
    raw.device_clock_shift = shifts
    return warnings
