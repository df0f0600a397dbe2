"""Dashboard page speed in headless Chromium: what a person waits for.

  - page: navigation start → the timeline drawn (the plotly graph holds its slice traces and their
    filled SVG paths, or for a WebGL timeline its canvas, are in the page), read from the page's own
    clock (performance.now(), which starts at navigation), median of ROUNDS fresh loads; and
    → painted: the next frame, by which the browser has rasterised the drawn timeline (WebGL here is
    rasterised in software, SwiftShader, after the draw: this is what a person waits for);
  - zoom: a zoom to 1/20 of the window (Plotly.relayout, what a drag or the W key does) → the
    server's narrower window drawn (the status line changes), SETTLE_S after the page was drawn
    (so the rest of the page has finished), median of ROUNDS;
  - key: a W key press (a keydown event on the page) → the frame after the timeline's axis took
    the new window (input → redrawn frame: what the person sees move), and → the server's
    detail of that window swapped in (the status line changes), median of ROUNDS;
  - weight: the bytes of every script, style and data request of one load (Resource Timing),
    and of the largest.
Run it with nothing else on the machine; it prints the load average next to the figures.

    python bench/bench_page.py [--cold] [RUN ...]     # default /tmp/runs/big_tl
    (--cold: the pages load while the findings are still being computed, as right after start)
    (make it: python ../shared/tools/tile_trace.py tests/data/traces/cuda_train_68k_events.json.gz /tmp/big.json 32
              neuron-explorer import /tmp/big.json -o /tmp/runs/big_tl --force)
Target (issue 15): the page (painted) ≤ 2 s on the 2.2M-event run; (issue 35) input → redrawn
frame ≤ 50 ms, detail swapped in ≤ 500 ms quiet, page → painted ≤ 1.5 s quiet.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
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

# a W press on the page (the pointer off the plot: a zoom at the middle); records in window.__nxKey
# the ms to the frame after the axis took the new window, and to the status line's change (the
# server's detail of that window drawn)
KEY = """const gd = document.querySelector('#timeline .js-plotly-plot'), st = document.getElementById('status');
  const r0 = gd._fullLayout.xaxis.range.slice(), s0 = st.innerText, t0 = performance.now();
  window.__nxKey = {frame: null, detail: null};
  new MutationObserver((m, obs) => { if (st.innerText !== s0) { window.__nxKey.detail = performance.now() - t0; obs.disconnect(); } })
    .observe(st, {childList: true, subtree: true, characterData: true});
  document.dispatchEvent(new KeyboardEvent('keydown', {key: 'w', bubbles: true}));
  (function poll() { const r = gd._fullLayout.xaxis.range;
    if (r[0] !== r0[0] || r[1] !== r0[1]) { requestAnimationFrame(() => { window.__nxKey.frame = performance.now() - t0; }); return; }
    requestAnimationFrame(poll); })();"""


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
    drv.set_page_load_timeout(120)
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


def serve(runs: list[Path]) -> tuple[str, object]:
    from werkzeug.serving import make_server

    from neuron_explorer.dashboard import queries
    from neuron_explorer.dashboard.app import create_app, warm
    from neuron_explorer.dashboard.runs import RunSet

    rs = RunSet(runs)
    warm(rs)  # what `neuron-explorer dashboard` does before it prints its URL
    if not COLD:
        t = time.perf_counter()
        for r in rs.runs:  # what its background thread does next: the findings, cached for every page
            queries.findings(rs, r.index)
        print(f"findings computed in {time.perf_counter() - t:.1f} s (before the pages are measured; --cold: while they load)")
    else:
        threading.Thread(target=lambda: [queries.findings(rs, r.index) for r in rs.runs], daemon=True).start()
    srv = make_server("127.0.0.1", 0, create_app(rs).server, threaded=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{srv.server_port}/", srv


def main() -> None:
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    runs = [Path(p) for p in ([a for a in sys.argv[1:] if a != "--cold"] or ["/tmp/runs/big_tl"])]
    t = time.perf_counter()
    url, srv = serve(runs)
    print(f"runs {', '.join(map(str, runs))}: server up in {time.perf_counter() - t:.2f} s; load average {os.getloadavg()[0]:.2f}")
    drv = browser()
    drv.get(url)  # one load to start Chromium's own processes; not counted
    wait(drv, "return window.__nxDrawn")
    pages, painted, zooms, frames, details, weight = [], [], [], [], [], None
    for _ in range(ROUNDS):
        drv.get("about:blank")
        drv.get(url)
        painted.append(wait(drv, "return window.__nxPainted") / 1000)
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
            k = wait(drv, "return window.__nxKey && window.__nxKey.detail !== null && window.__nxKey", timeout=30)
            frames.append(k["frame"] / 1000)
            details.append(k["detail"] / 1000)
        except RuntimeError:
            frames.append(float("nan"))
            details.append(float("nan"))
    drv.quit()
    srv.shutdown()
    total = sum(b for _, b in weight)
    big = sorted(weight, key=lambda x: -x[1])[:3]
    print(f"page (navigation → timeline drawn): median {statistics.median(pages):.2f} s  min {min(pages):.2f}  max {max(pages):.2f}  "
          f"({', '.join(f'{p:.2f}' for p in pages)})")
    print(f"page (navigation → painted):        median {statistics.median(painted):.2f} s  min {min(painted):.2f}  max {max(painted):.2f}  "
          f"({', '.join(f'{p:.2f}' for p in painted)})")
    print(f"zoom 1/20 → drawn:                  median {statistics.median(zooms) * 1000:.0f} ms  max {max(zooms) * 1000:.0f} ms")
    print(f"key W → redrawn frame:              median {statistics.median(frames) * 1000:.0f} ms  max {max(frames) * 1000:.0f} ms  "
          f"({', '.join(f'{p * 1000:.0f}' for p in frames)})")
    print(f"key W → detail swapped in:          median {statistics.median(details) * 1000:.0f} ms  max {max(details) * 1000:.0f} ms  "
          f"({', '.join(f'{p * 1000:.0f}' for p in details)})")
    print(f"weight: {total / 1e6:.2f} MB in {len(weight)} requests; largest: "
          + ", ".join(f"{n} {b / 1e6:.2f} MB" for n, b in big))
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
