"""Make torch's Python tracer see the statement behind every torch call, syntax included.

torch.profiler's Python tracer records calls of Python functions and of built-in methods. An
operator reached through Python syntax (`a @ b`, `x[i]`, `y * c + d`) calls neither: its calling
statement is invisible, and the operator lands on the line that called the enclosing function.

A `TorchFunctionMode` that only calls through is entered while profiling. torch calls its
`__torch_function__` (a Python function) for every torch function and tensor method, syntax
included, so the tracer records a call whose caller is the user's statement; the operators run
inside that call. The converter (_live_convert / native) reads the caller as the operator's line
and writes no event for the call itself (`is_marker`).

The mode is thread-local in torch, as is the profiler's recording of operators: both hold on
the thread that starts profiling, and torch carries them into the autograd engine's threads.
Under `torch.compile` the mode is traced through, with no graph break.

Must not: change what any torch call computes or returns.
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode


class StatementLines(TorchFunctionMode):
    """Calls through; exists so that the tracer records the user's statement as a caller."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if kwargs:
            return func(*args, **kwargs)
        return func(*args)


class StatementHook:
    """Enters StatementLines on the thread that starts profiling; `stop()` leaves it."""

    def __init__(self):
        self._mode: StatementLines | None = None

    def start(self) -> None:
        if self._mode is None:
            self._mode = StatementLines()
            self._mode.__enter__()

    def stop(self) -> None:
        mode, self._mode = self._mode, None
        if mode is None:
            return
        # pop our own mode even when user code left one of its own above it
        stack = [torch._C._pop_torch_function_stack() for _ in range(torch._C._len_torch_function_stack())]
        for m in reversed(stack):
            if m is not mode:
                torch._C._push_on_torch_function_stack(m)
