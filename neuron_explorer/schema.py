"""The one definition of the run format: every table, every column, its type, unit and meaning.

Everything that writes or reads a run takes its columns from here; docs/SCHEMA.md is generated
from this module (`python -m neuron_explorer.schema > docs/SCHEMA.md`) and a test fails when the
two differ. Only plain Parquet types are used (int64, int32, double, string, bool) so that any
engine reads a run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pyarrow is imported where a table is built: the CLI's start-up (--help, version) pays nothing for it
    import pyarrow as pa

FORMAT_VERSION = 2
"""Version of the run directory format. Bumped on any change a reader must know about."""

FORMAT_VERSION_KEY = b"neuron_explorer.format_version"
"""Key of the format version in every Parquet file's key-value metadata."""

DERIVED_ON_READ = {
    "events": {"self_ns": "NULL::BIGINT", "fwd_op_id": "NULL::BIGINT", "pass": "NULL::VARCHAR", "source_frame_id": "frame_id",
               "python_ancestors": "0::INT", "graph": "FALSE", "capture_op": "NULL::VARCHAR", "capture_top_op": "NULL::VARCHAR"},
}
"""Columns added since format v1, as DuckDB expressions over a v1 file's columns: runs written
before them open with these (re-import or re-record to compute the real values)."""

ID_STRIDE = 1_000_000_000_000
"""Run-wide ids are `rank * ID_STRIDE + index within the rank` (readable: rank 3, event 42 = 3000000000042)."""

_ARROW_TYPES = {"int64": "int64", "int32": "int32", "double": "float64", "string": "string", "bool": "bool_"}
"""Column type -> the pyarrow factory of its Arrow type."""

# The normalised event kinds. The original Kineto category is always kept in `category`.
KINDS: dict[str, str] = {
    "cpu_op": "an ATen/framework operator on a CPU thread (Kineto `cpu_op`, `operator`)",
    "python": "a Python function call (Kineto `python_function`)",
    "user_annotation": "a `record_function` range on a CPU thread",
    "step": "a profiler step range (`ProfilerStep#N`)",
    "runtime": "a runtime or driver call on the host (`cuda_runtime`, `cuda_driver`, `mtia_runtime`, "
    "`privateuse1_runtime`, `xpu_runtime`, old `Runtime`)",
    "kernel": "a kernel or compute command on a device (`kernel`, `mtia_ccp_events`, old `Kernel`)",
    "memcpy": "a device memory copy (`gpu_memcpy`, old `Memcpy`; a DMA transfer filed with the kernels, MTIA's "
    "`dma_request`: vocab.DEVICE_DMA_PATTERN)",
    "memset": "a device memory set (`gpu_memset`, old `Memset`)",
    "sync": "a synchronisation recorded on a device stream (`cuda_sync`; a device queue's wait on an event filed "
    "with the kernels, MTIA's `event_wait`: vocab.DEVICE_WAIT_KERNEL_PATTERN)",
    "gpu_annotation": "a `record_function` range as seen on a device stream (`gpu_user_annotation`)",
    "instant": "an instant event with no duration",
    "other": "any other category, kept as it is (`Trace`, `overhead`, unknown ones)",
}
DEVICE_KINDS = frozenset({"kernel", "memcpy", "memset", "sync", "gpu_annotation"})
"""Kinds that run on a device: their `pid` is the device index and their `tid` the stream."""


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    unit: str
    doc: str

    @property
    def arrow_type(self) -> pa.DataType:
        import pyarrow as pa

        return getattr(pa, _ARROW_TYPES[self.type])()


@dataclass(frozen=True)
class Table:
    name: str
    file: str
    doc: str
    columns: tuple[Column, ...]
    sort_by: tuple[str, ...]

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    def arrow_schema(self) -> pa.Schema:
        import pyarrow as pa

        fields = [pa.field(c.name, c.arrow_type) for c in self.columns]
        return pa.schema(fields, metadata={FORMAT_VERSION_KEY: str(FORMAT_VERSION).encode(), b"neuron_explorer.table": self.name.encode()})

    def empty(self) -> pa.Table:
        return self.arrow_schema().empty_table()


def _c(name: str, type_: str, unit: str, doc: str) -> Column:
    return Column(name, type_, unit, doc)


