"""Draw a timeline view (timeline.timeline_arrays) as a plotly figure. Drawing only.

Slices and per-pixel buckets are painted without WebGL: per kind and colour, all their rectangles
are ONE filled SVG path (a scatter trace, fill "toself", one polygon without gaps), so the first view
is a few dozen paths, not a DOM element per slice nor WebGL contexts (which headless and GPU-less
browsers rasterise in software, seconds on a large view). Right after each paint trace (meta
"paint") an invisible trace (mode "none", meta "spans") holds the middle of every span, in the same
order, with its event id (customdata) and hover text: what hover and click pick, so a click opens
that event. Leaving out the paint trace's points at its first x (left of the view, where its path
changes rows), exact slice i's rectangle is its points 4i..4i+3 (x0, x0, x1, x1); the buckets of a
row that touch are painted as one rectangle (`_merged`: a busy stretch of a lane is one, not one per
pixel), their hover trace keeps one point per bucket.

Exact slices are coloured by name (a stable hash of the name picks one of NAME_PALETTE, so a kernel
has the same colour in every view and every run) or by kind. Names are drawn inside the exact
slices that are at least LABEL_MIN_PX wide, shortened with "…" to what fits, as one text trace of
at most MAX_LABELS labels (the widest). The selected slice is
outlined.

Plotly picks the data point nearest the pointer (within HOVER_DISTANCE_PX), and a span's one
point is its middle: so that a click or hover anywhere inside a slice or bucket wider than
HIT_STEP_PX finds it, an invisible trace ("hit", nothing drawn) adds points spread evenly along it,
at most HIT_STEP_PX apart (at most MAX_HIT_POINTS in all, the widest spans first): every pixel of a
span is then within HIT_STEP_PX / 2 of one of its points.

Buckets of the view's flanks (timeline.timeline_arrays with `flanks`) are drawn like the others,
outside the axis range: the page moves them into view on a pan before the server answers.

x values are float64 where a view needs its digits (a µs zoom 10 s into a run) and float32 where
float32 is exact to within X_ERROR_PX of a pixel over the whole window (the first view of a
long run): half the bytes for the browser to read.

The figure is a plain dict (what Dash sends), with numeric arrays as plotly.js typed-array specs
({"dtype", "bdata"}): building plotly graph objects validates every element, which costs more than
the query on a large view.

Must not: query the run (it receives plain data) or decide the level of detail.
"""

from __future__ import annotations

import base64
import zlib

import numpy as np

from .. import fmt

KIND_COLORS = {
    "cpu_op": "#4C78A8",
    "python": "#A0785A",
    "user_annotation": "#B279A2",
    "step": "#9E9E9E",
    "runtime": "#F58518",
    "kernel": "#54A24B",
    "memcpy": "#E45756",
    "memset": "#FF9DA6",
    "sync": "#72B7B2",
    "gpu_annotation": "#D4B02A",
    "instant": "#333333",
    "other": "#BDBDBD",
}
NAME_PALETTE = (
    "#7BAFD4", "#F2A96B", "#93C47D", "#E8C95A", "#B9A0D6", "#76C1B8", "#F08E8E", "#A3B8E0",
    "#D9B382", "#B3D88C", "#EBA6CB", "#8FD0E3", "#C9A27E", "#C2CF62", "#A99BE0", "#F0B65A",
)
"""Light enough for dark text on them, and told apart from their neighbours."""
LABEL_COLOR = "#14202B"
LABEL_MIN_PX = 40.0
"""Names are drawn only inside exact slices at least this wide on screen."""
MAX_LABELS = 300
LABEL_CHAR_PX = 5.6
"""The mean width of a label character at LABEL_FONT_PX (to shorten names to what fits)."""
LABEL_FONT_PX = 9
HIT_STEP_PX = 16.0
MAX_HIT_POINTS = 40_000
HOVER_DISTANCE_PX = 12
X_ERROR_PX = 1 / 20
"""x values go as float32 only when its spacing at the window's largest |x| is below this part of a pixel."""
HIGHLIGHT = "#D62728"
CRITICAL = "#111111"
"""Colour of the critical path's band."""
UNDERLINE_DY = 0.47
"""Highlights and the critical path are drawn as a band this many rows below the middle of a
slice's row: slices are ROW_PX * 0.78 thick (±0.39 rows) and their names are written in the
middle, so the band runs along the foot of the slice, in the gap between rows, over no name."""
MODEBAR_MARGIN_PX = 40
"""The timeline's right margin: room for Plotly's mode bar, stood upright there (layout.modebar)."""
ROW_PX = 14
"""Height of one nesting row in pixels."""
NAME_CHARS = 80


