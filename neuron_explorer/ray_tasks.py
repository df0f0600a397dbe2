"""Per-rank work as Ray tasks, for jobs whose ranks outgrow one machine (optional extra:
`pip install "neuron-explorer[ray]"`).

`import --ray` and `analyze --ray` hand each rank to a Ray task: an import task reads its trace and
writes its own `rank=<r>/` partition into the run's temporary directory, an analysis task opens
views over its rank's partition only and returns the rank's summary and per-rank findings. The
driver (the process that called) writes the manifest and runs the cross-rank rules on the
summaries. The paths must be visible to every node under the same name (a shared filesystem).

Must not: decide anything about traces or findings; it only runs the functions it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from .errors import InputError

EXTRA_HINT = 'pip install "neuron-explorer[ray]"'


def require_ray():
    """The `ray` module, or a one-line error naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise InputError("--ray", f"needs Ray, which is not installed: {EXTRA_HINT}") from None
    return ray


def connect(address: str):
    """Connect to the Ray cluster at `address` ('auto': the one `ray start` runs here; 'local': a
    new one in this process) unless this process is already connected; returns the `ray` module."""
    ray = require_ray()
    if not ray.is_initialized():
        try:
            ray.init(address=None if address == "local" else address, include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        except ConnectionError as e:
            raise InputError("--ray", f"cannot connect to the Ray cluster at {address!r} ({e})") from None
    return ray


def map_unordered(address: str, fn: Callable, calls: Iterable[tuple]) -> Iterator:
    """Run fn(*args) for each args in `calls` as Ray tasks; yield the results as they finish. The
    first task that fails raises here (the remaining tasks are cancelled)."""
    ray = connect(address)
    remote = ray.remote(fn)
    pending = [remote.remote(*args) for args in calls]
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                try:
                    yield ray.get(ref)
                except ray.exceptions.RayTaskError as e:
                    raise e.as_instanceof_cause() from None
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
