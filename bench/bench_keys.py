"""W and D key presses on the timeline, two versions of the project side by side (issue 35, item 1).

For each tree (another checkout or `git archive` of the project, then this one) a fresh
`neuron-explorer dashboard RUN` is started with the run's analysis switched off (the findings panel
then says the analyzer is not available: on a loaded two-core machine the analysis takes minutes
and would hold the run while the keys are timed), the page is loaded at 1600x1000 once the server
serves its layout, and ROUNDS keys are pressed, W and D in turn, 1.5 s apart, each timed by
bench_page.KEY: input → redrawn frame (the page's nxTimeline.frames), the drawing call of that
frame alone (nxTimeline.draws where the page records it, else the first Plotly.relayout: what load
moves least), the Plotly.relayout calls until the detail came, and input → the server's detail
swapped in (the status line changes). Prints each press, the medians and the load average.

    python bench/bench_keys.py RUN ROUNDS BEFORE_TREE [--after-first]
    e.g. git archive f927c36 | tar -x -C /tmp/dfbefore
         python bench/bench_keys.py /tmp/ds_runs/mem48 6 /tmp/dfbefore
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_page as bp  # noqa: E402

HERE = str(Path(__file__).resolve().parent.parent)
LAUNCH = ("import sys; import neuron_explorer.dashboard.views.findings as f; f._load_analyze = lambda: None; "
          "from neuron_explorer.cli import main; sys.argv = ['neuron-explorer'] + sys.argv[1:]; main()")


def start(run: str, tree: str):
    port = bp.free_port()
    env = {**os.environ, "PYTHONPATH": tree}
    proc = subprocess.Popen([sys.executable, "-c", LAUNCH, "dashboard", run, "--port", str(port)], env=env, cwd=tree,  # -c puts cwd first
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, f"http://127.0.0.1:{port}/", time.time()


def rounds_of(drv, run: str, tree: str, rounds: int) -> list[tuple]:
    proc, url, t0 = start(run, tree)
    try:
        bp.answers(url, timeout=300)
        bp.answers(url + "_dash-layout", timeout=600)  # a page loaded before the server's modules are in lacks dash_ag_grid
        time.sleep(2)
        drv.get("about:blank")
        drv.get(url)
        bp.wait(drv, "return window.__nxPainted", timeout=900)
        print(f"  painted {time.time() - t0:.1f} s after the start; the page records its drawing calls: "
              f"{drv.execute_script('return !!window.nxTimeline.draws')}", flush=True)
        bp.wait(drv, "const s = document.getElementById('status').innerText; return s && s", timeout=120)
        time.sleep(8)
        rows = []
        for i in range(rounds):
            key = "wd"[i % 2]
            drv.execute_script(bp.KEY.replace("key: 'w'", f"key: '{key}'"))
            try:
                k = bp.wait(drv, "const k = window.__nxKey; return k && k.detail !== null && k.frame !== null && k", timeout=60)
                rows.append((key, k["frame"], k["draw"] or 0, k["relayout"], k["detail"]))
            except RuntimeError:
                rows.append((key,) + (float("nan"),) * 4)
            time.sleep(1.5)
        return rows
    finally:
        bp.stop(proc)


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--after-first"]
    run, rounds, before = args[0], int(args[1]), args[2]
    trees = [(f"before ({before})", before), ("this tree", HERE)]
    if "--after-first" in sys.argv:
        trees.reverse()
    drv = bp.browser()
    drv.set_window_size(1600, 1000)
    inner = drv.execute_script("return [window.innerWidth, window.innerHeight]")
    drv.set_window_size(1600 + 1600 - inner[0], 1000 + 1000 - inner[1])  # a viewport of 1600x1000
    try:
        for name, tree in trees:
            print(f"{name}: load average {os.getloadavg()[0]:.1f}", flush=True)
            rows = rounds_of(drv, run, tree, rounds)
            for r in rows:
                print(f"  {r[0]}: frame {r[1]:.1f} ms  drawing call {r[2]:.1f} ms  relayout {r[3]:.0f} ms  detail {r[4]:.0f} ms", flush=True)

            def med(j, rows=rows):
                return statistics.median(r[j] for r in rows)
            print(f"  median: frame {med(1):.1f} ms (max {max(r[1] for r in rows):.1f})  drawing call {med(2):.1f} ms  "
                  f"relayout {med(3):.0f} ms  detail {med(4):.0f} ms (max {max(r[4] for r in rows):.0f}); "
                  f"load average {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        drv.quit()


if __name__ == "__main__":
    main()
