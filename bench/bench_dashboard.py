"""Dashboard timeline: server time and payload for the first view and for zooms on a large run.

Measures what the server does for one timeline request — the level-of-detail query, building the
plotly figure and serialising it to the JSON Dash sends — and the size of that JSON:
  - open: RunSet + the per-run caches (lanes, long events, the pre-aggregated pyramid), once per
    dashboard start, before it prints its URL;
  - first view: the whole run at 1500 px;
  - zoom: windows of 1/20, 1/1000 and 1 ms around the busiest millisecond (what a drag-zoom asks).
Targets (DESIGN.md, issue 5): first view < 1 s, zoom < 300 ms, payload < 2 MB.

    python bench/bench_dashboard.py [RUN]     # default /tmp/runs/big
    (make it: python ../shared/tools/tile_trace.py tests/data/traces/cuda_train_68k_events.json.gz /tmp/big.json 32
              neuron-explorer import /tmp/big.json -o /tmp/runs/big --force)
"""

from __future__ import annotations

import statistics
import sys
import time

import _cli
from plotly.io.json import to_json_plotly

from neuron_explorer.dashboard.figure import build_figure
from neuron_explorer.dashboard.runs import RunSet
from neuron_explorer.dashboard.timeline import _pyramid, timeline_arrays

WIDTH = 1500
REPEAT = 5


def one(rs: RunSet, t0=None, t1=None) -> tuple[float, int, dict]:
    start = time.perf_counter()
    tl = timeline_arrays(rs, run=0, t0=t0, t1=t1, width=WIDTH)
    payload = to_json_plotly(build_figure(tl))
    return time.perf_counter() - start, len(payload.encode()), tl


def measure(rs: RunSet, label: str, t0=None, t1=None) -> None:
    times, size, tl = [], 0, None
    for _ in range(REPEAT):
        t, size, tl = one(rs, t0, t1)
        times.append(t)
    print(f"{label:<22} median {statistics.median(times) * 1000:8.1f} ms  max {max(times) * 1000:8.1f} ms  "
          f"payload {size / 1e6:6.3f} MB  {tl['mode']:<10} visible {tl['visible_events']:>9,}  "
          f"slices {len(tl['slices']['x0']):>6,}  buckets {len(tl['buckets']['x0']):>6,}")


def main() -> None:
    _cli.help_if_asked(__doc__)
    run = _cli.run_dir(sys.argv[1] if len(sys.argv) > 1 else "/tmp/runs/big")
    t = time.perf_counter()
    rs = RunSet([run])
    r = rs.get(0)
    r.span(), r.lanes(None), r.long_events(), _pyramid(r)  # what the dashboard does before it serves
    events = r.query("SELECT count(*) FROM events")[1][0][0]
    print(f"run {run}: {events:,} events; open + caches {(time.perf_counter() - t) * 1000:.0f} ms")
    t, size, _ = one(rs)
    print(f"{'first view (cold)':<22} {t * 1000:8.1f} ms  payload {size / 1e6:.3f} MB")
    measure(rs, "first view")
    start, end = r.span()
    # centred on the busiest millisecond: the trace is bursty, and a zoom into a quiet gap tests nothing
    mid = r.query("SELECT (ts_ns // 1000000) * 1000000 + 500000 FROM events GROUP BY 1 ORDER BY count(*) DESC LIMIT 1")[1][0][0]
    for label, span in (("zoom 1/20", (end - start) // 20), ("zoom 1/1000", (end - start) // 1000), ("zoom 1 ms", 1_000_000)):
        measure(rs, label, mid - span // 2, mid + span // 2)
    rs.close()


if __name__ == "__main__":
    main()
