"""Dashboard page speed in headless Chromium: what a person waits for.

  - page: navigation start → the timeline drawn (the plotly graph holds its slice traces and their
    filled SVG paths, or for a WebGL timeline its canvas, are in the page), read from the page's own
    clock (performance.now(), which starts at navigation), median of ROUNDS fresh loads; and
    → painted: the next frame, by which the browser has rasterised the drawn timeline (WebGL here is
    rasterised in software, SwiftShader, after the draw: this is what a person waits for);
  - zoom: a zoom box dragged over the middle 1/20 of the plot (mouse events dispatched in the page,
    as a person's drag), SETTLE_S after the page was drawn (so the rest of the page has finished),
    median of ROUNDS: the release → the frame after the page's own redraw of the new window
    (`zoom frame`), and → the server's detail of that window drawn (`zoom 1/20 → drawn`: the status
    line has changed and Plotly has drawn the figure that came with it, `plotly_afterplot`, and the
    frame after it is on screen);
  - weight: the bytes of every script, style and data request of one load (Resource Timing),
    and of the largest.
  - start: `neuron-explorer dashboard RUN` started in a fresh process → the server answers `/`, and
    → the first page's timeline painted in the browser (loaded as soon as the server answers),
    whatever is still being computed (issue 42: ≤ 5 s); the findings are computed in the server's
    background thread, and the page and zoom rounds start once they are done (--cold: at once).
Each RUN is measured on its own server, one after the other. Run it with nothing else on the
machine; it prints the load average next to the figures. Each tree's package is compiled to .pyc
first (`compiled`), as an installed one is.

    python bench/bench_page.py [--cold] [--rounds N] [--starts N] [--before TREE] [--drop-derived] [--first-timeout S] [RUN ...]
    (default RUN /tmp/runs/big_tl; --starts N: N starts per tree, each on a fresh server, start → `/` and → painted, with
     the server's CPU seconds to the paint; --before TREE: the same starts of another checkout (`git archive C | tar -x -C
     TREE`), alternating with this tree's (its server runs with TREE as working directory and PYTHONPATH); --drop-derived:
     RUN/derived/ (the stored timeline pyramid) removed before each start, the first open of a run; --first-timeout: how
     long a start may take to paint before it is reported as not painted, with the browser's console errors, default 120 s;
     the page and zoom rounds run on this tree's last server)
    (the runs of bench/README.md: the 68k-event trace tiled 32x, the V100 memory trace tiled 48x,
     256 ranks; e.g. python ../shared/tools/tile_trace.py tests/data/traces/cuda_train_68k_events.json.gz /tmp/big.json 32
              neuron-explorer import /tmp/big.json -o /tmp/runs/big_tl --force)
Targets: issue 15, the page (painted) ≤ 2 s; issue 42, the first page painted ≤ 5 s after the start, on every run;
issue 35, input → redrawn frame ≤ 50 ms, detail swapped in ≤ 500 ms quiet, page → painted ≤ 1.5 s quiet.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _cli

ROUNDS = 5
SETTLE_S = 3.0
COLD = "--cold" in sys.argv
HERE = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DRAWN = """(() => { const gd = document.querySelector('#timeline .js-plotly-plot');
  return !!(gd && gd._fullData && (gd._fullData.some(t => t.type === 'scattergl') && gd.querySelector('canvas')
    || gd._fullData.some(t => t.meta === 'spans') && gd.querySelector('.scatterlayer .trace .js-fill'))); })()"""
# installed before any page script runs: stamps the first frame at which the timeline is drawn, and
# the frame after it (by then the browser has painted the drawn timeline)
PROBE = ("(function poll() { if (" + DRAWN + ") { window.__nxDrawn = performance.now(); "
         "requestAnimationFrame(() => { window.__nxPainted = performance.now(); }); return; } requestAnimationFrame(poll); })();")


DRAWN_AFTER = """// resolves with performance.now() once the status line differs from `s0` and Plotly has drawn a figure since the
  // call (plotly_afterplot: the server's figure, which comes with the status, in either order), and the frame after
  // both is on screen; NaN after 30 s
  window.__nxDrawnAfter = function (s0) {
    const gd = document.querySelector('#timeline .js-plotly-plot'), st = document.getElementById('status');
    return new Promise(resolve => {
      let changed = false, plotted = false, over = false;
      const t = performance.now();
      const check = () => { if (over || !changed || !plotted) return; over = true; gd.removeListener('plotly_afterplot', onPlot);
        obs.disconnect(); requestAnimationFrame(() => resolve(performance.now())); };
      const onPlot = () => { plotted = true; check(); };
      const obs = new MutationObserver(() => { if (st.innerText !== s0) { changed = true; check(); } });
      obs.observe(st, {childList: true, subtree: true, characterData: true});
      gd.on('plotly_afterplot', onPlot);
      setTimeout(() => { if (!over) { over = true; gd.removeListener('plotly_afterplot', onPlot); obs.disconnect(); resolve(NaN); } }, 30000);
    });
  };"""
ZOOM_BOX = DRAWN_AFTER + """
  (async () => {
    const gd = document.querySelector('#timeline .js-plotly-plot'), st = document.getElementById('status'), s0 = st.innerText;
    const main = gd.querySelector('.nsewdrag'), b = main.getBoundingClientRect();
    const under = (x, y) => document.elementFromPoint(x, y) || document.body;
    const mouse = (type, el, x, y) => el.dispatchEvent(new MouseEvent(type, {clientX: Math.round(x), clientY: Math.round(y),
      bubbles: true, cancelable: true, view: window, button: 0, buttons: type === 'mouseup' ? 0 : 1}));
    const raf = () => new Promise(r => requestAnimationFrame(r)), y = b.top + b.height * 0.3, x = f => b.left + b.width * f;
    const z = window.__nxZoom = {frame: null, drawn: null, done: false}, r0 = gd._fullLayout.xaxis.range.slice();
    mouse('mousedown', main, x(0.475), y);
    for (const f of [0.485, 0.5, 0.525]) { mouse('mousemove', under(x(f), y), x(f), y); await raf(); }
    await new Promise(r => setTimeout(r, 0));  // out of the frame's callbacks, where a real mouseup comes
    const drawn = window.__nxDrawnAfter(s0), t0 = performance.now();
    mouse('mouseup', under(x(0.525), y), x(0.525), y);
    for (let i = 0; i < 600; i++) {
      await raf();
      const r = gd._fullLayout.xaxis.range;
      if (r[0] !== r0[0] || r[1] !== r0[1]) { await raf(); z.frame = performance.now() - t0; break; }
    }
    z.drawn = (await drawn) - t0;
    z.done = true;
  })();"""
"""A zoom box over the middle 1/20 of the plot, as a person drags it: its release → the redrawn frame, and → the
server's detail drawn (window.__nxZoom, ms)."""

