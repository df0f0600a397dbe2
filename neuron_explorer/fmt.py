"""How figures are written for people: one formatter per kind of figure, used by the text report,
`info`, `diff`, the notebook view and the dashboard alike, so one figure reads the same everywhere.

Must not: import anything but the standard library (every layer may import it).
"""

from __future__ import annotations

import math


def duration(ns: int | float | None) -> str:
    """A duration: `30,012.19 ms` from 1 ms up, `12.50 µs` from 1 µs, `750 ns` below; `-` when
    unknown (None, NaN or infinite). Milliseconds with two decimals up to any size, so that
    figures in one column line up and compare at a glance."""
    if ns is None or (isinstance(ns, float) and not math.isfinite(ns)):
        return "-"
    a = abs(ns)
    if a >= 1e6:
        return f"{ns / 1e6:,.2f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:,.2f} µs"
    return f"{ns:.0f} ns"


def share(x: float | None) -> str:
    """A share (0.123 → `12.3%`); `-` when unknown."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{100 * x:.1f}%"
