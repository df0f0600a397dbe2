"""glibc's mmap threshold, tuned per phase of a batch import, and the process's huge pages (no-ops
off Linux/glibc).

Must not: import anything of the package (the importer's modules all import it).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager

DECODE_MMAP_THRESHOLD = 256 << 10
BUILD_MMAP_THRESHOLD = 64 << 20
WRITE_MMAP_THRESHOLD = 4 << 20


def set_mmap_threshold(nbytes: int, trim: bool = False) -> None:
    """glibc's M_MMAP_THRESHOLD: blocks this large or larger are mmapped, and so returned to the OS
    when freed (a no-op off Linux/glibc). Process-wide, so only batch imports (`tune_allocator=True`,
    what the CLI asks for) change it.

    Decoding interleaves long-lived result buffers with short-lived ones of a few MB; served from
    the heap (glibc's adaptive default) the freed ones stay in the process and the peak grows by
    ~40%, so decoding runs with a small threshold. Building the links allocates and frees arrays of
    tens of MB; mmapping each costs page faults (~0.5 s for a 2M-event trace) while the heap
    reuses them, so the build runs with a large one. Writing makes the same few arrays of a row
    group's size (1 MB for 128k int64 values) for each row group: from the heap they are reused,
    mmapped they cost 70,000 page faults more for a 1.45M-event trace, so the write runs with a
    threshold above them (and the build's leftovers trimmed first).
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, int(nbytes))  # M_MMAP_THRESHOLD
        if trim:
            libc.malloc_trim(0)  # hand the heap's free memory back now
    except (OSError, AttributeError):
        pass


def arrow_on_malloc() -> None:
    """Arrow's buffers from glibc's malloc (pyarrow's system pool) instead of its bundled mimalloc,
    from here on in this process (a no-op off Linux/glibc). Only batch imports call it.

    mimalloc keeps the pages of freed buffers for its own later allocations, and numpy allocates
    from glibc: the decode's and the build's freed Arrow buffers (the pieces' tables, their joins,
    the args taken for sequence numbers) stayed resident beside every array allocated after them,
    about 110 MiB on a 1.45M-event trace, at the import's peak. From glibc's heap they are reused by
    whatever comes next, and the thresholds above decide when they go back to the system.
    """
    if not sys.platform.startswith("linux"):
        return
    import pyarrow as pa

    if pa.default_memory_pool().backend_name != "system":
        pa.set_memory_pool(pa.system_memory_pool())


PR_SET_THP_DISABLE = 41  # linux/prctl.h


def no_huge_pages() -> None:
    """No transparent huge pages for this process's memory from here on (prctl PR_SET_THP_DISABLE;
    inherited by child processes; a no-op off Linux). Batch imports and the CLI's own commands
    (cli._tune_tool_process) call it, never a process that runs the user's workload.

    numpy asks for huge pages for every array of 4 MiB or more (madvise(MADV_HUGEPAGE): with the
    kernel's THP setting `madvise`, this machine's, only such asks get them; with `always`, every
    large block does). The build makes and frees arrays of tens of MB, and the first touch of a 2 MiB
    page zeroes all of it, again after every trim (`trimming`) has handed it back. On a 1.45M-event
    trace the build spent 1.5-2.5 s in the kernel, most of it zeroing pages (perf: clear_page_erms
    under numpy's take, maximum and where), against 0.6 s on 4 KiB pages (bench/README.md)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


TRIM_INTERVAL_S = 0.05
TRIM_CHECK_S = 0.01
"""With a budget (`trimming`'s `above`), how often the resident memory is read (a few µs) to decide
whether to trim."""
TRIM_ABOVE_JSON = 0.9
"""A batch import's budget: the build and the write trim only while the process holds more than this
share of the trace's JSON (the import's peak must stay under the JSON's size). On the 2.2M-event
tiling (410 MiB of JSON): a peak of 378-384 MiB at 0.9 (377-381 at 0.85, and slower; 368-369 trimmed
all along), the write's page faults 116-120k -> 65-77k (bench/README.md)."""


def resident_bytes() -> int | None:
    """This process's resident memory now (Linux: /proc/self/statm), None where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


try:
    _PAGE = os.sysconf("SC_PAGE_SIZE")
except (ValueError, OSError, AttributeError):
    _PAGE = 4096


@contextmanager
def trimming(interval_s: float = TRIM_INTERVAL_S, above: int | None = None):
    """While inside, hand the heap's free pages back to the system every `interval_s` (glibc's
    malloc_trim, on a thread of its own; a no-op off Linux/glibc); with `above` (bytes), only while
    the process holds more than that (checked every TRIM_CHECK_S). Only batch imports use it.

    The build and the write allocate most arrays from the heap (the thresholds above), and glibc
    returns a freed chunk's pages only when it lies at the heap's top or at a trim. The holes the
    build's temporaries leave are touched again, piece by piece, by the next allocations: on a
    1.45M-event trace, 130-200 MiB of free but resident heap beside 300-440 MiB in use, at the
    import's peak. Trimmed every 50 ms, the pages a hole still holds go back, and a later
    allocation there costs a page fault (a few ms a trim at most). Each page handed back is
    faulted in again when reused: a trim is needed only near the memory the import may hold
    (`above`, under the trace's JSON size), and below it the freed pages are reused as they are
    (the write of a 2.2M-event trace ran at 260-360 MiB for a 410 MiB JSON, trimmed all along)."""
    if not sys.platform.startswith("linux"):
        yield
        return
    try:
        import ctypes

        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        yield
        return
    done = threading.Event()

    def run() -> None:
        if above is None:
            while not done.wait(interval_s):
                trim(0)
            return
        last = 0.0  # (over the budget all along, e.g. a small trace under the interpreter's own memory: as often as without one)
        while not done.wait(TRIM_CHECK_S):
            held = resident_bytes()
            if (held is None or held > above) and time.monotonic() - last >= interval_s:
                trim(0)
                last = time.monotonic()

    t = threading.Thread(target=run, name="neuron-explorer-trim", daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()
        t.join()
