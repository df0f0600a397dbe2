"""pyarrow without pandas: a block of work in which pyarrow's first conversion of Python values
does not import pandas (0.3-0.5 s of CPU), for the collector's write and the analysis, which make
and read no pandas object.

Must not: import pandas, or hide it where pandas is already imported.
"""

from __future__ import annotations

import contextlib
import sys
import threading

import pyarrow as pa


@contextlib.contextmanager
def without_pandas(*, every_thread: bool = False):
    """The conversion and write of a run without importing pandas (0.3-0.5 s of CPU at the first
    stop in a process, more than the rest of a small recording's write; in `analyze`, a tenth of a
    1M-event rank's analysis; issue 38).

    pyarrow imports pandas, when the job has not, at its first conversion of Python or NumPy values
    (`pa.array`, `pa.scalar`, a compute function given a Python number): its lazy pandas check asks
    once per process, and its C++ converter tries the import at each conversion until it succeeds.
    None of this work makes or reads a pandas object, so inside this block pandas cannot be imported
    on this thread (an import hook that fails it at once; other threads import as usual). pyarrow's
    Python check then remembers 'no pandas': it asks again at its next call that needs pandas
    (`to_pandas`, `from_pandas`), and when the job imports pandas later the answer is refreshed right
    after that import (a one-shot import hook), so pyarrow treats pandas objects as before. Nothing
    is hidden when pandas is already imported.

    `every_thread`: hidden on every thread, for a process that runs only the tool's own work (a
    batch import: its decode, build and write convert on helper threads too). Importing pandas
    there is 50 MiB of the process's memory for nothing (issue 38: the import's memory)."""
    if "pandas" in sys.modules:
        yield
        return
    hide = _HidePandas(None if every_thread else threading.get_ident())
    sys.meta_path.insert(0, hide)
    try:
        yield
    finally:
        sys.meta_path.remove(hide)
        if "pandas" not in sys.modules and hide.hidden and not any(isinstance(f, _RefreshArrowPandas) for f in sys.meta_path):
            sys.meta_path.insert(0, _RefreshArrowPandas())


class _HidePandas:
    """Fails an import of pandas on one thread, or on all (without_pandas)."""

    def __init__(self, thread: int | None):
        self.thread = thread  # (None: every thread)
        self.hidden = False

    def find_spec(self, name, path=None, target=None):
        if name == "pandas" and self.thread in (None, threading.get_ident()):
            self.hidden = True
            raise ModuleNotFoundError("pandas is not imported while Neuron Explorer writes or analyses a run (without_pandas)", name=name)
        return None


def hidden() -> bool:
    """Whether pandas is hidden from this thread now (a without_pandas block)."""
    me = threading.get_ident()
    return any(isinstance(f, _HidePandas) and f.thread in (None, me) for f in sys.meta_path)


class _RefreshArrowPandas:
    """A one-shot import hook: after the job imports pandas, pyarrow's pandas check is asked again (without_pandas)."""

    def find_spec(self, name, path=None, target=None):
        if name != "pandas":
            return None
        import importlib.util

        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)  # (the finders after this one)
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        def exec_then_refresh(module):
            exec_module(module)
            try:
                pa.lib._pandas_api.pd  # noqa: B018  (pyarrow imports pandas' compatibility layer and says yes)
            except Exception:  # pyarrow asks again at its next call that needs pandas
                pass

        loader.exec_module = exec_then_refresh
        return spec
