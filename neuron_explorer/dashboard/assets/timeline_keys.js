/* Timeline navigation in the page, as in Perfetto: W/S (or up/down) zoom, at the pointer when it
   is over the plot, else at the middle; A/D (or left/right) pan; shift+drag selects an area (a time
   range on some lanes; the server aggregates it per name). Nothing here leaves the page.

   The page draws every step itself, in the next frame: a key moves the client's window (`target`,
   each key from the last one's window, so quick presses add up and none is lost) and one
   Plotly.relayout per frame redraws the slices the page already holds in it. While keys come, the
   graph's relayouts of those windows are held back from the server (window.nxTimeline.ours(), read
   by the clientside callback in front of the "zoom-req" store); SETTLE_MS after the last key the window
   goes to the server once ("zoom-req"), which answers with the slices of that window at full
   detail. A figure from the server for an older window (window.nxTimeline.accept, the clientside
   callback in front of the graph) is drawn in the client's window, so an answer never moves the
   view back; a figure that is not a zoom (a jump to a finding, a search hit, a run switch) wins.

   Focus: W/S/A/D act on the timeline unless a text field has them (the search box) or a dropdown's
   menu is open; a closed dropdown that still holds the focus after a choice lets go of it and the
   key goes to the timeline. The arrows act only over the timeline or after a click on it
   (elsewhere they scroll the page and move in menus). nxTimeline.blur() (called after a run or rank is chosen) takes the
   focus from the dropdown, so the next key does not type into its filter. */
(function () {
  var ZOOM = 0.6, PAN = 0.2, SETTLE_MS = 150;
  var KEYS = {w: 'in', s: 'out', a: 'left', d: 'right', arrowup: 'in', arrowdown: 'out', arrowleft: 'left', arrowright: 'right'};
  var pointerX = null, hovered = false, clicked = false;
  var target = null, frame = null, firstInput = null, settle = null, seq = 0, drawn = [];
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

  function draw() {
    frame = null;
    var gd = graph();
    if (!gd || !target || !window.Plotly) return;
    var t0 = firstInput; firstInput = null;
    drawn.push(target.slice());
    if (drawn.length > 64) drawn.shift();
    window.Plotly.relayout(gd, {'xaxis.range': target.slice()});
    requestAnimationFrame(function () { nx.frames.push(performance.now() - t0); });
  }

  function ask() {
    settle = null;
    if (!target || !window.dash_clientside || !window.dash_clientside.set_props) return;
    nx.asked += 1;
    window.dash_clientside.set_props('zoom-req', {data: {'xaxis.range[0]': target[0], 'xaxis.range[1]': target[1], seq: ++seq}});
  }

  function step(what, gd, ax, when) {
    var r = target || ax[0].range.slice(), w = r[1] - r[0], a, b;
    if (what === 'in' || what === 'out') {
      var c = (pointerX !== null && pointerX > r[0] && pointerX < r[1]) ? pointerX : (r[0] + r[1]) / 2;
      var f = what === 'in' ? ZOOM : 1 / ZOOM;
      a = c - (c - r[0]) * f; b = c + (r[1] - c) * f;
    } else {
      var d = (what === 'right' ? 1 : -1) * w * PAN;
      a = r[0] + d; b = r[1] + d;
    }
    target = [a, b];
    if (firstInput === null) firstInput = when;
    if (settle !== null) clearTimeout(settle);
    settle = setTimeout(ask, SETTLE_MS);
    if (frame === null) frame = requestAnimationFrame(draw);
  }

  document.addEventListener('mousemove', function (ev) {
    var gd = graph(), ax = axes(gd);
    hovered = false; pointerX = null;
    if (ax) {
      var rect = gd.getBoundingClientRect();
      hovered = ev.clientX >= rect.left && ev.clientX <= rect.right && ev.clientY >= rect.top && ev.clientY <= rect.bottom;
      var px = ev.clientX - rect.left - ax[0]._offset;
      pointerX = (hovered && px >= 0 && px <= ax[0]._length) ? ax[0].p2l(px) : null;
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
  document.addEventListener('mouseleave', function () { hovered = false; pointerX = null; });

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
