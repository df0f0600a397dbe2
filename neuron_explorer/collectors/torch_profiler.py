"""The live collector: `profile()`, `trace_handler()` and `schedule`, over torch.profiler.

`profile` is a `torch.profiler.profile` (same `step()`, schedule, `key_averages()`, ...) that
writes a run directory when it stops. Each active cycle of the schedule is converted from the
profiler's in-memory results as it ends (no JSON round trip; see _live_convert.py) and the run is
written once, when the profiler stops, through the importer's normalisation (build.py) and writer.
A recording that ends with an exception or an interrupt still writes what was recorded, with a
warning in the manifest. With RANK/WORLD_SIZE set (torchrun), each rank writes its own
`rank=<r>/` partition of one run (see _live_write.py).

`module_path` of an operator is the chain of `nn.Module` calls around it, each named as the
profiler names it (class name and call index, e.g. 'TinyNet_0.Sequential_0.Linear_1'): the same
names an imported trace gives, so runs from both collectors compare.

Must not: analyse anything, or be imported by readers of runs (it imports torch).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import gc
import os
import platform
import socket
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable

import torch
import torch.profiler as tp

from .. import store
from ..errors import UsageError
from . import _live_write, compiled, native
from .statements import StatementHook

if TYPE_CHECKING:
    import pyarrow as pa

    from . import _live_convert
    from .build import RawRank

# pyarrow, numpy, the converter and the importer's build are imported when the first cycle is
# converted, not when the profiler is made: `nx.profile(...)` starts in milliseconds (issue 38).

schedule = tp.schedule
"""torch.profiler.schedule, re-exported: `nx.schedule(wait=1, warmup=1, active=3, repeat=1)`."""


# --- what the machine and the job are ------------------------------------------------------


def default_activities() -> list[tp.ProfilerActivity]:
    """The CPU plus every accelerator torch reports available (CUDA, XPU, MTIA, PrivateUse1)."""
    supported = tp.supported_activities()
    acts = [tp.ProfilerActivity.CPU]

    def available(mod_name: str) -> bool:
        mod = getattr(torch, mod_name, None)
        try:
            return bool(mod is not None and mod.is_available())
        except Exception:  # a backend that cannot even answer is not usable
            return False

    for act_name, mod_name in (("CUDA", "cuda"), ("XPU", "xpu"), ("MTIA", "mtia")):
        act = getattr(tp.ProfilerActivity, act_name, None)
        if act is not None and act in supported and available(mod_name):
            acts.append(act)
    pu1 = getattr(tp.ProfilerActivity, "PrivateUse1", None)
    backend = torch._C._get_privateuse1_backend_name()
    if pu1 is not None and backend != "privateuseone" and available(backend):
        acts.append(pu1)
    return acts


def activity_names(acts: Iterable) -> list[str]:
    """Activities as the manifest names them: CPU, CUDA, ... and a PrivateUse1 backend by its own name in
    lower case ('neuron'; torch renames the enum member to 'NEURON', so it is told by identity)."""
    pu1 = getattr(tp.ProfilerActivity, "PrivateUse1", None)
    backend = torch._C._get_privateuse1_backend_name().lower()
    return [backend if pu1 is not None and a == pu1 else a.name for a in acts]


def device_properties() -> list[dict]:
    """Properties of the visible accelerators, in the shape of Kineto's `deviceProperties`."""
    out: list[dict] = []
    for kind in ("cuda", "xpu", "mtia", torch._C._get_privateuse1_backend_name()):
        mod = getattr(torch, kind, None)
        try:
            if mod is None or not mod.is_available():
                continue
            for i in range(mod.device_count()):
                entry: dict = {"id": i, "type": kind}
                props = getattr(mod, "get_device_properties", None)
                if props is not None:
                    p = props(i)
                    entry["name"] = getattr(p, "name", None)
                    for src, dst in (("total_memory", "totalGlobalMem"), ("major", "computeMajor"), ("minor", "computeMinor"),
                                     ("multi_processor_count", "numSms")):
                        if hasattr(p, src):
                            entry[dst] = getattr(p, src)
                elif hasattr(mod, "get_device_name"):
                    entry["name"] = mod.get_device_name(i)
                out.append(entry)
        except Exception:  # properties are informative; a backend that fails to give them is skipped
            continue
    return out