def typed(a: np.ndarray) -> dict:
    """A plotly.js typed array (base64): float64 stays float64 (absolute times need its digits),
    other floats go as float32, integers as int32."""
    if a.dtype == np.float64:
        a = np.ascontiguousarray(a)
        return {"dtype": "f8", "bdata": base64.b64encode(a.tobytes()).decode()}
    a = np.ascontiguousarray(a, dtype=np.float32 if a.dtype.kind == "f" else np.int32)
    return {"dtype": "f4" if a.dtype == np.float32 else "i4", "bdata": base64.b64encode(a.tobytes()).decode()}


def _trace(xs, ys, cd, text, name: str, color: str, width: float, **extra) -> dict:
    return {"type": "scatter", "mode": "lines", "x": typed(xs), "y": typed(ys), "customdata": cd,
            "text": None if text is None else text.tolist(), "name": name, "legendgroup": name,
            "line": {"color": color, "width": width}, "hovertemplate": "%{text}<extra></extra>", **extra}


def _spans(x0, x1, y, ids, labels, name: str, color: str, width: float, showlegend: bool, left: float,
           hovertemplate: str | None = None, merge: bool = False, **extra) -> list[dict]:
    """The traces of one colour's spans: the paint (every span a rectangle, all of them ONE filled SVG
    path: no WebGL, no DOM element per span; meta "paint") and right after it the invisible hover
    trace (one point per span, its middle, with the event id and hover text; meta "spans"). Spans
    are ordered by row, then start; `left` is an x left of the view (see _paint_path). With `merge`
    (the buckets), the spans of a row that touch or overlap are painted as one rectangle (`_merged`:
    the same area, a fraction of the points for the browser to draw); the hover trace keeps each."""
    if len(x0) and x0.min() <= left:  # a span that starts further left: left of it
        left = float(x0.min()) - (float(x1.max()) - float(x0.min())) * 0.01
    order = np.lexsort((x0, y))
    x0, x1, y, ids, labels = x0[order], x1[order], np.asarray(y)[order], ids[order], labels[order]
    p0, p1, py_ = _merged(x0, x1, y) if merge else (x0, x1, y)
    px, py = _paint_path(p0, p1, np.asarray(py_, np.float32), np.float32(width / ROW_PX / 2), left)
    hover = {"type": "scatter", "mode": "none", "x": typed((x0 + x1) / 2), "y": typed(np.asarray(y, np.int32)),
             # a plain list, not a typed array: Dash copies customdata into clickData only from plain arrays
             "customdata": ids.astype(np.int64).tolist(), "text": labels.tolist(), "name": name, "legendgroup": name,
             "meta": "spans", "showlegend": False, "hovertemplate": hovertemplate or "%{text}<extra></extra>",
             "line": {"color": color, "width": width}, **extra}
    paint = {"type": "scatter", "mode": "none", "fill": "toself", "fillcolor": color, "x": typed(px), "y": typed(py),
             "name": name, "legendgroup": name, "showlegend": showlegend, "hoverinfo": "skip", "hoveron": "points", "meta": "paint",
             "line": {"width": 0, "simplify": False}, **extra}
    return [paint, hover]


