"""Turn one cycle of torch.profiler's in-memory results into raw Arrow columns (no JSON).

Two sources of the same recording are read, each for what it holds best:
- `kineto_results.events()` (KinetoEvent): every event Kineto would write to the JSON trace,
  with its Kineto category (`activity_type()`), times on the Unix-epoch clock in ns, thread,
  device and stream, correlation ids, shapes and flops. This gives the `events` table.
- `kineto_results.experimental_event_tree()`: the host call tree, where Python call nodes carry
  the *caller's* line (`extra_fields.caller`: the statement `y = model(x)`, not the `def` line of
  `forward`) and their `nn.Module`, and allocation nodes carry the allocator's numbers. This gives
  each host event its source frame and module path, and the `memory` table.
The two are joined by the operator's correlation id (operators, annotations) and by (start time,
name) for Python calls; device events get their frame later in build.py, through their launch.

Frames are the user's call sites as a tree: a frame is (file, line, function, parent frame),
where the parent is the next user call site further out. An event links to its innermost user
call site; an event with no user code around it links to its innermost call site (not user).

This module holds the rules, in Python; native/live_convert.cpp applies the same rules in C++
(about twenty times faster, asking `_NativeHelper` here for the decisions that need Python) and
is what the collector uses when it can be built. tests/test_native.py holds the two equal.

Must not: write files, compute links between events (build.py does), or import torch at module
import time (callers pass the results in).
"""

from __future__ import annotations

import json
import os
import re
import site
import sys
import sysconfig
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from ..no_pandas import without_pandas  # noqa: F401  (the collector's write runs inside it)
from .kineto_names import (
    C10_DEVICE_TYPE,
    C10_PRIVATEUSE1,
    CPU_INSTANT_CATEGORY,
    CPU_OP_CATEGORY,
    EXTERNAL_ID_ARG,
    FLOPS_ARG,
    FORWARD_BACKWARD_FLOW,
    FWD_THREAD_ARG,
    INPUT_DIMS_ARG,
    INPUT_TYPE_ARG,
    LAUNCH_FLOW,
    MODULE_PREFIX,
    PRIVATEUSE1_DRIVER_CATEGORY,
    PYTHON_FUNCTION_CATEGORY,
    SEQUENCE_NUMBER,
    USER_ANNOTATION_CATEGORY,
)
from .kineto_names import MEMORY_EVENT_NAME as MEMORY_NAME
from .raw import RAW_COUNTERS, RAW_EVENTS, RAW_FLOWS, RAW_MEMORY
from .sources import DISPATCH_HOOKS, is_user_file


@dataclass
class FrameTable:
    """Interned source frames shared by every cycle of one recording (so indices stay valid)."""

    keys: dict[tuple, int] = field(default_factory=dict)
    file: list[str] = field(default_factory=list)
    line: list[int] = field(default_factory=list)
    function: list[str] = field(default_factory=list)
    is_user: list[bool] = field(default_factory=list)
    parent: list[int] = field(default_factory=list)
    _file_cache: dict[str, tuple[str, bool]] = field(default_factory=dict)
    launcher_files: set[str] = field(default_factory=set)

    def resolve(self, recorded: str) -> tuple[str, bool]:
        """(path to store, is user code) of a file name as the profiler recorded it."""
        hit = self._file_cache.get(recorded)
        if hit is None:
            hit = self._file_cache[recorded] = _resolve_file(recorded)
        return hit

    def intern(self, recorded_file: str, line: int, caller, parent: int) -> int:
        """Index of the frame (file, line, parent); `caller` (torch's frame, or the name as a str)
        gives the function name of a new one. A line lies in one function, so the name is not part
        of the key (and not read per call). The launcher's frames (is_launcher_file) are no frame: -1."""
        key = (recorded_file, line, parent)
        idx = self.keys.get(key)
        if idx is None:
            if recorded_file in self.launcher_files or is_launcher_file(recorded_file):
                self.launcher_files.add(recorded_file)
                return -1
            function = caller if isinstance(caller, str) else _text(caller, "function_name")
            path, user = self.resolve(recorded_file)
            idx = self.keys[key] = len(self.file)
            self.file.append(path)
            self.line.append(line)
            self.function.append(function)
            self.is_user.append(user and function not in DISPATCH_HOOKS)
            self.parent.append(parent)
        return idx

    def table(self) -> pa.Table:
        n = len(self.file)
        return pa.table({
            "file": pa.array(self.file, pa.string()),
            "line": pa.array(self.line, pa.int32()),
            "function": pa.array(self.function, pa.string()),
            "is_user": pa.array(self.is_user, pa.bool_()),
            "line_kind": pa.array(["call"] * n, pa.string()),
            "parent_index": pa.array(self.parent, pa.int64()),
        })


