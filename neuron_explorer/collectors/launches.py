"""How device work finds its launch by correlation id: one rule for the build's launch links and the
device clock's move (device_clock), so that a moved device's work starts at or after the very call
the run links it to.

Must not: import anything of the package (numpy arrays in, numpy arrays out).
"""

from __future__ import annotations

import numpy as np


def first_call_of(call_corr: np.ndarray, corr: np.ndarray) -> np.ndarray:
    """Per id of `corr`, the position in `call_corr` (the runtime calls' correlation ids, in time
    order) of the call that launched it: the first call of that id (a process's ids are unique; of
    several, the earliest); -1 where no call has it."""
    out = np.full(len(corr), -1, dtype=np.int64)
    if len(call_corr) and len(corr):
        o = np.argsort(call_corr, kind="stable")
        ids = call_corr[o]
        p = np.clip(np.searchsorted(ids, corr), 0, len(ids) - 1)
        hit = ids[p] == corr
        out[hit] = o[p[hit]]
    return out
