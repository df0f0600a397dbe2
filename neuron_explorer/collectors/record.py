"""`neuron-explorer record`: run an unmodified script or module under the live collector.

The target runs the way `python script.py args` / `python -m pkg.mod args` (and `python -m
cProfile`) run it: the same `sys.argv`, `__name__ == "__main__"`, and `sys.path[0]` (the script's
directory, or the current directory for a module). Its exit code is kept. When it raises or is
interrupted, the run of what was recorded is still written, with a warning in the manifest, and
the traceback is printed as Python would print it.

Signals: SIGTERM ends the script the way Ctrl-C does (an exception, `Terminated`, raised where it
runs), so the run of what was recorded is written and the exit code is 143 (128 + 15), as an
unhandled SIGTERM gives; SIGHUP, SIGUSR1 and SIGUSR2 (when the script has no handler of its own)
likewise, exit 129, 138 or 140. These signals and SIGINT, when they arrive while the profiler starts,
stops or while the run is being written, wait until that is done (the run is then written, exit
128 + the signal, no traceback).
A script that ends with `os._exit()` (or is killed with SIGKILL) ends the process at once, without
unwinding: no run can be written then.

Must not: parse command lines (cli.py does) or change what the profiler records.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import runpy
import signal
import sys
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError, NeuronExplorerError, UsageError


@dataclass
class RecordResult:
    run_dir: Path | None
    exit_code: int


QUIET_TORCH_LOGS = {"KINETO_LOG_LEVEL": "6", "TORCH_CPP_LOG_LEVEL": "ERROR"}
"""Log levels set under `record` and `demo` unless the environment already has them, so that the
script's stderr holds its own lines (the README's "Record a job" says what each hides).

Measured on torch 2.13 (CPU): Kineto's levels are VERBOSE 0, INFO 1, WARNING 2, STAGE 3, ERROR 4,
USDT 5; at torch's default (4) every profiler start and stop prints a `USDT: … profiler_start` /
`profiler_stop` line, 6 hides them, and with them Kineto's ERROR lines. Kineto reads the variable
when the profiler first starts. `[W… CPUAllocator.cpp:245] Memory block of unknown size …` (a
block allocated before a memory-recording window and freed inside it) is c10's C++ LOG(WARNING):
TORCH_CPP_LOG_LEVEL=ERROR hides it with the other C++ warning lines, keeps errors, and is read
only when torch is imported. Warnings torch raises as Python warnings are not affected."""


def quiet_torch_logs() -> dict[str, str]:
    """Set QUIET_TORCH_LOGS where the environment has no value yet (child processes inherit them);
    call before torch is imported. Returns what was set."""
    added = {k: v for k, v in QUIET_TORCH_LOGS.items() if k not in os.environ}
    os.environ.update(added)
    return added


class Terminated(BaseException):
    """Raised in the script when `record` gets SIGTERM (a BaseException: `except Exception` in the
    script does not swallow it), so that the profiler stops and the run is written."""


def _raise_terminated(signum, frame):
    raise Terminated(f"received {signal.Signals(signum).name}")


_SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129, signal.SIGUSR1: 138, signal.SIGUSR2: 140}
"""The signals `record` turns into an orderly end (the run written, exit 128 + the signal's
number): SIGINT as KeyboardInterrupt; SIGTERM, SIGHUP (a closed terminal or SSH session) and
SIGUSR1/2 (whose default, too, kills the process) as Terminated. A handler the script installs
for one of them is its own."""
_TERMINATING = tuple(s for s in _SIGNAL_EXIT if s != signal.SIGINT)


def _hold_signals(into: list[int]):
    """Hold SIGINT and SIGTERM back (each one that comes is appended to `into`) while the profiler
    starts or the run is written. Returns what `_restore_signals` needs; only in the main thread
    (elsewhere signals cannot be handled and nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    saved = {s: signal.getsignal(s) for s in _SIGNAL_EXIT}
    for s in _SIGNAL_EXIT:
        signal.signal(s, lambda signum, frame: into.append(signum))
    return saved


def _restore_signals(saved, *, terminate: bool = False) -> None:
    """Put the handlers back; with `terminate`, SIGTERM raises Terminated (while the script runs)."""
    if saved is None:
        return
    for s, h in saved.items():
        signal.signal(s, h)
    if terminate:
        for s in _TERMINATING:
            if saved.get(s) in (signal.SIG_DFL, None) or s == signal.SIGTERM:
                signal.signal(s, _raise_terminated)


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)  # sys.exit("message") prints it and exits 1, as Python does
    return 1


