"""One Kineto / Chrome JSON trace file into its rank's raw tables (`RawRank`) and metadata.

The file is decoded by _kineto_json; here its rank is found (`distributedInfo.rank`, else a
`rank-N` / `rank_N` file name, else 0 with a warning), `baseTimeNanoseconds` taken, the chunks
joined into the raw tables, and the header's metadata kept for the manifest.

A run is written only when every later reader can use it, so what the run cannot hold truthfully
is refused with one line (InputError) before anything is written: a rank beyond MAX_RANK, a
`baseTimeNanoseconds` that is not within TIME_LIMIT_NS, times (start, and start plus duration,
after the base) beyond ±TIME_LIMIT_NS, durations or allocation sizes whose sum does not fit int64
(DuckDB's int64 arithmetic on them must never overflow). Descriptive metadata that is
malformed is dropped with a warning instead: `deviceProperties` entries without an integer id
(or not a list at all), a `world_size` that is not a positive integer, a `distributedInfo` that is
not an object. An event whose ts (or an 'X' event's dur) is not a JSON number is counted in one
warning: a number written as text ("100") is read as that number, and one with no time (null,
missing, other text, true, an object) is dropped, never placed at 0.

Must not: build links or write the run (build.py, chrome_trace.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgspec
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from ..schema import ID_STRIDE
from . import _kineto_json, remote
from ._packed_text import PackedText
from .device_clock import DeviceClockError, check_device_clock
from .kineto_names import MEMORY_ARGS
from .raw import RawRank

_RANK_IN_NAME = re.compile(r"rank[-_](\d+)", re.IGNORECASE)
HEADER_KEYS_KEPT_APART = ("deviceProperties", "computeProperties", "distributedInfo", "baseTimeNanoseconds")
MAX_RANK = (2**63 - 1) // ID_STRIDE - 1
"""The largest rank a run holds: event ids are `rank * ID_STRIDE + index` in int64."""
TIME_LIMIT_NS = 2**62
"""Every time in a run (ns from the epoch, or from the trace's start) lies within ±2^62 ns (about
146 years), and a rank's durations (and allocation sizes) add up to less than 2^63: then any
difference of times, start plus duration, or sum of durations a query forms fits int64."""


def rank_bounds_error(rank: int) -> str | None:
    if 0 <= rank <= MAX_RANK:
        return None
    return f"rank {rank} is not one a run can hold (0 to {MAX_RANK})"


def rank_of(path: Path, header: dict) -> tuple[int, str | None]:
    """(rank, warning or None)."""
    info = header.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int) and not isinstance(info.get("rank"), bool):
        if problem := rank_bounds_error(info["rank"]):
            raise InputError(path, f"distributedInfo: {problem}")
        return info["rank"], None
    m = _RANK_IN_NAME.search(path.name)
    if m:
        rank = int(m.group(1)[:40])
        if problem := rank_bounds_error(rank):
            raise InputError(path, f"the file name says {problem}")
        return rank, None
    return 0, f"{path.name}: no rank in distributedInfo or the file name; assumed rank 0"


def _device_properties(path: Path, header: dict, warnings: list[str]) -> list:
    """deviceProperties (or its older name computeProperties), only the entries every reader can
    use: objects with an integer id and a text name (or none)."""
    key = "deviceProperties" if header.get("deviceProperties") else "computeProperties"
    props = header.get(key) or []
    if not isinstance(props, list):
        warnings.append(f"{path.name}: {key} is not a list; ignored")
        return []
    kept = [p for p in props if isinstance(p, dict) and type(p.get("id")) is int and -(2**63) <= p["id"] < 2**63
            and isinstance(p.get("name"), (str, type(None)))]
    if len(kept) < len(props):
        warnings.append(f"{path.name}: {len(props) - len(kept)} {key} entries without an integer id "
                        "(or with a name that is not text) ignored")
    return kept


def _distributed_info(path: Path, header: dict, warnings: list[str]) -> dict | None:
    info = header.get("distributedInfo")
    if info is None:
        return None
    if not isinstance(info, dict):
        warnings.append(f"{path.name}: distributedInfo is not an object; ignored")
        return None
    world = info.get("world_size")
    if world is not None and not (type(world) is int and 0 < world < 2**63):
        warnings.append(f"{path.name}: distributedInfo world_size {str(world)[:40]!r} is not a positive integer; ignored")
        info = {k: v for k, v in info.items() if k != "world_size"}
    return info


def _check_ranges(path: Path, raw: RawRank) -> None:
    """Times and sums that later int64 arithmetic (here and in DuckDB) must hold; see TIME_LIMIT_NS."""
    limit = TIME_LIMIT_NS

    def span(col) -> tuple[int, int]:
        mm = pc.min_max(col).as_py()
        return mm["min"], mm["max"]

    for table, what in ((raw.events, "an event"), (raw.flows, "a flow event"), (raw.memory, "a [memory] event"),
                        (raw.counters, "a counter")):
        if not table.num_rows:
            continue
        lo, hi = span(table["ts_ns"])
        for v in (lo, hi):
            if not -limit <= v + raw.base_ns <= limit:
                raise InputError(path, f"wrong value: {what} starts at {_us_text(v)} µs"
                                       + (f" after baseTimeNanoseconds {raw.base_ns}" if raw.base_ns else "")
                                       + ", beyond the ±2^62 ns (146 years) a run holds")
    ev = raw.events
    if ev.num_rows:
        lo, hi = span(ev["dur_ns"])
        for v in (lo, hi):
            if not -limit <= v <= limit:
                raise InputError(path, f"wrong value: an event lasts {_us_text(v)} µs, beyond the 2^62 ns (146 years) a run holds")
        try:
            lo, hi = span(pc.add_checked(ev["ts_ns"], ev["dur_ns"]))
        except pa.ArrowInvalid:  # overflows int64: far beyond the limit
            lo, hi = -2 * limit, 2 * limit
        for v in (lo, hi):
            if not -limit <= v + raw.base_ns <= limit:
                raise InputError(path, f"wrong value: an event ends at {_us_text(v)} µs, beyond the ±2^62 ns (146 years) a run holds")
        total = pc.sum(pc.abs(ev["dur_ns"].cast(pa.float64(), safe=False))).as_py() or 0
        if total >= 2**63:
            raise InputError(path, f"wrong value: the events' durations add up to {total / 1e9:.3g} s, beyond the int64 ns "
                                   "(292 years) a sum of them must fit")
    mem = raw.memory
    if mem.num_rows:
        total = pc.sum(pc.abs(mem["bytes"].cast(pa.float64(), safe=False))).as_py() or 0
        if total >= 2**63:
            raise InputError(path, f"wrong value: the [memory] events' Bytes add up to {total:.3g}, beyond the int64 a sum of them must fit")
        for col in ("total_allocated", "total_reserved"):
            key = MEMORY_ARGS[col]
            lo, hi = span(mem[col])
            for v in (lo, hi):
                if v is not None and not -limit <= v <= limit:
                    raise InputError(path, f"wrong value: [memory] args {key!r} {v} is beyond the ±2^62 a run holds")


def _us_text(ns: int) -> str:
    return f"{ns / 1000:.6g}"


def _concat(tables: list[pa.Table]) -> pa.Table:
    """Chunks → one table. Dictionary columns keep their per-chunk dictionaries (build unifies them)."""
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def decode_rank(path: Path, progress: Callable[[int, int], None] | None = None,
                workers: int | None = None, source: remote.RemoteTrace | None = None,
                align_clock: bool = True) -> tuple[RawRank, dict, list[str], dict]:
    """Decode the trace file `path`; `source`: the trace it is a local copy of, which names it
    (rank from its name, errors, the manifest's source). `align_clock`: a device clock behind the
    host's is moved to its launches (device_clock.check_device_clock)."""
    try:
        decoded = _kineto_json.decode_trace(str(path), progress=progress, workers=workers, pack_args=True)
    except InputError as e:
        if source is None or e.path != str(path):
            raise
        raise InputError(source, e.problem) from None
    if source is not None:
        path = source
    header = decoded.header
    rank, warning = rank_of(path, header)
    warnings = [warning] if warning else []
    base = header.get("baseTimeNanoseconds", 0)
    if isinstance(base, bool) or not isinstance(base, int):
        if base not in (None, 0):
            warnings.append(f"{path.name}: baseTimeNanoseconds is not an integer; ignored")
        base = 0
    if not -TIME_LIMIT_NS <= base <= TIME_LIMIT_NS:
        raise InputError(path, f"wrong value: baseTimeNanoseconds {str(base)[:40]} is beyond the ±2^62 ns (146 years) a run holds")
    chunks = decoded.chunks
    unsupported: dict[str, int] = {}
    for c in chunks:
        for k, v in c.unsupported.items():
            unsupported[k] = unsupported.get(k, 0) + v
    if said := _odd_times_warning(sum(c.odd_times[0] for c in chunks), sum(c.odd_times[1] for c in chunks)):
        warnings.append(f"{path.name}: {said}")
    events = _concat([c.events for c in chunks])
    events, cut = _cap_text(events)
    # the args stay compressed in blocks (most of a trace's bytes): the build and the write take
    # the rows they need
    args, dropped = PackedText.concat([c.args for c in chunks]).with_rows_longer_dropped(MAX_TEXT_CHARS)
    if dropped:
        cut += ("; " if cut else "") + _args_dropped(dropped)
    if cut:
        warnings.append(f"{path.name}: {cut}")
    raw = RawRank(
        rank=rank,
        events=events,
        packed_args=args,
        flows=_concat([c.flows for c in chunks]),
        memory=_concat([c.memory for c in chunks]),
        counters=_concat([c.counters for c in chunks]),
        base_ns=base,
    )
    metadata_events = _merged_metadata(c.metadata for c in chunks)
    del chunks, decoded, events, args
    # the ranges and the category counts read the columns as decoded, on a thread of their own while
    # this one checks the device clock (each pass runs without the GIL); a range error is the one raised
    with ThreadPoolExecutor(max_workers=1) as helper:
        ranges = helper.submit(_check_ranges, path, raw)
        category_counts = helper.submit(_category_counts, raw)
        try:
            moved = check_device_clock(raw, align=align_clock)
        except Exception as e:
            ranges.result()  # (the clock's arithmetic assumes the ranges: out of range, that is the error)
            if isinstance(e, DeviceClockError):
                raise InputError(path, str(e)) from None
            raise
        ranges.result()
        warnings += [f"{path.name}: {w}" for w in moved]
    meta = {
        "source": str(path),
        "base_ns": base,
        "distributed_info": _distributed_info(path, header, warnings),
        # older traces call deviceProperties computeProperties
        "device_properties": _device_properties(path, header, warnings),
        "trace_metadata": {k: v for k, v in header.items() if k not in HEADER_KEYS_KEPT_APART},
        "metadata_events": metadata_events,
        "unsupported_phases": unsupported,
    }
    if unsupported:
        warnings.append(f"{path.name}: events of unsupported phases skipped: {unsupported}")
    return raw, meta, warnings, category_counts.result()


def _odd_times_warning(dropped: int, read: int) -> str:
    """What became of the events whose ts (or an 'X' event's dur) is not a JSON number ('' if none):
    those with no time (null, missing, other text) are dropped; a numeric string is read as its number."""
    if not (dropped or read):
        return ""
    n = dropped + read
    how = []
    if dropped:
        how.append(f"{dropped:,} with null, missing or non-numeric text dropped")
    if read:
        how.append(f'{read:,} with a number written as text ("100") read as that number')
    return f"{n:,} event{'s' if n != 1 else ''} with a non-numeric ts/dur: " + "; ".join(how)


MAX_TEXT_CHARS = 64 << 10
"""The longest name, category or args text an event keeps (65,536 characters): a longer name is cut
to it and longer args are dropped (cut JSON would not read), with a warning counting them. Kernel
names of templated C++ run to a few thousand characters; what is beyond this is an accident or an
attack (a 1 GiB name), and would otherwise be copied into every table, query and page that shows
the event."""


def _cap_text(events: pa.Table) -> tuple[pa.Table, str]:
    """Events with every text column within MAX_TEXT_CHARS, and what was cut, as a warning ('' if nothing).
    (The args are held apart, packed: PackedText.with_rows_longer_dropped.)"""
    said = []
    for col in ("name", "category", "pid_text", "tid_text", "module_path"):
        if col not in events.column_names:
            continue
        column = events[col]
        dictionary = pa.types.is_dictionary(column.type)
        if all((pc.max(pc.utf8_length(c.dictionary if dictionary else c)).as_py() or 0) <= MAX_TEXT_CHARS for c in column.chunks):
            continue
        plain = column.cast(pa.string()) if dictionary else column
        long = pc.greater(pc.utf8_length(plain), MAX_TEXT_CHARS)
        n = pc.sum(long).as_py() or 0
        fixed = pc.if_else(long, pc.utf8_slice_codeunits(plain, 0, MAX_TEXT_CHARS), plain)
        said.append(f"{n} {col.replace('_', ' ')}{'s' if n != 1 else ''} longer than {MAX_TEXT_CHARS:,} characters cut to that length")
        if dictionary:
            fixed = pa.chunked_array([c.dictionary_encode().cast(column.type) for c in fixed.chunks], column.type)
        events = events.set_column(events.schema.get_field_index(col), col, fixed)
    return events, "; ".join(said)


def _args_dropped(n: int) -> str:
    return f"{n} {'event' + chr(39) + 's' if n == 1 else 'events' + chr(39)} args longer than {MAX_TEXT_CHARS:,} characters dropped"


def _merged_metadata(per_chunk) -> list[dict]:
    """The chunks' metadata events, identical ones (all but their ts and dur) once, their counts summed:
    the manifest keeps each distinct metadata event once (`count`: how often the trace holds it)."""
    merged: dict[tuple, dict] = {}
    for metadata in per_chunk:
        for m in metadata:
            key = (m["name"], m["cat"], m["pid"], m["tid"], msgspec.json.encode(m["args"]))
            if (seen := merged.get(key)) is not None:
                seen["count"] += m["count"]
            else:
                merged[key] = dict(m)
    return list(merged.values())


def _category_counts(raw: RawRank) -> dict:
    """Events per category (null: None) over the events, flows and memory tables."""
    counts: dict[str, int] = {}
    for t in (raw.events, raw.flows, raw.memory):
        for chunk in t["category"].chunks:
            coded = pa.types.is_dictionary(chunk.type)  # counted by code: no string made per event
            for item in pc.value_counts(chunk.indices if coded else chunk).to_pylist():
                value = item["values"]
                if coded and value is not None:
                    value = chunk.dictionary[value].as_py()
                counts[value] = counts.get(value, 0) + item["counts"]
    return counts
