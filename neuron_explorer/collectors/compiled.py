"""torch.compile under the live collector: its compiler left out, its kernels on the user's statements.

Two things happen to a `torch.compile`d model while it is profiled:

- Compiling (Dynamo tracing, AOT autograd, Inductor's code generation) runs as ordinary Python
  under torch's Python tracer: millions of calls of the compiler's own frames for a small model.
  Torch marks each compile phase with a range (`… (dynamo_timed)`: `_compile.compile_inner`,
  `compile_fx_inner`, `backward._backward_impl`, ...). `drop_compile_python` leaves out the
  Python calls inside those ranges; the ranges stay, so compile time keeps its phases and the
  line that triggered it.
- Inductor's generated kernels run inside one compiled call, on the line that called the compiled
  function. `InductorProvenance` turns on, while profiling, a profiler range per generated C++
  kernel (`cpp.enable_kernel_profile`) and Inductor's provenance tracking
  (`trace.provenance_tracking_level`), restoring the user's settings after. Each compiled graph
  then keeps, per kernel, the stack traces of the FX nodes fused into it: the user's file and line
  (AOT autograd's backward nodes keep the forward node's stack trace). `charge_kernels` writes,
  in each kernel event's args (vocab.COMPILED_FROM_ARG), the statements it came from, each with
  an equal share of its time (see docs/METRICS.md).

Compiling itself is kept out of the Python tracer while it runs (`CompilerUntraced`): for each
frame Dynamo compiles, for the backward AOT autograd compiles in the first backward, and for the
`torch.compile(...)` call (which imports the compiler), torch's Python tracer is paused on that
thread and one range names what was compiled
(COMPILE_NAME_PREFIX: `torch.compile: <function> (<file>:<line>)`, `torch.compile: backward of …`,
`torch.compile: setup`); torch's own phase ranges (`… (dynamo_timed)`) are kept under it.
`drop_compile_python` stays for whatever the pause could not keep out (a Python whose thread state
it cannot read). Each compile's graph breaks and, for a recompile, the guard that failed are kept
too (CompilerUntraced.records), and `name_compile_records` makes them events of the run
(vocab.GRAPH_BREAK_EVENT, RECOMPILE_EVENT) on the user's statement.

Settings take effect when a function is compiled: a function compiled before profiling started
keeps its kernels unnamed (no ranges, no provenance), and its time stays on the calling line.

Must not: analyse anything, or import torch at module import (the raw-table functions are pure).
"""

from __future__ import annotations

import gc
import json
import re
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..vocab import COMPILE_NAME_PREFIX, COMPILED_FROM_ARG, GRAPH_BREAK_EVENT, RECOMPILE_EVENT
from .kineto_names import PYTHON_FUNCTION_CATEGORY

if TYPE_CHECKING:
    import pyarrow as pa

COMPILE_RANGE_SUFFIX = " (dynamo_timed)"
"""How torch names the range of a compile phase (torch._dynamo.utils.dynamo_timed)."""
GRAPH_CALL_RE = re.compile(r"^## Call CompiledFxGraph (\S+) ##$")
"""The range around one call of a compiled graph (torch._inductor.output_code), with its cache key."""
KERNEL_NAME_RE = re.compile(r"^(?:graph_\d+_)?((?:cpp_fused|triton_)\w*)$")
"""A generated kernel's event name (C++: `graph_<n>_cpp_fused_…`; Triton: `triton_…`) → its name in Inductor's provenance."""
EXTERN_KERNEL_RE = re.compile(r"^(?:extern_kernels|torch\.ops\.aten|aten)\.(\w+?)(?:\.(?:default|out|Tensor|Scalar|\w+))?$")
"""An extern kernel in Inductor's provenance (a call of an ATen operator from the generated code:
`extern_kernels.addmm`, `torch.ops.aten.convolution_backward.default`) → the operator's name."""
EXTERN_SEP = "#"
"""The n-th (from 0) extern kernel of one operator in a graph: `aten::addmm#1` in compiled_graph_provenance."""
_FRAME_RE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
RECORD_MARK = "neuron_explorer: compile record #"
"""The range the collector records, inside a compile's range, for its n-th graph break or
recompile (CompilerUntraced.records[n]); `name_compile_records` turns it into the event."""
RECORD_MARK_RE = re.compile(r"^neuron_explorer: compile record #(\d+)$")


# ---- the recording side (torch) -----------------------------------------------------------


