"""Dashboard page speed in headless Chromium: what a person waits for.

  - page: navigation start → the timeline drawn (the plotly graph holds its slice traces and their
    filled SVG paths, or for a WebGL timeline its canvas, are in the page), read from the page's own
    clock (performance.now(), which starts at navigation), median of ROUNDS fresh loads; and
    → painted: the next frame, by which the browser has rasterised the drawn timeline (WebGL here is
    rasterised in software, SwiftShader, after the draw: this is what a person waits for);
  - zoom: a zoom to 1/20 of the window (Plotly.relayout, what a drag or the W key does) → the
    server's narrower window drawn (the status line changes), SETTLE_S after the page was drawn
    (so the rest of the page has finished), median of ROUNDS;
  - weight: the bytes of every script, style and data request of one load (Resource Timing),
    and of the largest.
  - start: `neuron-explorer dashboard RUN` started in a fresh process → the server answers `/`, and
    → the first page's timeline painted in the browser (loaded as soon as the server answers),
    whatever is still being computed (issue 42: ≤ 5 s); the findings are computed in the server's
    background thread, and the page and zoom rounds start once they are done (--cold: at once).
Each RUN is measured on its own server, one after the other. Run it with nothing else on the
machine; it prints the load average next to the figures.

    python bench/bench_page.py [--cold] [--rounds N] [RUN ...]     # default /tmp/runs/big_tl
    (the runs of bench/README.md: the 68k-event trace tiled 32x, the V100 memory trace tiled 48x,
     256 ranks; e.g. python ../shared/tools/tile_trace.py tests/data/traces/cuda_train_68k_events.json.gz /tmp/big.json 32
              neuron-explorer import /tmp/big.json -o /tmp/runs/big_tl --force)
Targets: issue 15, the page (painted) ≤ 2 s; issue 42, the first page painted ≤ 5 s after the start, on every run;
issue 35, input → redrawn frame ≤ 50 ms, detail swapped in ≤ 500 ms quiet, page → painted ≤ 1.5 s quiet.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROUNDS = 5
SETTLE_S = 3.0
COLD = "--cold" in sys.argv
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DRAWN = """(() => { const gd = document.querySelector('#timeline .js-plotly-plot');
  return !!(gd && gd._fullData && (gd._fullData.some(t => t.type === 'scattergl') && gd.querySelector('canvas')
    || gd._fullData.some(t => t.meta === 'spans') && gd.querySelector('.scatterlayer .trace .js-fill'))); })()"""
# installed before any page script runs: stamps the first frame at which the timeline is drawn, and
# the frame after it (by then the browser has painted the drawn timeline)
PROBE = ("(function poll() { if (" + DRAWN + ") { window.__nxDrawn = performance.now(); "
         "requestAnimationFrame(() => { window.__nxPainted = performance.now(); }); return; } requestAnimationFrame(poll); })();")


KEY = """const gd = document.querySelector('#timeline .js-plotly-plot'), st = document.getElementById('status');
  const nx = window.nxTimeline, n0 = nx.frames.length, d0 = (nx.draws || []).length;
  const s0 = st.innerText, t0 = performance.now(), rel = window.Plotly.relayout, calls = [];
  window.__nxKey = {frame: null, draw: null, relayout: null, detail: null};
  window.Plotly.relayout = function () { const a = performance.now(), p = rel.apply(this, arguments); calls.push(performance.now() - a); return p; };
  new MutationObserver((m, obs) => { if (st.innerText !== s0) { window.__nxKey.detail = performance.now() - t0;
      window.__nxKey.relayout = calls.length ? calls.reduce((a, b) => a + b, 0) : 0; window.Plotly.relayout = rel; obs.disconnect(); } })
    .observe(st, {childList: true, subtree: true, characterData: true});
  document.dispatchEvent(new KeyboardEvent('keydown', {key: 'w', bubbles: true}));
  (function poll() { if (nx.frames.length > n0) { window.__nxKey.frame = nx.frames[n0];
      window.__nxKey.draw = nx.draws ? nx.draws[d0] : calls[0]; return; }
    requestAnimationFrame(poll); })();"""
"""A W key press: the page's own input → redrawn frame (nxTimeline.frames, ms), the drawing call of
that frame alone (nxTimeline.draws where the page records it, else the first Plotly.relayout: the
time load moves least), the Plotly.relayout calls made until the detail came (the settled frame's
full redraw), and when the server's detail for the new window has been swapped in (`detail`, the
status line changes), ms after the press."""


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


def start_server(run: Path):
    """`neuron-explorer dashboard RUN` in a fresh process: (process, url, epoch seconds at its start)."""
    import signal
    import subprocess

    port = free_port()
    t = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "neuron_explorer", "dashboard", str(run), "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # Ctrl+C works even when run in the background
    return proc, f"http://127.0.0.1:{port}/", t


def answers(url: str, timeout: float = 120.0) -> float:
    """Epoch seconds at which `url` first answers 200."""
    import urllib.request

    end = time.time() + timeout
    while time.time() < end:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                if resp.status == 200:
                    return time.time()
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"no answer from {url}")


def stop(proc) -> None:
    import signal

    proc.send_signal(signal.SIGINT)  # as Ctrl+C: the server closes its runs
    try:
        proc.wait(timeout=30)
    except Exception:  # noqa: BLE001
        proc.kill()


def measure(drv, run: Path, rounds: int) -> dict:
    import urllib.request

    proc, url, t_start = start_server(run)
    try:
        up = answers(url) - t_start
        drv.get("about:blank")
        drv.get(url)
        wait(drv, "return window.__nxPainted", timeout=600)
        first = drv.execute_script("return (performance.timeOrigin + window.__nxPainted) / 1000") - t_start
        findings = "computing" in drv.execute_script("const n = document.getElementById('findings-note'); return n ? n.innerText : ''")
        if not COLD:
            t = time.time()
            with urllib.request.urlopen(url + "api/findings?run=0", timeout=3600) as resp:  # answers when the analysis is done
                resp.read()
            print(f"  findings computed {time.time() - t:.1f} s after the first page (the rounds start then; --cold: at once)")
        pages, painted, zooms, frames, draws, relayouts, details, weight = [], [], [], [], [], [], [], None
        for _ in range(rounds):
            drv.get("about:blank")
            drv.get(url)
            painted.append(wait(drv, "return window.__nxPainted", timeout=600) / 1000)
            pages.append(drv.execute_script("return window.__nxDrawn") / 1000)
            if weight is None:
                weight = drv.execute_script("""const r = performance.getEntriesByType('resource').concat(performance.getEntriesByType('navigation'));
                    return r.map(e => [e.name.split('?')[0].split('/').slice(-1)[0], e.encodedBodySize || e.transferSize || 0]);""")
            status = wait(drv, "const s = document.getElementById('status').innerText; return s && s")
            time.sleep(SETTLE_S)  # the rest of the page (tables, overview charts) finishes; then the zoom alone is timed
            t0 = time.perf_counter()
            drv.execute_script("""const gd = document.querySelector('#timeline .js-plotly-plot'); const r = gd._fullLayout.xaxis.range;
                const m = (r[0] + r[1]) / 2, w = (r[1] - r[0]) / 40; Plotly.relayout(gd, {'xaxis.range[0]': m - w, 'xaxis.range[1]': m + w});""")
            try:
                wait(drv, f"const s = document.getElementById('status').innerText; return s !== {status!r} && s", timeout=30)
                zooms.append(time.perf_counter() - t0)
            except RuntimeError:
                zooms.append(float("nan"))  # this version did not redraw the zoom within 30 s
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
    return {"up": up, "first": first, "findings_computing": findings, "pages": pages, "painted": painted, "zooms": zooms,
            "frames": frames, "draws": draws, "relayouts": relayouts, "details": details, "weight": weight}


def report(run: Path, m: dict) -> None:
    from neuron_explorer.store import open_run

    with open_run(run) as r:
        events = r.con.execute("SELECT count(*) FROM events").fetchone()[0]
        ranks = len(r.ranks)
    pages, painted, zooms, weight = m["pages"], m["painted"], m["zooms"], m["weight"]
    print(f"{run} ({events:,} events, {ranks} rank{'s' if ranks != 1 else ''}):")
    print(f"  start → server answers /:          {m['up']:.2f} s")
    print(f"  start → first page painted:        {m['first']:.2f} s  (findings panel then said 'computing…': {m['findings_computing']})")
    if not pages:
        return
    print(f"  page (navigation → timeline drawn): median {statistics.median(pages):.2f} s  min {min(pages):.2f}  max {max(pages):.2f}  "
          f"({', '.join(f'{p:.2f}' for p in pages)})")
    print(f"  page (navigation → painted):        median {statistics.median(painted):.2f} s  min {min(painted):.2f}  max {max(painted):.2f}  "
          f"({', '.join(f'{p:.2f}' for p in painted)})")
    print(f"  zoom 1/20 → drawn:                  median {statistics.median(zooms) * 1000:.0f} ms  max {max(zooms) * 1000:.0f} ms")
    frames, details = m["frames"], m["details"]
    print(f"  key W → redrawn frame:              median {statistics.median(frames) * 1000:.0f} ms  max {max(frames) * 1000:.0f} ms")
    print(f"    its drawing call alone:           median {statistics.median(m['draws']) * 1000:.1f} ms  max {max(m['draws']) * 1000:.1f} ms")
    print(f"    Plotly.relayout until the detail: median {statistics.median(m['relayouts']) * 1000:.0f} ms  max {max(m['relayouts']) * 1000:.0f} ms")
    print(f"  key W → detail swapped in:          median {statistics.median(details) * 1000:.0f} ms  max {max(details) * 1000:.0f} ms")
    total = sum(b for _, b in weight)
    big = sorted(weight, key=lambda x: -x[1])[:3]
    print(f"  weight: {total / 1e6:.2f} MB in {len(weight)} requests; largest: " + ", ".join(f"{n} {b / 1e6:.2f} MB" for n, b in big))


def main() -> None:
    args = sys.argv[1:]
    rounds = ROUNDS
    if "--rounds" in args:
        k = args.index("--rounds")
        rounds = int(args[k + 1])
        del args[k:k + 2]
    runs = [Path(p) for p in ([a for a in args if a != "--cold"] or ["/tmp/runs/big_tl"])]
    print(f"load average before: {os.getloadavg()[0]:.2f} ({'cold: the rounds start while the findings are computed' if COLD else 'warm'})")
    drv = browser()
    try:
        for run in runs:
            m = measure(drv, run, rounds)
            report(run, m)
            print(f"  load average: {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        drv.quit()


if __name__ == "__main__":
    main()
