"""Give every operator the statement that called it, syntax included.

torch.profiler's Python tracer records calls of Python functions and of built-in methods. An
operator reached through Python syntax (`a @ b`, `x[i]`, `y * c + d`) calls neither: its calling
statement is invisible, and the operator lands on the line that called the enclosing function.

Two ways, the same lines (tests/test_statement_lines.py holds them equal):

- With the C++ converter on CPython 3.11 (`native.statement_lines_supported()`): a RecordFunction
  callback notes, per operator, the line its calling Python frame is executing (a few hundred ns
  an operator, nothing for a `.shape` read or any torch call that runs no operator);
  live_convert.cpp's tree walk gives it to operators whose parent is that function's call.
- Otherwise, the StatementLines mode below, which costs ~3 µs per torch call on the step (torch's
  mode dispatch and the tracer's event) and ~6 µs per call in Kineto's stop (issue 38).

The mode: a `TorchFunctionMode` that only calls through is entered while profiling. torch calls its
`__torch_function__` (a Python function) for every torch function and tensor method, syntax
included, so the tracer records a call whose caller is the user's statement; the operators run
inside that call. The converter (_live_convert / native) reads the caller as the operator's line
and writes no event for the call itself (`_live_convert.call_kind`).

The mode is thread-local in torch, as is the profiler's recording of operators: both hold on
the thread that starts profiling, and torch carries them into the autograd engine's threads.
Under `torch.compile` the mode is traced through, with no graph break. Processes forked while
profiling (DataLoader workers) drop it.

A warning raised inside a torch call (from torch's C++ or with a stack level meant for the user's
call) would name the mode's frame here: while the hook is on, `warnings.showwarning` is wrapped so
that such a warning names the statement that called through the mode (Python 3.11 has no
`skip_file_prefixes`, and C++ warnings take the innermost frame whatever it is).

Must not: change what any torch call computes or returns.
"""

from __future__ import annotations

import os
import sys
import warnings

import torch
from torch.overrides import TorchFunctionMode


class StatementLines(TorchFunctionMode):
    """Calls through; exists so that the tracer records the user's statement as a caller."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs:
            return func(*args, **kwargs)
        return func(*args)


def _remove(keep) -> None:
    """Pop every StatementLines that `keep` rejects from this thread's mode stack, leaving the
    user's own modes in their order (even when one sits above ours)."""
    stack = [torch._C._pop_torch_function_stack() for _ in range(torch._C._len_torch_function_stack())]
    for m in reversed(stack):
        if not isinstance(m, StatementLines) or keep(m):
            torch._C._push_on_torch_function_stack(m)


def _drop_in_forked_child() -> None:
    # A DataLoader worker forked while profiling inherits the mode on its main thread, and no
    # profiler watches it there: it would only cost time.
    _remove(lambda m: False)


_FORK_HOOKED = False


def _user_frame_of_warning():
    """The frame that called through StatementLines, when a warning is being shown from inside it."""
    code = StatementLines.__torch_function__.__code__
    f = sys._getframe(2)
    while f is not None and f.f_code is not code:
        f = f.f_back
    return f.f_back if f is not None else None


def _wrap_showwarning(show):
    def showwarning(message, category, filename, lineno, file=None, line=None):
        if filename == __file__:
            caller = _user_frame_of_warning()
            if caller is not None:
                filename, lineno, line = caller.f_code.co_filename, caller.f_lineno, None
        return show(message, category, filename, lineno, file, line)

    showwarning.__wrapped__ = show  # type: ignore[attr-defined]
    showwarning._statement_lines = True  # type: ignore[attr-defined]
    return showwarning


_NATIVE_IN_USE: list = []  # the C++ module whose line callback is on (at most one), for a forked child to turn off


def _stop_native_in_child() -> None:
    for module in _NATIVE_IN_USE:
        module.lines_stop()
    _NATIVE_IN_USE.clear()


def uses_native(native) -> bool:
    """Whether the C++ converter `native` (or None) records the statement lines itself."""
    try:
        return native is not None and bool(native.statement_lines_supported())
    except AttributeError:  # a module built from an older source
        return False


class StatementHook:
    """Statement lines on for the thread that starts profiling: the C++ converter's line callback
    when `native` has one (uses_native), else StatementLines; `stop()` turns them off."""

    def __init__(self, native=None):
        self._mode: StatementLines | None = None
        self._native = native if uses_native(native) else None
        self.kind = "callback" if self._native is not None else "mode"

    def start(self) -> None:
        global _FORK_HOOKED
        if self._native is not None:
            if self._native.lines_start():
                _NATIVE_IN_USE[:] = [self._native]
        elif self._mode is None:
            self._mode = StatementLines()
            self._mode.__enter__()
            if not getattr(warnings.showwarning, "_statement_lines", False):
                warnings.showwarning = _wrap_showwarning(warnings.showwarning)
        if not _FORK_HOOKED and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_drop_in_forked_child)
            os.register_at_fork(after_in_child=_stop_native_in_child)
            _FORK_HOOKED = True

    def stop(self) -> None:
        if self._native is not None:
            self._native.lines_stop()
            _NATIVE_IN_USE.clear()
        mode, self._mode = self._mode, None
        if mode is not None:
            _remove(lambda m: m is not mode)
            if getattr(warnings.showwarning, "_statement_lines", False):  # (unless the user replaced it meanwhile)
                warnings.showwarning = warnings.showwarning.__wrapped__