class InductorProvenance:
    """Inductor's kernel ranges and provenance on while profiling; the user's settings restored after.

    Inductor's and AOT autograd's compile caches are off meanwhile: a graph loaded from them keeps
    the stack traces of whichever source first compiled the same graph (another file, or lines that
    have moved since), so a function compiled while profiling is compiled afresh.
    Importing Inductor's config costs seconds: when torch.compile has not been used yet, the settings
    are made when the script first imports it (an import hook), not at start."""

    SETTINGS = (("cpp", "enable_kernel_profile", True), ("trace", "provenance_tracking_level", 1), (None, "fx_graph_cache", False),
                (None, "fx_graph_remote_cache", False))
    FUNCTORCH_SETTINGS = (("enable_autograd_cache", False), ("enable_remote_autograd_cache", False))
    CONFIG_MODULE = "torch._inductor.config"

    def __init__(self):
        self._saved: list[tuple[object, str, object]] | None = None
        self._hook: _AfterImport | None = None

    def start(self) -> None:
        import sys

        if self._saved is not None or self._hook is not None:
            return
        config = sys.modules.get(self.CONFIG_MODULE)
        if config is not None:
            self._apply(config)
        else:
            self._hook = _AfterImport(self.CONFIG_MODULE, self._apply)
            sys.meta_path.insert(0, self._hook)

    def _apply(self, config) -> None:
        if self._saved is not None:
            return
        self._saved = []
        settings = [(config if section is None else getattr(config, section, None), name, value) for section, name, value in self.SETTINGS]
        try:
            import torch._functorch.config as functorch_config

            settings += [(functorch_config, name, value) for name, value in self.FUNCTORCH_SETTINGS]
        except Exception:  # a torch without it: its cache is not there either
            pass
        for holder, name, value in settings:
            if holder is not None and hasattr(holder, name):
                self._saved.append((holder, name, getattr(holder, name)))
                setattr(holder, name, value)

    def stop(self) -> None:
        import sys

        hook, self._hook = self._hook, None
        if hook is not None and hook in sys.meta_path:
            sys.meta_path.remove(hook)
        saved, self._saved = self._saved, None
        for holder, name, value in saved or []:
            setattr(holder, name, value)


class _AfterImport:
    """A meta path finder that calls `then(module)` once `name` has been imported (by anyone)."""

    def __init__(self, name: str, then):
        self.name, self.then = name, then

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader, then = spec.loader, self.then

        class _Loader:
            def create_module(self, spec_):
                return loader.create_module(spec_)

            def exec_module(self, module):
                loader.exec_module(module)
                then(module)

        spec.loader = _Loader()
        return spec


class _TracerPause:
    """Pauses torch's Python tracer on the calling thread and resumes it (CPython's C profile hook).

    torch's tracer is a C profile function (PyEval_SetProfile) whose object `sys.getprofile()`
    returns; Python has no call that gives the function back, so it is read from the thread state,
    two pointers before that object (c_profilefunc, c_tracefunc, c_profileobj: CPython 3.9-3.13).
    Nothing is paused when that cannot be read, or when the hook is not torch's."""

    _words = 64

    def __init__(self):
        import ctypes

        if sys.implementation.name != "cpython" or not (3, 9) <= sys.version_info[:2] <= (3, 13):
            raise OSError("the thread state's layout is known for CPython 3.9-3.13 only")  # (a wrong word would be called)
        api = ctypes.pythonapi
        self._set_null = ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(("PyEval_SetProfile", api))
        self._set = ctypes.PYFUNCTYPE(None, ctypes.c_void_p, ctypes.py_object)(("PyEval_SetProfile", api))
        self._tstate = ctypes.PYFUNCTYPE(ctypes.c_void_p)(("PyThreadState_Get", api))
        self._array = ctypes.c_void_p * self._words

    def pause(self):
        """The resume function, or None when nothing was paused."""
        obj = sys.getprofile()
        if obj is None or type(obj).__name__ != "TraceContext":
            return None
        words = self._array.from_address(self._tstate())
        slot = next((i for i in range(2, self._words) if words[i] == id(obj)), None)
        fn = words[slot - 2] if slot is not None else None
        if not fn:
            return None
        self._set_null(None, None)

        def resume() -> None:
            import torch

            # not after the profiler stopped (its tracer is gone) or when another hook was set meanwhile
            if sys.getprofile() is None and torch._C._autograd._profiler_enabled():
                self._set(fn, obj)

        return resume


