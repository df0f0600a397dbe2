"""Neuron Explorer: a profiler and performance-analysis toolkit for PyTorch.

Collectors write run directories (Parquet + manifest); everything else reads them.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import InputError, NeuronExplorerError, RunExistsError  # noqa: E402
from .store import Run, open_run  # noqa: E402


def import_trace(source, out_dir, *, force: bool = False):
    """Import a Kineto JSON trace (file or directory of per-rank files) into a run directory."""
    from .collectors.chrome_trace import import_traces

    return import_traces(source, out_dir, force=force).run_dir


__all__ = ["__version__", "open_run", "Run", "import_trace", "InputError", "NeuronExplorerError", "RunExistsError"]