_RANK = _c("rank", "int32", "", "distributed rank the row belongs to (0 for a single-process job)")
_TS = _c("ts_ns", "int64", "ns", "start time on the run clock (Unix epoch when the trace gives `baseTimeNanoseconds` or the collector is live)")
_OP = _c("op_id", "int64", "event id", "innermost CPU operator (`kind='cpu_op'`) around the event, the event itself for an operator; "
         "for a device event, that of the runtime call that launched it")
_STEP = _c("step", "int64", "", "profiler step number N of the `ProfilerStep#N` range around the event (device events: of their launch); "
                                "where a trace's numbers start again (sessions joined), later steps are numbered on "
                                "(`data_quality.steps_renumbered`)")
_FRAME = _c("frame_id", "int64", "frame id",
            "innermost user source frame of the event (joins `frames.frame_id`); device events inherit their launch's")

EVENTS = Table(
    "events",
    "events.parquet",
    "Every span and instant of a rank: operators, Python calls, annotations, runtime calls, kernels, copies.",
    (
        _c("event_id", "int64", "event id", "unique in the run: rank * 10^12 + index of the event in time order within the rank"),
        _RANK,
        _c("kind", "string", "", "normalised kind: " + ", ".join(KINDS)),
        _c("category", "string", "", "the original Kineto category (`cat`), '' when the source had none"),
        _c("name", "string", "", "event name: operator, kernel, function or annotation name"),
        _c("phase", "string", "", "Chrome trace phase: 'X' for a span, 'i' for an instant"),
        _TS,
        _c("dur_ns", "int64", "ns", "duration; 0 for instants"),
        _c("pid", "int64", "", "process id; for device events the device index"),
        _c("tid", "int64", "", "thread id; for device events the stream"),
        _c("pid_text", "string", "", "the original pid when it was not an integer (e.g. 'Spans'); null otherwise"),
        _c("tid_text", "string", "", "the original tid when it was not an integer; null otherwise"),
        _c("device", "int32", "", "device index for device events (from `pid`); null on the host"),
        _c("stream", "int64", "", "device stream for device events (args `stream`, else `tid`); null on the host"),
        _c("depth", "int32", "", "nesting depth on its track (same pid and tid): 0 for a top-level slice"),
        _c("python_ancestors", "int32", "", "how many of the slices around it on its track (parent, its parent, ...) are "
           "Python frames (kind 'python'): `depth - python_ancestors` is its depth with the Python frames folded away"),
        _c("parent_id", "int64", "event id", "innermost slice on the same track that contains this event"),
        _OP,
        _c("top_op_id", "int64", "event id", "outermost CPU operator around the event (device events: of their launch)"),
        _c("launch_id", "int64", "event id", "device events: the runtime call that launched it (by correlation id, else by an `ac2g` flow)"),
        _c("correlation", "int64", "", "Kineto correlation id joining a runtime call and its device events"),
        _c("external_id", "int64", "", "Kineto `External id` joining an operator and the runtime calls it made"),
        _STEP,
        _c("module_path", "string", "", "`nn.Module` path around the event (e.g. 'Net.encoder.Linear_0') where modules were recorded"),
        _FRAME,
        _c("self_ns", "int64", "ns", "self time: `dur_ns` less the durations of the slices directly inside it on its track "
           "(same pid and tid, `parent_id` = this event); equals `dur_ns` for device events and slices with nothing inside"),
        _c("fwd_op_id", "int64", "event id", "backward work (inside `autograd::engine::evaluate_function: …`, and device work it launched): "
           "the forward operator that built its autograd node, by the `fwdbwd` flow, else the `Sequence number`; "
           "`AccumulateGrad` takes the node evaluated just before it on its thread, unless a gradient hook runs a collective inside it "
           "(DDP's bucket all-reduce: null); null otherwise"),
        _c("pass", "string", "", "'forward', 'backward' (inside an autograd node's evaluation or the backward call), "
           "'optimizer' (inside torch's `Optimizer.step#…`/`Optimizer.zero_grad#…`), 'data' (inside `enumerate(DataLoader)#…`), "
           "'other' (steps, profiler bookkeeping, device work with no launch); device events take their launch's"),
        _c("source_frame_id", "int64", "frame id", "the user statement this event's time belongs to: for backward work the frame of "
           "its forward operator (`fwd_op_id`), else `frame_id`; what per-line figures group by"),
        _c("args", "string", "", "the remaining Kineto args as a JSON object (shapes, dtypes, flops, bytes, ...); null when empty. "
           "The live collector adds its own: `compiled_from` on a torch.compile kernel (vocab.COMPILED_FROM_ARG), and the "
           "`reason`, `hint`, `guard`, `function`, `compile_id` of a `torch.compile graph break` or `torch.compile recompile` "
           "event (vocab.COMPILE_RECORD_ARGS)"),
        _c("graph", "bool", "", "device work replayed by a graph launch: its `launch_id` is a `cudaGraphLaunch`/`hipGraphLaunch`/"
           "`cuGraphLaunch` (it takes the launch's operator, step and statement, or its capture's below); false otherwise"),
        _c("capture_op", "string", "", "graph replays imported with their capture (`--capture`): the innermost operator around "
           "the launch call of this work when the graph was captured (the work paired by kernel sequence, docs/METRICS.md "
           "'Graph replays'; `source_frame_id` and `frame_id` are then its statement and frame at capture); null otherwise"),
        _c("capture_top_op", "string", "", "the outermost operator around that launch call at capture; null otherwise"),
    ),
    ("ts_ns",),
)