class CompilerUntraced:
    """While profiling: torch's Python tracer paused while torch.compile compiles, one range per
    compile naming the function (see the module's docstring); `stop()` undoes it all.

    Three calls are wrapped while profiling (module or class attributes, looked up by torch when it
    calls them; restored at stop): `torch.compile`, Dynamo's `convert_frame._compile` (one frame's
    compile: Dynamo, AOT autograd, Inductor) and AOT autograd's lazy backward compile
    (`_AutogradBackwardCompiler.get_or_compile`, when nothing is compiled yet). The tracer is paused
    and resumed in the same wrapper frame, so the calls it records stay nested (pausing in Dynamo's
    compile-start callback and resuming in the end one leaves a call open: the tree below it breaks).
    A torch without one of them keeps that compile traced (drop_compile_python then leaves it out).
    With `pause=False` (no Python tracer: with_stack off) the ranges are recorded, nothing is paused.

    Each frame's compile also notes, in `records`, the graph breaks Dynamo made in it
    (`torch._dynamo.utils.graph_break_reasons`: the reason and the user's frame, appended as Dynamo
    breaks) and, for a recompile, the guard that failed (the `recompile_reason` of its
    compilation metrics, `torch._dynamo.utils.get_compilation_metrics`): read after the compile,
    nothing re-run. Each record gets a range (RECORD_MARK + its index) at the end of its compile's
    range, so that it lies in the recording only when its compile does.

    Compiles made before the recording began (a model compiled in a warm-up call before `nx.profile`,
    or in a step the schedule waited through) have no range in it, but their graph breaks matter
    as much: the compiled graphs that run while profiling keep them. `recording_started` (called
    when the profiler starts recording, the first time after `start`) records the graph breaks
    Dynamo had made before `start` (`graph_break_reasons`, read at `start`) and marks again the
    graph breaks noted since `start` that the recording missed, so that each gets its event."""

    EVAL_FRAME = "torch._dynamo.eval_frame"
    TARGETS = (("torch._dynamo.convert_frame", None, "_compile"),
               ("torch._functorch._aot_autograd.runtime_wrappers", "_AutogradBackwardCompiler", "get_or_compile"))

    def __init__(self, pause: bool = True):
        self._local = threading.local()
        self._want_pause = pause
        self._started = False
        self.records: list[dict] = []  # graph breaks and recompiles, in the order compiled (see the class's docstring)
        self._pause: _TracerPause | None = None
        self._hooks: list[_AfterImport] = []
        self._wrapped: list[tuple[object, str, object]] = []  # (holder, attribute, original)
        self._names: dict[str, str] = {}  # compile id -> the compiled function, for its backward
        self._earlier: list | None = None  # Dynamo's graph breaks made before start, until the recording starts

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        utils = sys.modules.get("torch._dynamo.utils")  # (not imported: nothing was compiled)
        self._earlier = list(getattr(utils, "graph_break_reasons", None) or [])
        self._unmarked = len(self.records)  # records from here on were made while the recording may not have begun
        if self._want_pause:
            try:
                self._pause = _TracerPause()
            except (AttributeError, OSError):  # not CPython 3.9-3.13: drop_compile_python does what it can
                self._pause = None
        import torch

        self._wrap(torch, "compile", self._wrap_compile)
        module = sys.modules.get(self.EVAL_FRAME)
        if module is not None:
            _skip_own_hooks(module)
        else:
            self._hooks.append(_AfterImport(self.EVAL_FRAME, _skip_own_hooks))
            sys.meta_path.insert(0, self._hooks[-1])
        for module_name, cls, attr in self.TARGETS:
            def wrap(module, cls=cls, attr=attr):
                holder = getattr(module, cls, None) if cls else module
                if holder is not None:
                    self._wrap(holder, attr, self._wrap_frame_compile if cls is None else self._wrap_backward_compile)

            module = sys.modules.get(module_name)
            if module is not None:
                wrap(module)
            else:
                hook = _AfterImport(module_name, wrap)
                self._hooks.append(hook)
                sys.meta_path.insert(0, hook)

    def recording_started(self) -> None:
        """The profiler records from now: the graph breaks made before `start` become records, and
        those noted since `start` (before the recording began) are marked again (see the class's
        docstring). Once per `start`."""
        earlier, self._earlier = self._earlier, None
        if earlier is None:
            return
        try:
            for index in range(getattr(self, "_unmarked", len(self.records)), len(self.records)):
                if self.records[index]["event"] == GRAPH_BREAK_EVENT:  # (a recompile's cost is its range, not recorded)
                    self._mark(index)
            for record in earlier_breaks(earlier, sys.modules.get("torch._dynamo.utils")):
                self._record(record)
        except Exception:  # Dynamo's records are debugging data: never let them fail the profiler's start
            pass

    def stop(self) -> None:
        self._earlier = None
        for hook in self._hooks:
            if hook in sys.meta_path:
                sys.meta_path.remove(hook)
        self._hooks = []
        for holder, attr, original in reversed(self._wrapped):
            if getattr(getattr(holder, attr, None), "_neuron_explorer", False):  # (unless replaced meanwhile)
                setattr(holder, attr, original)
        self._wrapped = []
        self._pause = None
        self._started = False

    def _wrap(self, holder, attr: str, make) -> None:
        original = getattr(holder, attr, None)
        if original is None or getattr(original, "_neuron_explorer", False):
            return
        wrapper = make(original)
        wrapper._neuron_explorer = True
        self._wrapped.append((holder, attr, original))
        setattr(holder, attr, wrapper)

    def _untraced(self, name: str, fn, args, kwargs):
        self._enter(COMPILE_NAME_PREFIX + name)
        try:
            return fn(*args, **kwargs)
        finally:
            self._exit()

    def _wrap_compile(self, original):
        import functools

        @functools.wraps(original)
        def compile(*args, **kwargs):  # noqa: A001 (torch.compile, while profiling)
            return self._untraced("setup", original, args, kwargs)

        return compile

    def _wrap_frame_compile(self, original):
        import functools

        @functools.wraps(original)
        def _compile(code, *args, **kwargs):
            name = _code_name(code)
            compile_id = kwargs.get("compile_id")
            if compile_id is not None:
                self._names[str(compile_id)] = name
            self._enter(COMPILE_NAME_PREFIX + name)
            breaks_before = _graph_break_count()
            try:
                return original(code, *args, **kwargs)
            finally:
                try:
                    self._note_compile(code, name, compile_id, breaks_before)
                except Exception:  # Dynamo's records are debugging data: never let them fail a compile
                    pass
                self._exit()

        return _compile

    def _wrap_backward_compile(self, original):
        import functools

        @functools.wraps(original)
        def get_or_compile(compiler, *args, **kwargs):
            if getattr(compiler, "compiled_bw", None) is not None:  # compiled already: the backward runs, untouched
                return original(compiler, *args, **kwargs)
            info = getattr(compiler, "lazy_backward_info", None)
            compile_id = str(getattr(getattr(info, "saved_compile_context", None), "compile_id", ""))
            what = self._names.get(compile_id, compile_id or "a compiled function")
            return self._untraced(f"backward of {what}", original, (compiler, *args), kwargs)

        return get_or_compile

    def _note_compile(self, code, name: str, compile_id, breaks_before: int) -> None:
        """Records (and marks) the graph breaks Dynamo made while compiling `code`, and the guard
        that failed when this compile is a recompile."""
        utils = sys.modules.get("torch._dynamo.utils")
        if utils is None or _is_own_code(code):  # Dynamo compiling Neuron Explorer's own hooks: no user's function
            return
        reasons = list(getattr(utils, "graph_break_reasons", None) or [])
        seen = set()
        for r in reasons[breaks_before:] if len(reasons) >= breaks_before else reasons:  # (shorter: torch._dynamo.reset())
            record = _break_record(r, name, None if compile_id is None else str(compile_id))
            if _break_key(record) not in seen:
                seen.add(_break_key(record))
                self._record(record)
        metrics = getattr(utils, "get_compilation_metrics", None)
        if compile_id is None or metrics is None:
            return
        cid = str(compile_id)
        metric = next((m for m in reversed(metrics()) if getattr(m, "compile_id", None) == cid), None)
        guard = _guard_text(getattr(metric, "recompile_reason", None))
        if guard:
            self._record({"event": RECOMPILE_EVENT, "guard": guard, "function": name, "compile_id": cid,
                          "stack": [(str(code.co_filename), int(code.co_firstlineno), str(code.co_name))]})

    def _record(self, record: dict) -> None:
        self.records.append(record)
        self._mark(len(self.records) - 1)

    @staticmethod
    def _mark(index: int) -> None:
        try:
            import torch

            rf = torch._C._profiler._RecordFunctionFast(f"{RECORD_MARK}{index}")
            rf.__enter__()
            rf.__exit__(None, None, None)
        except Exception:  # a torch without it: the record has no event
            pass

    def _enter(self, name: str) -> None:
        stack = self._local.__dict__.setdefault("stack", [])
        resume, rf = None, None
        try:
            import torch

            rf = torch._C._profiler._RecordFunctionFast(name)
            rf.__enter__()
        except Exception:  # a torch without it: no range, the pause still holds
            rf = None
        if self._pause is not None and not stack:
            resume = self._pause.pause()
        stack.append((resume, rf))

    def _exit(self) -> None:
        stack = self._local.__dict__.get("stack")
        if not stack:
            return
        resume, rf = stack.pop()
        if resume is not None:
            resume()
        if rf is not None:
            rf.__exit__(None, None, None)


