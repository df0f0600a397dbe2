/* dash-ag-grid, loaded after the timeline is painted instead of before it (issue 35).

   Its bundle (1.3 MB) is not among the page's scripts (ui/grid.py marks it dynamic): no grid is on
   screen when the timeline is first drawn, and evaluating the bundle, then drawing the Overview's
   grid, would delay that draw. Until the bundle is here, this file stands in for its namespace
   (window.dash_ag_grid, which Dash's renderer reads as soon as it meets a grid in a layout): a
   component that shows an empty box of the grid's size, waits for the bundle, then draws the real
   grid with the same props. The bundle replaces this namespace as it loads, so later grids are the
   real component directly. It is fetched once the timeline is painted (nxTimeline.painted,
   assets/timeline_keys.js), when the browser is idle or at most IDLE_MS later.

   The page gives the bundle's address in window.nxGridSrc (dashboard/app.py). */
(function () {
  var IDLE_MS = 1000;
  if (window.dash_ag_grid || !window.React) return;  // the bundle is a script of this page after all
  var loading = null;

  function load() {
    if (!loading) {
      loading = new Promise(function (resolve, reject) {
        var s = document.createElement('script');
        s.src = window.nxGridSrc;
        s.onload = function () { resolve(window.dash_ag_grid.AgGrid); };
        s.onerror = function () { loading = null; reject(new Error('dash-ag-grid could not be loaded from ' + s.src)); };
        document.head.appendChild(s);
      });
    }
    return loading;
  }

  function LazyGrid(props) {
    var got = window.React.useState(null), real = got[0], setReal = got[1];
    window.React.useEffect(function () {
      var live = true;
      var nx = window.nxTimeline;
      (nx && nx.painted ? nx.painted : Promise.resolve()).then(load).then(function (grid) { if (live) setReal(function () { return grid; }); });
      return function () { live = false; };
    }, []);
    if (real) return window.React.createElement(real, props);
    return window.React.createElement('div', {id: props.id, className: props.className, style: props.style});
  }
  // what the renderer reads off the component class before it is drawn (the real one has the same)
  LazyGrid.dashRenderType = true;
  LazyGrid.dashPersistence = {persisted_props: ['selectedRows'], persistence_type: 'local'};

  window.dash_ag_grid = {AgGrid: LazyGrid};

  // once the timeline is painted (assets/timeline_keys.js, which this page evaluates after this file)
  document.addEventListener('DOMContentLoaded', function () {
    var nx = window.nxTimeline;
    (nx && nx.painted ? nx.painted : Promise.resolve()).then(function () {
      if (window.requestIdleCallback) window.requestIdleCallback(function () { load(); }, {timeout: IDLE_MS});
      else setTimeout(load, 0);
    });
  });
})();