FRAMES = Table(
    "frames",
    "frames.parquet",
    "Source locations that events link to through `frame_id`.",
    (
        _c("frame_id", "int64", "frame id", "unique in the run: rank * 10^12 + index"),
        _RANK,
        _c("file", "string", "", "source file path as recorded"),
        _c("line", "int32", "", "line number (see `line_kind`)"),
        _c("function", "string", "", "function name"),
        _c("is_user", "bool", "", ("true for user code; false for torch, site-packages, the standard library, built-ins, "
                                   "code torch.compile or torch.fx generated (Inductor's cache, a GraphModule's `<eval_with_key>.N`) and "
                                   "a tensor subclass's or mode's dispatch hook (`__torch_function__`, `__torch_dispatch__`)")),
        _c("line_kind", "string", "",
           "'call': the calling statement (live collector; in an imported trace, the statements a torch.compile kernel was "
           "generated from, read from Inductor's provenance: `import --provenance`); 'def': the function's def line (what "
           "imported JSON traces hold)"),
        _c("parent_frame_id", "int64", "frame id", "the frame that called this one, when known"),
        _c("code", "string", "", "the text of the line (stripped) when the source file was readable at collection time; null otherwise"),
    ),
    ("frame_id",),
)

FLOWS = Table(
    "flows",
    "flows.parquet",
    "Flow endpoints: one row per flow event of the trace ('s' start, 'f' finish, 't' step); pairs share `flow_id` and `category`.",
    (
        _RANK,
        _c("flow_id", "int64", "", "the trace's flow id; a start and a finish with the same id and category form one link"),
        _c("category", "string", "", "flow category: 'ac2g' (launch → device), 'fwdbwd' (forward → backward), ..."),
        _c("name", "string", "", "flow name as recorded"),
        _c("phase", "string", "", "'s', 'f' or 't'"),
        _TS,
        _c("pid", "int64", "", "process id (device index on a device)"),
        _c("tid", "int64", "", "thread id (stream on a device)"),
        _c("binding_point", "string", "", "'e' when the finish binds to the enclosing slice, else null"),
        _c("event_id", "int64", "event id", "the slice this endpoint binds to (starts at `ts_ns` on the same track, else encloses it)"),
    ),
    ("ts_ns",),
)

MEMORY = Table(
    "memory",
    "memory.parquet",
    "Allocator events (`[memory]` instants): one row per allocation (bytes > 0) or free (bytes < 0).",
    (
        _RANK,
        _TS,
        _c("pid", "int64", "", "process id"),
        _c("tid", "int64", "", "thread id"),
        _c("device_type", "int32", "", "c10 device type (0 = CPU, 1 = CUDA, ...)"),
        _c("device", "int32", "", "device index (-1 for the CPU)"),
        _c("addr", "int64", "", "address of the block"),
        _c("bytes", "int64", "bytes", "size: positive for an allocation, negative for a free"),
        _c("total_allocated", "int64", "bytes", "bytes allocated on that device after this event; for traces that do not record it "
           "(torch <= 1.9), the running sum of `bytes` on the device from the trace's first allocator event"),
        _c("total_reserved", "int64", "bytes", "bytes reserved by the caching allocator after this event"),
        _OP,
        _STEP,
        _FRAME,
        _c("category", "string", "", "original category ('' when none)"),
    ),
    ("ts_ns",),
)