def earlier_breaks(reasons: list, utils=None) -> list[dict]:
    """Graph break records (as CompilerUntraced.records) of Dynamo's `graph_break_reasons` made
    before profiling, once per reason and stack. The compiled function is the frame the break's
    stack starts in, named `function (file:line)` like the compile ranges when Dynamo's compilation
    metrics (`utils.get_compilation_metrics`) have its `def` line; breaks in Neuron Explorer's own
    code are left out."""
    first_lines = {}
    try:
        for m in (utils.get_compilation_metrics() if utils is not None else []):
            if getattr(m, "co_name", None) and getattr(m, "co_firstlineno", None):
                first_lines.setdefault((m.co_name, m.co_filename), m.co_firstlineno)
    except Exception:  # a torch without them: the function is named without its line
        pass
    out, seen = [], set()
    for r in reasons:
        record = _break_record(r, None, None)
        stack = record["stack"]
        if _break_key(record) in seen or (stack and all(_is_own_file(f[0]) for f in stack)):
            continue
        seen.add(_break_key(record))
        if stack:
            file, _, name = stack[0]
            first = first_lines.get((name, file))
            record["function"] = f"{name} ({file.rsplit('/', 1)[-1]}{f':{first}' if first else ''})"
        out.append(record)
    return out


def _break_record(reason, function: str | None, compile_id: str | None) -> dict:
    """The record of one of Dynamo's graph break reasons (`GraphCompileReason`: reason, user_stack)."""
    stack = [(str(f.filename), int(f.lineno or 0), str(f.name)) for f in (getattr(reason, "user_stack", None) or [])]
    lines = [ln.strip() for ln in str(getattr(reason, "reason", "") or "").splitlines() if ln.strip()]
    hint = next((ln[len("Hint:"):].strip() for ln in lines if ln.startswith("Hint:")), None)
    return {"event": GRAPH_BREAK_EVENT, "reason": lines[0] if lines else "", "hint": hint, "function": function,
            "compile_id": compile_id, "stack": stack}