def _library_roots() -> list[str]:
    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib", "scripts"):  # scripts: console entry points
        p = sysconfig.get_paths().get(key)
        if p:
            roots.add(os.path.realpath(p))
    try:
        roots.update(os.path.realpath(p) for p in site.getsitepackages())
    except AttributeError:  # some virtualenv layouts lack it
        pass
    return sorted(roots, key=len, reverse=True)


_LIB_ROOTS: list[str] | None = None
# Neuron Explorer's own frames (the `record` runner around a script) are never the user's code.
_OWN_PACKAGE = os.path.realpath(os.path.join(os.path.dirname(__file__), "..")) + os.sep


def _resolve_file(recorded: str) -> tuple[str, bool]:
    """The profiler strips sys.path prefixes ('typing.py', 'torch/nn/...', 'train.py'); find the
    file again to tell the standard library and installed packages from the user's own code."""
    global _LIB_ROOTS
    if recorded.startswith("<"):
        return recorded, False
    if _LIB_ROOTS is None:
        _LIB_ROOTS = _library_roots()
    candidates = [recorded] if os.path.isabs(recorded) else [os.path.join(p or os.getcwd(), recorded) for p in sys.path]
    for c in candidates:
        if os.path.isfile(c):
            real = os.path.realpath(c)
            in_library = any(real.startswith(root + os.sep) for root in _LIB_ROOTS) or real.startswith(_OWN_PACKAGE)
            return os.path.abspath(c), (not in_library) and is_user_file(real) and is_user_file(recorded)
    return recorded, is_user_file(recorded)


@dataclass
class CycleColumns:
    """Raw columns of one recorded cycle, ready for RawRank (ts_ns are Unix-epoch ns)."""

    events: pa.Table
    memory: pa.Table
    flows: pa.Table


def empty_cycle() -> CycleColumns:
    return CycleColumns(RAW_EVENTS.empty_table(), RAW_MEMORY.empty_table(), RAW_FLOWS.empty_table())


def empty_counters() -> pa.Table:
    return RAW_COUNTERS.empty_table()


def _device_type_code(device) -> int:
    t = getattr(device, "type", str(device))
    code = C10_DEVICE_TYPE.get(t)
    if code is None:
        return C10_PRIVATEUSE1
    return code


UNDECODABLE = "<name not decodable>"
_PROFILER_OWN = re.compile(r"^(torch/profiler/|torch/autograd/profiler\.py\(|(.*[/\\])?neuron_explorer[/\\]collectors[/\\]"
                           r"(torch_profiler\.py\(|_live_\w+\.py\(|record\.py\(\d+\): step$))")


# The Python call that statements.StatementLines makes for every torch call: its caller is the
# user's statement; it gets no event of its own.
_STATEMENT_MARKER = re.compile(r"neuron_explorer[/\\]collectors[/\\]statements\.py\(\d+\): __torch_function__$")


# The frames that run the user's script (`python -m neuron_explorer record`: runpy, the CLI's typer
# and click, Neuron Explorer's own modules, the editable install's import hook): not the job's
# code, so they get no event and no frame; the job's calls under them are kept.
_LAUNCHER_FILE = re.compile(r"^(<frozen runpy>|(.*[/\\])?runpy\.py|(.*[/\\])?(neuron_explorer|typer|click)[/\\].*\.py"
                            r"|(.*[/\\])?__editable___neuron_explorer\w*\.py)$")
_LAUNCHER_CALL = re.compile(_LAUNCHER_FILE.pattern[:-1] + r"\(\d+\): ")


