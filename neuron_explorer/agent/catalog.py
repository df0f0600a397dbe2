"""What an agent can query: every view of a run with its columns, types, units and docs.

The stored tables come from the run's own `schema_fields` table (so the description matches the
run, even one written by another version) and fall back to schema.py, which also describes the
views that `open_run` derives (steps, ranks, devices); a test checks those descriptions against
the views themselves. Plain data in, plain data out; nothing is written.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from .. import schema
from ..store import read_manifest, resolve_run


def describe(run: Path | str | None = None) -> list[dict]:
    """Tables/views with their columns: [{table, doc, columns: [{name, type, unit, doc}]}].

    With a run, the stored tables are those of the run's schema_fields; without one, schema.py's.
    """
    fields: list[dict] | None = None
    if run is not None:
        run = resolve_run(run)  # a trace is imported into the cache first
        read_manifest(run)  # a bad path fails here with a one-line InputError
        path = Path(run) / schema.SCHEMA_FIELDS.file
        if path.is_file():
            fields = pq.read_table(path).to_pylist()
    out: list[dict] = []
    if fields is None:
        for t in schema.RANK_TABLES:
            out.append({"table": t.name, "doc": t.doc,
                        "columns": [{"name": c.name, "type": c.type, "unit": c.unit, "doc": c.doc} for c in t.columns]})
    else:
        by_table: dict[str, list[dict]] = {}
        for f in fields:
            by_table.setdefault(f["table_name"], []).append(
                {"name": f["column_name"], "type": f["type"], "unit": f["unit"] or "", "doc": f["doc"] or ""})
        for name, cols in by_table.items():
            known = schema.TABLES.get(name)
            out.append({"table": name, "doc": known.doc if known else "", "columns": cols})
    for v in schema.DERIVED_VIEWS:
        out.append({"table": v.name, "doc": v.doc,
                    "columns": [{"name": c.name, "type": c.type, "unit": c.unit, "doc": c.doc} for c in v.columns]})
    sf = schema.SCHEMA_FIELDS
    out.append({"table": sf.name, "doc": sf.doc,
                "columns": [{"name": c.name, "type": c.type, "unit": c.unit, "doc": c.doc} for c in sf.columns]})
    return out


def render_text(tables: list[dict]) -> str:
    """A compact plain-text listing (few tokens, one column per line)."""
    lines = ["Views you can query (neuron-explorer query RUN \"SELECT ...\"); times and durations are int64 ns."]
    for t in tables:
        lines += ["", f"{t['table']}: {t['doc']}"]
        width = max((len(c["name"]) for c in t["columns"]), default=0)
        for c in t["columns"]:
            unit = f" [{c['unit']}]" if c["unit"] else ""
            lines.append(f"  {c['name']:<{width}}  {c['type']}{unit}  {c['doc']}")
    return "\n".join(lines) + "\n"