COUNTERS = Table(
    "counters",
    "counters.parquet",
    "Counter tracks (Chrome 'C' events): one row per series value.",
    (
        _RANK,
        _TS,
        _c("pid", "int64", "", "process id"),
        _c("name", "string", "", "counter name"),
        _c("series", "string", "", "series within the counter (the args key)"),
        _c("value", "double", "", "value at `ts_ns`"),
        _c("category", "string", "", "original category ('' when none)"),
    ),
    ("ts_ns",),
)

RANK_TABLES: tuple[Table, ...] = (EVENTS, FRAMES, FLOWS, MEMORY, COUNTERS)
"""Tables written once per rank, as RUN/rank=<r>/<file>."""

SCHEMA_FIELDS = Table(
    "schema_fields",
    "schema_fields.parquet",
    "This description of the run's tables, stored in every run so that plain DuckDB can read it.",
    (
        _c("table_name", "string", "", "table name"),
        _c("file", "string", "", "file name inside each rank=<r>/ partition"),
        _c("column_name", "string", "", "column name"),
        _c("type", "string", "", "Parquet/Arrow type"),
        _c("unit", "string", "", "unit ('ns', 'bytes', 'event id', ...) or ''"),
        _c("doc", "string", "", "what the column holds"),
    ),
    ("table_name",),
)

TABLES: dict[str, Table] = {t.name: t for t in (*RANK_TABLES, SCHEMA_FIELDS)}


@dataclass(frozen=True)
class View:
    """A view that `store.open_run` derives (from events or the manifest) rather than reads from a file."""

    name: str
    doc: str
    columns: tuple[Column, ...]


DERIVED_VIEWS: tuple[View, ...] = (
    View("steps", "One row per profiler step and rank, derived from the `kind='step'` events.", (
        _RANK,
        _c("step", "int64", "", "profiler step number N of `ProfilerStep#N`"),
        _c("ts_ns", "int64", "ns", "start of the step's first range"),
        _c("dur_ns", "int64", "ns", "end of its last range minus start"),
        _c("event_id", "int64", "event id", "the step's first range (joins events.event_id)"),
    )),
    View("ranks", "One row per rank of the run, from manifest.json.", (
        _RANK,
        _c("world_size", "int64", "", "ranks in the job, when the trace said"),
        _c("events", "int64", "", "events imported or recorded for the rank"),
        _c("source", "string", "", "the trace file the rank came from (import) or 'live'"),
    )),
    View("devices", "One row per device a rank reported (Kineto `deviceProperties`), from manifest.json.", (
        _RANK,
        _c("device", "int64", "", "device index (matches events.device)"),
        _c("name", "string", "", "device name"),
        _c("properties", "string", "", "all reported properties as a JSON object"),
    )),
)

DERIVED_DIR = "derived"
"""Folder of a run (RUN/derived/) holding tables computed from the run's own tables to speed up a
reader (DERIVED_TABLES). Optional: a run without it, or with a stale or unreadable file in it, reads
the same; nothing else in the run refers to it. The run check keeps its record of the partition
files it found good there (run_check.CHECKED_RECORD, runs of many ranks), and reads nothing else in it."""

DERIVED_KEY = b"neuron_explorer.derived_from"
"""Key, in a derived file's Parquet metadata, of what it was computed from (store.derived_key: the
rank partitions' names, sizes and modification times, and the computation's own description). A
file whose key differs from the run's current one is stale: it is computed again and replaced."""

TIMELINE_PYRAMID = Table(
    "timeline_pyramid",
    "timeline_pyramid.parquet",
    "The dashboard timeline's pre-aggregated short events (dashboard/timeline.py `_pyramid`): every event shorter "
    "than the run's longest few thousand, counted per lane, nesting row and one of 65,536 fine time buckets over the run. "
    "One file per scope (`all` ranks or `rank<r>`) and layout (Python frames folded or not, the tool's frames hidden or "
    "not), named `timeline_pyramid.<scope>.<layout>.parquet`; written at the first dashboard open of the run.",
    (
        _RANK,
        _c("is_device", "bool", "", "a device lane (device, stream) rather than a host one (pid, tid)"),
        _c("lane_a", "int64", "", "the lane's device index, or pid"),
        _c("lane_b", "int64", "", "the lane's stream, or tid"),
        _c("lane_text", "string", "", "the lane's non-integer pid ('' when there is none)"),
        _c("depth", "int32", "", "the events' row in the lane (capped at the rows drawn)"),
        _c("fine_bucket", "int64", "", "(ts_ns - the run's first start) // the fine bucket width"),
        _c("busy", "int64", "ns", "sum of the events' durations"),
        _c("n", "int64", "", "events counted"),
        _c("end_max", "int64", "ns", "the furthest end of the events"),
        _c("kind", "string", "", "kind of the longest event"),
        _c("event_id", "int64", "event id", "the longest event"),
        _c("dur", "int64", "ns", "duration of the longest event"),
    ),
    ("rank", "fine_bucket"),
)

