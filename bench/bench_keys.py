"""Keys and the mouse on the timeline, two versions of the project side by side (issue 35, item 1).

For each tree (another checkout or `git archive` of the project, then this one) a fresh
`neuron-explorer dashboard RUN` is started with the run's analysis switched off (the findings panel
then says the analyzer is not available: on a loaded two-core machine the analysis takes minutes
and would hold the run while the inputs are timed), the page is loaded at 1600x1000 once the server
serves its layout, and ROUNDS rounds of six inputs are made, 1.5 s apart, each dispatched in the
page (INPUT, below): a wheel step (deltaY -100) at the middle of the plot; a zoom box dragged over
0.3-0.7 of the plot's width; a pan, the x axis's middle dragged 60 px then 180 px to the left; a
double-click (the whole run); W; D. Each is timed on the page's own clock:
  - frame: input → the frame after the first frame whose x axis shows the new window (for the
    pan: of the first move; `release` is the pan's mouseup → the frame after it);
  - draw: the page's own drawing calls for that input (nxTimeline.draws; none where Plotly draws);
  - longest: the longest main-thread task (PerformanceObserver "longtask", ≥ 50 ms) from the input
    until the detail came (a Plotly redraw of every path shows here: the page is frozen that long);
  - detail: input (the pan's release) → the server's detail for the new window drawn (the status
    line has changed and Plotly has drawn the figure that came with it, and the frame after it is
    on screen: bench_page.DRAWN_AFTER).
Prints each input, per kind the medians, and the load average.

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
KINDS = ("wheel", "box", "pan", "dblclick", "w", "d")
INPUT = bp.DRAWN_AFTER + """
window.__nxMeasure = async function (kind) {
  const gd = document.querySelector('#timeline .js-plotly-plot'), st = document.getElementById('status');
  const nx = window.nxTimeline || {}, d0 = (nx.draws || []).length, s0 = st.innerText, drawn = window.__nxDrawnAfter(s0);
  const res = window.__nxIn = {kind: kind, frame: null, release: null, draw: null, longest: 0, detail: null, done: false};
  const raf = () => new Promise(r => requestAnimationFrame(r)), tasks = [];
  // out of the frame's callbacks, where a real input event comes (one dispatched inside a rAF callback is drawn a frame late)
  const task = () => new Promise(r => setTimeout(r, 0));
  try { new PerformanceObserver(l => l.getEntries().forEach(e => tasks.push([e.startTime, e.duration]))).observe({type: 'longtask'}); }
  catch (e) {}
  const main = gd.querySelector('.nsewdrag'), b = main.getBoundingClientRect(), axis = gd.querySelector('.ewdrag').getBoundingClientRect();
  const under = (x, y) => document.elementFromPoint(x, y) || document.body;
  const mouse = (type, el, x, y) => el.dispatchEvent(new MouseEvent(type, {clientX: Math.round(x), clientY: Math.round(y), bubbles: true,
    cancelable: true, view: window, button: 0, buttons: type === 'mouseup' ? 0 : 1}));
  const range = () => gd._fullLayout.xaxis.range.slice();
  // input → the frame after the first frame whose axis shows a new window (`any`: after the first frame)
  async function timed(fire, any) {
    const r0 = range(), t0 = performance.now();
    fire();
    for (let i = 0; i < 600; i++) {
      await raf();
      const r = range();
      if (any || r[0] !== r0[0] || r[1] !== r0[1]) { await raf(); return [t0, performance.now() - t0]; }
    }
    return [t0, NaN];
  }
  const y = b.top + b.height * 0.3, x = f => b.left + b.width * f, ay = axis.top + axis.height / 2, ax = axis.left + axis.width / 2;
  let t0, first;
  if (kind === 'wheel') {
    [t0, res.frame] = await timed(() => main.dispatchEvent(new WheelEvent('wheel', {deltaY: -100, clientX: Math.round(x(0.5)),
      clientY: Math.round(y), bubbles: true, cancelable: true})));
  } else if (kind === 'box') {
    mouse('mousedown', main, x(0.3), y);
    for (const f of [0.35, 0.45, 0.55, 0.65, 0.7]) { mouse('mousemove', under(x(f), y), x(f), y); await raf(); }
    await task();
    [t0, res.frame] = await timed(() => mouse('mouseup', under(x(0.7), y), x(0.7), y));
  } else if (kind === 'pan') {
    mouse('mousedown', gd.querySelector('.ewdrag'), ax, ay);
    [first, res.frame] = await timed(() => mouse('mousemove', under(ax - 60, ay), ax - 60, ay));
    mouse('mousemove', under(ax - 180, ay), ax - 180, ay);
    await raf(); await raf(); await task();
    [t0, res.release] = await timed(() => mouse('mouseup', under(ax - 180, ay), ax - 180, ay), true);
  } else if (kind === 'dblclick') {
    if (window.Plotly && Plotly.Fx && Plotly.Fx.unhover) Plotly.Fx.unhover(gd);
    gd._hoverdata = undefined;  // the first click selects nothing
    [t0, res.frame] = await timed(() => { for (let i = 0; i < 2; i++) { mouse('mousedown', main, x(0.5), y); mouse('mouseup', main, x(0.5), y); } });
  } else {
    [t0, res.frame] = await timed(() => document.dispatchEvent(new KeyboardEvent('keydown', {key: kind, bubbles: true})));
  }
  first = first === undefined ? t0 : first;
  res.draw = (nx.draws || []).slice(d0).reduce((a, v) => a + v, 0);
  res.detail = (await drawn) - t0;
  await new Promise(r => setTimeout(r, 400));  // the answer's own redraw, and the long tasks' reports
  res.longest = Math.max(0, ...tasks.filter(t => t[0] + t[1] >= first).map(t => t[1]));
  res.done = true;
};"""
"""Installs window.__nxMeasure(kind): one input of `kind` dispatched in the page and timed (the
module's docstring); the result in window.__nxIn once its `done`."""
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
        drv.execute_script(INPUT)
        rows = []
        for _ in range(rounds):
            for kind in KINDS:
                drv.execute_script("window.__nxMeasure(arguments[0])", kind)
                try:
                    k = bp.wait(drv, "const k = window.__nxIn; return k && k.done && k", timeout=90)
                    rows.append((kind, k["frame"], k["release"], k["draw"], k["longest"], k["detail"]))
                except RuntimeError:
                    rows.append((kind,) + (float("nan"),) * 5)
                time.sleep(1.5)
        return rows
    finally:
        bp.stop(proc)


def num(v, digits: int = 1) -> str:
    return "-" if v is None else f"{v:,.{digits}f}"


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
                print(f"  {r[0]:>8}: frame {num(r[1])} ms  release {num(r[2])} ms  drawing calls {num(r[3])} ms  "
                      f"longest task {num(r[4], 0)} ms  detail {num(r[5], 0)} ms", flush=True)
            for kind in KINDS:
                of = [r for r in rows if r[0] == kind]

                def med(j, of=of):
                    xs = [r[j] for r in of if r[j] is not None and r[j] == r[j]]
                    return (statistics.median(xs), max(xs)) if xs else (float("nan"), float("nan"))
                print(f"  median {kind:>8}: frame {num(med(1)[0])} ms (max {num(med(1)[1])})"
                      + (f"  release {num(med(2)[0])} ms (max {num(med(2)[1])})" if kind == "pan" else "")
                      + f"  drawing calls {num(med(3)[0])} ms  longest task {num(med(4)[0], 0)} ms (max {num(med(4)[1], 0)})"
                      f"  detail {num(med(5)[0], 0)} ms (max {num(med(5)[1], 0)})", flush=True)
            print(f"  load average {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        drv.quit()


if __name__ == "__main__":
    main()
