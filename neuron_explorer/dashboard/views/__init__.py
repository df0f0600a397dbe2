"""The dashboard's data: plain functions of the RunSet and request-style parameters that return
JSON-able dicts and lists, the ones behind /api/<view> (queries.VIEWS lists them all).

Must not: draw (no Dash, no plotly) or import anything under ui/.
"""