CALL, PROFILER_OWN, NO_EVENT = 0, 1, 2
"""What a Python call node is (`call_kind`): the job's own call, the profiler watching itself
(start, stop, step: left out with everything under it), or a call with no event of its own whose
children are kept: the StatementLines call (its caller is the statement) and the launcher's frames
(`is_launcher_file`)."""
STATEMENT_MARKER = NO_EVENT


def call_kind(name: str) -> int:
    if _PROFILER_OWN.search(name):
        return PROFILER_OWN
    if _STATEMENT_MARKER.search(name) or _LAUNCHER_CALL.match(name):
        return NO_EVENT
    return CALL


def is_launcher_file(recorded: str) -> bool:
    """A file of the frames that run the user's script (runpy, typer, click, Neuron Explorer)."""
    return bool(_LAUNCHER_FILE.match(recorded)) or (os.path.isabs(recorded) and os.path.realpath(recorded).startswith(_OWN_PACKAGE))


def _text(obj, attr: str) -> str:
    # torch sometimes hands back a name or file name whose bytes are not UTF-8 (seen on C
    # functions and on frames of code freed before the cycle ended); the event is kept under a
    # placeholder rather than the whole cycle lost.
    try:
        return getattr(obj, attr)
    except UnicodeDecodeError:
        return UNDECODABLE


def _node_name(node) -> str:
    return _text(node, "name")


@dataclass
class _PythonRows:
    """Python call events, read from the tree (which holds all they need) rather than from
    KinetoEvents: one pass over the tree instead of a second set of calls per event."""

    ts: list = field(default_factory=list)
    dur: list = field(default_factory=list)
    thread: list = field(default_factory=list)  # the profiler's internal thread id
    name: list = field(default_factory=list)
    frame: list = field(default_factory=list)
    module: list = field(default_factory=list)


def _walk_tree(roots, frames: FrameTable):
    """Frame and module path of each operator (by correlation id), the Python call events with
    theirs, and the allocation nodes."""
    from torch._C._profiler import _EventType

    py_call, py_ccall, torch_op, allocation = _EventType.PyCall, _EventType.PyCCall, _EventType.TorchOp, _EventType.Allocation
    op_info: dict[int, tuple[int, str | None]] = {}
    py = _PythonRows()
    allocations = []
    kind_cache: dict[str, int] = {}
    file_user: dict[str, bool] = {}
    runs_user_code: dict[str, bool | None] = {}
    # (node, innermost user frame, innermost frame of any kind, module path, inside the profiler's
    # own calls, whether the code that called this node is the user's: True/False, None = not
    # known without asking torch). A root's "caller" is only the line its frame was at when
    # recording began (it has no caller), so roots start with user_frame -2 and it is skipped.
    stack = [(r, -2, -1, None, False, None) for r in reversed(roots)]
    pop, push = stack.pop, stack.extend
    while stack:
        node, user_frame, any_frame, module, in_profiler, caller_user = pop()
        children_caller_user = None
        tag = node.tag
        is_root = user_frame == -2
        if is_root:
            user_frame = -1
        if tag == py_call or tag == py_ccall:
            name = _node_name(node)
            kind = kind_cache.get(name)
            if kind is None:
                kind = kind_cache[name] = call_kind(name)
            if in_profiler or kind == PROFILER_OWN:
                # the profiler watching itself (start, stop, step): its calls straddle the step
                # ranges they open and close, so they would only show as overlapping slices
                in_profiler = True
            else:
                # A Python call's children are called from its own file: when that is not user
                # code, their caller needs no lookup (most calls happen inside torch).
                children_caller_user = runs_user_code.get(name, 0)
                if children_caller_user == 0:
                    children_caller_user = runs_user_code[name] = _runs_user_code(name, tag == py_call, frames)
                if not is_root and (caller_user is not False or user_frame < 0):
                    caller = node.extra_fields.caller
                    c_file = _text(caller, "file_name")
                    user = file_user.get(c_file)
                    if user is None:
                        user = file_user[c_file] = frames.resolve(c_file)[1]
                    if user and _text(caller, "function_name") not in DISPATCH_HOOKS:  # (a hook's caller is the statement)
                        user_frame = frames.intern(c_file, caller.line_number, caller, user_frame)
                        any_frame = user_frame
                    elif user_frame < 0:
                        any_frame = frames.intern(c_file, caller.line_number, caller, -1)
                if tag == py_call and name.startswith(MODULE_PREFIX):
                    seg = name[len(MODULE_PREFIX):]
                    module = f"{module}.{seg}" if module else seg
                if kind != STATEMENT_MARKER:  # the marker's caller is the statement; it has no event of its own
                    t0 = node.start_time_ns
                    py.ts.append(t0)
                    py.dur.append(node.end_time_ns - t0)
                    py.thread.append(node.start_tid)
                    py.name.append(name)
                    py.frame.append(user_frame if user_frame >= 0 else any_frame)
                    py.module.append(module)
        elif tag == torch_op:
            op_info[node.correlation_id] = (user_frame if user_frame >= 0 else any_frame, module)
        elif tag == allocation:
            allocations.append(node)
            continue
        children = node.children
        if children:
            push((c, user_frame, any_frame, module, in_profiler, children_caller_user) for c in reversed(children))
    return op_info, py, allocations


