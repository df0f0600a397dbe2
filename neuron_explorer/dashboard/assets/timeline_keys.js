/* Timeline navigation in the page, as in Perfetto: W/S zoom (at the pointer when it is over the
   plot, else at the middle), A/D pan, and shift+drag selects an area (a time range on some lanes;
   the server aggregates it per name). Zoom and pan go through Plotly.relayout, so the server
   re-queries the window the same way as for a mouse drag. Nothing here leaves the page. */
(function () {
  var ZOOM = 0.6, PAN = 0.2, THROTTLE_MS = 120;
  var pointerX = null, pending = null, timer = null, lastSent = 0;
  var sel = null, box = null;

  function graph() { return document.querySelector('#timeline .js-plotly-plot'); }
  function typing(t) {
    return t && (t.tagName === 'INPUT' || t.tagName === 'TEXTAREA' || t.tagName === 'SELECT' || t.isContentEditable);
  }
  function axes(gd) { return gd && gd._fullLayout && gd._fullLayout.xaxis ? [gd._fullLayout.xaxis, gd._fullLayout.yaxis] : null; }
  function send() {  // at most one relayout per THROTTLE_MS while a key is held
    timer = null;
    var gd = graph();
    if (!pending || !gd || !window.Plotly) { pending = null; return; }
    var r = pending; pending = null; lastSent = Date.now();
    window.Plotly.relayout(gd, {'xaxis.range[0]': r[0], 'xaxis.range[1]': r[1]});
  }

  document.addEventListener('mousemove', function (ev) {
    var gd = graph(), ax = axes(gd);
    if (ax) {
      var px = ev.clientX - gd.getBoundingClientRect().left - ax[0]._offset;
      pointerX = (px >= 0 && px <= ax[0]._length) ? ax[0].p2l(px) : null;
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

  document.addEventListener('keydown', function (ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey || typing(ev.target)) return;
    var key = (ev.key || '').toLowerCase();
    if (key !== 'w' && key !== 's' && key !== 'a' && key !== 'd') return;
    var gd = graph(), ax = axes(gd);
    if (!ax) return;
    ev.preventDefault();
    var r = pending || ax[0].range.slice(), w = r[1] - r[0], a, b;
    if (key === 'w' || key === 's') {
      var c = (pointerX !== null && pointerX > r[0] && pointerX < r[1]) ? pointerX : (r[0] + r[1]) / 2;
      var f = key === 'w' ? ZOOM : 1 / ZOOM;
      a = c - (c - r[0]) * f; b = c + (r[1] - c) * f;
    } else {
      var d = (key === 'd' ? 1 : -1) * w * PAN;
      a = r[0] + d; b = r[1] + d;
    }
    pending = [a, b];
    if (!timer) timer = setTimeout(send, Math.max(0, THROTTLE_MS - (Date.now() - lastSent)));
  });

  // shift+drag on the plot: an area selection instead of a zoom (captured before plotly sees it)
  document.addEventListener('mousedown', function (ev) {
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
