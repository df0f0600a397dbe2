/* Timeline navigation in the page, as in Perfetto: W/S (or up/down) zoom, at the pointer when it
   is over the plot, else at the middle; A/D (or left/right) pan; the mouse wheel zooms at the
   pointer; a drag on the plot draws a zoom box (x only: the lanes are fixed), ctrl+drag, a drag in
   Plotly's pan mode or a drag of the x axis's middle pans, a drag of either end of the x axis
   stretches the window from that end (the other stays); a double-click shows the whole run;
   shift+drag selects an area (a time range on some lanes; the server aggregates it per name).
   Nothing here leaves the page.

   The page draws every step itself, in the next frame, in O(1): an input moves the client's window
   (`target`, each input from the last one's window, so quick keys and wheel steps add up and none
   is lost), and the frame moves the slices Plotly has already drawn (for the window `base`) with
   one SVG transform of the plot's data layers, translate and scale in x (what Plotly's own drag
   does), with the x axis's scale set to the new window (so hover, click and the pointer's zoom
   centre follow it) and the axis's tick labels written by this file (a dozen text nodes); the step
   lines, step labels and flow arrows move with them (a transform each, `overlays`; an arrow's head
   keeps its shape). Nothing is recomputed: no path, no Plotly.relayout. The server holds slices for
   one window width either side of the window it sent (timeline.flank_buckets), so a pan shows
   slices at once.
   The mouse: the wheel is taken before Plotly sees it (its own wheel zoom redraws every path 300 ms
   after the last step). A press on the plot (or the x axis: its middle, its ends) is left to Plotly until the
   pointer moves DRAG_PX: a still press stays its click (a slice selected) and its hover works;
   once it moves, the moves go to this file only (the zoom box is a div, a pan moves the window at
   every move) and at the release Plotly's own handler is told the drag is over (gd._dragging), so
   it neither relayouts nor clicks. A double-click (two presses within Plotly's doubleClickDelay)
   goes to the whole run (the figure's meta.whole, from the server) the same way.
   The first key or wheel step of a burst (once its frame is on screen), and SETTLE_MS after its last
   one if the window moved on since (at once after a drag or a double-click), the window goes to the
   server ("zoom-req"; an answer that comes while the burst goes on is not drawn), which answers
   with the slices of that window at full detail; if that answer has not come REDRAW_MS (nxTimeline.redrawMs, 2 s) later, the
   page does the one real Plotly.relayout itself (paths recomputed for the window, names re-fitted).
   While keys come, the graph's relayouts of those windows are held back from the server
   (window.nxTimeline.ours(), read by the clientside callback in front of the "zoom-req" store). A
   figure from the server for an older window (window.nxTimeline.accept, the clientside callback in
   front of the graph) is drawn in the client's window, so an answer never moves the view back; a
   figure that is not a zoom (a jump to a finding, a search hit, a run switch) wins. A drag this
   file leaves to Plotly (the select and lasso modes) on a moved plot first does the real relayout
   (Plotly's own drag then starts from it).

   Focus: W/S/A/D act on the timeline unless a text field has them (the search box) or a dropdown's
   menu is open; a closed dropdown that still holds the focus after a choice lets go of it and the
   key goes to the timeline. The arrows act only over the timeline or after a click on it
   (elsewhere they scroll the page and move in menus). nxTimeline.blur() (called after a run or rank is chosen) takes the
   focus from the dropdown, so the next key does not type into its filter. */