_CALLSITE = re.compile(r"^(.+)\(\d+\): ")


def _runs_user_code(name: str, is_python_call: bool, frames: FrameTable) -> bool | None:
    """Whether the function a Python call node stands for is user code, from its name
    ('file.py(12): func'); None when the name does not say (C functions, other names)."""
    if not is_python_call:
        return None
    if name.startswith(MODULE_PREFIX):
        return False  # nn.Module calls run torch's Module._call_impl
    m = _CALLSITE.match(name)
    if m and name[m.end():] in DISPATCH_HOOKS:
        return False  # a tensor subclass's dispatch hook: the operators it calls are its caller's statement's
    return frames.resolve(m.group(1))[1] if m else None


_HOST_OPS = frozenset({CPU_OP_CATEGORY, USER_ANNOTATION_CATEGORY})


def _signed64(value: int) -> int:
    """An unsigned 64-bit profiler value read as the int64 the run holds, as the C++ converter
    casts it. Python calls on a thread the profiler has no id for (a thread running Python while
    recording, such as pytest-xdist's I/O thread) carry the thread id 2**64 - 1: -1 in the run."""
    return value - (1 << 64) if value >= (1 << 63) else value


def convert_cycle(kineto_results, frames: FrameTable, pid: int | None = None, native=None) -> CycleColumns:
    """Columns of one cycle. `pid` is the host process id written on host events. `native` is the
    compiled converter (collectors/native), which gives the same columns much faster."""
    pid = os.getpid() if pid is None else pid
    if native is not None:
        return _from_native(native.convert(kineto_results, _NativeHelper(frames), pid), pid)
    op_info, py, allocations = _walk_tree(kineto_results.experimental_event_tree(), frames)

    category_l, name_l, ts_l, dur_l, host_l, tid_l, corr_l, ext_l, args_l, frame_l, module_l = ([] for _ in range(11))
    fl: dict[str, list] = {k: [] for k in ("flow_id", "category", "name", "phase", "ts_ns", "pid", "tid", "binding_point")}
    internal_tid: dict[int, int] = {}
    seen_threads: set[int] = set()
    no_info = (-1, None)
    shapes_json: dict[str, str] = {}
    for e in kineto_results.events():
        category = e.activity_type()
        if category == PYTHON_FUNCTION_CATEGORY:
            continue  # taken from the tree
        try:
            name = e.name()
        except UnicodeDecodeError:
            name = UNDECODABLE
        if category == CPU_INSTANT_CATEGORY and name == MEMORY_NAME:
            continue  # allocations come from the tree, which holds their sizes
        ts = _signed64(e.start_ns())
        resource = e.device_resource_id()
        if category in _HOST_OPS:
            if resource not in seen_threads:  # the tree names threads by the profiler's own ids
                seen_threads.add(resource)
                internal_tid[e.start_thread_id()] = resource
            corr = _signed64(e.correlation_id())
            on_host, correlation, external = True, None, corr
            frame, module = op_info.get(corr, no_info)
            if category == CPU_OP_CATEGORY:
                args = _op_args(e, corr, shapes_json)
                flow_id = e.flow_id()
                if flow_id:
                    start = e.flow_start()
                    fl["flow_id"].append(flow_id)
                    fl["category"].append(FORWARD_BACKWARD_FLOW if e.flow_type() == 1 else LAUNCH_FLOW)
                    fl["name"].append(FORWARD_BACKWARD_FLOW if e.flow_type() == 1 else LAUNCH_FLOW)
                    fl["phase"].append("s" if start else "f")
                    fl["ts_ns"].append(ts)
                    fl["pid"].append(pid)
                    fl["tid"].append(resource)
                    fl["binding_point"].append(None if start else "e")
            else:
                args = None
        else:
            on_host = e.device_type().name == "CPU" and category != PRIVATEUSE1_DRIVER_CATEGORY
            correlation = _signed64(e.correlation_id())
            external = _signed64(e.linked_correlation_id()) or None
            args = None
            # a runtime call belongs to the operator that made it (its External id); device
            # events get theirs through their launch, in build.py
            frame, module = op_info.get(external, no_info) if on_host and external else no_info
            if not on_host:
                resource = (e.device_index(), resource)  # type: ignore[assignment]
        category_l.append(category)
        name_l.append(name)
        ts_l.append(ts)
        dur_l.append(_signed64(e.duration_ns()))
        host_l.append(on_host)
        tid_l.append(resource)
        corr_l.append(correlation)
        ext_l.append(external)
        args_l.append(args)
        frame_l.append(frame)
        module_l.append(module)

    # device events: pid = device index, tid = stream (resource id), as in the JSON trace
    pid_l = [pid if h else r[0] for h, r in zip(host_l, tid_l)]
    stream_l = [None if h else r[1] for h, r in zip(host_l, tid_l)]
    tid_l = [r if h else r[1] for h, r in zip(host_l, tid_l)]
    n_py = len(py.ts)
    py_tid = [internal_tid[t] if t in internal_tid else _signed64(t) for t in py.thread]
    n = len(name_l) + n_py
    events = pa.Table.from_pydict({
        "category": category_l + [PYTHON_FUNCTION_CATEGORY] * n_py,
        "name": name_l + py.name,
        "phase": ["X"] * n,
        "ts_ns": ts_l + py.ts,
        "dur_ns": dur_l + py.dur,
        "pid": pid_l + [pid] * n_py,
        "tid": tid_l + py_tid,
        "pid_text": pa.nulls(n, pa.string()),
        "tid_text": pa.nulls(n, pa.string()),
        "correlation": corr_l + [None] * n_py,
        "external_id": ext_l + [None] * n_py,
        "stream": stream_l + [None] * n_py,
        "args": args_l + [None] * n_py,
        "frame_index": frame_l + py.frame,
        "module_path": module_l + py.module,
    }, schema=RAW_EVENTS)
    flows = pa.Table.from_pydict(fl, schema=RAW_FLOWS)
    return CycleColumns(events, _memory_table(allocations, internal_tid, pid), flows)


