"""glibc's mmap threshold, tuned per phase of a batch import (a no-op off Linux/glibc).

Must not: import anything of the package (the importer's modules all import it).
"""

from __future__ import annotations

import sys

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
