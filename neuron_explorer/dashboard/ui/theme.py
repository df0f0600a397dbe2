"""The dashboard's look: one stylesheet, inlined into the page (no external assets to fetch)."""

STYLE = """
html { scrollbar-gutter: stable; }  /* the page growing past the window (the Overview filling in) does not narrow it: no reflow under the timeline */
body { margin: 0; background: #F4F6F8; font-family: Inter, 'Segoe UI', Helvetica, Arial, sans-serif; color: #263238; }
.nx-top { display: flex; align-items: center; gap: 14px; padding: 8px 16px; background: #1F2A36; color: #ECEFF1; }
.nx-top h1 { font-size: 17px; margin: 0 12px 0 0; font-weight: 600; letter-spacing: .2px; }
.nx-top .nx-dd { flex: 0 0 auto; }
.nx-top label { font-size: 12px; color: #B0BEC5; }
.nx-btn { background: #37474F; color: #ECEFF1; border: 1px solid #546E7A; border-radius: 4px; padding: 5px 10px; cursor: pointer; font-size: 12px; }
.nx-btn:hover { background: #455A64; }
.nx-top label, .nx-btn { white-space: nowrap; }
.nx-radio { font-size: 12px; color: #ECEFF1; display: flex; gap: 8px; }
.nx-radio label { color: #ECEFF1; display: inline-flex; align-items: center; gap: 3px; cursor: pointer; }
.nx-card .nx-radio, .nx-card .nx-radio label, .nx-radio-light, .nx-radio-light label { color: #37474F; }
.nx-search { display: flex; align-items: center; gap: 6px; margin: 0 0 4px 0; }
.nx-search-box { width: 320px; font-size: 12px; padding: 4px 8px; border: 1px solid #B0BEC5; border-radius: 4px; }
.nx-btn-light { background: #ECEFF1; color: #263238; border-color: #B0BEC5; }
.nx-btn-light:hover { background: #CFD8DC; }
.nx-status { font-size: 12px; color: #B0BEC5; margin-left: auto; }
.nx-card { background: #FFF; border-radius: 6px; box-shadow: 0 1px 3px rgba(0,0,0,.08); margin: 10px 12px; padding: 8px 10px; }
.nx-grid { display: grid; grid-template-columns: minmax(0, 1fr); gap: 0; }
.nx-detail h3 { margin: 2px 0 6px 0; font-size: 15px; word-break: break-all; }
/* the event panel: a drawer at the right of the window, beside the timeline, on screen whatever was clicked and wherever
   the page is scrolled (fixed, below the top bar); shown only while an event is selected (panels.drawer_class), closed by
   its × (which clears the selection); while it is open the page's content is narrower by its width, so it covers no lane
   of the timeline (the graph follows its container's width) and nothing of the tables */
.nx-detail { display: none; position: fixed; right: 0; top: 58px; bottom: 0; width: 440px; margin: 0; overflow-y: auto; z-index: 30;
             border-radius: 6px 0 0 0; box-shadow: -2px 0 10px rgba(0,0,0,.18); border-left: 2px solid #90A4AE; box-sizing: border-box; }
.nx-detail.nx-open { display: block; }
#explore-view:has(.nx-detail.nx-open) { padding-right: 440px; }
.nx-detail-close { position: sticky; top: 0; float: right; z-index: 1; border: 1px solid #B0BEC5; border-radius: 4px; background: #ECEFF1;
                   color: #263238; font-size: 16px; line-height: 16px; padding: 2px 8px; cursor: pointer; }
.nx-detail-close:hover { background: #CFD8DC; }
/* assets/timeline_keys.js moves the slices Plotly drew while keys come (class nx-moving on the graph), and the step lines,
   step labels and flow arrows with them: Plotly's x tick labels and grid lines give way to its own tick labels until the
   window is drawn again; names keep their width (scaled back by --nx-inv); outlines and arrows keep theirs */
.js-plotly-plot .nx-ticks { display: none; }
.js-plotly-plot.nx-moving .nx-ticks { display: inline; }
.js-plotly-plot.nx-moving .xaxislayer-above .xtick, .js-plotly-plot.nx-moving .gridlayer .x { visibility: hidden; }
.js-plotly-plot.nx-moving .annotation-arrow-g path, .js-plotly-plot.nx-moving .shapelayer path { vector-effect: non-scaling-stroke; }
.js-plotly-plot.nx-moving .scatterlayer .textpoint text { transform-box: fill-box; transform-origin: center; transform: scaleX(var(--nx-inv, 1)); }
.js-plotly-plot .scatterlayer path.js-line { vector-effect: non-scaling-stroke; }
#detail > div { column-width: 400px; column-gap: 22px; }
#detail h3 { column-span: all; }
#detail .nx-kv, #detail .nx-chain, #detail .nx-src, #detail .nx-args { break-inside: avoid; }
.nx-kv { display: grid; grid-template-columns: 110px 1fr; font-size: 12px; row-gap: 2px; }
.nx-kv div:nth-child(odd) { color: #78909C; }
.nx-chain { list-style: none; padding: 0; margin: 6px 0; font-size: 12px; }
.nx-chain li { padding: 3px 6px; border-left: 3px solid #90A4AE; margin: 2px 0; background: #FAFBFC; }
.nx-chain li b { display: inline-block; min-width: 92px; color: #546E7A; font-weight: 600; }
.nx-src { font-family: 'JetBrains Mono', Menlo, Consolas, monospace; font-size: 11.5px; background: #263238; color: #ECEFF1;
          border-radius: 4px; padding: 6px 0; margin: 6px 0; overflow-x: auto; }
.nx-src div { white-space: pre; padding: 0 10px; }
.nx-src .cur { background: #FFB30033; border-left: 3px solid #FFB300; }
.nx-src span.ln { color: #78909C; display: inline-block; width: 42px; text-align: right; margin-right: 10px; }
.nx-muted { color: #78909C; font-size: 12px; }
.nx-error { color: #B71C1C; font-size: 12px; margin: 4px 12px; }
.nx-args { font-family: Menlo, Consolas, monospace; font-size: 11px; background: #F5F7F9; padding: 6px; border-radius: 4px;
           max-height: 180px; overflow: auto; white-space: pre-wrap; }
"""

GRAPH_CONFIG = {"displaylogo": False, "showSendToCloud": False, "showEditInChartStudio": False, "showLink": False,
                "modeBarButtonsToRemove": ["sendDataToCloud", "editInChartStudio"]}
"""Every graph's plotly config: no "share / upload chart" button, no link out of the page."""
