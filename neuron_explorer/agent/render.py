"""Render a sandboxed QueryResult as a text table, JSON (the envelope) or CSV. Pure functions."""

from __future__ import annotations

import csv
import io
import json

from .sandbox import QueryResult

FORMATS = ("table", "json", "csv")


def _cell(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, (list, dict)):
        return json.dumps(v)
    return str(v)


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _distinct_width(values: list[str], max_width: int) -> int:
    """The narrowest width, at least `max_width`, at which cutting keeps different values different:
    kernel names that share their first 60 characters would otherwise print identically. Cut at
    width w, a value keeps w-1 characters; two values stay apart when that passes their common prefix."""
    longs = sorted({v for v in values if len(v) > max_width})
    return max([max_width] + [_common_prefix(a, b) + 2 for a, b in zip(longs, longs[1:])])


def render_table(result: QueryResult, max_width: int = 60) -> str:
    """Aligned columns; long cells are shortened for the screen (use json/csv for full values), each
    column only as far as keeps its different values apart."""
    def short(s: str, width: int) -> str:
        return s if len(s) <= width else s[: width - 1] + "…"

    cells = [[_cell(v).replace("\n", " ") for v in row] for row in result.rows]
    col_widths = [_distinct_width([r[i] for r in cells], max_width) for i in range(len(result.columns))]
    head = [short(c.replace("\n", " "), max_width) for c in result.columns]
    body = [[short(v, w) for v, w in zip(row, col_widths)] for row in cells]
    widths = [max([len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(head)]
    right = [t.upper().split("(")[0] in {"BIGINT", "INTEGER", "DOUBLE", "HUGEINT", "SMALLINT", "TINYINT", "FLOAT", "DECIMAL", "UBIGINT"}
             for t in result.types] if result.types else [False] * len(head)
    fmt = lambda cells: "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)).rstrip()  # noqa: E731
    lines = [fmt(head), "  ".join("-" * w for w in widths)]
    lines += [fmt(r) for r in body]
    tail = f"({result.row_count} row{'s' if result.row_count != 1 else ''}"
    tail += ", truncated: more rows or longer values exist; raise --max-rows or narrow the query)" if result.truncated else ")"
    lines.append(tail)
    return "\n".join(lines) + "\n"


def render_json(result: QueryResult) -> str:
    return json.dumps(result.to_dict(), ensure_ascii=False) + "\n"


def render_csv(result: QueryResult) -> str:
    """RFC 4180 CSV with a header; NULL is an empty field. Truncation is not marked in CSV (see --format json)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(result.columns)
    for row in result.rows:
        w.writerow(["" if v is None else (json.dumps(v) if isinstance(v, (list, dict)) else v) for v in row])
    return buf.getvalue()


def render(result: QueryResult, fmt: str) -> str:
    return {"table": render_table, "json": render_json, "csv": render_csv}[fmt](result)
