"""The server's part of a timeline detail answer (issue 35), in one process of the tree on PYTHONPATH.

For the windows bench_keys.py's keys ask from the page's first view (W: the middle 0.6 of the
window; D: a pan by 0.2 of its width; in turn, six windows): app.timeline_figure (the window's
arrays with its flanks, the overlays, the figure) and the figure's JSON as Dash sends it
(plotly.io.json.to_json_plotly), median of 3 per window; prints one JSON line. Run it for a
before tree and this one in turn (a tree: `git archive C | tar -x -C TREE`), from a directory
that holds neither, so that PYTHONPATH decides which is imported:

    cd /tmp && PYTHONPATH=TREE python /path/to/bench/bench_detail_server.py RUN
"""

from __future__ import annotations

import json
import statistics
import sys
import time


def main() -> None:
    import plotly.io.json as pj

    from neuron_explorer.dashboard import app
    from neuron_explorer.dashboard.runs import RunSet

    rs = RunSet([sys.argv[1]])
    view, _, _ = app.first_view(rs)
    a, b = float(view["t0"]), float(view["t1"])
    windows = []
    for i in range(6):
        if i % 2 == 0:
            c = (a + b) / 2
            a, b = c - (c - a) * 0.6, c + (b - c) * 0.6
        else:
            d = (b - a) * 0.2
            a, b = a + d, b + d
        windows.append((int(a), int(b)))
    fig_ms, json_ms, kb = [], [], []
    for t0, t1 in windows:
        v = {**view, "t0": t0, "t1": t1, "zoom": True}
        app.timeline_figure(rs, v, app.DEFAULT_WIDTH, None)  # the window's caches warm, as after the page's first answer
        f, j = [], []
        for _ in range(3):
            t = time.perf_counter()
            fig, _status = app.timeline_figure(rs, v, app.DEFAULT_WIDTH, None)
            f.append(time.perf_counter() - t)
            t = time.perf_counter()
            text = pj.to_json_plotly(fig)
            j.append(time.perf_counter() - t)
        fig_ms.append(statistics.median(f) * 1000)
        json_ms.append(statistics.median(j) * 1000)
        kb.append(len(text) / 1000)
    print(json.dumps({"figure_ms": round(statistics.median(fig_ms)), "json_ms": round(statistics.median(json_ms)),
                      "kB": round(statistics.median(kb)), "per_window_ms": [round(x) for x in fig_ms]}))
    rs.close()


if __name__ == "__main__":
    main()
