"""Kineto traces opened as runs: each trace (or directory of per-rank traces) is imported once
into a cache of runs, and imported again when a trace file changes.

`neuron_explorer` registers `cached_run` with store (`store.set_trace_resolver`), so that
`open_run`, `analyze`, the dashboard and the agent tools accept a trace wherever they accept a
run, while store itself never imports a collector.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .. import schema
from .._version import __version__
from ..errors import RunExistsError
from ..store import is_run
from .chrome_trace import capture_files, find_traces, import_traces, provenance_files


def cache_dir() -> Path:
    """Where runs imported on the fly are kept: $NEURON_EXPLORER_CACHE, else the user's cache folder."""
    env = os.environ.get("NEURON_EXPLORER_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "neuron-explorer" / "runs"


def holds_traces(path: Path) -> bool:
    """A trace file, or a directory with .json / .json.gz files under it."""
    if path.is_file():
        return True
    return path.is_dir() and (any(path.rglob("*.json")) or any(path.rglob("*.json.gz")))


def cached_run(path: Path | str, captures: list[Path | str] | None = None) -> Path:
    """The cached run of the Kineto trace (or directory of traces) `path`, imported now when the
    cache has no up-to-date copy. The cache key covers every trace file's path, size and
    modification time (graph-capture traces too: `captures` and a `capture_traces/` folder beside
    the trace; the structured log of Inductor's provenance found beside it), the format and the
    tool version, so an edited or re-recorded trace is imported again."""
    p = Path(path)
    files = find_traces(p)
    capture = capture_files(p, captures)
    kernel_provenance = provenance_files(p)
    h = hashlib.sha256(f"{schema.FORMAT_VERSION}|{__version__}".encode())
    marked = [*(["captures"] if capture else []), *capture, *(["provenance"] if kernel_provenance else []), *kernel_provenance]
    for f in [*files, *marked]:
        if f in ("captures", "provenance"):
            h.update(f"|{f}".encode())
            continue
        st = f.stat()
        h.update(f"|{f.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode())
    target = cache_dir() / f"{p.name.split('.')[0] or 'trace'}-{h.hexdigest()[:16]}"
    if is_run(target):
        return target
    try:
        import_traces(p, target, captures=captures)
    except RunExistsError:  # another process imported it meanwhile
        pass
    return target


def resolve(path: Path | str) -> Path:
    """A run directory for `path`: the path itself when it is a run or holds no traces (then
    read_manifest says what it is), else the cached import of its traces."""
    p = Path(path)
    if is_run(p) or not p.exists() or not holds_traces(p):
        return p
    return cached_run(p)
