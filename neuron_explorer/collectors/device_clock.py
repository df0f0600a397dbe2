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

Must not: know about JSON, torch or the run tables; it edits a RawRank's events and flows in place.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..schema import DEVICE_KINDS, KINDS
from .kineto_names import kind_of_category
from .raw import RawRank

SCALE = 1000
"""The one factor recognised: microseconds written where nanoseconds belong."""
_LIMIT_NS = 2**62
_K = {k: k for k in KINDS}
"""The run's kinds by name (a KeyError here if the schema drops one these checks read)."""
_HOST_KINDS = frozenset({_K["cpu_op"], _K["user_annotation"], _K["python"]})
_PLUGIN_GROUPS = (("device events", DEVICE_KINDS), ("runtime calls", frozenset({_K["runtime"]})))


class DeviceClockError(ValueError):
    """Device timestamps that no recognised unit places within the host's span."""


def _text(ns: int) -> str:
    return f"{ns / 1e9:,.3f} s"


def check_device_clock(raw: RawRank) -> list[str]:
    """Scale the plugin event groups of `raw` written in µs; the warnings to record (one per group
    scaled). Raises DeviceClockError when a group lies outside the host's span in any unit."""
    ev = raw.events
    if not ev.num_rows:
        return []
    # every decision is made once per distinct category (a handful), then read per row through the codes
    cats = ev["category"].combine_chunks()
    values = cats.dictionary.to_pylist()
    kinds = [kind_of_category(v or "") for v in values] + ["other"]
    groups = [(what, np.array([k in group_kinds for k in kinds])) for what, group_kinds in _PLUGIN_GROUPS]
    groups = [(what, of_code) for what, of_code in groups if of_code.any()]
    if not groups:  # no device plugin's events (a CPU-only recording): nothing to check
        return []
    codes = cats.indices.fill_null(len(values)).to_numpy(zero_copy_only=False)
    host = np.array([k in _HOST_KINDS for k in kinds])[codes]
    if not host.any():
        return []
    ts = np.asarray(ev["ts_ns"].fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64) + raw.base_ns
    dur = np.maximum(np.asarray(ev["dur_ns"].fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64), 0)
    lo, hi = int(ts[host].min()), int((ts[host] + dur[host]).max())
    slack = max(100 * (hi - lo), 60_000_000_000)  # generous: a wrong unit or epoch misses by a factor of 1000 or by years
    lo, hi = lo - slack, hi + slack
    warnings: list[str] = []
    scale = np.zeros(len(ts), dtype=bool)
    for what, of_code in groups:
        rows = of_code[codes]
        if not rows.any():
            continue
        g_lo, g_hi = int(ts[rows].min()), int((ts[rows] + dur[rows]).max())
        if g_lo <= hi and lo <= g_hi:
            continue  # it meets the host's (widened) span: one clock; a unit or epoch apart would miss it entirely
        if abs(g_hi) < _LIMIT_NS // SCALE and lo <= g_lo * SCALE and g_hi * SCALE <= hi:
            scale |= rows
            warnings.append(f"{what}' timestamps were in µs, not ns (they lay {_text(lo + slack - g_lo)} before the host's): "
                            f"scaled ×{SCALE}")
            continue
        clamped = " (they start at the trace's baseTimeNanoseconds: its writer clamped earlier times)" \
            if raw.base_ns and g_lo == raw.base_ns else ""
        raise DeviceClockError(f"{what}' timestamps ({_text(g_lo)} to {_text(g_hi)}) lie outside the host's span "
                               f"({_text(lo + slack)} to {_text(hi - slack)}), in ns and in µs alike{clamped}: a device clock of "
                               "another unit or epoch, which cannot be placed on the host's; not imported")
    if scale.any():
        _scale_rows(raw, scale, ts, dur, lo, hi)
    return warnings


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
