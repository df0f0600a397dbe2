"""Errors a user can act on. The CLI prints them as one line and exits 2; besides these it catches
only a run file that DuckDB or pyarrow cannot read (unreadable_file), so a damaged run is one line
too, and anything else (a bug) keeps its traceback."""

from __future__ import annotations


class NeuronExplorerError(Exception):
    """Base of every error the CLI reports as one line (never a traceback)."""


class InputError(NeuronExplorerError):
    """Bad input: names the file and the problem."""

    def __init__(self, path: object, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")

    def __reduce__(self):  # raised in worker processes too: pickles with both arguments
        return type(self), (self.path, self.problem)


class RunExistsError(NeuronExplorerError):
    """The output path already holds a run (or other files) and replacing it was not asked for."""

    def __init__(self, path: object):
        self.path = str(path)
        super().__init__(f"{self.path}: already exists; pass --force (overwrite=True) to replace it")


class UsageError(NeuronExplorerError):
    """The tool was used in a way that cannot work (checked early, before any long work)."""


def unreadable_file(e: BaseException) -> str | None:
    """The one-line problem when `e` is DuckDB or pyarrow failing to read a file (a truncated or
    overwritten Parquet file of a run: its message names the file), else None."""
    module = type(e).__module__ or ""
    if not (module.startswith("duckdb") or module.startswith("_duckdb") or module.startswith("pyarrow")):
        return None
    text = str(e).strip()
    first = text.splitlines()[0] if text else type(e).__name__
    lowered = text.lower()
    if "parquet" not in lowered and "file '" not in lowered and "no such file" not in lowered:
        return None
    return f"a file of the run cannot be read ({first}); import or record the run again"