class _NativeHelper:
    """What the C++ converter asks of Python, once per distinct name, file or frame: the same
    decisions _walk_tree makes, from the same FrameTable."""

    def __init__(self, frames: FrameTable):
        self.frames = frames

    def kind(self, name: str) -> int:
        return call_kind(name)

    def runs_user(self, name: str, is_python_call: bool) -> bool | None:
        return _runs_user_code(name, is_python_call, self.frames)

    def file_user(self, recorded_file: str) -> bool:
        return self.frames.resolve(recorded_file)[1]

    def dispatch_hooks(self) -> list[str]:
        """Functions whose frames are no user statement (sources.DISPATCH_HOOKS), whatever their file."""
        return sorted(DISPATCH_HOOKS)

    def intern(self, recorded_file: str, line: int, function: str, parent: int) -> int:
        return self.frames.intern(recorded_file, line, function, parent)


def _int64(data: tuple, n: int) -> pa.Array:
    values, validity = data
    return pa.Array.from_buffers(pa.int64(), n, [None if validity is None else pa.py_buffer(validity), pa.py_buffer(values)])


def _dictionary(codes: bytes, values: list, n: int, *, nullable: bool = False) -> pa.Array:
    idx = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(codes)])
    if nullable:  # code -1: no value
        idx = pc.if_else(pc.less(idx, 0), pa.scalar(None, pa.int32()), idx)
    return pa.DictionaryArray.from_arrays(idx, pa.array(values, pa.string()))


