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
    from .app import serve as _serve

    _serve(paths, host=host, port=port, **kw)


__all__ = ["serve"]