def _merged(x0: np.ndarray, x1: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Spans ordered by row then start, those of a row that touch or overlap (a start at or before
    the furthest end so far in its row) joined: (starts, ends, rows) of the joined spans, which cover
    exactly the area the spans cover. The aggregated view's buckets are a pixel wide each and side by
    side where a lane is busy: a busy stretch is one rectangle, not one per pixel."""
    if len(x0) < 2:
        return x0, x1, y
    new_row = np.r_[True, y[1:] != y[:-1]]
    a, b = x0.astype(np.float64), x1.astype(np.float64)
    # the furthest end so far within each row: one running max over the rows laid end to end
    shift = (np.cumsum(new_row) - 1) * (float(b.max() - a.min()) + 1.0)
    reach = np.maximum.accumulate(b - a.min() + shift) - shift + a.min()
    start = np.flatnonzero(new_row | np.r_[True, a[1:] > reach[:-1]])
    return x0[start], np.maximum.reduceat(x1, start), np.asarray(y)[start]


def _paint_path(x0: np.ndarray, x1: np.ndarray, y: np.ndarray, h, left) -> tuple[np.ndarray, np.ndarray]:
    """The rectangles (x0..x1, y-h..y+h) of spans ordered by row then start as ONE closed polygon
    without gaps, filled exactly like separate rectangles.

    Plotly draws every NaN-separated piece of a trace as an SVG element of its own before it removes
    them (seconds for thousands of pieces), so there are none. A filled area is bounded by its
    vertical edges, horizontal ones add none: each rectangle is its top left, bottom left, bottom
    right and top right corners (4 points: down its left side, up its right side), and the path goes
    on to the next one along the row's top line. Each row begins and ends at x = `left` (left of
    the view) on its top line, so the path changes rows on that vertical line, down row by row and
    at the close back up in one step (traced both ways: no area, and out of sight if anti-aliasing
    leaves a trace). Leaving out the points at x = `left`, span i's rectangle is points 4i..4i+3."""
    n = len(x0)
    lo, hi = y - h, y + h
    new_row = np.r_[True, y[1:] != y[:-1]]
    k = np.cumsum(new_row) - 1  # each span's row number
    first = np.flatnonzero(new_row)
    last = np.r_[first[1:] - 1, n - 1]
    rows = np.arange(len(first))
    px = np.empty(n * 4 + 2 * len(first), x0.dtype)
    py = np.empty(len(px), np.float32)
    at = 4 * np.arange(n) + 1 + 2 * k  # where each span's rectangle starts
    for j, (xs, ys) in enumerate(((x0, hi), (x0, lo), (x1, lo), (x1, hi))):
        px[at + j], py[at + j] = xs, ys
    ends = np.r_[4 * first + 2 * rows, 4 * (last + 1) + 2 * rows + 1]  # each row's first and last point
    px[ends] = left
    py[ends] = np.r_[hi[first], hi[first]]
    return px, py


def _segments(x0: np.ndarray, x1: np.ndarray, y: np.ndarray, ids: np.ndarray, names=None):
    """NaN-separated polyline (start, middle, end, gap) per segment; hover text on the middle."""
    n = len(x0)
    xs = np.empty(n * 4, x0.dtype if x0.dtype == np.float64 else np.float32)
    ys = np.empty(n * 4, np.float32)
    xs[0::4], xs[1::4], xs[2::4], xs[3::4] = x0, (x0 + x1) / 2, x1, np.nan
    ys[0::4] = ys[1::4] = ys[2::4] = y
    ys[3::4] = np.nan
    # a plain list, not a typed array: Dash copies customdata into clickData only from plain arrays
    cd = np.repeat(ids.astype(np.int64), 4).tolist()
    text = None
    if names is not None:
        text = np.full(n * 4, "", dtype=object)
        text[1::4] = names
    return xs, ys, cd, text


def name_color_index(name: str) -> int:
    """A stable palette index for a name: the same name gets the same colour in every view and run."""
    return zlib.crc32(str(name).encode("utf-8", "replace")) % len(NAME_PALETTE)


def fit_label(name: str, width_px: float, kernel: bool = False) -> str | None:
    """`name` shortened with "…" to fit `width_px` (None when not even three characters fit); a
    kernel's as every view shortens it (fmt.kernel_name), to the characters that fit."""
    room = int((width_px - 4) / LABEL_CHAR_PX)
    if room < 3:
        return None
    if kernel:
        return fmt.kernel_name(name, room)
    return name if len(name) <= room else name[:room - 1] + "…"