KEY = DRAWN_AFTER + """
  const gd = document.querySelector('#timeline .js-plotly-plot'), st = document.getElementById('status');
  const nx = window.nxTimeline, n0 = nx.frames.length, d0 = (nx.draws || []).length;
  const s0 = st.innerText, rel = window.Plotly.relayout, calls = [];
  window.__nxKey = {frame: null, draw: null, relayout: null, detail: null};
  window.Plotly.relayout = function () { const a = performance.now(), p = rel.apply(this, arguments); calls.push(performance.now() - a); return p; };
  const drawn = window.__nxDrawnAfter(s0), t0 = performance.now();
  drawn.then(t => { window.__nxKey.detail = t - t0; window.__nxKey.relayout = calls.reduce((a, b) => a + b, 0); window.Plotly.relayout = rel; });
  document.dispatchEvent(new KeyboardEvent('keydown', {key: 'w', bubbles: true}));
  (function poll() { if (nx.frames.length > n0) { window.__nxKey.frame = nx.frames[n0];
      window.__nxKey.draw = nx.draws ? nx.draws[d0] : calls[0]; return; }
    requestAnimationFrame(poll); })();"""
"""A W key press: the page's own input → redrawn frame (nxTimeline.frames, ms), the drawing call of
that frame alone (nxTimeline.draws where the page records it, else the first Plotly.relayout: the
time load moves least), the Plotly.relayout calls made until the detail came (the settled frame's
full redraw), and when the server's detail for the new window has been drawn (`detail`: the status
line has changed and Plotly has drawn the figure that came with it, DRAWN_AFTER), ms after the press."""


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--no-first-run", "--enable-unsafe-swiftshader",
              "--window-size=1600,1250", f"--user-data-dir={tempfile.mkdtemp(prefix='nx-bench-chromium-')}"):
        opts.add_argument(a)
    drv = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    drv.set_page_load_timeout(600)
    drv.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": PROBE})
    drv.execute_cdp_cmd("Network.enable", {})
    drv.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})  # every load fetches the assets, as a first visit
    return drv