def _from_native(d: dict, pid: int) -> CycleColumns:
    n = d["n"]
    offsets, data, validity = d["args"]
    events = pa.Table.from_pydict({
        "category": _dictionary(d["category_codes"], d["category_values"], n),
        "name": _dictionary(d["name_codes"], d["name_values"], n),
        "phase": pa.DictionaryArray.from_arrays(pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(bytes(4 * n))]),
                                                pa.array(["X"], pa.string())),
        "ts_ns": _int64(d["ts_ns"], n),
        "dur_ns": _int64(d["dur_ns"], n),
        "pid": _int64(d["pid"], n),
        "tid": _int64(d["tid"], n),
        "pid_text": pa.nulls(n, pa.string()),
        "tid_text": pa.nulls(n, pa.string()),
        "correlation": _int64(d["correlation"], n),
        "external_id": _int64(d["external_id"], n),
        "stream": _int64(d["stream"], n),
        "args": pa.Array.from_buffers(pa.string(), n, [pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)]),
        "frame_index": _int64(d["frame_index"], n),
        "module_path": _dictionary(d["module_codes"], d["module_values"], n, nullable=True).cast(pa.string()),
    }, schema=RAW_EVENTS)
    f = d["flows"]
    flows = pa.Table.from_pydict({**f, "name": f["category"], "pid": [pid] * len(f["flow_id"])}, schema=RAW_FLOWS)
    m = d["memory"]
    nm = m["n"]
    packed = {c.name: pa.Array.from_buffers(c.type, nm, [None, pa.py_buffer(m[c.name])]) for c in RAW_MEMORY if c.name in m}
    memory = pa.Table.from_pydict({**packed, "pid": [pid] * nm, "category": [CPU_INSTANT_CATEGORY] * nm}, schema=RAW_MEMORY)
    return CycleColumns(events, memory, flows)


def _op_args(e, corr: int, shapes_json: dict[str, str]) -> str:
    """The args the JSON trace gives an operator (shapes, dtypes, flops, sequence number), as
    JSON text built directly: json.dumps per operator would cost more than all the rest."""
    parts = [f'"{EXTERNAL_ID_ARG}":{corr}']
    shapes = e.shapes()
    if shapes:
        text = repr(shapes)  # lists of ints: already JSON
        if "None" in text or "'" in text:
            text = json.dumps(shapes)
        parts.append(f'"{INPUT_DIMS_ARG}":{text}')
        dtypes = e.dtypes()
        key = "\x00".join(dtypes)
        dt = shapes_json.get(key)
        if dt is None:
            dt = shapes_json[key] = json.dumps(dtypes)
        parts.append(f'"{INPUT_TYPE_ARG}":{dt}')
    seq = e.sequence_nr()
    if seq >= 0:
        parts.append(f'"{SEQUENCE_NUMBER}":{seq},"{FWD_THREAD_ARG}":{e.fwd_thread_id()}')
    flops = e.flops()
    if flops:
        parts.append(f'"{FLOPS_ARG}":{flops}')
    return "{" + ",".join(parts) + "}"


def _memory_table(allocations, internal_tid: dict[int, int], pid: int) -> pa.Table:
    rows: dict[str, list] = {k: [] for k in ("ts_ns", "tid", "device_type", "device", "addr", "bytes", "total_allocated", "total_reserved")}
    for node in allocations:
        a = node.extra_fields
        dev = a.device
        rows["ts_ns"].append(node.start_time_ns)
        rows["tid"].append(internal_tid.get(node.start_tid, node.start_tid))
        rows["device_type"].append(_device_type_code(dev))
        rows["device"].append(dev.index if dev.index is not None else -1)
        rows["addr"].append(a.ptr)
        rows["bytes"].append(a.alloc_size)
        rows["total_allocated"].append(a.total_allocated)
        rows["total_reserved"].append(a.total_reserved)
    n = len(rows["ts_ns"])
    return pa.Table.from_pydict({**rows, "pid": [pid] * n, "category": [CPU_INSTANT_CATEGORY] * n}, schema=RAW_MEMORY)