def _break_key(record: dict) -> tuple:
    """A graph break record once per reason and stack (Dynamo notes a break again when it restarts its analysis)."""
    return record["reason"], record["hint"], tuple(record["stack"])


def _guard_text(reason) -> str:
    """The failed guard of Dynamo's recompile reason, alone: its first line without the earlier
    compile's id (`2/0: `) and the source comment Dynamo appends (`  # x = f(y)  # file.py:12 in fn`)."""
    first = str(reason or "").split("\n", 1)[0]
    first = re.sub(r"^\d+/\d+: ", "", first)
    return " ".join(re.split(r"\s{2,}#", first, maxsplit=1)[0].split())


def _skip_own_hooks(eval_frame) -> None:
    """Dynamo never compiles the statement hook's `__torch_function__` as a frame of its own.
    Run eagerly between two graphs of a compiled function (after a graph break), the hook's call is
    a new frame to Dynamo: compiled (0.5 s on a small model), guarded and recompiled, and breaking
    where the user's code broke. Skipping its frame leaves Dynamo tracing through it inside a
    compiled function as before (that is inlining, not a frame)."""
    skip = getattr(eval_frame, "skip_code", None)
    if skip is None:
        return
    try:
        from .statements import StatementLines

        skip(StatementLines.__torch_function__.__code__)
    except Exception:  # a torch whose skip_code differs: Dynamo compiles the hook, as before
        pass


def _is_own_code(code) -> bool:
    """A code object of Neuron Explorer itself (its statement hook, which Dynamo may compile)."""
    return _is_own_file(str(getattr(code, "co_filename", "")))


def _is_own_file(file: str) -> bool:
    import os

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.abspath(file).startswith(package + os.sep)


def _graph_break_count() -> int:
    utils = sys.modules.get("torch._dynamo.utils")
    return len(getattr(utils, "graph_break_reasons", None) or [])


def _code_name(code) -> str:
    """`function (file:line)` of a code object, as the compile range names it."""
    name = getattr(code, "co_name", None)
    if name is None:
        return "a function"
    return f"{name} ({str(code.co_filename).rsplit('/', 1)[-1]}:{code.co_firstlineno})"


def compiled_graph_provenance() -> dict[str, dict[str, list[str]]]:
    """{graph cache key: {kernel name: [FX node stack traces]}} of every compiled graph alive in the
    process (Inductor keeps them on the compiled graph objects, also when loaded from its cache). A
    graph compiled with the cache off has no key (its call range says `None`): it is listed under
    `#<object id>`, which no call range names, so its kernels are looked up by name."""
    import sys

    output_code = sys.modules.get("torch._inductor.output_code")
    cls = getattr(output_code, "CompiledFxGraph", None)
    if cls is None:
        return {}
    out: dict[str, dict[str, list[str]]] = {}
    for obj in gc.get_objects():
        if type(obj) is not cls:
            continue
        text = getattr(obj, "inductor_provenance_stack_traces_str", None)
        if not text:
            continue
        # compiled with the cache off (as while profiling), a graph has no key: its kernels are found by name
        key = getattr(obj, "_fx_graph_cache_key", None) or f"#{id(obj)}"
        try:
            traces = json.loads(text)
        except ValueError:
            continue
        out[str(key)] = graph_kernels(traces)
    return out


def graph_kernels(traces: dict[str, list]) -> dict[str, list[str]]:
    """{kernel name: [FX node stack traces]} of one graph from Inductor's provenance
    ({`<kernel>:<debug handle>`: [stack traces]}, in the order the kernels were generated). A
    generated kernel is listed by its name; an extern kernel (EXTERN_KERNEL_RE) by its operator and
    its place among the graph's calls of that operator (`aten::addmm#0`, `aten::addmm#1`: the
    generated code calls them in that order)."""
    kernels: dict[str, list[str]] = {}
    seen: dict[str, int] = {}
    for handle, stacks in traces.items():
        name = handle.split(":")[0]
        extern = EXTERN_KERNEL_RE.match(name)
        if extern:
            op = "aten::" + extern.group(1)
            name = f"{op}{EXTERN_SEP}{seen.get(op, 0)}"
            seen[op] = seen.get(op, 0) + 1
        kernels.setdefault(name, []).extend(s for s in stacks if isinstance(s, str))
    return kernels