def check_target(script: str | None, module: str | None) -> Path | None:
    """Fail early on a target that cannot run. Returns the script path (None for a module)."""
    if bool(script) == bool(module):
        raise UsageError("give either a script path or -m MODULE")
    if script:
        path = Path(script)
        if not path.exists():
            raise InputError(path, "no such script")
        if path.is_dir() and not (path / "__main__.py").is_file():
            raise InputError(path, "is a directory with no __main__.py")
        return path
    # `python -m` looks in the current directory first: so does this look-up, which runs before
    # record() puts the current directory at sys.path[0] (from a console script, sys.path[0] is
    # the script's bin directory). A parent package it imports stays imported, as with python -m.
    saved_path = sys.path[:]
    sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.find_spec(module)  # type: ignore[arg-type]
    except (ImportError, ValueError) as e:
        raise InputError(module, f"cannot find module ({e})") from None
    finally:
        sys.path[:] = saved_path
    if spec is None:
        raise InputError(module, "no such module")
    return None


_ACTIVITY_NAMES = ("cpu", "cuda", "xpu", "mtia", "privateuse1")
_PRIVATEUSE1_BACKENDS = ("neuron", "npu", "openreg")
"""PrivateUse1 backends' names (AWS Trainium's TorchNeuron, Ascend's torch_npu, PyTorch's reference) that
--activities takes before the script registers them: checked when profiling stops."""


def profile_options(*, wait: int = 0, warmup: int = 0, active: int = 0, repeat: int = 0, activities: str | None = None,
                    stack: bool = True, memory: bool = True, shapes: bool = True, statement_lines: bool = True) -> dict:
    """Keyword arguments of `profile()` from the CLI's options (checked here, before the script runs)."""
    quiet_torch_logs()  # a schedule or activities import torch here, before record() does
    if min(wait, warmup, active, repeat) < 0:
        raise UsageError("--wait, --warmup, --active and --repeat must not be negative")
    if (wait or warmup or repeat) and not active:
        raise UsageError("--wait, --warmup and --repeat need --active N (steps recorded per cycle)")
    # flops are computed from input shapes: torch records shapes whenever flops are asked for
    opts: dict = {"with_stack": stack, "profile_memory": memory, "record_shapes": shapes, "with_flops": shapes,
                  "statement_lines": statement_lines}
    if active:
        import torch.profiler as tp

        opts["schedule"] = tp.schedule(wait=wait, warmup=warmup, active=active, repeat=repeat)
    if activities:
        import torch
        import torch.profiler as tp

        names = [a.strip().lower() for a in activities.split(",") if a.strip()]
        pu1 = torch._C._get_privateuse1_backend_name()
        acts = []
        for n in names:
            key = "privateuse1" if n == pu1 else n
            if key not in _ACTIVITY_NAMES:
                if n not in _PRIVATEUSE1_BACKENDS:
                    raise UsageError(f"unknown activity {n!r}; choose from {', '.join(_ACTIVITY_NAMES)} "
                                     f"(or a PrivateUse1 backend: {', '.join(_PRIVATEUSE1_BACKENDS)}, or the one registered: {pu1!r})")
                # a backend the script registers itself ('neuron'): PrivateUse1, checked when profiling stops
                opts["privateuse1_backend"] = n
                key = "privateuse1"
            acts.append(getattr(tp.ProfilerActivity, {"privateuse1": "PrivateUse1"}.get(key, key.upper())))
        opts["activities"] = acts
    return opts


