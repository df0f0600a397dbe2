"""What a worker process the importer forks does first.

Must not: import anything of the package (the importer's modules import it).
"""

from __future__ import annotations

import gc


def keep_inherited() -> None:
    """Initializer of a forked worker process: the objects it inherited are never collected there.

    A fork copies the parent's garbage with the rest, among it objects that own native threads: a
    DuckDB connection left in a reference cycle by earlier work (an analysis in the same notebook,
    the tests before in a test run). Those threads do not exist in the child. If the child's
    collector frees such an object, its destructor joins a thread that is not there and the worker
    segfaults in pthread_join, and every trace it held is reported as "its worker process died".
    Frozen, the inherited objects stay as they are; what the worker makes itself is collected as
    usual. (A parent that froze its objects before passes on its freeze count, not a frozen
    garbage: whatever it made since is frozen here.)
    """
    gc.freeze()