# ---- the raw tables (pure) ------------------------------------------------------------------


def _mask_of_names(column: pa.ChunkedArray, predicate) -> np.ndarray:
    """Rows of a dictionary-encoded text column whose value satisfies `predicate` (tested once per value)."""
    parts = []
    for chunk in column.chunks:
        values = chunk.dictionary.to_pylist()
        hit = np.array([v is not None and bool(predicate(v)) for v in values] + [False], dtype=bool)
        codes = chunk.indices.to_numpy(zero_copy_only=False)
        codes = np.where(chunk.is_null().to_numpy(zero_copy_only=False), len(values), codes)
        parts.append(hit[codes])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def _column(events: pa.Table, name: str) -> np.ndarray:
    return events[name].to_numpy()


def drop_compile_python(events: pa.Table) -> tuple[pa.Table, int]:
    """The raw events less the Python calls (category python_function) that lie inside a compile
    range (COMPILE_RANGE_SUFFIX) on their thread, and how many were left out."""
    import pyarrow as pa  # imported when used: `nx.profile` starts without pyarrow

    if events.num_rows == 0:
        return events, 0
    compile_rows = _mask_of_names(events["name"], lambda n: n.endswith(COMPILE_RANGE_SUFFIX))
    if not compile_rows.any():
        return events, 0
    python = _mask_of_names(events["category"], lambda c: c == PYTHON_FUNCTION_CATEGORY)
    ts, dur = _column(events, "ts_ns"), _column(events, "dur_ns")
    tid = events["tid"].fill_null(-1).to_numpy()
    pid = events["pid"].fill_null(-1).to_numpy()
    inside = np.zeros(events.num_rows, dtype=bool)
    for p, t in {(int(a), int(b)) for a, b in zip(pid[compile_rows], tid[compile_rows])}:
        on_track = (pid == p) & (tid == t)
        ranges = compile_rows & on_track
        starts, ends = ts[ranges], ts[ranges] + dur[ranges]
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], np.maximum.accumulate(ends[order])  # outermost ranges: a running end
        candidates = np.flatnonzero(python & on_track)
        at = np.searchsorted(starts, ts[candidates], side="right") - 1
        ok = at >= 0
        inside[candidates[ok]] = ts[candidates[ok]] + dur[candidates[ok]] <= ends[at[ok]]
    n = int(inside.sum())
    return (events.filter(pa.array(~inside)) if n else events), n


def statements_of(stack_traces: list[str], is_user) -> list[list[tuple[str, int, str]]]:
    """Distinct user statements of a kernel's FX stack traces, each as its chain of user frames
    (file, line, function), outermost first; in the order first met."""
    out: dict[tuple[str, int], list[tuple[str, int, str]]] = {}
    for text in stack_traces:
        chain = [(f, int(n), fn) for f, n, fn in _FRAME_RE.findall(text) if is_user(f)]
        if chain:
            out.setdefault(chain[-1][:2], chain)
    return list(out.values())


@dataclass
class ChargeCount:
    """What charge_kernels did: kernel events seen, charged to statements, and the kernel names left
    uncharged; `kernels_ns`, `charged_ns`: their summed durations."""

    kernels: int = 0
    charged: int = 0
    unmatched: set = field(default_factory=set)
    kernels_ns: int = 0
    charged_ns: int = 0

    def quality(self) -> dict[str, int]:
        """The counts a rank's manifest entry keeps (data_quality), that `info` reports."""
        return {"compiled_kernels": self.kernels, "compiled_kernels_charged": self.charged,
                "compiled_kernels_ns": self.kernels_ns, "compiled_kernels_charged_ns": self.charged_ns}


