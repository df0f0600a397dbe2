"""The JSON twin of every dashboard view: GET /api/<view>?run=<index>&... on the Dash server
(views of two runs: /api/compare?base=<index>&test=<index>&...).

Every response is one envelope: {"ok": bool, "error": str|null, "data": ..., "truncated": bool}.
Keys are only ever added. A bad request (unknown view, unknown parameter, a value of the wrong
type or out of its range, an unknown run index) is answered with ok=false and HTTP 400, never a
crash; a run is named by its index, never by a path. A path under /_dash-component-suites/ that Dash
does not serve is a 404, not a 500.

Must not: compute anything itself (the views listed in queries.py do) or accept a path.
"""

from __future__ import annotations

import inspect
import json
import math

import duckdb
import numpy as np

from ..errors import NeuronExplorerError
from .queries import PAIR_VIEWS, VIEWS
from .runs import RunSet


def envelope(data=None, error: str | None = None) -> dict:
    truncated = bool(isinstance(data, dict) and data.get("truncated"))
    return {"ok": error is None, "error": error, "data": data, "truncated": truncated}


def _clean(v):
    """JSON-safe: numpy scalars to Python, NaN/inf to null."""
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def call_view(rs: RunSet, view: str, params: dict) -> tuple[dict, int]:
    """(envelope, HTTP status) of one view called with string parameters."""
    fn = VIEWS.get(view) or PAIR_VIEWS.get(view)
    if fn is None:
        return envelope(error=f"unknown view {view!r}; views: {', '.join(sorted({**VIEWS, **PAIR_VIEWS}))}"), 404
    allowed = [p for p in inspect.signature(fn).parameters if p != "rs"]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        return envelope(error=f"unknown parameter(s) {', '.join(unknown)} for {view}; accepted: {', '.join(allowed)}"), 400
    try:
        data = fn(rs, **params)
    except NeuronExplorerError as e:
        return envelope(error=str(e)), 400
    except (OverflowError, duckdb.OutOfRangeException, duckdb.ConversionException) as e:
        # a value the checks let through that still does not fit the run's int64 arithmetic
        return envelope(error=f"a parameter is out of range for {view}: {' '.join(str(e).split())[:200]}"), 400
    return envelope(_clean(data)), 200


def register(server, rs: RunSet) -> None:
    """Add /api/<view> to a Flask server."""
    from flask import Response, request

    def api(view: str):
        env, status = call_view(rs, view, {k: v for k, v in request.args.items()})
        return Response(json.dumps(env, allow_nan=False), status=status, mimetype="application/json")

    server.add_url_rule("/api/<view>", "neuron_explorer_api", api, methods=["GET"])

    def not_found(e):
        return Response(json.dumps(envelope(error="not found")), status=404, mimetype="application/json")

    # Dash answers a component-suite path it does not serve (`..%2f..%2fetc%2fpasswd`) by raising
    # DependencyException, which Flask turns into a 500 with a traceback in the log: a 404 instead.
    from dash.exceptions import DependencyException

    server.register_error_handler(DependencyException, not_found)
