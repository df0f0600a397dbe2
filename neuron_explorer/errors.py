"""Errors a user can act on. The CLI prints them as one line and exits 2; nothing else is caught."""

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
