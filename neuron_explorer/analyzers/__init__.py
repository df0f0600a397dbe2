"""Analyzers: summary numbers (metrics), rules (one file each under rules/), the Report, its renderers.

Reads runs only through `store.open_run`. `analyze(path)` is the entry point.
"""

from .engine import analyze, analyze_run  # noqa: F401