def charge_kernels(events: pa.Table, provenance: dict[str, dict[str, list[str]]], intern, frame_id_of, is_user,
                   count: ChargeCount | None = None, frame_column: str = "frame_index") -> pa.Table:
    """The raw events with COMPILED_FROM_ARG added to the args of each generated kernel whose
    statements `provenance` (compiled_graph_provenance) names. A kernel is looked up in the graph
    of the `## Call CompiledFxGraph` range around it on its thread, else by its name alone when one
    graph has a kernel of that name. An ATen operator the generated code called (an extern kernel:
    `aten::addmm` of `extern_kernels.addmm`) is looked up only inside a graph call, as the n-th call
    of that operator in it (graph_kernels). `intern(file, line, function, parent_index) -> index` interns a
    frame (parent: the frame the kernel event was recorded under, so the statements sit under the
    line that called the compiled function); `frame_id_of(index)` is its run frame id. Each
    statement gets an equal share. `frame_column`: the events' column that holds each event's frame
    (the raw tables' `frame_index`; a built run's `frame_id`, when the importer charges a built rank:
    then `intern` takes and returns run frame ids)."""
    import pyarrow as pa  # imported when used: `nx.profile` starts without pyarrow

    count = count if count is not None else ChargeCount()
    if events.num_rows == 0 or not provenance:
        return events
    extern_ops = {name.split(EXTERN_SEP)[0] for kernels in provenance.values() for name in kernels if EXTERN_SEP in name}
    kernel_rows = np.flatnonzero(_mask_of_names(events["name"], lambda n: KERNEL_NAME_RE.match(n) or n in extern_ops))
    if not len(kernel_rows):
        return events
    by_name: dict[str, set[str]] = {}
    for key, kernels in provenance.items():
        for name in kernels:
            by_name.setdefault(name, set()).add(key)
    call_rows = np.flatnonzero(_mask_of_names(events["name"], GRAPH_CALL_RE.match))
    ts_all, dur_all = _column(events, "ts_ns"), _column(events, "dur_ns")
    tid_all = events["tid"].fill_null(-1).to_numpy()
    # per row Python values of the kernel and call rows only (a trace holds many more events than kernels)
    call_names = events["name"].take(pa.array(call_rows, pa.int64())).to_pylist()
    calls = sorted((int(ts_all[r]), int(ts_all[r] + dur_all[r]), int(tid_all[r]), GRAPH_CALL_RE.match(n).group(1))
                   for r, n in zip(call_rows, call_names))
    rows = kernel_rows[np.argsort(ts_all[kernel_rows], kind="stable")]
    names = events["name"].take(pa.array(rows, pa.int64())).to_pylist()
    generated_of = {n: KERNEL_NAME_RE.match(n) for n in set(names)}  # (matched once per distinct name)
    ts, dur, tid = ts_all[rows].tolist(), dur_all[rows].tolist(), tid_all[rows].tolist()
    frame_index = (events[frame_column].take(pa.array(rows, pa.int64())).fill_null(-1).to_numpy().tolist()
                   if frame_column in events.column_names else None)
    starts = np.array([c[0] for c in calls], dtype=np.int64)
    after = np.searchsorted(starts, ts_all[rows], side="right").tolist()
    call_of: dict[int, int] = {}  # (position in `rows`) -> call
    for j, at in enumerate(after):
        for i in range(at - 1, max(at - 9, -1), -1):  # the innermost call around the kernel: the latest started
            if calls[i][2] == tid[j] and ts[j] + dur[j] <= calls[i][1]:
                call_of[j] = i
                break
    # a call's graph: its cache key, else (compiled with the cache off) the one graph holding all its kernels
    graph_of: dict[int, str | None] = {}
    for j, i in call_of.items():
        if calls[i][3] in provenance:
            graph_of[i] = calls[i][3]
            continue
        generated = generated_of[names[j]]
        name = generated.group(1) if generated else names[j] + EXTERN_SEP + "0"
        keys = by_name.get(name, set()) if generated or name in by_name else None
        if keys is not None:
            graph_of[i] = keys if i not in graph_of else graph_of[i] & keys
    graph_of = {i: (g if isinstance(g, str) else next(iter(g)) if len(g) == 1 else None) for i, g in graph_of.items()}
    seen: dict[tuple, list[int]] = {}  # (graph call, operator) -> end of each extern call counted so far
    charged_json: dict[tuple, str | None] = {}  # (graph, kernel, frame) -> its charges as JSON (None: no statement)
    updates: dict[int, str] = {}  # (row) -> its args with the charges
    old_args = None
    for j, name in enumerate(names):
        generated = generated_of[name]
        call = call_of.get(j)
        graph = graph_of.get(call) if call is not None else None
        if generated:
            kernel = generated.group(1)
            if graph is None or kernel not in provenance.get(graph, {}):
                keys = by_name.get(kernel, set())
                graph = next(iter(keys)) if len(keys) == 1 else None
        else:  # an ATen operator: an extern kernel only when the generated code called it, the n-th of its name in that call
            if graph is None or name + EXTERN_SEP + "0" not in provenance[graph]:
                continue
            ends = seen.setdefault((call, name), [])
            if ends and ts[j] < ends[-1]:  # inside the previous one (an operator calling itself): not a call of the code
                continue
            kernel = f"{name}{EXTERN_SEP}{len(ends)}"
            ends.append(ts[j] + dur[j])
            if kernel not in provenance[graph]:
                count.kernels += 1
                count.kernels_ns += dur[j]
                count.unmatched.add(kernel)
                continue
        count.kernels += 1
        count.kernels_ns += dur[j]
        parent0 = frame_index[j] if frame_index is not None else -1
        memo = (graph, kernel, parent0)
        if memo not in charged_json:  # the same kernel under the same frame: the same statements, interned once
            statements = statements_of(provenance[graph][kernel], is_user) if graph is not None else []
            charges = []
            for chain in statements:
                parent = parent0
                for file, line, function in chain:
                    parent = intern(file, line, function, parent)
                charges.append({"frame_id": frame_id_of(parent), "share": 1.0 / len(statements)})
            charged_json[memo] = json.dumps(charges) if charges else None
        charges_text = charged_json[memo]
        if charges_text is None:
            count.unmatched.add(kernel)
            continue
        if old_args is None:
            old_args = events["args"].take(pa.array(rows, pa.int64())).to_pylist()
        updates[int(rows[j])] = _with_arg(old_args[j], charges_text)
        count.charged += 1
        count.charged_ns += dur[j]
    if not updates:
        return events
    import pyarrow.compute as pc

    mask = np.zeros(events.num_rows, dtype=bool)
    order = sorted(updates)
    mask[order] = True
    args = pc.replace_with_mask(events["args"].combine_chunks().cast(pa.string()), pa.array(mask),
                                pa.array([updates[r] for r in order], pa.string()))
    return events.set_column(events.column_names.index("args"), "args", args)