def wait(drv, js: str, timeout: float = 120.0):
    end = time.time() + timeout
    while time.time() < end:
        v = drv.execute_script(js)
        if v:
            return v
        time.sleep(0.05)
    raise RuntimeError(f"timed out: {js}")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(run: Path, tree: Path = HERE):
    """`neuron-explorer dashboard RUN` of the source `tree` in a fresh process (its working directory
    and PYTHONPATH: `python -m` puts the working directory first on the path, so a server started
    from this checkout would run this checkout's code whatever PYTHONPATH says):
    (process, url, epoch seconds at its start, its stderr file)."""
    import signal
    import subprocess

    port = free_port()
    err = tempfile.TemporaryFile()
    t = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "neuron_explorer", "dashboard", str(Path(run).resolve()), "--port", str(port)],
                            cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, stdout=subprocess.DEVNULL, stderr=err,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # Ctrl+C works even when run in the background
    return proc, f"http://127.0.0.1:{port}/", t, err


def compiled(tree: Path) -> None:
    """Each module of the tree's package compiled to its .pyc, as an installed package has them (pip compiles at
    install; a checkout writes them at its first import). Where PYTHONDONTWRITEBYTECODE is set (these machines), a
    server would otherwise compile the ~50 modules it imports at every start: 0.3 s of CPU before `/` answers that no
    user pays."""
    import compileall

    compileall.compile_dir(str(tree / "neuron_explorer"), quiet=1)


