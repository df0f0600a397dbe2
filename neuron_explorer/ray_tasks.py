"""Per-rank work as Ray tasks, for jobs whose ranks outgrow one machine (optional extra:
`pip install "neuron-explorer[ray]"`).

`import --ray` and `analyze --ray` hand each rank to a Ray task: an import task reads its trace and
writes its own `rank=<r>/` partition into the run's temporary directory, an analysis task opens
views over its rank's partition only and returns the rank's summary and per-rank findings. The
driver (the process that called) writes the manifest and runs the cross-rank rules on the
summaries. The paths must be visible to every node under the same name (a shared filesystem).
A task that fails, or whose worker dies, is reported by its rank or file while the others run on.

Must not: decide anything about traces or findings; it only runs the functions it is given.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator

from .errors import InputError

EXTRA_HINT = 'pip install "neuron-explorer[ray]"'
RAY_NOTICE_LOCAL = "neuron-explorer: starting a local Ray cluster for --ray local (10-40 s; 40 s measured on 2 cores) ..."
"""Said on stderr before Ray starts: `ray.init` prints nothing (log_to_driver=False) while it starts
its processes (issue 37: about 40 s on a 2-core machine)."""


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
        print(RAY_NOTICE_LOCAL if address == "local" else f"neuron-explorer: connecting to the Ray cluster at {address} ...",
              file=sys.stderr, flush=True)
        try:
            # "local" as it is: with no address Ray would join RAY_ADDRESS's cluster, or the last one
            # `ray start` recorded (/tmp/ray/ray_current_cluster), and wait on it even when it is gone
            ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
        except ConnectionError as e:
            raise InputError("--ray", f"cannot connect to the Ray cluster at {address!r} ({e})") from None
    return ray


def map_settled(address: str, fn: Callable, calls: list[tuple]) -> Iterator[tuple[object, bool, object]]:
    """Run fn(*args) for each args in `calls` as Ray tasks; yield (args[0], True, result) or
    (args[0], False, why) for each as it finishes: a task that fails, or whose worker dies, is
    reported by its first argument while the others run on."""
    ray = connect(address)
    remote = ray.remote(max_retries=1)(fn)  # one retry, for a node lost mid-task; a worker killed twice is reported
    pending = {remote.remote(*args): args[0] for args in calls}
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                key = pending.pop(ref)
                try:
                    yield key, True, ray.get(ref)
                except ray.exceptions.RayTaskError as e:
                    cause = getattr(e, "cause", None)
                    yield key, False, getattr(cause, "problem", None) or f"{type(cause).__name__}: {cause}"
                except ray.exceptions.RayError as e:  # the worker died, the node went away
                    yield key, False, f"its Ray worker died ({type(e).__name__})"
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