_COMPILED_FROM_KEY = json.dumps(COMPILED_FROM_ARG)


def _with_arg(args: str | None, charges_text: str) -> str:
    """An event's args (JSON object text) with COMPILED_FROM_ARG set to `charges_text`; the text is
    extended, not parsed and rewritten, when it is an object that does not hold the key yet."""
    key = _COMPILED_FROM_KEY
    text = (args or "").strip()
    if not text:
        return "{" + f"{key}: {charges_text}" + "}"
    if text.startswith("{") and text.endswith("}") and key not in text:
        body = text[1:-1].strip()
        return "{" + body + (", " if body else "") + f"{key}: {charges_text}" + "}"
    try:
        a = json.loads(text)
    except ValueError:
        a = {}
    if not isinstance(a, dict):
        a = {}
    a[COMPILED_FROM_ARG] = json.loads(charges_text)
    return json.dumps(a)


def name_compile_records(events: pa.Table, records: list[dict], intern, is_user) -> tuple[pa.Table, int]:
    """The raw events with each record's range (RECORD_MARK + index into `records`, from
    CompilerUntraced) made its event: named GRAPH_BREAK_EVENT or RECOMPILE_EVENT, its args the
    record's (vocab.COMPILE_RECORD_ARGS), its frame the record's user frames (outermost first)
    interned under the frame the range was recorded in (the line that called the compiled function).
    `intern(file, line, function, parent_index) -> index`; `is_user(file)`. Also how many were named."""
    import pyarrow as pa  # imported when used: `nx.profile` starts without pyarrow

    from ..vocab import COMPILE_RECORD_ARGS
    from .raw import TEXT_CODES

    if events.num_rows == 0 or not records:
        return events, 0
    rows = np.flatnonzero(_mask_of_names(events["name"], RECORD_MARK_RE.match))
    if not len(rows):
        return events, 0
    names = events["name"].to_pylist()
    args = events["args"].to_pylist()
    frame_index = events["frame_index"].fill_null(-1).to_numpy().copy() if "frame_index" in events.column_names else None
    named = 0
    for r in rows:
        index = int(RECORD_MARK_RE.match(names[r]).group(1))
        if index >= len(records):
            continue
        record = records[index]
        names[r] = record["event"]
        args[r] = json.dumps({k: record[k] for k in COMPILE_RECORD_ARGS if record.get(k) is not None})
        named += 1
        if frame_index is None:
            continue
        stack = [tuple(f) for f in record.get("stack") or []]
        chain = [f for f in stack if is_user(f[0])] or stack[-1:]
        parent = int(frame_index[r])
        for file, line, function in chain:
            got = intern(file, line, function, parent)
            parent = got if got >= 0 else parent
        frame_index[r] = parent
    events = events.set_column(events.column_names.index("name"), "name", pa.array(names, pa.string()).dictionary_encode().cast(TEXT_CODES))
    events = events.set_column(events.column_names.index("args"), "args", pa.array(args, pa.string()))
    if frame_index is not None:
        events = events.set_column(events.column_names.index("frame_index"), "frame_index",
                                   pa.array(np.where(frame_index < 0, None, frame_index).tolist(), pa.int64()))
    return events, named


def compile_warning(dropped: int) -> str | None:
    """The one line the run's manifest says about drop_compile_python."""
    if not dropped:
        return None
    return (f"{dropped:,} Python calls of torch.compile's compiler (Dynamo, AOT autograd, Inductor) were left out: "
            f"its compile phases are kept as ranges ('…{COMPILE_RANGE_SUFFIX}') on the line that triggered the compile; "
            "to keep compiling out of the recording, compile in a step the schedule waits through "
            "(record --wait 1 --active N; nx.schedule(wait=1, active=N))")