def _labels(x0: np.ndarray, x1: np.ndarray, y: np.ndarray, names, px_per_x: float, kinds=None) -> dict | None:
    """One text trace with the names of the widest slices that are at least LABEL_MIN_PX wide
    (`kinds`: each slice's, to name kernels as fit_label does)."""
    w = (x1 - x0) * px_per_x
    idx = np.nonzero(w >= LABEL_MIN_PX)[0]
    if not len(idx):
        return None
    idx = idx[np.argsort(-w[idx], kind="stable")[:MAX_LABELS]]
    xs, ys, texts = [], [], []
    for i in idx:
        t = fit_label(str(names[i]), float(w[i]), kinds is not None and kinds[i] == "kernel")
        if t is not None:
            xs.append((x0[i] + x1[i]) / 2)
            ys.append(y[i])
            texts.append(t)
    if not texts:
        return None
    return {"type": "scatter", "mode": "text", "x": typed(np.asarray(xs, x0.dtype)), "y": typed(np.asarray(ys, np.int32)),
            "text": texts, "name": "labels", "showlegend": False, "hoverinfo": "skip",
            "textfont": {"size": LABEL_FONT_PX, "color": LABEL_COLOR}, "textposition": "middle center"}


def _hit_points(x0: np.ndarray, x1: np.ndarray, y: np.ndarray, ids: np.ndarray, text: np.ndarray, px_per_x: float):
    """(x, y, event ids, hover texts) of points spread evenly along each span wider than HIT_STEP_PX,
    at most HIT_STEP_PX apart, so every pixel of it is within HIT_STEP_PX / 2 of one (a narrower
    span's middle, in its hover trace, is that close to all of it)."""
    if px_per_x <= 0 or not len(x0):
        return None
    w = (x1 - x0) * px_per_x
    n = np.where(w > HIT_STEP_PX, np.ceil(w / HIT_STEP_PX), 0).astype(np.int64)
    total = int(n.sum())
    if total == 0:
        return None
    if total > MAX_HIT_POINTS:  # the widest spans keep theirs
        keep = np.argsort(-w, kind="stable")
        room = np.cumsum(n[keep]) <= MAX_HIT_POINTS
        n[keep[~room]] = 0
        total = int(n.sum())
    idx = np.repeat(np.arange(len(n)), n)
    j = np.arange(total) - np.repeat(np.cumsum(n) - n, n)
    xs = x0[idx] + (j + 0.5) * ((x1[idx] - x0[idx]) / n[idx])
    return xs.astype(x0.dtype), y[idx], ids[idx], text[idx]


def x_dtype(lo_x: float, hi_x: float, x_per_px: float):
    """float32 when its spacing at the window's largest |x| is below X_ERROR_PX of a pixel
    (`x_per_px` x units per screen pixel), else float64."""
    ulp32 = max(abs(lo_x), abs(hi_x)) * 2.0 ** -23
    return np.float32 if ulp32 < x_per_px * X_ERROR_PX else np.float64


def time_unit(span_ns: int) -> tuple[float, str]:
    """(ns per x unit, suffix) for a window: µs for windows up to 20 ms, ms beyond (readable ticks).
    The app converts zoom ranges back to ns with the same function."""
    return (1000.0, " µs") if span_ns <= 20_000_000 else (1e6, " ms")


def _kind_order(kinds: np.ndarray) -> list[str]:
    present = set(kinds.tolist())
    return [k for k in KIND_COLORS if k in present] + sorted(present - set(KIND_COLORS))


