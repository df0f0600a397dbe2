"""Small helpers shared by rules (private: may change)."""

from __future__ import annotations


from ...store import sql_literal as q  # noqa: F401  (rules write q(...) for a SQL string literal)


def ms(ns: float | int | None) -> str:
    return "n/a" if ns is None else f"{ns / 1e6:.2f} ms"


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def row(run, sql: str) -> dict:
    rel = run.sql(sql)
    cols = [d[0] for d in rel.description]
    r = rel.fetchone()
    return dict(zip(cols, r)) if r else {c: None for c in cols}


def rows(run, sql: str) -> list[dict]:
    rel = run.sql(sql)
    cols = [d[0] for d in rel.description]
    return [dict(zip(cols, r)) for r in rel.fetchall()]