_LANE_COLS = TIMELINE_PYRAMID.columns[:5]  # rank, is_device, lane_a, lane_b, lane_text: a lane's identity (dashboard/runs.py LANE_SQL)

TIMELINE_LANES = Table(
    "timeline_lanes",
    "timeline_lanes.parquet",
    "The dashboard timeline's lanes (dashboard/runs.py `OpenRun.lanes`): one row per lane (a host thread or a device "
    "stream) with what decides its rows. One file per scope (`all` ranks or `rank<r>`), rank picked (`all` or `r<rank>`) "
    "and layout (Python frames folded or not, the tool's frames hidden or not), named "
    "`timeline_lanes.<scope>-<rank>-<layout>.parquet`; written at the first dashboard open of the run.",
    (
        *_LANE_COLS,
        _c("max_row", "int64", "", "the deepest row of the lane's events drawn in this layout (0 when none)"),
        _c("has_python", "bool", "", "the lane holds Python frames (`kind='python'`)"),
        _c("first", "int64", "", "the shallowest depth of the lane's events drawn in this layout"),
        _c("first_ts_ns", "int64", "ns", "the first start of the lane's events"),
        _c("last_end_ns", "int64", "ns", "the last end of the lane's events (ts_ns + dur_ns)"),
    ),
    ("rank",),
)

TIMELINE_LONG_EVENTS = Table(
    "timeline_long_events",
    "timeline_long_events.parquet",
    "The run's few thousand longest events, kept in the dashboard's memory (dashboard/runs.py `OpenRun.long_events`): every "
    "other event is no longer than `short_max_dur_ns`, which bounds how far before a window a timeline query looks. One "
    "file per scope (`all` ranks or `rank<r>`), named `timeline_long_events.<scope>-all.parquet`; written at the first "
    "dashboard open of the run.",
    (
        _c("short_max_dur_ns", "int64", "ns", "the longest duration of an event not in this table (the same on every row)"),
        _c("event_id", "int64", "event id", "the event (events.event_id)"),
        _c("kind", "string", "", "its kind"),
        _c("name", "string", "", "its name"),
        _TS,
        _c("dur_ns", "int64", "ns", "its duration"),
        _c("depth", "int32", "", "its nesting depth on its track"),
        _c("python_ancestors", "int32", "", "Python frames around it on its track (events.python_ancestors)"),
        *_LANE_COLS,
    ),
    ("rank", "ts_ns"),
)

TIMELINE_SPANS = Table(
    "timeline_spans",
    "timeline_spans.parquet",
    "Each rank's first event start and last event end (dashboard/runs.py `OpenRun.span`): the run's span, the origin of "
    "every timeline's time axis, without a scan of every rank's events at each open. One file per scope (`all` ranks "
    "or `rank<r>`), named `timeline_spans.<scope>-all.parquet`; written at the first dashboard open of the run.",
    (
        _RANK,
        _c("first_ts_ns", "int64", "ns", "the first start of the rank's events"),
        _c("last_end_ns", "int64", "ns", "the last end of the rank's events (ts_ns + dur_ns)"),
    ),
    ("rank",),
)

DERIVED_TABLES: dict[str, Table] = {t.name: t for t in (TIMELINE_PYRAMID, TIMELINE_LANES, TIMELINE_LONG_EVENTS, TIMELINE_SPANS)}
"""The tables a run may hold in RUN/derived/ (DERIVED_DIR)."""