(function () {
  var ZOOM = 0.6, PAN = 0.2, SETTLE_MS = 100, TICK_PX = 160;  // SETTLE_MS: still more than a held key's repeat (30-50 ms)
  var DRAG_PX = 3, MINZOOM_PX = 8;  // a press that moves less is a click; a zoom box narrower than Plotly's MINDRAG zooms nothing
  var KEYS = {w: 'in', s: 'out', a: 'left', d: 'right', arrowup: 'in', arrowdown: 'out', arrowleft: 'left', arrowright: 'right'};
  var pointerPx = null, hovered = false, clicked = false;
  var target = null, frame = null, firstInput = null, settle = null, soon = null, redraw = null, seq = 0, drawn = [];
  var lastAsked = null;  // the last window sent to the server (a burst's end that is its first step is not sent twice)
  var base = null;  // the x range Plotly drew the slices for, while the page has moved them (null: not moved)
  var sel = null, box = null;
  var drag = null, lastDown = -1e9;  // a press on the plot that may become the page's drag; when the last one began (double-click)
  var askDrawn = false;  // the window goes to the server once its frame is drawn (askAfterDraw)

  function graph() { return document.querySelector('#timeline .js-plotly-plot'); }
  function inDropdown(t) { return !!(t && t.closest && t.closest('.nx-dd')); }
  function menuOpen(t) { return !!(t && t.closest && t.closest('.dash-dropdown-content, [role=dialog], [role=listbox]')); }
  function typing(t) {
    return !!t && !inDropdown(t) && (t.tagName === 'INPUT' || t.tagName === 'TEXTAREA' || t.tagName === 'SELECT' || t.isContentEditable);
  }
  function axes(gd) { return gd && gd._fullLayout && gd._fullLayout.xaxis ? [gd._fullLayout.xaxis, gd._fullLayout.yaxis] : null; }

  var nx = window.nxTimeline = {
    frames: [],      // input → redrawn frame, ms, of each drawn step (for bench/bench_page.py and the tests)
    draws: [],       // the drawing call of each of those frames alone, ms
    relayouts: 0,    // real redraws this file made (one per burst of keys, when the server's answer is late)
    redrawMs: 2000,  // REDRAW_MS: how late the server's answer may be before the page redraws the window itself
    settleMs: SETTLE_MS,  // how long after a burst's last key or wheel step its window is asked
    asked: 0,        // windows sent to the server
    // a relayout this file made (a window it drew): not for the server
    ours: function (rl) {
      if (!rl) return false;
      var r = rl['xaxis.range'] || [rl['xaxis.range[0]'], rl['xaxis.range[1]']];
      return drawn.some(function (d) { return d[0] === r[0] && d[1] === r[1]; });
    },
    target: function () { return target && target.slice(); },
    lastAsked: function () { return lastAsked && lastAsked.slice(); },  // the last window sent to the server
    settling: function () { return settle !== null; },  // a burst of keys or wheel steps is under way
    blur: function () {  // now, and again once the menu has closed (it gives the focus back to its button as it closes)
      var off = function () { var a = document.activeElement; if (a && a !== document.body && inDropdown(a) && !menuOpen(a) && a.blur) a.blur(); };
      off(); setTimeout(off, 0); setTimeout(off, 250);
    },
    // a relayout the page did not make: after a drag, the wheel or a double-click the axis is the
    // window now (an autosize, which Plotly sends as the page lays out, moves nothing)
    moved: function (rl) {
      if (rl && Object.keys(rl).some(function (k) { return k.indexOf('xaxis') === 0; })) target = null;
    },
    // the server's figure → what the graph draws (see the top of this file)
    accept: function (fig) {
      var meta = fig && fig.layout && fig.layout.meta;
      if (!(meta && meta.zoom) || !target) { target = null; lastAsked = null; return fig; }
      if (settle !== null) {  // keys still coming: a later window will be asked (again, if the burst comes back to this one)
        lastAsked = null;
        return window.dash_clientside.no_update;
      }
      var xaxis = Object.assign({}, fig.layout.xaxis, {range: target.slice()});
      return Object.assign({}, fig, {layout: Object.assign({}, fig.layout, {xaxis: xaxis})});
    }
  };

  // The first figure painted: the frame after Plotly has drawn the timeline of the layout. What is
  // not needed to paint it waits for this (nxTimeline.painted, a Promise): the Overview's content
  // (the "painted" store, an input of its callback: ui/overview.py) and the grids' script
  // (assets/grid_lazy.js); after PAINT_WAIT_MS without a timeline they stop waiting.
  var PAINT_WAIT_MS = 15000, paintedNow;
  nx.painted = new Promise(function (resolve) { paintedNow = resolve; });
  (function firstPaint() {
    var gd = graph();
    if (gd && gd._fullLayout && gd.querySelector('.main-svg')) {
      requestAnimationFrame(function () { setTimeout(function () { painted(true); }, 0); });  // after that frame
      return;
    }
    if (performance.now() > PAINT_WAIT_MS) { painted(); return; }
    requestAnimationFrame(firstPaint);
  })();
  function painted() {
    nx.paintedAt = performance.now();  // ms after navigation (for the tests)
    nx.isPainted = true;
    paintedNow();
    // the store is in the page's layout, which is mounted when the timeline's container is
    if (document.getElementById('timeline') && window.dash_clientside && window.dash_clientside.set_props)
      window.dash_clientside.set_props('painted', {data: true});
  }

  function dataLayers(gd) { return gd.querySelectorAll('.cartesianlayer .scatterlayer'); }

  // the x axis's tick labels for the window `r` while the plot is moved: Plotly's own are hidden
  // (class nx-moving, ui/theme.py), these are clones of its first one, so they look the same
  function ticks(gd, ax, r) {
    var svg = gd.querySelector('.main-svg'), g = svg && svg.querySelector('g.nx-ticks');
    if (!svg) return;
    if (!g) { g = document.createElementNS('http://www.w3.org/2000/svg', 'g'); g.setAttribute('class', 'nx-ticks'); svg.appendChild(g); }
    var proto = gd.querySelector('.xaxislayer-above .xtick text');
    if (proto && !g.dataset.y) { g.dataset.y = proto.getAttribute('y'); g.dataset.style = proto.getAttribute('style') || ''; }
    var w = r[1] - r[0], raw = w * TICK_PX / ax._length, mag = Math.pow(10, Math.floor(Math.log10(raw))), q = raw / mag;
    var stepv = mag * (q < 1.5 ? 1 : q < 3 ? 2 : q < 7 ? 5 : 10), dec = Math.max(0, -Math.floor(Math.log10(stepv) + 1e-9));
    var y = g.dataset.y || String(gd._fullLayout._size.t + gd._fullLayout._size.h + 14);
    var nodes = g.childNodes, i = 0, suffix = ax.ticksuffix || '';
    for (var v = Math.ceil(r[0] / stepv) * stepv; v <= r[1] && i < 40; v += stepv, i++) {
      var t = nodes[i];
      if (!t) { t = document.createElementNS('http://www.w3.org/2000/svg', 'text'); t.setAttribute('text-anchor', 'middle'); g.appendChild(t); }
      t.setAttribute('style', g.dataset.style || 'font-size: 11px; fill: rgb(38, 50, 56);');
      t.setAttribute('x', ax._offset + (v - r[0]) / w * ax._length);
      t.setAttribute('y', y);
      t.textContent = (Math.abs(v) < stepv / 2 ? 0 : v).toLocaleString('en-US', {minimumFractionDigits: dec, maximumFractionDigits: dec}) + suffix;
    }
    while (nodes.length > i) g.removeChild(nodes[nodes.length - 1]);
  }

  // the slices Plotly drew for `base`, moved to show `r` (see the top of this file)
  function place(gd, ax, r) {
    var len = ax._length, s = (base[1] - base[0]) / (r[1] - r[0]), dx = (base[0] - r[0]) * len / (r[1] - r[0]);
    var tf = 'translate(' + dx + ',0) scale(' + s + ',1)';
    dataLayers(gd).forEach(function (l) { l.setAttribute('transform', tf); });
    gd.style.setProperty('--nx-inv', String(1 / s));
    gd.classList.add('nx-moving');
    overlays(gd, ax, r, s, dx);
    ax.range = r.slice();  // the axis's scale follows: hover, click and p2l see the window on screen
    ax.setScale();
    ticks(gd, ax, r);
  }

  // the step lines, step labels and flow arrows (layout shapes and annotations on the x axis) moved
  // with the slices: a vertical line or a label by its x (a translate), an arrow by the slices'
  // own map (translate and scale, its stroke kept by CSS); one that leaves the plot is hidden (their
  // clip moves with them)
  function overlays(gd, ax, r, s, dx) {
    var fl = gd._fullLayout, off = ax._offset, len = ax._length, bw = base[1] - base[0], rw = r[1] - r[0];
    var was = function (v) { return off + (v - base[0]) / bw * len; }, now = function (v) { return off + (v - r[0]) / rw * len; };
    var inside = function (px) { return px >= off - 0.5 && px <= off + len + 0.5; };
    var affine = 'translate(' + (off * (1 - s) + dx) + ',0) scale(' + s + ',1)';
    gd.querySelectorAll('.shapelayer path[data-index]').forEach(function (p) {
      var sh = (fl.shapes || [])[+p.getAttribute('data-index')];
      if (!sh || sh.xref !== 'x') return;
      var a = now(sh.x0), b = now(sh.x1);
      p.setAttribute('transform', sh.x0 === sh.x1 ? 'translate(' + (a - was(sh.x0)) + ',0)' : affine);
      p.style.visibility = inside(a) || inside(b) ? '' : 'hidden';
    });
    gd.querySelectorAll('.infolayer g.annotation[data-index]').forEach(function (g) {
      var an = (fl.annotations || [])[+g.getAttribute('data-index')];
      if (!an || an.xref !== 'x') return;
      var a = now(an.x), arrow = an.showarrow && an.axref === 'x';
      if (arrow) arrowTo(g, off * (1 - s) + dx, s);
      else g.setAttribute('transform', 'translate(' + (a - was(an.x)) + ',0)');
      g.style.visibility = inside(a) || (arrow && inside(now(an.ax))) ? '' : 'hidden';
    });
  }

  // a flow arrow under the map x -> x0 + s x: its line by the map (a line stays a line; its stroke is
  // kept by CSS), its head moved to the line's new end and turned along it, at its own size (under
  // the map itself the head would be stretched s times in x)
  function arrowTo(g, x0, s) {
    var line = g.querySelector('.annotation-arrow-g path'), head = line && line.nextElementSibling;
    if (!line) return;
    line.setAttribute('transform', 'translate(' + x0 + ',0) scale(' + s + ',1)');
    if (!head) return;
    if (!head.dataset.nxTf) head.dataset.nxTf = head.getAttribute('transform') || '';
    var d = (line.getAttribute('d') || '').match(/-?[\d.]+(e-?\d+)?/g), t = head.dataset.nxTf.match(/-?[\d.]+(e-?\d+)?/g);
    if (!d || d.length < 4 || !t || t.length < 3) return;
    // the head's origin stands as far back from the line's end as Plotly put it, along the new line
    var ex = x0 + s * +d[2], ey = +d[3], vx = s * (+d[2] - +d[0]), vy = +d[3] - +d[1], len = Math.hypot(vx, vy) || 1;
    var back = Math.hypot(+d[2] - +t[0], +d[3] - +t[1]);
    head.setAttribute('transform', 'translate(' + (ex - back * vx / len) + ',' + (ey - back * vy / len) + ')rotate(' +
      Math.atan2(vy, vx) * 180 / Math.PI + ')' + (t.length > 3 ? 'scale(' + t[3] + ')' : ''));
  }

  // the moved slices are Plotly's again (it has drawn them for its axis' range)
  function unplace(gd) {
    base = null;
    if (!gd) return;
    dataLayers(gd).forEach(function (l) { l.removeAttribute('transform'); });
    gd.querySelectorAll('.shapelayer path[data-index], .infolayer g.annotation[data-index]').forEach(function (e) {
      e.removeAttribute('transform'); e.style.visibility = '';
    });
    gd.querySelectorAll('.infolayer .annotation-arrow-g path').forEach(function (p) {
      if (p.dataset.nxTf !== undefined) { p.setAttribute('transform', p.dataset.nxTf); delete p.dataset.nxTf; }
      else p.removeAttribute('transform');
    });
    gd.classList.remove('nx-moving');
  }

  function draw() {
    frame = null;
    var gd = graph(), ax = axes(gd);
    if (!ax || !target || !window.Plotly) { askAfterDraw(); return; }
    var t0 = firstInput; firstInput = null;
    var a = performance.now();
    hook(gd);
    if (!base) base = ax[0].range.slice();
    place(gd, ax[0], target);
    nx.draws.push(performance.now() - a);
    requestAnimationFrame(function () { nx.frames.push(performance.now() - t0); askAfterDraw(); });
  }

  // a window asked for at once (a drag's end, a double-click, a burst's first step) goes to the server
  // once its frame is on screen: the request's own work in the page (Dash's, 50-150 ms on a loaded
  // machine) would delay it
  function askAfterDraw() {
    if (!askDrawn) return;
    askDrawn = false;
    soon = setTimeout(function () { soon = null; ask(); }, 0);
  }

  // the one real redraw of a burst: Plotly recomputes the paths for the window the keys chose
  function relayout() {
    redraw = null;
    var gd = graph();
    if (!gd || !base || !target || !window.Plotly) return;
    var r = target.slice();
    unplace(gd);
    drawn.push(r);
    if (drawn.length > 64) drawn.shift();
    nx.relayouts += 1;
    window.Plotly.relayout(gd, {'xaxis.range': r});
  }

  // a figure Plotly drew itself (the server's answer, a relayout): its slices are where it put them
  function hook(gd) {
    if (gd.__nxHooked || !gd.on) return;
    gd.__nxHooked = true;
    gd.on('plotly_afterplot', function () { if (base) unplace(gd); });
  }

  function ask() {
    if (!target || !window.dash_clientside || !window.dash_clientside.set_props) return;
    if (lastAsked && lastAsked[0] === target[0] && lastAsked[1] === target[1]) return;  // a one-step burst: asked at its start
    lastAsked = target.slice();
    nx.asked += 1;
    window.dash_clientside.set_props('zoom-req', {data: {'xaxis.range[0]': target[0], 'xaxis.range[1]': target[1], seq: ++seq}});
    if (redraw !== null) clearTimeout(redraw);
    redraw = setTimeout(relayout, nx.redrawMs);
  }

  // the client's window is `r` now: drawn in the next frame, asked of the server `settleMs` after the
  // last input (0: once that frame is on screen; null: not yet, a drag is still moving it). The first
  // step of a burst of keys or wheel steps is also asked once its frame is on screen: a single key
  // press does not wait SETTLE_MS for its detail (the burst's last window is asked when it stops, if
  // it moved on; the answers that come while it goes on are not drawn: `accept`)
  function go(r, when, settleMs) {
    var first = settle === null;  // no burst under way
    target = r;
    if (firstInput === null) firstInput = when || performance.now();
    if (settle !== null) { clearTimeout(settle); settle = null; }
    if (soon !== null) { clearTimeout(soon); soon = null; }
    if (redraw !== null) { clearTimeout(redraw); redraw = null; }
    askDrawn = settleMs === 0 || (!!settleMs && first);
    if (settleMs) settle = setTimeout(function () { settle = null; ask(); }, settleMs);
    if (frame === null) frame = requestAnimationFrame(draw);
  }

  function step(what, gd, ax, when) {
    var r = target || ax[0].range.slice(), w = r[1] - r[0], a, b;
    if (what === 'in' || what === 'out') {
      var c = pointerPx !== null ? r[0] + pointerPx / ax[0]._length * w : (r[0] + r[1]) / 2;
      var f = what === 'in' ? ZOOM : 1 / ZOOM;
      a = c - (c - r[0]) * f; b = c + (r[1] - c) * f;
    } else {
      var d = (what === 'right' ? 1 : -1) * w * PAN;
      a = r[0] + d; b = r[1] + d;
    }
    go([a, b], when, nx.settleMs);
  }

  // the pixel of the plot's x axis at the client x `cx` (clamped to the axis), and its value in the window `r`
  function axisPx(d, cx) { return Math.max(0, Math.min(d.len, cx - d.left)); }
  function at(d, px) { return d.r[0] + px / d.len * (d.r[1] - d.r[0]); }
  function panned(d, cx) { var s = (d.x - cx) / d.len * (d.r[1] - d.r[0]); return [d.r[0] + s, d.r[1] + s]; }
  // an end of the x axis dragged: that end moves, the other stays, by Plotly's own law for it (its dZoom: dragging
  // an end inwards by a share d of the axis divides the window by 1 - d, up to 10x; outwards, gently)
  function dZoom(f) { return 1 - (f >= 0 ? Math.min(f, 0.9) : 1 / (1 / Math.max(f, -0.3) + 3.222)); }
  function stretched(d, cx) {
    var dx = cx - d.x, r = d.r;
    return d.end === 'w' ? [r[1] + (r[0] - r[1]) / dZoom(dx / d.len), r[1]] : [r[0], r[0] + (r[1] - r[0]) / dZoom(-dx / d.len)];
  }
  // the whole run on this figure's axis (its meta, from the server), or null
  function whole(gd) { var m = gd.layout && gd.layout.meta; return m && m.whole && m.whole.length === 2 ? m.whole.slice() : null; }

  // the zoom box while the pointer moves: a band across the plot (the lanes' axis is fixed, so only x zooms)
  function zoomBox(d, cx) {
    if (!d.box) {
      d.box = document.createElement('div');
      d.box.id = 'nx-zoom-box';
      // a layer of its own (will-change): its moves repaint it alone, not the plot's paths under it
      d.box.style.cssText = 'position:absolute;border-left:1px solid #455A64;border-right:1px solid #455A64;background:rgba(69,90,100,0.12);' +
        'pointer-events:none;z-index:50;will-change:transform;top:' + (d.top + window.scrollY) + 'px;height:' + d.height + 'px';
      document.body.appendChild(d.box);
    }
    var a = axisPx(d, d.x), b = axisPx(d, cx);
    d.box.style.left = (d.left + Math.min(a, b) + window.scrollX) + 'px';
    d.box.style.width = Math.abs(b - a) + 'px';
  }

  // a drag or double-click this file has drawn: Plotly's mouseup handler (on the document, after this
  // file's) sees the drag as over, ends it (its listeners, its cover) and makes no relayout and no click
  function endPlotlyDrag(gd) {
    gd._dragging = false;
    gd.querySelectorAll('.zoombox, .zoombox-corners').forEach(function (e) { e.remove(); });
  }

  document.addEventListener('mousemove', function (ev) {
    var gd = graph(), ax = axes(gd);
    hovered = false; pointerPx = null;
    if (ax) {
      var rect = gd.getBoundingClientRect();
      hovered = ev.clientX >= rect.left && ev.clientX <= rect.right && ev.clientY >= rect.top && ev.clientY <= rect.bottom;
      var px = ev.clientX - rect.left - ax[0]._offset;
      pointerPx = (hovered && px > 0 && px < ax[0]._length) ? px : null;  // the zoom's centre: this pixel of the window on screen
    }
    if (drag && ev.buttons === 0) {  // released where no mouseup came (outside the window): a drag of nothing
      if (drag.box) drag.box.remove();
      drag = null;
    }
    if (drag) {
      ev.stopPropagation(); ev.preventDefault();  // Plotly sees no move: a still press stays its click
      if (!drag.moved && Math.abs(ev.clientX - drag.x) < DRAG_PX && Math.abs(ev.clientY - drag.y) < DRAG_PX) return;
      if (!drag.moved && window.Plotly && window.Plotly.Fx) window.Plotly.Fx.unhover(drag.gd);  // no hover label left over a drag
      drag.moved = true;
      if (drag.kind === 'pan') go(panned(drag, ev.clientX), ev.timeStamp, null);
      else if (drag.kind === 'stretch') go(stretched(drag, ev.clientX), ev.timeStamp, null);
      else zoomBox(drag, ev.clientX);
      return;
    }
    if (sel) {
      ev.stopPropagation(); ev.preventDefault();
      var x = Math.max(sel.left, Math.min(ev.clientX, sel.right)), y = Math.max(sel.top, Math.min(ev.clientY, sel.bottom));
      box.style.left = (Math.min(x, sel.x) + window.scrollX) + 'px';
      box.style.top = (Math.min(y, sel.y) + window.scrollY) + 'px';
      box.style.width = Math.abs(x - sel.x) + 'px';
      box.style.height = Math.abs(y - sel.y) + 'px';
      sel.x1 = x; sel.y1 = y;
    }
  }, true);
  document.addEventListener('mouseleave', function () { hovered = false; pointerPx = null; });
  // the wheel over the plot or the x axis: a zoom at the pointer, Plotly's own step (10% a notch of
  // 100 px), from the client's window; taken before Plotly's own wheel handler (on the drag element)
  document.addEventListener('wheel', function (ev) {
    var gd = graph(), ax = axes(gd), el = ev.target && ev.target.closest && ev.target.closest('.nsewdrag, .ewdrag');
    if (!ax || !el || !gd.contains(el) || !(gd._context && gd._context.scrollZoom)) return;
    ev.preventDefault(); ev.stopPropagation();
    var dy = ev.deltaY * (ev.deltaMode === 1 ? 40 : ev.deltaMode === 2 ? 800 : 1);
    if (!dy || !isFinite(dy)) return;
    var f = Math.exp(Math.max(-20, Math.min(20, dy)) / 200), r = target || ax[0].range.slice();
    var rect = gd.getBoundingClientRect(), px = Math.max(0, Math.min(ax[0]._length, ev.clientX - rect.left - ax[0]._offset));
    var c = r[0] + px / ax[0]._length * (r[1] - r[0]);
    go([c - (c - r[0]) * f, c + (r[1] - c) * f], ev.timeStamp, nx.settleMs);
  }, {capture: true, passive: false});

  // captured before the dropdown sees it: a key meant for the timeline types nothing into a filter
  document.addEventListener('keydown', function (ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey) return;
    var what = KEYS[(ev.key || '').toLowerCase()];
    if (!what) return;
    var t = ev.target, mine = hovered || clicked, arrow = ev.key.indexOf('Arrow') === 0;
    if (typing(t)) return;
    // a dropdown's open menu, or its filter, keeps its keys; a closed one (after a choice) does not
    if (inDropdown(t) && (menuOpen(t) || (arrow && !mine))) return;
    if (arrow && !mine) return;
    var gd = graph(), ax = axes(gd);
    if (!ax) return;
    ev.preventDefault(); ev.stopPropagation();
    if (inDropdown(t) && t.blur) t.blur();
    step(what, gd, ax, ev.timeStamp || performance.now());
  }, true);

  // shift+drag on the plot: an area selection instead of a zoom (captured before plotly sees it)
  document.addEventListener('mousedown', function (ev) {
    var tl = document.getElementById('timeline');
    clicked = !!(tl && ev.target && tl.contains(ev.target));
    if (box && !sel) { box.remove(); box = null; }
    var gd = graph(), ax = axes(gd);
    if (drag && drag.box) drag.box.remove();
    drag = null;
    // a press that may become the page's drag (Plotly's choice of zoom or pan: its dragbox's prepFn)
    var el = clicked && ax && ev.button === 0 && !ev.shiftKey && ev.target.closest && ev.target.closest('.nsewdrag, .ewdrag, .wdrag, .edrag');
    var main = !!el && el.classList.contains('nsewdrag'), mode = el && gd._fullLayout.dragmode;
    var end = !el ? null : el.classList.contains('wdrag') ? 'w' : el.classList.contains('edrag') ? 'e' : null;
    var kind = !el ? null : end ? 'stretch' : !main || mode === 'pan' || (mode === 'zoom' && ev.ctrlKey) ? 'pan' : mode === 'zoom' ? 'zoom' : null;
    if (kind) {
      var rect = gd.getBoundingClientRect(), fl = gd._fullLayout, delay = (gd._context && gd._context.doubleClickDelay) || 300;
      var dbl = ev.timeStamp - lastDown < delay && ['autosize', 'reset+autosize'].indexOf(gd._context && gd._context.doubleClick) >= 0;
      drag = {kind: kind, gd: gd, x: ev.clientX, y: ev.clientY, r: (target || ax[0].range).slice(), moved: false, box: null,
              left: rect.left + ax[0]._offset, len: ax[0]._length, top: rect.top + fl._size.t, height: fl._size.h,
              dbl: dbl ? lastDown : null, delay: delay, end: end};
      lastDown = dbl ? -1e9 : ev.timeStamp;
    } else if (base && clicked && ev.target.closest && ev.target.closest('.nsewdrag, .drag')) relayout();  // Plotly's own drag, from the window on screen
    if (!ev.shiftKey || !ax || !ev.target.closest || !ev.target.closest('#timeline .nsewdrag')) return;
    ev.stopPropagation(); ev.preventDefault();
    var rect = gd.getBoundingClientRect();
    sel = {x: ev.clientX, y: ev.clientY, x1: ev.clientX, y1: ev.clientY, gd: gd,
           left: rect.left + ax[0]._offset, right: rect.left + ax[0]._offset + ax[0]._length,
           top: rect.top + ax[1]._offset, bottom: rect.top + ax[1]._offset + ax[1]._length};
    box = document.createElement('div');
    box.id = 'nx-area-box';
    box.style.cssText = 'position:absolute;border:1.5px solid #1565C0;background:rgba(21,101,192,0.12);pointer-events:none;z-index:50;will-change:transform;' +
      'left:' + (ev.clientX + window.scrollX) + 'px;top:' + (ev.clientY + window.scrollY) + 'px;width:0;height:0';
    document.body.appendChild(box);
  }, true);

  document.addEventListener('mouseup', function (ev) {
    if (drag) {
      var d = drag, w;
      drag = null;
      if (d.box) d.box.remove();
      if (d.moved) {
        endPlotlyDrag(d.gd);
        if (d.kind === 'pan') go(panned(d, ev.clientX), ev.timeStamp, 0);
        else if (d.kind === 'stretch') go(stretched(d, ev.clientX), ev.timeStamp, 0);
        else {
          var a = axisPx(d, d.x), b = axisPx(d, ev.clientX);
          if (Math.abs(b - a) >= MINZOOM_PX) go([at(d, Math.min(a, b)), at(d, Math.max(a, b))], ev.timeStamp, 0);
        }
      } else if (d.dbl !== null && ev.timeStamp - d.dbl <= d.delay && (w = whole(d.gd))) {
        endPlotlyDrag(d.gd);
        go(w, ev.timeStamp, 0);
      }
      return;
    }
    if (!sel) return;
    ev.stopPropagation(); ev.preventDefault();
    var s = sel, ax = axes(s.gd); sel = null;
    if (!ax || Math.abs(s.x1 - s.x) < 3) { if (box) { box.remove(); box = null; } return; }
    var rect = s.gd.getBoundingClientRect();
    var xa = function (cx) { return ax[0].p2l(cx - rect.left - ax[0]._offset); };
    var ya = function (cy) { return ax[1].p2l(cy - rect.top - ax[1]._offset); };
    var x0 = xa(Math.min(s.x, s.x1)), x1 = xa(Math.max(s.x, s.x1));
    var y0 = ya(s.y), y1 = ya(s.y1);
    if (box) { box.dataset.x0 = x0; box.dataset.x1 = x1; box.dataset.y0 = Math.min(y0, y1); box.dataset.y1 = Math.max(y0, y1); }
    if (window.dash_clientside && window.dash_clientside.set_props) {
      window.dash_clientside.set_props('area', {data: {x0: x0, x1: x1, y0: Math.min(y0, y1), y1: Math.max(y0, y1)}});
    }
  }, true);
})();