def record(out: Path | str, script: str | None, args: list[str], *, module: str | None = None, overwrite: bool = False,
           profile_options: dict | None = None) -> RecordResult:
    """Run the script (or module) under `neuron_explorer.profile(out, **profile_options)`."""
    path = check_target(script, module)
    quiet_torch_logs()
    from . import torch_profiler  # torch is imported only once the target is known to exist

    argv0 = str(path) if path is not None else module
    command = list(sys.argv)
    prof = torch_profiler.profile(out, overwrite=overwrite, command=command,
                                  script_dir=(path.resolve().parent if path is not None else Path.cwd()),
                                  **(profile_options or {}))
    saved_argv, saved_path0 = sys.argv[:], sys.path[0] if sys.path else None
    sys.argv = [argv0, *args]
    new_path0 = str(path.resolve().parent) if path is not None and not path.is_dir() else \
        str(path.resolve()) if path is not None else os.getcwd()
    if sys.path:
        sys.path[0] = new_path0
    else:
        sys.path.append(new_path0)
    code = 0
    restore_dist = _capture_process_group_on_destroy(prof)
    step_hook = _count_optimizer_steps(prof)
    late: list[int] = []
    write_error = _keep_write_error(prof, late)
    _hold_signals_while_stopping(prof, late)
    early: list[int] = []
    saved = _hold_signals(early)  # a signal while the profiler starts waits until it runs
    pid, cwd = os.getpid(), os.getcwd()
    try:
        try:
            # The profiler starts in torch's __enter__ called from this frame, as the plain `with
            # prof:` did: a frame of ours open across the start would show as an overlapping slice.
            with prof:
                _restore_signals(saved, terminate=True)
                saved = None
                if early:  # the profiler runs: end as the signal says, the (empty) run is written on the way out
                    raise KeyboardInterrupt() if early[0] == signal.SIGINT else Terminated(f"received {signal.Signals(early[0]).name}")
                if path is not None:
                    runpy.run_path(str(path), run_name="__main__")
                else:
                    runpy.run_module(module, run_name="__main__", alter_sys=True)  # type: ignore[arg-type]
        except SystemExit as e:
            code = _exit_code(e)
        except Terminated as e:
            name = str(e).removeprefix("received ") or "SIGTERM"
            print(f"neuron-explorer: terminated ({name}); the run holds what was recorded", file=sys.stderr)
            code = _SIGNAL_EXIT.get(getattr(signal.Signals, name, signal.SIGTERM), 143)
        except KeyboardInterrupt as e:
            if early:
                print("interrupted", file=sys.stderr)  # while the profiler started: nothing of the script to show
            else:
                _print_script_traceback(e)
            code = 130
        except BaseException as e:  # the script's own error: shown as Python shows it, the run is written
            _print_script_traceback(e)
            code = 1
        if os.getpid() != pid:
            _end_forked_child(code)
        for s in late:  # a signal that came while the run was written
            code = code or _SIGNAL_EXIT[s]
    finally:
        _restore_signals(saved)  # only when the profiler did not start
        restore_dist()
        step_hook.remove()
        sys.argv = saved_argv
        if saved_path0 is not None and sys.path:
            sys.path[0] = saved_path0
        with contextlib.suppress(OSError):
            os.chdir(cwd)  # a script that changed directory (Hydra does): the CLI goes on where it was started
    if write_error:
        print(f"error: {write_error[0]}", file=sys.stderr)  # one line; the script's own exit code is kept
        code = code or 2
    return RecordResult(_as_given(prof.run_dir, cwd), code)


def _as_given(run_dir: Path | None, cwd: str) -> Path | None:
    """The run's path relative to where `record` started when it lies below it (`runs/x`, as typed)."""
    if run_dir is None:
        return None
    try:
        return Path(run_dir).relative_to(cwd)
    except ValueError:
        return Path(run_dir)


def _end_forked_child(code: int) -> None:
    """A child the script forked (os.fork) that ends by returning, or with sys.exit, unwinds back
    here: it ends now with its code, as the script's own process would, without writing a run,
    stopping the parent's profiler or running the CLI's report (the run is the parent's)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream: nothing to flush
            pass
    os._exit(code if 0 <= code <= 255 else 1)


def _hold_signals_while_stopping(prof, held: list[int]) -> None:
    """A second Ctrl-C (or SIGTERM) while the profiler stops — torch's own post-processing takes
    seconds on a long recording — waits (appended to `held`) until the run is written, instead of
    interrupting torch's stop and losing the whole recording."""
    stop = prof.stop

    def guarded(*a, **kw):
        saved = _hold_signals(held)
        try:
            return stop(*a, **kw)
        finally:
            _restore_signals(saved)

    prof.stop = guarded


def _keep_write_error(prof, held: list[int]) -> list:
    """Writing the run can fail late (a full disk): keep the one-line error instead of letting it
    pass for the script's own exception (the script's exit code is kept; 2 when it succeeded).
    SIGINT and SIGTERM that come while the run is written wait (appended to `held`)."""
    errors: list = []
    write = prof.recording.write

    def guarded(*a, **kw):
        saved = _hold_signals(held)
        try:
            return write(*a, **kw)
        except (NeuronExplorerError, OSError) as e:
            errors.append(e)
            return None
        finally:
            _restore_signals(saved)

    prof.recording.write = guarded
    return errors


def _print_script_traceback(e: BaseException) -> None:
    """The traceback from the script's first frame on, without the runner's and runpy's frames."""
    tb = e.__traceback__
    while tb is not None and (tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__)
                              or "runpy" in tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    traceback.print_exception(type(e), e, tb)


def _count_optimizer_steps(prof):
    """An unmodified script never calls prof.step(): each optimizer.step() ends a step instead,
    which gives the run its steps and lets a schedule (wait/warmup/active) advance."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    def step(optimizer, args, kwargs):  # registered only while the script runs inside the profiler
        prof.step()

    return register_optimizer_step_post_hook(step)


def _capture_process_group_on_destroy(prof):
    """Scripts often tear their process group down before they return, and the run is written
    after that: note the group's setup (backend, world size) just before it goes."""
    try:
        import torch.distributed as dist
    except ImportError:
        return lambda: None
    if not dist.is_available():
        return lambda: None
    original = dist.destroy_process_group

    def destroy_process_group(*a, **kw):
        prof.recording.capture_process_group()
        return original(*a, **kw)

    dist.destroy_process_group = destroy_process_group

    def restore():
        dist.destroy_process_group = original

    return restore
