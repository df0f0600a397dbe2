"""Neuron Explorer: a profiler and performance-analysis toolkit for PyTorch.

Collectors write run directories (Parquet + manifest); everything else reads them.
"""

from __future__ import annotations

from . import store as _store
from ._version import __version__
from .analyzers.model import Report as _Report
from .errors import InputError, NeuronExplorerError, RunExistsError
from .store import Run, open_run


def _trace_as_run(path):
    """A Kineto trace (or directory of traces) as a run: its cached import (collectors/trace_cache.py)."""
    from .collectors import trace_cache

    return trace_cache.resolve(path)


_store.set_trace_resolver(_trace_as_run)  # open_run & co. accept traces; store imports no collector


# How runs and reports draw in Jupyter (notebook.py): imported when one is first drawn, not here, so
# that `import neuron_explorer` stays light for scripts that only profile (the notebook view pulls in
# the analyzers' figures and html: about a third of the package's import). Importing notebook
# replaces these with its own functions.
def _run_repr_html(run) -> str:
    from . import notebook

    return notebook._run_repr_html(run)


def _report_repr_html(report) -> str:
    from . import notebook

    return notebook._report_repr_html(report)


if "_repr_html_" not in vars(_store.Run):
    _store.Run._repr_html_ = _run_repr_html
if "_repr_html_" not in vars(_Report):
    _Report._repr_html_ = _report_repr_html


def import_trace(source, out_dir, *, force: bool = False):
    """Import a Kineto JSON trace (file or directory of per-rank files) into a run directory."""
    from .collectors.chrome_trace import import_traces

    return import_traces(source, out_dir, force=force).run_dir


def analyze(run_dir, *, write: bool = True):
    """Analyse a run directory: a Report of ranked findings (also written to RUN/analysis/ unless write=False)."""
    from .analyzers.engine import analyze as _analyze

    return _analyze(run_dir, write=write)


__all__ = ["__version__", "open_run", "analyze", "Run", "import_trace", "InputError", "NeuronExplorerError", "RunExistsError"]

# The live collector (profile, schedule, trace_handler) imports torch: loaded only when asked, so
# that readers of runs (analyze, dashboard, agent) never import torch.
_LIVE = ("profile", "schedule", "trace_handler")
__all__ += list(_LIVE)


def __getattr__(name: str):
    if name in _LIVE:
        from .collectors import torch_profiler

        return getattr(torch_profiler, name)
    raise AttributeError(f"module 'neuron_explorer' has no attribute {name!r}")