def build_figure(tl: dict, *, highlight: list[dict] | None = None, flows: list[dict] | None = None,
                 selected: dict | None = None, color_by: str = "name", origin_ns: int | None = None,
                 outline: list[dict] | None = None) -> dict:
    """The timeline figure. `highlight` and `selected` are events as `queries._brief` returns them
    (ts_ns, dur_ns, y); `flows` are {from, to} pairs of such events (drawn as arrows). Exact
    slices are coloured by `color_by`: "name" (stable hash) or "kind". `outline` are time spans
    (ts_ns, dur_ns, y) drawn as outlines (the critical path).

    With `origin_ns` (the run's first event) the x axis is absolute: ms from that origin, as
    float64 (a µs zoom 10 s into a run needs more digits than float32 has), so the axis does not
    restart at 0 on every zoom or pan. Without it, x is µs (ms beyond 20 ms) from the window start."""
    lanes = tl["lanes"]
    n_rows = max((ln["y0"] + ln["rows"] for ln in lanes), default=1)
    has_memory = bool(tl.get("memory"))
    t0, t1 = tl["t0"], tl["t1"]
    if origin_ns is None:
        unit_ns, suffix = time_unit(t1 - t0)
        k, xo = np.float32(1000.0 / unit_ns), np.float32(0.0)  # timeline offsets are µs; the axis shows `suffix`
    else:
        unit_ns, suffix = 1e6, " ms"
        k, xo = np.float64(1e-3), np.float64((t0 - origin_ns) / 1e6)

    span_us = (t1 - t0) / 1000.0
    px_us = span_us / max(tl["width"], 1)
    lo_x, hi_x = float(xo), float(xo) + span_us * float(k)  # the window's x range
    fl = tl.get("flank") or {"t0": t0, "t1": t1}  # the span the view holds buckets for (the window, or it and its flanks)
    xdt = x_dtype(min(lo_x, float(xo) + (fl["t0"] - t0) / 1000.0 * float(k)), max(hi_x, float(xo) + (fl["t1"] - t0) / 1000.0 * float(k)),
                  px_us * float(k))
    left = lo_x - (hi_x - lo_x) * 0.01  # just left of the view: where the slice paths change rows (see _paint_path)

    def X(us):  # window offsets (µs) to x values
        return (np.asarray(us, k.dtype) * k + xo).astype(xdt, copy=False)
    lane_h = n_rows * ROW_PX
    mem_h = 110 if has_memory else 0
    height = lane_h + mem_h + 86  # + the top and bottom margins
    traces: list[dict] = []
    line_w = ROW_PX * 0.78

    px_per_x = tl["width"] / (span_us * float(k)) if span_us else 0.0  # screen pixels per x unit
    hit_parts: list[tuple] = []  # (x0, x1, y, event ids, hover texts) of the drawn spans, for the hit points
    s = tl["slices"]
    if len(s["x0"]):
        x1 = np.maximum(s["x1"], s["x0"] + np.float32(px_us * 0.8))  # at least ~1 pixel, so instants show
        kinds = np.asarray(s["kind"], dtype=object)
        names = np.array([str(n)[:NAME_CHARS] for n in s["name"]], dtype=object)
        durs = s["dur_ns"]
        labels = np.array([f"{n}<br>{k} · {fmt.duration(int(d))}" for n, k, d in zip(names, kinds, durs)], dtype=object)
        by_name = color_by != "kind"
        shade = np.array([name_color_index(n) for n in s["name"]], np.int32) if by_name else np.zeros(len(kinds), np.int32)
        for kind in _kind_order(kinds):
            mk = kinds == kind
            for c in np.unique(shade[mk]):
                m = mk & (shade == c)
                color = NAME_PALETTE[c] if by_name else KIND_COLORS.get(kind, "#888")
                # by name, a legend entry's colour would be one name's: the legend is for kinds
                traces += _spans(X(s["x0"][m]), X(x1[m]), s["y"][m], s["event_id"][m], labels[m], kind, color, line_w,
                                 showlegend=bool(not by_name and c == shade[mk][0]), left=left)
        lab = _labels(X(s["x0"]), X(x1), s["y"], s["name"], px_per_x, kinds)
        if lab is not None:
            traces.append(lab)
        hit_parts.append((X(s["x0"]), X(x1), s["y"], s["event_id"], labels))
    b = tl["buckets"]
    if len(b["x0"]):
        kinds = np.asarray(b["kind"], dtype=object)
        occ = b["occupancy"]
        for kind in _kind_order(kinds):
            for dense in (True, False):
                m = (kinds == kind) & ((occ >= 0.5) == dense)
                if not m.any():
                    continue
                # what all of the trace's buckets share goes in its hovertemplate, once
                text = np.array([f"{c} events · {o * 100:.0f}% busy" for c, o in zip(b["events"][m], occ[m])], dtype=object)
                traces += _spans(X(b["x0"][m]), X(b["x1"][m]), b["y"][m], b["event_id"][m], text, kind, KIND_COLORS.get(kind, "#888"),
                                 line_w, showlegend=bool(not len(s["x0"]) and dense), left=left, opacity=1.0 if dense else 0.45,
                                 hovertemplate=f"%{{text}} · mostly {kind}<extra></extra>", merge=True)
                hit_parts.append((X(b["x0"][m]), X(b["x1"][m]), b["y"][m], b["event_id"][m], text + f" · mostly {kind}"))
    hits = [h for h in (_hit_points(*part, px_per_x) for part in hit_parts) if h is not None]
    if hits:
        hx, hy, hid, htext = (np.concatenate([h[i] for h in hits]) for i in range(4))
        traces.append({"type": "scatter", "mode": "none", "x": typed(hx), "y": typed(hy.astype(np.int32)),
                       "customdata": hid.astype(np.int64).tolist(), "text": htext.tolist(), "name": "hit", "showlegend": False,
                       "marker": {"size": 8, "color": "rgba(0,0,0,0)"}, "hovertemplate": "%{text}<extra></extra>"})

    def off(ts_ns: int) -> float:
        return (ts_ns - t0) / unit_ns + float(xo)

    marks = [e for e in (highlight or []) if e and e.get("y") is not None]
    if marks:
        x0 = np.array([off(e["ts_ns"]) for e in marks], k.dtype)
        x1 = np.maximum(np.array([off(e["ts_ns"] + e["dur_ns"]) for e in marks], k.dtype), x0 + np.float32(px_us * 2) * k)
        # an underline along the foot of each row (UNDERLINE_DY), not a line through the middle where the name is written
        xs, ys, cd, text = _segments(x0, x1, np.array([e["y"] for e in marks]) + UNDERLINE_DY, np.array([e["event_id"] for e in marks]),
                                     np.array([str(e.get("name", ""))[:NAME_CHARS] for e in marks], dtype=object))
        traces.append(_trace(xs, ys, cd, text, "highlighted", HIGHLIGHT, 3, mode="lines+markers",
                             marker={"size": 6, "color": HIGHLIGHT, "symbol": "diamond"}, hovertemplate="%{text}<extra>evidence</extra>"))
    if selected and selected.get("y") is not None:
        # an outline around the selected slice (at least a few pixels wide, so an instant shows)
        a = off(selected["ts_ns"])
        b = max(off(selected["ts_ns"] + selected["dur_ns"]), a + px_us * 3 * float(k))
        a, b = max(a, lo_x - px_us * 2 * float(k)), min(b, hi_x + px_us * 2 * float(k))  # clipped just outside the plot
        y, h = float(selected["y"]), 0.48
        if a < b:  # else it lies outside the window
            traces.append({"type": "scatter", "mode": "lines", "x": [a, b, b, a, a], "y": [y - h, y - h, y + h, y + h, y - h],
                           "customdata": [selected["event_id"]] * 5, "name": "selected", "showlegend": False, "hoverinfo": "skip",
                           "line": {"color": HIGHLIGHT, "width": 2.5}})
    path = [e for e in (outline or []) if e and e.get("y") is not None]
    if path:
        # each charged segment of the critical path underlined on its event's row: a band at the foot
        # of the row (UNDERLINE_DY), so the slice and its name stay visible above it
        xs, ys = [], []
        for e in path:
            a, b = off(e["ts_ns"]), off(e["ts_ns"] + e["dur_ns"])
            if b < lo_x or a > hi_x:
                continue
            a, b = max(a, lo_x), max(min(b, hi_x), a + px_us * float(k))
            y = float(e["y"]) + UNDERLINE_DY
            xs += [a, b, None]
            ys += [y, y, None]
        traces.append({"type": "scatter", "mode": "lines", "x": xs, "y": ys, "name": "critical path", "showlegend": True,
                       "hoverinfo": "skip", "line": {"color": CRITICAL, "width": 2.5}})
    annotations = []
    off_marks = []  # flow ends outside the window: a marker at the edge that jumps there
    for f in (flows or [])[:60]:
        src, dst = f.get("from"), f.get("to")
        if not src or not dst or src.get("y") is None or dst.get("y") is None:
            continue
        # an end outside the window is pinned to its edge, so the arrow stays over the plot and
        # points off-screen; a marker there jumps to that end
        for end in (src, dst):
            x = off(end["ts_ns"])
            if (x < lo_x or x > hi_x) and end.get("event_id") is not None:
                off_marks.append((lo_x if x < lo_x else hi_x, end))
        annotations.append({"x": min(max(off(dst["ts_ns"]), lo_x), hi_x), "y": dst["y"],
                            "ax": min(max(off(src["ts_ns"]), lo_x), hi_x), "ay": src["y"], "xref": "x", "yref": "y",
                            "axref": "x", "ayref": "y", "showarrow": True, "arrowhead": 3, "arrowwidth": 1.6,
                            "arrowcolor": HIGHLIGHT, "text": ""})
    if off_marks:
        traces.append({"type": "scatter", "mode": "markers", "x": [x for x, _ in off_marks], "y": [e["y"] for _, e in off_marks],
                       "customdata": [[e["event_id"], "jump"] for _, e in off_marks], "name": "off-screen", "showlegend": False,
                       "text": [f"{'←' if x == lo_x else '→'} {str(e.get('name', ''))[:NAME_CHARS]} (off-screen: click to go there)"
                                for x, e in off_marks],
                       "hovertemplate": "%{text}<extra></extra>",
                       "marker": {"size": 13, "color": HIGHLIGHT,
                                  "symbol": ["triangle-left" if x == lo_x else "triangle-right" for x, _ in off_marks]}})
    shapes = []
    steps = tl.get("steps") or []
    for st in steps[:200]:
        sx = float(X(st["x0"]))
        shapes.append({"type": "line", "x0": sx, "x1": sx, "yref": "paper", "y0": 0, "y1": 1, "xref": "x",
                       "line": {"color": "rgba(60,60,60,0.45)", "width": 1, "dash": "dot"}})
        if len(steps) <= 30:
            annotations.append({"x": max(sx, lo_x), "y": 1, "yref": "paper", "xref": "x", "text": f"step {st['step']}",
                                "showarrow": False, "xanchor": "left", "yanchor": "bottom", "font": {"size": 10, "color": "#555"}})

    if has_memory:
        for series in tl["memory"]:
            traces.append({"type": "scatter", "x": typed(X(series["x"])),
                           "y": typed(np.asarray(series["bytes"], np.float64).astype(np.float32) / np.float32(2**20)),
                           "mode": "lines", "line": {"shape": "hv", "color": "#7F3C8D", "width": 1.5}, "name": series["label"],
                           "yaxis": "y2", "hovertemplate": "%{y:.2f} MiB<extra>" + series["label"] + "</extra>"})
    dom_split = mem_h / (lane_h + mem_h) if has_memory else 0
    tick_vals = [ln["y0"] for ln in lanes]
    tick_text = [ln["label"] for ln in lanes]
    layout = dict(
        height=height,
        margin={"l": 190, "r": MODEBAR_MARGIN_PX, "t": 30, "b": 56},
        # the mode bar stands in the right margin, top to bottom, clear of the step labels over the plot
        modebar={"orientation": "v", "bgcolor": "rgba(255,255,255,0.9)"},
        plot_bgcolor="#FFFFFF", paper_bgcolor="#FFFFFF",
        font={"family": "Inter, Segoe UI, Helvetica, Arial, sans-serif", "size": 11, "color": "#263238"},
        dragmode="zoom", hovermode="closest", hoverdistance=HOVER_DISTANCE_PX, showlegend=True,
        # under the time axis labels (26 px below the plot area), clear of the step labels on top
        legend={"orientation": "h", "x": 0, "xanchor": "left", "y": -26 / max(height - 86, 1), "yanchor": "top", "font": {"size": 10}},
        xaxis={"range": [lo_x, hi_x], "title": None, "showgrid": True, "gridcolor": "#EEF1F4", "zeroline": False,
               "ticksuffix": suffix, "anchor": "y2" if has_memory else "y"},
        yaxis={"range": [n_rows - 0.5, -0.8], "tickvals": tick_vals, "ticktext": tick_text, "showgrid": False, "zeroline": False,
               "fixedrange": True, "domain": [dom_split + (0.02 if has_memory else 0), 1], "tickfont": {"size": 10}},
        shapes=shapes, annotations=annotations, uirevision=f"{tl['run']}-{tl['rank']}-{t0}-{t1}",
    )
    if has_memory:
        layout["yaxis2"] = {"domain": [0, dom_split - 0.02], "title": {"text": "MiB", "font": {"size": 10}},
                            "fixedrange": True, "gridcolor": "#EEF1F4", "rangemode": "tozero"}
    return {"data": traces, "layout": layout}
