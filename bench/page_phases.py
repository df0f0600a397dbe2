"""Where a page load's time goes (issue 42): one server (`neuron-explorer dashboard RUN` of a source tree), then
LOADS fresh loads in headless Chromium (cache off, as bench_page.py), each with: every request's start, server wait
(requestStart → responseStart) and end, by the page's own clock (Resource Timing); the timeline drawn / painted
(bench_page.py's probe); the main thread's script, layout and task time by then (CDP Performance.getMetrics); the
server's CPU seconds during the load. Prints one block per load and the medians.

    python bench/page_phases.py RUN [LOADS] [--tree TREE] [--wait-findings]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import _cli  # noqa: F401
import bench_page as bp


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if not args or "--help" in sys.argv:
        print(__doc__)
        raise SystemExit(0 if "--help" in sys.argv else 2)
    run, loads = Path(args[0]), int(args[1]) if len(args) > 1 else 3
    tree = Path(sys.argv[sys.argv.index("--tree") + 1]) if "--tree" in sys.argv else bp.HERE
    drv = bp.browser()
    drv.execute_cdp_cmd("Performance.enable", {})
    proc, url, t0, _ = bp.start_server(run, tree)
    rows = []
    try:
        bp.answers(url + "_dash-layout", proc=proc)
        for i in range(loads):
            drv.get("about:blank")
            base = {m["name"]: m["value"] for m in drv.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]}
            cpu0 = bp.cpu_s(proc.pid)
            drv.get(url)
            painted = bp.wait(drv, "return window.__nxPainted", timeout=600)
            cpu = bp.cpu_s(proc.pid) - cpu0
            met = {m["name"]: m["value"] for m in drv.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]}
            res = drv.execute_script("""return performance.getEntriesByType('resource').filter(e => e.startTime < window.__nxPainted)
                .map(e => [e.name.split('?')[0].split('/').slice(-1)[0], Math.round(e.startTime), Math.round(e.responseStart - e.requestStart),
                           Math.round(e.responseEnd), e.encodedBodySize]);""")
            dcl = drv.execute_script("const n = performance.getEntriesByType('navigation')[0]; return [n.domContentLoadedEventEnd, n.loadEventEnd]")
            d = {k: met.get(k, 0) - base.get(k, 0) for k in ("ScriptDuration", "LayoutDuration", "RecalcStyleDuration", "TaskDuration")}
            rows.append({"painted": painted, "drawn": drv.execute_script("return window.__nxDrawn"), "cpu": cpu, **d, "dcl": dcl[0]})
            print(f"load {i + 1}: painted {painted:.0f} ms (drawn {rows[-1]['drawn']:.0f}), DOMContentLoaded {dcl[0]:.0f} ms, load {dcl[1]:.0f} ms; "
                  f"main thread by then: script {d['ScriptDuration'] * 1000:.0f} ms, layout {d['LayoutDuration'] * 1000:.0f} ms, "
                  f"style {d['RecalcStyleDuration'] * 1000:.0f} ms, tasks {d['TaskDuration'] * 1000:.0f} ms; server CPU {cpu:.2f} s")
            for name, start, wait_ms, end, size in res:
                print(f"    {name[:48]:48s} start {start:5d} ms  server {wait_ms:5d} ms  end {end:5d} ms  {size / 1e6:6.2f} MB")
        print(f"median of {loads}: painted {statistics.median(r['painted'] for r in rows):.0f} ms, script "
              f"{statistics.median(r['ScriptDuration'] for r in rows) * 1000:.0f} ms, tasks {statistics.median(r['TaskDuration'] for r in rows) * 1000:.0f} ms, "
              f"server CPU {statistics.median(r['cpu'] for r in rows):.2f} s; load average {bp.os.getloadavg()[0]:.2f}")
    finally:
        bp.stop(proc)
        drv.quit()


if __name__ == "__main__":
    main()
