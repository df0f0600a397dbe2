"""The raw tables of one rank: what every collector hands to build.py, in one schema.

The JSON importer (trace_rank / _kineto_json) and the live collector (torch_profiler with its
Python and C++ converters) each turn their source into a `RawRank` of these tables; `build_rank`
checks it with `check_raw_rank` before it reads a column, so a collector that drifts from the
contract fails there, naming the table and column, not somewhere inside the link passes.

Times are int64 ns (events' ts_ns relative to `RawRank.base_ns`); ids are int64 (null where the
trace has none); text with few distinct values (category, name, phase of events) is
dictionary-encoded. Must not: know about JSON, torch or the run tables (schema.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from ._packed_text import PackedText

TEXT_CODES = pa.dictionary(pa.int32(), pa.string())
"""Text with few distinct values: build.py reads the dictionary codes."""
_I64 = pa.int64()

RAW_EVENTS = pa.schema({
    "category": TEXT_CODES, "name": TEXT_CODES, "phase": TEXT_CODES, "ts_ns": _I64, "dur_ns": _I64, "pid": _I64,
    "tid": _I64, "pid_text": pa.string(), "tid_text": pa.string(), "correlation": _I64, "external_id": _I64,
    "stream": _I64, "args": pa.string(), "frame_index": _I64,
    "module_path": pa.string(),
})
"""Slices ('X') and instants ('i'). pid/tid hold integer ids; pid_text/tid_text the ids that were
text in the trace. args is the event's args as JSON text. (Kineto's `Python id` and `Python parent id`
are not kept: the build nests python_function events by time; as two columns of a row per event
they were 22 MiB of a 1.45M-event trace's decode that nothing read.)"""
RAW_EVENTS_OPTIONAL = ("frame_index", "module_path")
"""Columns only a collector that knows each event's source line and module (the live one) gives."""
RAW_MEMORY = pa.schema({
    "ts_ns": _I64, "pid": _I64, "tid": _I64, "device_type": pa.int32(), "device": pa.int32(), "addr": _I64,
    "bytes": _I64, "total_allocated": _I64, "total_reserved": _I64, "category": pa.string(),
})
"""`[memory]` instants: one row per allocation (bytes > 0) or free (bytes < 0)."""
RAW_FLOWS = pa.schema({
    "flow_id": _I64, "category": TEXT_CODES, "name": TEXT_CODES, "phase": TEXT_CODES, "ts_ns": _I64,
    "pid": _I64, "tid": _I64, "binding_point": TEXT_CODES,
})
"""Flow endpoints ('s', 'f', 't'). Their text takes a few values ('ac2g', 's', 'e')."""
RAW_COUNTERS = pa.schema({
    "ts_ns": _I64, "pid": _I64, "name": pa.string(), "series": pa.string(), "value": pa.float64(),
    "category": pa.string(),
})
"""Counter samples, one row per series value."""
RAW_FRAMES = pa.schema({
    "file": pa.string(), "line": pa.int32(), "function": pa.string(), "is_user": pa.bool_(),
    "line_kind": pa.string(), "parent_index": _I64,
})
"""Source frames a live collector interned; events' frame_index points into them."""
EVENT_PHASES = ("X", "i")


@dataclass
class RawRank:
    """What a collector hands over for one rank: tables in the schemas above."""

    rank: int
    events: pa.Table
    flows: pa.Table
    memory: pa.Table
    counters: pa.Table
    base_ns: int = 0
    frames: pa.Table | None = None
    metadata: dict = field(default_factory=dict)
    packed_args: PackedText | None = None
    """The events' args held compressed (the JSON importer: a trace's args are most of its bytes);
    the events table then has no args column."""
    device_clock_shift: dict[int, int] = field(default_factory=dict)
    """{device: ns} its events were moved earlier, its clock offset from the host's (device_clock)."""


class RawTableError(TypeError):
    """A collector handed build.py a table that is not in the raw schema (a bug in the collector)."""


def check_table(table: pa.Table, schema: pa.Schema, what: str, optional: tuple[str, ...] = ()) -> None:
    """Every column of `schema` (but `optional` ones) present with its type, and no other column."""
    have = {f.name: f.type for f in table.schema}
    missing = [f.name for f in schema if f.name not in have and f.name not in optional]
    extra = [name for name in have if schema.get_field_index(name) < 0]
    wrong = [f"{f.name} is {have[f.name]}, not {f.type}" for f in schema if f.name in have and have[f.name] != f.type]
    problems = ([f"missing {', '.join(missing)}"] if missing else []) + ([f"unknown {', '.join(extra)}"] if extra else []) + wrong
    if problems:
        raise RawTableError(f"raw {what} table: " + "; ".join(problems))


def check_raw_rank(raw: RawRank) -> None:
    """The one check of the collector → build contract (build_rank calls it first)."""
    check_table(raw.events, RAW_EVENTS, "events", RAW_EVENTS_OPTIONAL + (("args",) if raw.packed_args is not None else ()))
    if raw.packed_args is not None and ("args" in raw.events.column_names or len(raw.packed_args) != raw.events.num_rows):
        raise RawTableError(f"raw events table: {len(raw.packed_args)} packed args for {raw.events.num_rows} rows"
                            + (", and an args column too" if "args" in raw.events.column_names else ""))
    check_table(raw.flows, RAW_FLOWS, "flows")
    check_table(raw.memory, RAW_MEMORY, "memory")
    check_table(raw.counters, RAW_COUNTERS, "counters")
    if raw.frames is not None:
        check_table(raw.frames, RAW_FRAMES, "frames")
    phases = {v for chunk in raw.events["phase"].chunks for v in chunk.dictionary.to_pylist()}
    if phases - set(EVENT_PHASES):
        raise RawTableError(f"raw events table: phases {sorted(phases - set(EVENT_PHASES))}, not only {EVENT_PHASES}")
    if raw.frames is None and "frame_index" in raw.events.column_names:
        raise RawTableError("raw events table: frame_index without a frames table")