def git_info(directory: Path | str) -> dict | None:
    """Commit and dirty flag of the repository holding `directory`, or None outside a repository."""
    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return r.stdout if r.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit.strip(), "dirty": bool(status and status.strip()), "directory": str(directory)}


def dist_rank() -> tuple[int, int | None, bool]:
    """(rank, world size, shared run) from torch.distributed or the RANK/WORLD_SIZE variables."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        world = dist.get_world_size()
        return dist.get_rank(), world, world > 1
    rank = int(os.environ.get("RANK", "0") or 0)
    world = int(os.environ["WORLD_SIZE"]) if os.environ.get("WORLD_SIZE") else None
    return rank, world, bool(world and world > 1)


def process_group_info() -> dict | None:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    return {"backend": str(dist.get_backend()), "rank": dist.get_rank(), "world_size": dist.get_world_size()}


def _schedule_options(fn) -> dict | None:
    """wait/warmup/active/repeat/skip_first of a torch.profiler.schedule, read from its closure."""
    if fn is None:
        return None
    code, cells = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
    if code is None or not cells:
        return {"custom": repr(fn)}
    return {k: c.cell_contents for k, c in zip(code.co_freevars, cells) if isinstance(c.cell_contents, (int, bool))}


# --- the recording --------------------------------------------------------------------------


@contextlib.contextmanager
def _no_gc():
    """Python's cycle collector off while a cycle is converted or the run written: that work
    allocates many short-lived objects and no cycles, and each collection it would trigger walks
    the whole heap of the job being profiled (its model, optimizer, data) for nothing."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Recording:
    """Accumulates the cycles of one profiler and writes them as a run (or a rank's partition)."""

    def __init__(self, run_dir: Path | str, *, overwrite: bool, options: dict, command: list[str] | None = None,
                 script_dir: Path | str | None = None):
        self.rank, self.world_size, self.shared = dist_rank()
        # resolved now: a script that changes directory (Hydra does) still writes where it was asked
        self.run_dir = _live_write.check_target(run_dir, overwrite=overwrite, rank=self.rank, shared=self.shared).absolute()
        self.overwrite = overwrite
        self.options = options
        self.command = list(command if command is not None else sys.argv)
        self.script_dir = Path(script_dir) if script_dir else _script_dir()
        self.started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self.cwd = os.getcwd()  # frames name the script as run (`sub/train.py`): relative to this folder
        self.frames = None  # _live_convert.FrameTable, made with the first cycle (it imports pyarrow)
        self.native = native.load()  # before any training runs: a first build takes a while
        self.cycles: list[_live_convert.CycleColumns] = []
        self.process_group: dict | None = None
        self.warnings: list[str] = []
        self.written = False
        # seconds spent in this collector's own work, wall and CPU (all threads: the conversion and the
        # write use two): what the stop costs beyond torch.profiler's own (bench/bench_collect.py)
        self.timings = {"convert_s": 0.0, "write_s": 0.0, "convert_cpu_s": 0.0, "write_cpu_s": 0.0}
        self.compile_python_dropped = 0  # Python calls of torch.compile's compiler left out (compiled.drop_compile_python)
        self.compile_records: list[dict] = []  # graph breaks and recompiles (compiled.CompilerUntraced.records)
        self.compile_charge = compiled.ChargeCount()  # what charging the compiled kernels did (the manifest's counts)

    def capture_process_group(self) -> None:
        pg = process_group_info()
        if pg:
            self.process_group = pg
            self.rank, self.world_size, self.shared = pg["rank"], pg["world_size"], pg["world_size"] > 1

    def add_cycle(self, prof: tp.profile) -> None:
        t0, c0 = time.perf_counter(), time.process_time()
        from . import _live_convert

        if self.frames is None:
            self.frames = _live_convert.FrameTable()
        self.capture_process_group()
        results = prof.profiler.kineto_results if prof.profiler is not None else None
        if results is not None:
            try:
                with _no_gc(), _live_convert.without_pandas():
                    cycle = _live_convert.convert_cycle(results, self.frames, native=self.native)
                    cycle.events, dropped = compiled.drop_compile_python(cycle.events)
                    self.compile_python_dropped += dropped
                    self.cycles.append(cycle)
            except Exception as e:  # never let the collector stop the training it watches
                where = traceback.extract_tb(e.__traceback__)[-1]
                self.warnings.append(f"profiler cycle {len(self.cycles) + 1} could not be read and is missing: "
                                     f"{type(e).__name__}: {e} (at {Path(where.filename).name}:{where.lineno})")
        self.timings["convert_s"] += time.perf_counter() - t0
        self.timings["convert_cpu_s"] += time.process_time() - c0

    def _charge_compiled_kernels(self) -> list[str]:
        """Each torch.compile kernel's statements into its args (compiled.charge_kernels); the lines
        the manifest says about compiled code."""
        notes = [w for w in [compiled.compile_warning(self.compile_python_dropped)] if w]
        from ..schema import ID_STRIDE

        count = self.compile_charge = compiled.ChargeCount()
        base = self.rank * ID_STRIDE

        def intern(file: str, line: int, function: str, parent: int) -> int:
            return self.frames.intern(file, line, function, parent)

        def is_user(file: str) -> bool:
            return self.frames.resolve(file)[1]

        try:
            for c in self.cycles:  # each graph break and recompile on its line
                c.events, _ = compiled.name_compile_records(c.events, self.compile_records, intern, is_user)
        except Exception as e:  # Dynamo's records are debugging data: never let them stop the run being written
            notes.append(f"torch.compile's graph breaks and recompiles were not named: {type(e).__name__}: {e}")
        try:
            provenance = compiled.compiled_graph_provenance() if "torch._inductor.output_code" in sys.modules else {}
        except Exception as e:  # provenance is Inductor's debugging data: never let it stop the run being written
            return [*notes, f"torch.compile kernels were not traced to their statements: {type(e).__name__}: {e}"]
        if not provenance:
            return notes
        for c in self.cycles:
            c.events = compiled.charge_kernels(c.events, provenance, intern, lambda i: base + i, is_user, count)
        if count.kernels and count.charged < count.kernels:
            notes.append(f"{count.kernels - count.charged} of {count.kernels} torch.compile kernel calls were not traced to a "
                         f"statement (kernels {', '.join(sorted(count.unmatched)[:3])}…): their time stays on the line that "
                         "called the compiled function")
        return notes

    def raw_rank(self) -> RawRank:
        import pyarrow as pa

        from . import _live_convert
        from .build import RawRank

        if self.frames is None:
            self.frames = _live_convert.FrameTable()
        # stopped before any active cycle: an empty but whole run
        cycles = self.cycles or [_live_convert.empty_cycle()]

        def cat(name: str) -> pa.Table:
            # one schema (raw.RAW_*); dictionaries differ per cycle, build.py unifies them
            return pa.concat_tables([getattr(c, name) for c in cycles])

        return RawRank(rank=self.rank, events=cat("events"), flows=cat("flows"), memory=cat("memory"),
                       counters=_live_convert.empty_counters(), frames=self.frames.table())

    def write(self, extra_warnings: Iterable[str] = ()) -> Path:
        from . import _live_convert

        with _no_gc(), _live_convert.without_pandas():
            return self._write(extra_warnings)

    def _write(self, extra_warnings: Iterable[str]) -> Path:
        t0, c0 = time.perf_counter(), time.process_time()
        from . import sources
        from .build import build_rank
        from .device_clock import DeviceClockError, check_device_clock
        from .rank_entry import quality_warnings, rank_entry

        self.capture_process_group()
        if self.shared and not self.process_group:
            self.process_group = {"backend": None, "rank": self.rank, "world_size": self.world_size,
                                  "note": "from the RANK/WORLD_SIZE environment; no process group was initialised while recording"}
        warnings_ = [*self.warnings, *extra_warnings]
        if not self.cycles:
            warnings_.append("no active profiler cycle completed: the run holds no events (check the schedule and prof.step() calls)")
        warnings_ += self._charge_compiled_kernels()
        raw = self.raw_rank()
        try:
            warnings_ += check_device_clock(raw)
        except DeviceClockError as e:  # a recorded run is kept: its device timeline is as the plugin gave it
            warnings_.append(str(e).replace("; not imported", "; left as recorded"))
        built = build_rank(raw)
        built.tables["frames"] = sources.with_code(built.tables["frames"])  # the call sites' text, where readable
        meta = {"source": "live", "distributed_info": self.process_group or ({"rank": self.rank, "world_size": self.world_size}
                                                                            if self.world_size else None),
                "device_properties": device_properties(), "started": self.started, "cycles": len(self.cycles),
                "host": socket.gethostname(), "pid": os.getpid()}
        entry = rank_entry(built, meta, self.compile_charge.quality() if self.compile_charge.kernels else None)
        warnings_ = [f"rank {self.rank}: {w}" if self.shared else w for w in warnings_] + quality_warnings(entry)
        manifest = store.base_manifest(
            "live",
            command=self.command,
            git=git_info(self.script_dir),
            torch_version=torch.__version__,
            python_version=platform.python_version(),
            host=socket.gethostname(),
            cwd=self.cwd,
            started=self.started,
            profiler=self.options,
            converter="native" if self.native is not None else "python",
            devices=meta["device_properties"],
            process_group=self.process_group,
            ranks=[entry],
            warnings=warnings_,
        )
        if not (self.overwrite or self.written):
            beside = _live_write.free_run_dir(self.run_dir, self.rank, self.shared)
            if beside != self.run_dir:  # something was written at the output while this recorded: never replaced
                note = (f"{self.run_dir} was taken while this recorded (another run or files appeared there); "
                        f"this run is written beside it, at {beside}")
                print(f"neuron-explorer: warning: {note}", file=sys.stderr, flush=True)
                manifest["warnings"] = [*manifest["warnings"], note]
                self.run_dir = beside
        if self.shared:
            out = _live_write.write_shared(self.run_dir, self.rank, built.tables, entry, manifest, overwrite=self.overwrite or self.written)
        else:
            out = _live_write.write_single(self.run_dir, self.rank, built.tables, manifest, overwrite=self.overwrite or self.written)
        self.written = True
        self.timings["write_s"] += time.perf_counter() - t0
        self.timings["write_cpu_s"] += time.process_time() - c0
        return out