MANIFEST_KEYS: dict[str, str] = {
    "format_version": "run format version (this document's)",
    "tool_version": "Neuron Explorer version that wrote the run",
    "created": "when the run was written (ISO 8601, UTC)",
    "source": "'import' (from Kineto JSON) or 'live' (recorded by the collector)",
    "sources": "imported files: path, size, rank",
    "command": "command line that produced the run",
    "ranks": "per rank: rank, world_size, event counts, span_ns (first event start to last event end), devices, distributedInfo, "
             "trace metadata keys, metadata events (identical ones once, `count`: how many the trace holds), op_args_named (whether "
             "any operator's args name its inputs or flops: a trace recorded with shapes or flops; absent in runs written before "
             "it was kept)",
    "devices": "device properties (Kineto `deviceProperties`) per rank",
    "steps": "profiler steps found, per rank (`number_in_trace`: a renumbered step's N in the trace)",
    "warnings": "data-quality problems: counted, never raised (see `data_quality`)",
    "data_quality": "counts per rank: device events with no launch (`device_events_without_launch`; of them, launched before the "
                    "trace began: `device_launched_before_trace`, a correlation id below every runtime call's, or a start before the first "
                    "runtime call's), non-positive durations, "
                    "overlapping slices, clock anomalies, "
                    "profiler steps numbered on where the trace's numbers start again (`steps_renumbered`), "
                    "torch.compile kernel calls looked up and charged to their statements (`compiled_kernels`, "
                    "`compiled_kernels_charged`, their time in `…_ns`), the longest wait from a device's first work's launch "
                    "to its start with nothing traced on the device before it (`first_work_wait_ns`, `first_work_wait_device`; "
                    "warned from 1 ms: a device clock offset, or work the trace does not hold), the largest move of a device's events to its "
                    "launches where its clock ran behind the host's (`device_clock_shift_ns`, `device_clock_shift_device`; docs/METRICS.md), ...",
    "provenance": "Inductor's provenance files an import read (`import --provenance`, or the structured log found beside the trace)",
    "profiler": "profiler options (live runs)",
    "converter": "what read the profiler's results: 'native' (the C++ converter) or 'python' (its fallback, same tables; live runs)",
    "git": "commit and dirty flag of the profiled script's repository (live runs)",
    "host": "host name (live runs)",
    "cwd": "the working directory when recording began: frames recorded relative to it (`sub/train.py`) are read from it (live runs)",
    "torch_version": "torch version (live runs)",
    "python_version": "Python version (live runs)",
    "started": "when recording began (ISO 8601, UTC; live runs)",
    "process_group": "torch.distributed setup while recording: backend, rank, world size (live runs; null for one process)",
}


def schema_fields_table() -> pa.Table:
    import pyarrow as pa

    rows = [(t.name, t.file, c.name, c.type, c.unit, c.doc) for t in RANK_TABLES for c in t.columns]
    cols = list(zip(*rows))
    return pa.Table.from_arrays([pa.array(list(col), pa.string()) for col in cols], schema=SCHEMA_FIELDS.arrow_schema())


def markdown() -> str:
    """docs/SCHEMA.md, generated."""
    out = [
        "# Run format (v%d)" % FORMAT_VERSION,
        "",
        "<!-- generated by `python -m neuron_explorer.schema > docs/SCHEMA.md`; do not edit -->",
        "",
        "A run is a directory: `manifest.json`, `schema_fields.parquet`, and one `rank=<r>/` folder per rank",
        "holding the tables below. Every Parquet file carries the format version under the key",
        f"`{FORMAT_VERSION_KEY.decode()}` of its metadata. Timestamps and durations are int64 nanoseconds.",
        "",
        "## Event kinds",
        "",
        "| kind | what |",
        "| --- | --- |",
    ]
    out += [f"| `{k}` | {v} |" for k, v in KINDS.items()]
    def section(title: str, intro: str, columns) -> list[str]:
        return (["", f"## {title}", "", intro, "", "| column | type | unit | meaning |", "| --- | --- | --- | --- |"]
                + [f"| `{c.name}` | {c.type} | {c.unit} | {c.doc} |" for c in columns])

    for t in (*RANK_TABLES, SCHEMA_FIELDS):
        where = f"RUN/rank=<r>/{t.file}" if t in RANK_TABLES else f"RUN/{t.file}"
        out += section(t.name, f"`{where}`, sorted by {', '.join(t.sort_by)}. {t.doc}", t.columns)
    for v in DERIVED_VIEWS:
        out += section(f"{v.name} (view)", f"Derived by `open_run`, not stored. {v.doc}", v.columns)
    for t in DERIVED_TABLES.values():
        out += section(f"{t.name} (derived, optional)", f"`RUN/{DERIVED_DIR}/`. Computed from the run, not part of it: a run "
                       "without it reads the same, and a file whose metadata key "
                       f"`{DERIVED_KEY.decode()}` no longer matches the run is computed again. {t.doc}", t.columns)
    out += ["", "## manifest.json", "", "| key | meaning |", "| --- | --- |"]
    out += [f"| `{k}` | {v} |" for k, v in MANIFEST_KEYS.items()]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
