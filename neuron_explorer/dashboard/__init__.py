"""The web dashboard (Dash): timeline with server-side level of detail, event chain and source
view, findings, tables. Every view is a query function listed in `queries.VIEWS` (also served as
JSON at /api/<view>); `app` only draws. Start it with `neuron-explorer dashboard RUN...` or `serve()`.

Layers point down: `app` → `ui/` (figures, layout, callbacks) and `panels` → `views/` and the
view modules here (plain data, no Dash, no plotly) → `runs` → the analyzers and the store. A
lower layer never imports a higher one.

Reads runs only (through store.open_run); serves only the runs it was given.
"""

from __future__ import annotations


def serve(paths, host: str = "127.0.0.1", port: int = 8050, **kw) -> None:
    """Open the runs (a bad path raises before any server starts) and serve them.
    A run opened before has its first timeline's lanes, longest events and pyramid stored beside it
    (`OpenRun.timeline_stored`): its first page is then a few reads and 0.5-1 s of Python (pandas,
    which the first Arrow-to-NumPy conversion imports, the figure, the layout), which would only
    hold the GIL against the imports that the server needs before it can answer `/`. So the page
    is built once the server answers, while the browser evaluates the page's scripts (about 1 s),
    which ask for the layout early (app.PREFETCH_JS) and get it when it is built.
    Otherwise (the first open: scans of every event) each run's first timeline starts computing in
    a background thread before the app's modules and Dash are imported, so that the queries and
    the imports share the time to the first page."""
    import threading

    from .runs import RunSet

    rs = RunSet(paths)
    stored = first_timelines_stored(rs)
    if not stored:
        threading.Thread(target=_first_timelines, args=(rs,), name="nx-warm-timelines", daemon=True).start()
    from .app import serve as _serve

    _serve(rs, host=host, port=port, warm_first=not stored, **kw)


def first_timelines_stored(rs) -> bool:
    """Whether every run's first timeline (of its first rank on a run of many ranks) reads stored lanes and longest events."""
    from . import ranks_view

    return all(r.timeline_stored(None if (k := ranks_view.first_rank(rs, r.index)) == "all" else k) for r in rs.runs)


def _first_timelines(rs) -> None:
    """Each run's first timeline (timeline.first_timeline: the arrays the page's first view uses,
    computed once; the page's request waits for this computation rather than repeating it)."""
    from . import ranks_view
    from .timeline import first_timeline

    for r in rs.runs:
        try:
            first_timeline(rs, r.index, ranks_view.first_rank(rs, r.index))
        except Exception:  # noqa: BLE001  (a warm-up: the page's request computes it again and shows the error)
            pass


__all__ = ["serve"]
