"""Where the first page's and a page load's time goes (issue 42), side by side for two source trees.

For each RUN, STARTS times per tree (alternating, so that both see the same load): `neuron-explorer dashboard RUN`
of the tree in a fresh process; the page loaded in headless Chromium as soon as `/` answers (bench_page.py's
start: start → `/`, start → the first page painted, the server's CPU seconds by then); then LOADS fresh loads of
the page (cache off), with the findings still being computed (as `bench_page.py --cold`), each: navigation →
painted (bench_page.py's probe), DOMContentLoaded (every script evaluated), the browser's main-thread script
and task seconds by the paint (CDP Performance.getMetrics), the server's CPU seconds during the load, the
requests before the paint and the layout's size. Prints each start and the medians per tree; CPU seconds are
what the machine's load moves least.

    python bench/page_phases.py [--before TREE] [--starts N] [--loads L] [--verbose] RUN ...
    (TREE: another checkout, e.g. git archive 510c096 | tar -x -C /tmp/dsbefore2; defaults N=2, L=3)
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

import _cli
import bench_page as bp


def _opt(name: str, default):
    return type(default)(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


def load_once(drv, url: str, pid: int, verbose: bool) -> dict:
    drv.get("about:blank")
    base = {m["name"]: m["value"] for m in drv.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]}
    cpu0 = bp.cpu_s(pid)
    drv.get(url)
    painted = bp.wait(drv, "return window.__nxPainted", timeout=600)
    cpu = bp.cpu_s(pid) - cpu0
    met = {m["name"]: m["value"] for m in drv.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]}
    res = drv.execute_script("""return performance.getEntriesByType('resource').filter(e => e.startTime < window.__nxPainted)
        .map(e => [e.name.split('?')[0].split('/').slice(-1)[0], Math.round(e.startTime), Math.round(e.responseStart - e.requestStart),
                   Math.round(e.responseEnd), e.encodedBodySize]);""")
    dcl = drv.execute_script("return performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd")
    if verbose:
        for name, start, wait_ms, end, size in res:
            print(f"      {name[:48]:48s} start {start:5d} ms  server {wait_ms:5d} ms  end {end:5d} ms  {size / 1e6:6.2f} MB")
    return {"painted": painted / 1000, "dcl": dcl / 1000, "cpu": cpu, "requests": len(res),
            "layout_mb": sum(s for n, *_, s in res if n == "_dash-layout") / 1e6,
            "script": met.get("ScriptDuration", 0) - base.get("ScriptDuration", 0), "tasks": met.get("TaskDuration", 0) - base.get("TaskDuration", 0)}


def main() -> None:
    _cli.help_if_asked(__doc__)
    starts, loads, verbose = _opt("--starts", 2), _opt("--loads", 3), "--verbose" in sys.argv
    before = Path(_opt("--before", "")) if "--before" in sys.argv else None
    skip = {sys.argv.index(o) + 1 for o in ("--before", "--starts", "--loads") if o in sys.argv}
    runs = [_cli.run_dir(a) for i, a in enumerate(sys.argv[1:], 1) if not a.startswith("--") and i not in skip]
    if not runs:
        print(__doc__)
        raise SystemExit(2)
    trees = [("after", bp.HERE)] + ([("before", before)] if before else [])
    drv = bp.browser()
    drv.execute_cdp_cmd("Performance.enable", {})
    try:
        for run in runs:
            print(f"{run}  (load average {os.getloadavg()[0]:.2f})")
            got: dict = {name: {"starts": [], "loads": []} for name, _ in trees}
            for i in range(starts):
                for name, tree in (trees if i % 2 == 0 else trees[::-1]):
                    proc, url, m = bp.start_once(drv, run, tree, 120.0, False)
                    try:
                        ls = [load_once(drv, url, proc.pid, verbose) for _ in range(loads)] if m["first"] is not None else []
                    finally:
                        bp.stop(proc)
                    m["load"] = os.getloadavg()[0]
                    got[name]["starts"].append(m)
                    got[name]["loads"] += ls
                    first = f"{m['first']:.2f} s" if m["first"] is not None else f"NOT PAINTED {m['errors'][:1]}"
                    pages = ", ".join(f"{x['painted']:.2f}" for x in ls)
                    print(f"  {name:6s} start → / {m['up']:.2f} s · → first page painted {first} · server CPU {m['cpu']:.2f} s · "
                          f"page → painted {pages} s · load {m['load']:.1f}")
            for name, _ in trees:
                s, ls = got[name]["starts"], got[name]["loads"]
                med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731
                print(f"  {name}: start → first page painted median {med([x['first'] for x in s if x['first'] is not None]):.2f} s "
                      f"(server CPU {med([x['cpu'] for x in s]):.2f} s); page → painted median {med([x['painted'] for x in ls]):.2f} s "
                      f"(min {min([x['painted'] for x in ls], default=float('nan')):.2f}), DOMContentLoaded {med([x['dcl'] for x in ls]):.2f} s, "
                      f"browser main thread: script {med([x['script'] for x in ls]):.2f} s, tasks {med([x['tasks'] for x in ls]):.2f} s; "
                      f"server CPU per load {med([x['cpu'] for x in ls]):.2f} s; {med([x['requests'] for x in ls]):.0f} requests before the paint, "
                      f"layout {med([x['layout_mb'] for x in ls]):.2f} MB")
    finally:
        drv.quit()


if __name__ == "__main__":
    main()