def _script_dir() -> Path:
    main = sys.argv[0] if sys.argv and sys.argv[0] else ""
    return Path(main).resolve().parent if main and Path(main).is_file() else Path.cwd()


def _check_no_active_profiler() -> None:
    if torch._C._autograd._profiler_enabled():
        raise UsageError("another profiler is already active in this process; neuron_explorer.profile() cannot run inside it "
                         "(use on_trace_ready=neuron_explorer.trace_handler(...) on that profiler instead)")


# --- public API -----------------------------------------------------------------------------


class profile(tp.profile):
    """A `torch.profiler.profile` that writes a Neuron Explorer run directory when it stops.

    `statement_lines` (default on, with `with_stack`): operators written as Python syntax (`a @ b`,
    `x[i]`) link to their own statement, through statements.StatementHook (the C++ converter's line
    callback where it has one, else a TorchFunctionMode: a few % of step time).

    Context manager (`with nx.profile("runs/x") as prof: ... prof.step()`) or decorator
    (`@nx.profile("runs/x")`: every call is recorded; the run is rewritten to hold them all). Activities
    default to the CPU plus every available accelerator, checked again when each cycle starts (a
    PrivateUse1 backend the script registers itself); `privateuse1_backend` names the backend that
    PrivateUse1 stands for when it is not registered yet (`record --activities neuron`), checked when
    profiling stops. Errors in how it is used (a run already
    at run_dir, a directory that cannot be written) are raised here, before any work is profiled.
    """

    def __init__(self, run_dir: Path | str, *, activities: Iterable | None = None, schedule: Callable | None = None,
                 with_stack: bool = True, record_shapes: bool = True, profile_memory: bool = True, with_flops: bool = True,
                 overwrite: bool = False, command: list[str] | None = None, script_dir: Path | str | None = None,
                 statement_lines: bool = True, privateuse1_backend: str | None = None, **torch_profiler_kwargs):
        self._privateuse1_backend = privateuse1_backend  # the backend --activities named, if not yet registered
        self._default_activities = activities is None  # re-checked when each cycle starts (a backend the script registers)
        acts = list(activities) if activities is not None else default_activities()
        user_ready = torch_profiler_kwargs.pop("on_trace_ready", None)
        options = {"activities": activity_names(acts), "schedule": _schedule_options(schedule), "with_stack": with_stack,
                   "statement_lines": bool(statement_lines and with_stack),
                   "record_shapes": record_shapes, "profile_memory": profile_memory, "with_flops": with_flops,
                   **{k: repr(v) for k, v in torch_profiler_kwargs.items()}}
        self.recording = Recording(run_dir, overwrite=overwrite, options=options, command=command, script_dir=script_dir)
        self._user_ready = user_ready
        self._statements = StatementHook(self.recording.native) if statement_lines and with_stack else None
        self._inductor = compiled.InductorProvenance()  # torch.compile kernels as ranges, with the statements they came from
        # compiling kept out of the Python tracer (with_stack), one range per compile, its graph breaks and recompiles
        self._compiler = compiled.CompilerUntraced(pause=with_stack)
        self.recording.compile_records = self._compiler.records
        self._exit_warning: str | None = None
        self.run_dir: Path | None = None
        super().__init__(activities=acts, schedule=schedule, on_trace_ready=self._on_trace_ready, record_shapes=record_shapes,
                         profile_memory=profile_memory, with_stack=with_stack, with_flops=with_flops, **torch_profiler_kwargs)
        # torch marks ProfilerStep#N ranges only under a schedule; a run wants its steps either way
        self.record_steps = True

    def prepare_trace(self) -> None:
        # a backend registered after the profile was made (by the script under `record`, by an import
        # inside the `with`) is seen when the next cycle starts
        if self._default_activities:
            self.activities = set(default_activities())
        pu1 = getattr(tp.ProfilerActivity, "PrivateUse1", None)
        backend = torch._C._get_privateuse1_backend_name()
        if pu1 in self.activities and self.use_device in (None, "privateuseone") and backend != "privateuseone":
            self.use_device = backend  # (torch chose it when the profile was made, before the backend was registered)
        self.recording.options["activities"] = activity_names(sorted(self.activities, key=lambda a: int(a.value)))
        # torch.profiler's start imports torch._inductor (and Dynamo: ~2 s the first time in a
        # process) through `hasattr(torch, "_inductor")`. That is kept: skipping it only moved the
        # import into the recording, where the script's first optimizer (torch._compile imports
        # Dynamo) recorded 1.36M Python events of it and buried the script's own work.
        super().prepare_trace()

    def start_trace(self) -> None:
        super().start_trace()
        if self._compiler is not None:  # graph breaks of compiles made before the recording began (a warm-up call)
            self._compiler.recording_started()

    def _on_trace_ready(self, prof: tp.profile) -> None:
        self.recording.add_cycle(prof)
        if self._user_ready is not None:
            self._user_ready(prof)

    def start(self) -> None:
        _check_no_active_profiler()
        self._exit_warning = None
        self._pid = os.getpid()
        self._inductor.start()
        if self._compiler is not None:
            self._compiler.start()
        super().start()
        if self._statements is not None:
            self._statements.start()

    def _forked_child(self) -> bool:
        """True in a child the profiled code forked (os.fork): the profiler and the run belong to
        the process that started them; a child that unwinds through the `with` must leave both
        alone (stopping Kineto in a child aborts it, and its run would replace the parent's)."""
        return getattr(self, "_pid", None) not in (None, os.getpid())

    def stop(self) -> None:
        if self._forked_child():
            return
        if self._statements is not None:
            self._statements.stop()
        super().stop()
        if self._compiler is not None:
            self._compiler.stop()
        self._inductor.stop()
        warn = [self._exit_warning] if self._exit_warning else []
        missing = self._missing_backend()
        if missing:
            print(f"neuron-explorer: warning: {missing}", file=sys.stderr, flush=True)
            warn.append(missing)
        self.run_dir = self.recording.write(warn)

    def _missing_backend(self) -> str | None:
        """A line when PrivateUse1 was asked for but no backend of that name is registered (torch then records
        the CPU only, silently), or when a backend was registered only after the profiler started."""
        pu1 = getattr(tp.ProfilerActivity, "PrivateUse1", None)
        if pu1 is None:
            return None
        backend = torch._C._get_privateuse1_backend_name()
        if pu1 not in self.activities:
            if self._default_activities and pu1 in default_activities():  # registered while the cycle ran
                return (f"the PrivateUse1 backend {backend!r} was registered after profiling started (by the script?): its device "
                        "events were not recorded; record with a schedule (--wait 1 --active N) so that a cycle starts after "
                        "it, or load it before (a torch.backends entry point)")
            return None
        wanted = self._privateuse1_backend
        if backend == "privateuseone":
            return (f"activity {wanted or 'privateuse1'!r}: no PrivateUse1 backend was registered "
                    "(torch.utils.rename_privateuse1_backend), so only the CPU was recorded")
        if wanted is not None and wanted.lower() != backend.lower():
            return f"activity {wanted!r}: the PrivateUse1 backend registered is {backend!r}; it was recorded under that name"
        return None

    def __exit__(self, exc_type, exc_val, exc_tb):
        if self._forked_child():
            return False
        if exc_type is not None and not (exc_type is SystemExit and exc_val.code in (0, None)):
            what = "interrupted (KeyboardInterrupt)" if exc_type is KeyboardInterrupt else \
                f"exited with code {exc_val.code}" if exc_type is SystemExit else f"raised {exc_type.__name__}: {exc_val}"
            self._exit_warning = f"the profiled code {what}; the run holds what was recorded until then"
        return super().__exit__(exc_type, exc_val, exc_tb)

    def __call__(self, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)

        return wrapper


def trace_handler(run_dir: Path | str, *, overwrite: bool = False) -> Callable[[tp.profile], None]:
    """`on_trace_ready` for a torch.profiler.profile of your own: each cycle is added to one run.

    The run is rewritten after every cycle, so it is always whole, whichever cycle was the last.
    """
    recording = Recording(run_dir, overwrite=overwrite, options={"via": "trace_handler"})

    def handler(prof: tp.profile) -> None:
        recording.options = {"via": "trace_handler", "activities": activity_names(prof.activities),
                             "record_shapes": prof.record_shapes, "profile_memory": prof.profile_memory,
                             "with_stack": prof.with_stack, "with_flops": prof.with_flops,
                             "schedule": _schedule_options(getattr(prof, "schedule", None))}
        recording.add_cycle(prof)
        recording.write()

    handler.recording = recording  # type: ignore[attr-defined]
    return handler


def _silence_cycle_warning() -> None:
    # torch warns that events are cleared between cycles (acc_events); every cycle is kept here.
    warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle.*")


_silence_cycle_warning()
