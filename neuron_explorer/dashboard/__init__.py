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
    """Open the runs (a bad path raises before any server starts) and serve them. Each run's first
    timeline (its lanes, longest events and pyramid: the costly part of the first page) starts
    computing in a background thread before the app's modules and Dash are imported, so that the
    queries and the imports share the time to the first page."""
    import threading

    from .runs import RunSet

    rs = RunSet(paths)
    threading.Thread(target=_first_timelines, args=(rs,), name="nx-warm-timelines", daemon=True).start()
    from .app import serve as _serve

    _serve(rs, host=host, port=port, **kw)


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
