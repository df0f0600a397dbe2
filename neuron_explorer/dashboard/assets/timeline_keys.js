/* Timeline navigation in the page, as in Perfetto: W/S (or up/down) zoom, at the pointer when it
   is over the plot, else at the middle; A/D (or left/right) pan; shift+drag selects an area (a time
   range on some lanes; the server aggregates it per name). Nothing here leaves the page.

   The page draws every step itself, in the next frame, in O(1): a key moves the client's window
   (`target`, each key from the last one's window, so quick presses add up and none is lost), and
   the frame moves the slices Plotly has already drawn (for the window `base`) with one SVG
   transform of the plot's data layers, translate and scale in x (what Plotly's own drag does),
   with the x axis's scale set to the new window (so hover, click and the pointer's zoom centre
   follow it) and the axis's tick labels written by this file (a dozen text nodes); the step lines,
   step labels and flow arrows move with them (a transform each, `overlays`; an arrow's head keeps its shape). Nothing is
   recomputed: no path, no Plotly.relayout. The server holds slices for one window width either side
   of the window it sent (timeline.flank_buckets), so a pan shows slices at once.
   SETTLE_MS after the last key the window goes to the server once ("zoom-req"), which answers
   with the slices of that window at full detail; if that answer has not come REDRAW_MS (nxTimeline.redrawMs, 2 s) later, the
   page does the one real Plotly.relayout itself (paths recomputed for the window, names re-fitted).
   While keys come, the graph's relayouts of those windows are held back from the server
   (window.nxTimeline.ours(), read by the clientside callback in front of the "zoom-req" store). A
   figure from the server for an older window (window.nxTimeline.accept, the clientside callback in
   front of the graph) is drawn in the client's window, so an answer never moves the view back; a
   figure that is not a zoom (a jump to a finding, a search hit, a run switch) wins. A drag or the
   wheel on a moved plot first does the real relayout (Plotly's own drag then starts from it).

   Focus: W/S/A/D act on the timeline unless a text field has them (the search box) or a dropdown's
   menu is open; a closed dropdown that still holds the focus after a choice lets go of it and the
   key goes to the timeline. The arrows act only over the timeline or after a click on it
   (elsewhere they scroll the page and move in menus). nxTimeline.blur() (called after a run or rank is chosen) takes the
   focus from the dropdown, so the next key does not type into its filter. */
(function () {
  var ZOOM = 0.6, PAN = 0.2, SETTLE_MS = 100, TICK_PX = 160;  // SETTLE_MS: still more than a held key's repeat (30-50 ms)
  var KEYS = {w: 'in', s: 'out', a: 'left', d: 'right', arrowup: 'in', arrowdown: 'out', arrowleft: 'left', arrowright: 'right'};
  var pointerPx = null, hovered = false, clicked = false;
  var target = null, frame = null, firstInput = null, settle = null, redraw = null, seq = 0, drawn = [];
  var base = null;  // the x range Plotly drew the slices for, while the page has moved them (null: not moved)
  var sel = null, box = null;

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
    asked: 0,        // windows sent to the server
    // a relayout this file made (a window it drew): not for the server
    ours: function (rl) {
      if (!rl) return false;
      var r = rl['xaxis.range'] || [rl['xaxis.range[0]'], rl['xaxis.range[1]']];
      return drawn.some(function (d) { return d[0] === r[0] && d[1] === r[1]; });
    },
    target: function () { return target && target.slice(); },
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
      if (!(meta && meta.zoom) || !target) { target = null; return fig; }
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
    if (!ax || !target || !window.Plotly) return;
    var t0 = firstInput; firstInput = null;
    var a = performance.now();
    hook(gd);
    if (!base) base = ax[0].range.slice();
    place(gd, ax[0], target);
    nx.draws.push(performance.now() - a);
    requestAnimationFrame(function () { nx.frames.push(performance.now() - t0); });
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
    settle = null;
    if (!target || !window.dash_clientside || !window.dash_clientside.set_props) return;
    nx.asked += 1;
    window.dash_clientside.set_props('zoom-req', {data: {'xaxis.range[0]': target[0], 'xaxis.range[1]': target[1], seq: ++seq}});
    if (redraw !== null) clearTimeout(redraw);
    redraw = setTimeout(relayout, nx.redrawMs);
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
    target = [a, b];
    if (firstInput === null) firstInput = when;
    if (settle !== null) clearTimeout(settle);
    if (redraw !== null) { clearTimeout(redraw); redraw = null; }
    settle = setTimeout(ask, SETTLE_MS);
    if (frame === null) frame = requestAnimationFrame(draw);
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
  // a drag or the wheel on a plot the keys have moved: the real redraw first, then Plotly's own
  document.addEventListener('wheel', function (ev) {
    var tl = document.getElementById('timeline');
    if (base && tl && ev.target && tl.contains(ev.target)) relayout();
  }, true);

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
    if (base && clicked && ev.target.closest && ev.target.closest('.nsewdrag, .drag')) relayout();
    if (box && !sel) { box.remove(); box = null; }
    var gd = graph(), ax = axes(gd);
    if (!ev.shiftKey || !ax || !ev.target.closest || !ev.target.closest('#timeline .nsewdrag')) return;
    ev.stopPropagation(); ev.preventDefault();
    var rect = gd.getBoundingClientRect();
    sel = {x: ev.clientX, y: ev.clientY, x1: ev.clientX, y1: ev.clientY, gd: gd,
           left: rect.left + ax[0]._offset, right: rect.left + ax[0]._offset + ax[0]._length,
           top: rect.top + ax[1]._offset, bottom: rect.top + ax[1]._offset + ax[1]._length};
    box = document.createElement('div');
    box.id = 'nx-area-box';
    box.style.cssText = 'position:absolute;border:1.5px solid #1565C0;background:rgba(21,101,192,0.12);pointer-events:none;z-index:50;' +
      'left:' + (ev.clientX + window.scrollX) + 'px;top:' + (ev.clientY + window.scrollY) + 'px;width:0;height:0';
    document.body.appendChild(box);
  }, true);

  document.addEventListener('mouseup', function (ev) {
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