def answers(url: str, timeout: float = 120.0, proc=None) -> float:
    """Epoch seconds at which `url` first answers 200 (RuntimeError when the server exits first)."""
    import urllib.request

    end = time.time() + timeout
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}) before answering {url}")
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return time.time()
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"no answer from {url}")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far, all its threads (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def console_errors(drv) -> list[str]:
    try:
        return [e["message"][:200] for e in drv.get_log("browser") if e.get("level") == "SEVERE"]
    except Exception:  # noqa: BLE001  (a driver without logs)
        return []


def start_once(drv, run: Path, tree: Path, first_timeout: float, drop_derived: bool):
    """One start: (server process, url, figures): start → `/` answers, start → the first page
    painted in Chromium (loaded as soon as `/` answers; None when not painted within
    `first_timeout`, with the console's errors), the server's CPU seconds by then."""
    if drop_derived:
        shutil.rmtree(Path(run) / "derived", ignore_errors=True)
    proc, url, t_start, err = start_server(run, tree)
    try:
        up = answers(url, proc=proc) - t_start
        drv.get("about:blank")
        console_errors(drv)  # drop earlier pages' messages
        drv.get(url)
        try:
            wait(drv, "return window.__nxPainted", timeout=max(1.0, first_timeout - (time.time() - t_start)))
            first = drv.execute_script("return (performance.timeOrigin + window.__nxPainted) / 1000") - t_start
            errors = []
        except RuntimeError:
            first, errors = None, console_errors(drv) or ["(no console error)"]
        cpu = cpu_s(proc.pid)
        findings = bool(drv.execute_script("return !!document.getElementById('overview-computing')"))  # the Overview tab, shown first
    except BaseException:
        stop(proc)
        err.seek(0)
        print(err.read().decode(errors="replace")[-1500:], file=sys.stderr)
        raise
    return proc, url, {"up": up, "first": first, "cpu": cpu, "errors": errors, "findings_computing": findings}


def stop(proc) -> None:
    import signal

    proc.send_signal(signal.SIGINT)  # as Ctrl+C: the server closes its runs
    try:
        proc.wait(timeout=30)
    except Exception:  # noqa: BLE001
        proc.kill()


def measure(drv, run: Path, rounds: int, starts: int = 1, before: Path | None = None, first_timeout: float = 120.0,
            drop_derived: bool = False) -> dict:
    import urllib.request

    trees = [("after", HERE)] + ([("before", before)] if before else [])
    runs_of: dict[str, list] = {name: [] for name, _ in trees}
    for i in range(starts):
        for name, tree in (trees if i % 2 == 0 else trees[::-1]):  # alternating, so that both see the same load
            p, _, m = start_once(drv, run, tree, first_timeout, drop_derived)
            m["load"] = os.getloadavg()[0]
            stop(p)  # at once: its analysis must not load the machine for the next start
            runs_of[name].append(m)
    pages, painted, zooms, frames, draws, relayouts, details, weight = [], [], [], [], [], [], [], None
    zoom_frames: list[float] = []
    if not rounds or runs_of["after"][-1]["first"] is None:
        return {"starts": runs_of, "pages": pages, "painted": painted, "zooms": zooms, "frames": frames, "draws": draws,
                "relayouts": relayouts, "details": details, "weight": weight, "zoom_frames": zoom_frames}
    proc, url, _ = start_once(drv, run, HERE, first_timeout, False)  # the page and zoom rounds: a server of this tree
    try:
        if not COLD and rounds:
            t = time.time()
            with urllib.request.urlopen(url + "api/findings?run=0", timeout=3600) as resp:  # answers when the analysis is done
                resp.read()
            print(f"  findings computed {time.time() - t:.1f} s after the first page (the rounds start then; --cold: at once)")
        for _ in range(rounds):
            drv.get("about:blank")
            drv.get(url)
            painted.append(wait(drv, "return window.__nxPainted", timeout=600) / 1000)
            pages.append(drv.execute_script("return window.__nxDrawn") / 1000)
            if weight is None:
                weight = drv.execute_script("""const r = performance.getEntriesByType('resource').concat(performance.getEntriesByType('navigation'));
                    return r.map(e => [e.name.split('?')[0].split('/').slice(-1)[0], e.encodedBodySize || e.transferSize || 0]);""")
            wait(drv, "const s = document.getElementById('status').innerText; return s && s")  # the first figure has come
            time.sleep(SETTLE_S)  # the rest of the page (tables, overview charts) finishes; then the zoom alone is timed
            drv.execute_script(ZOOM_BOX)
            try:
                z = wait(drv, "const z = window.__nxZoom; return z && z.done && z", timeout=40)
                zooms.append(z["drawn"] / 1000)  # NaN: this version did not draw the zoom's detail within 30 s
                zoom_frames.append(z["frame"] / 1000)
            except RuntimeError:
                zooms.append(float("nan"))
                zoom_frames.append(float("nan"))
            time.sleep(1.0)
            drv.execute_script(KEY)
            try:
                k = wait(drv, "const k = window.__nxKey; return k && k.detail !== null && k.frame !== null && k", timeout=30)
                frames.append(k["frame"] / 1000)
                draws.append((k["draw"] or 0) / 1000)
                relayouts.append(k["relayout"] / 1000)
                details.append(k["detail"] / 1000)
            except RuntimeError:
                for xs in (frames, draws, relayouts, details):
                    xs.append(float("nan"))
    finally:
        stop(proc)
    return {"starts": runs_of, "pages": pages, "painted": painted, "zooms": zooms, "frames": frames, "draws": draws,
            "relayouts": relayouts, "details": details, "weight": weight, "zoom_frames": zoom_frames}


def report(run: Path, m: dict) -> None:
    from neuron_explorer.store import open_run

    with open_run(run) as r:
        events = r.con.execute("SELECT count(*) FROM events").fetchone()[0]
        ranks = len(r.ranks)
    pages, painted, zooms, weight = m["pages"], m["painted"], m["zooms"], m["weight"]
    print(f"{run} ({events:,} events, {ranks} rank{'s' if ranks != 1 else ''}):")
    for name, starts in m["starts"].items():
        for x in starts:
            shown = f"{x['first']:.2f} s" if x["first"] is not None else "NOT PAINTED (" + "; ".join(x["errors"])[:300] + ")"
            print(f"  {name}: start → / {x['up']:.2f} s · start → first page painted {shown} · server CPU by then {x['cpu']:.2f} s"
                  f" · Overview still computing: {x['findings_computing']} · load {x['load']:.2f}")
    if not pages:
        return
    print(f"  page (navigation → timeline drawn): median {statistics.median(pages):.2f} s  min {min(pages):.2f}  max {max(pages):.2f}  "
          f"({', '.join(f'{p:.2f}' for p in pages)})")
    print(f"  page (navigation → painted):        median {statistics.median(painted):.2f} s  min {min(painted):.2f}  max {max(painted):.2f}  "
          f"({', '.join(f'{p:.2f}' for p in painted)})")
    print(f"  zoom box 1/20 → redrawn frame:      median {statistics.median(m['zoom_frames']) * 1000:.0f} ms  "
          f"max {max(m['zoom_frames']) * 1000:.0f} ms")
    print(f"  zoom 1/20 → drawn:                  median {statistics.median(zooms) * 1000:.0f} ms  max {max(zooms) * 1000:.0f} ms  "
          f"({', '.join(f'{z * 1000:.0f}' for z in zooms)})")
    frames, details = m["frames"], m["details"]
    print(f"  key W → redrawn frame:              median {statistics.median(frames) * 1000:.0f} ms  max {max(frames) * 1000:.0f} ms")
    print(f"    its drawing call alone:           median {statistics.median(m['draws']) * 1000:.1f} ms  max {max(m['draws']) * 1000:.1f} ms")
    print(f"    Plotly.relayout until the detail: median {statistics.median(m['relayouts']) * 1000:.0f} ms  max {max(m['relayouts']) * 1000:.0f} ms")
    print(f"  key W → detail drawn:               median {statistics.median(details) * 1000:.0f} ms  max {max(details) * 1000:.0f} ms")
    total = sum(b for _, b in weight)
    big = sorted(weight, key=lambda x: -x[1])[:3]
    print(f"  weight: {total / 1e6:.2f} MB in {len(weight)} requests; largest: " + ", ".join(f"{n} {b / 1e6:.2f} MB" for n, b in big))


def main() -> None:
    _cli.help_if_asked(__doc__)
    args = sys.argv[1:]
    opts = {"--rounds": ROUNDS, "--starts": 1, "--before": None, "--first-timeout": 120.0}
    for k in list(opts):
        if k in args:
            i = args.index(k)
            if i + 1 >= len(args):
                raise SystemExit(f"bench_page.py: {k} needs a value (--help for usage)")
            opts[k] = args[i + 1]
            del args[i:i + 2]
    drop = "--drop-derived" in args
    flags = {"--cold", "--drop-derived"}
    unknown = [a for a in args if a.startswith("-") and a not in flags]
    if unknown:
        raise SystemExit(f"bench_page.py: unknown option {unknown[0]} (--help for usage)")
    runs = [_cli.run_dir(p) for p in ([a for a in args if a not in flags] or ["/tmp/runs/big_tl"])]
    before = Path(opts["--before"]).resolve() if opts["--before"] else None
    if before is not None and not (before / "neuron_explorer" / "__init__.py").is_file():
        raise SystemExit(f"bench_page.py: --before {before}: not a source tree (no neuron_explorer/__init__.py)")
    for tree in [HERE] + ([before] if before else []):
        compiled(tree)
    print(f"load average before: {os.getloadavg()[0]:.2f} ({'cold: the rounds start while the findings are computed' if COLD else 'warm'})")
    drv = browser()
    try:
        for run in runs:
            m = measure(drv, run, int(opts["--rounds"]), int(opts["--starts"]), before, float(opts["--first-timeout"]), drop)
            report(run, m)
            print(f"  load average: {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        drv.quit()


if __name__ == "__main__":
    main()
