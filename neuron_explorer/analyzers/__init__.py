"""Analyzers: the figures (metrics, lines, critical_path, utilisation, ranks, ...), the summary that
puts them together (summary.py), the rules (one file each under rules/) and their engine, the
Report and its renderers.

Layers point down: figures → summary → rules and engine. Reads runs only through
`store.open_run`. `analyze(path)` is the entry point; it is loaded when first asked for, so that
importing one figure module (e.g. `analyzers.metrics`) does not load the layers above it.
"""

_ENTRY_POINTS = ("analyze", "analyze_run")


def __getattr__(name: str):
    if name in _ENTRY_POINTS:
        from . import engine

        return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
