"""Write a Report to RUN/analysis/: report.json, report.md, findings.parquet, critical_path.parquet and work.parquet.

Must not: compute anything (the engine does; the critical path comes from analyzers/critical_path.py,
which computed it for the summary and keeps it per run) or print (the CLI does). The engine takes
each rank's rows of critical_path.parquet and work.parquet (`rank_parts`) while that rank's
analysis still holds them: those caches keep a few ranks only, and computing the path again for
each of a thousand ranks would cost as much as the analysis.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from .model import Report
from .render import markdown


def report_json(report: Report) -> str:
    """report.json's text: the report's content (`Report.content`; its findings encoded from their
    dataclasses, not copied into dicts first), an indent of one space, non-ASCII characters escaped
    as the standard library escapes them, a value JSON has no type for as its str(). Encoded by
    msgspec: the standard library's indented encoder is pure Python (2 s of a 256-rank analysis,
    3.7 s with the findings' copy). Its numbers read the same (1e16, not 1e+16); a non-finite one
    is null."""
    import msgspec

    return _ascii_escaped(msgspec.json.format(msgspec.json.encode(report.content(), enc_hook=str), indent=1))


def _ascii_escaped(utf8: bytes) -> str:
    """JSON text (UTF-8) with its non-ASCII characters escaped as the standard library's `json.dumps`
    escapes them: \\u and four lowercase hex digits, a surrogate pair beyond the BMP. Python's
    `backslashreplace` does most of it in C (a regular expression over the 17 MB report of 256
    ranks took 0.15 s): it writes \\uXXXX as JSON does, but \\xXX for U+0080-U+00FF and \\UXXXXXXXX
    beyond the BMP, which are rewritten. A backslash of the text is already escaped (\\\\) in JSON, so
    the rewrite steps over escaped backslashes and never reads one as the start of an escape. At
    most two copies of the text are alive at once (a report of 1,024 ranks is 70 MB)."""
    if utf8.isascii():
        return utf8.decode("ascii")
    text = utf8.decode()
    del utf8
    escaped = text.encode("ascii", "backslashreplace")
    del text
    out = escaped.decode("ascii")
    del escaped
    if "\\x" in out or "\\U" in out:
        out = _PYTHON_ESCAPE.sub(_json_escape, out)
    return out


_PYTHON_ESCAPE = re.compile(r"\\(?:(\\)|x([0-9a-f]{2})|U([0-9a-f]{8}))")


def _json_escape(m: re.Match) -> str:
    if m.group(1):  # an escaped backslash: kept
        return m.group()
    if m.group(2):
        return "\\u00" + m.group(2)
    c = int(m.group(3), 16) - 0x10000
    return f"\\u{0xd800 + (c >> 10):04x}\\u{0xdc00 + (c & 0x3ff):04x}"


def findings_table(report: Report) -> pa.Table:
    """One row per finding, flat columns (evidence values as JSON text) so plain Parquet readers see it."""
    rows = []
    for rank_order, f in enumerate(report.findings, 1):
        loc = f.location
        rows.append({
            "rank_order": rank_order, "rule_id": f.rule_id, "title": f.title, "category": f.category, "severity": f.severity,
            "impact_ns": f.impact_ns, "impact_share": f.impact_share, "saving_bound_ns": f.saving_bound_ns,
            "rank": loc.rank, "device": loc.device, "steps": [int(s) for s in loc.steps], "op": loc.op, "kernel": loc.kernel,
            "source": loc.source, "module_path": loc.module_path, "evidence_sql": f.evidence.sql,
            "sample_event_ids": f.evidence.sample_event_ids, "evidence_values": json.dumps(f.evidence.values, default=str),
            "recommendation": f.recommendation, "confidence": f.confidence,
        })
    schema = pa.schema([("rank_order", pa.int32()), ("rule_id", pa.string()), ("title", pa.string()), ("category", pa.string()),
                        ("severity", pa.string()), ("impact_ns", pa.int64()), ("impact_share", pa.float64()),
                        ("saving_bound_ns", pa.int64()), ("rank", pa.int32()), ("device", pa.int32()), ("steps", pa.list_(pa.int64())),
                        ("op", pa.string()), ("kernel", pa.string()), ("source", pa.string()), ("module_path", pa.string()),
                        ("evidence_sql", pa.string()), ("sample_event_ids", pa.list_(pa.int64())), ("evidence_values", pa.string()),
                        ("recommendation", pa.string()), ("confidence", pa.float64())])
    return pa.Table.from_pylist(rows, schema=schema)


def _atomic_write(path: Path, write) -> None:
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:8]}"
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_outputs(report: Report, out_dir: Path, run=None) -> Path:
    """Write the report's files into `out_dir`; when it is RUN/analysis, also the run's
    critical_path.parquet and work.parquet, read on `run` (the open run, views over every rank)
    or on a connection of their own when None."""
    out_dir.mkdir(parents=True, exist_ok=True)

    def tables() -> None:
        from ..store import open_run

        parts = report.rank_parts
        with contextlib.nullcontext(run) if run is not None else open_run(out_dir.parent) as opened:  # one connection for both tables
            # the ranks the report analysed (metrics.ranks: those with events), else asked again (a scan
            # of every rank's file: 0.05-0.35 s on 256 ranks)
            ranks = [int(s["rank"]) for s in report.summary.get("ranks", [])] if run is not None else None
            if ranks is None:
                ranks = [r for (r,) in opened.sql("SELECT DISTINCT rank FROM events ORDER BY 1").fetchall()]
            _atomic_write(out_dir / "critical_path.parquet", lambda p: _write_rows(_critical_path(opened, ranks, parts), p))
            _atomic_write(out_dir / "work.parquet", lambda p: _write_rows(_work(opened, ranks, parts), p))

    # the run's tables (out_dir is RUN/analysis) on a thread of their own, while this one renders the
    # report: their Parquet encoding runs outside the GIL (256 ranks: 0.4 s beside report.json's 0.34 s)
    with ThreadPoolExecutor(1, thread_name_prefix="nx-outputs") as pool:
        written = pool.submit(tables) if (out_dir.parent / "manifest.json").exists() else None
        _atomic_write(out_dir / "report.json", lambda p: p.write_text(report_json(report)))
        _atomic_write(out_dir / "report.md", lambda p: p.write_text(markdown(report)))
        _atomic_write(out_dir / "findings.parquet", lambda p: pq.write_table(findings_table(report), p))
        if written is not None:
            written.result()
    return out_dir


def _write_rows(table: pa.Table, path: Path) -> None:
    """A table of rows (critical_path.parquet, work.parquet) as Parquet, dictionary-encoded in its
    text columns only: the integer columns (ids, times) have nearly as many values as rows, and
    building their dictionaries took 0.19 of 0.45 s of CPU writing a 1.5M-row path (files 3% larger)."""
    pq.write_table(table, path, use_dictionary=[f.name for f in table.schema if pa.types.is_string(f.type)])


def rank_parts(run, rank: int, compress: bool = True) -> dict[str, bytes | pa.Table]:
    """A rank's rows of critical_path.parquet and work.parquet ({"critical_path", "work"}), as
    zstd-compressed Arrow IPC streams (about 60 KB for a rank of 5k events), on `run`'s views
    (over that rank, or every rank): what the rank's analysis just computed (critical_path.path_of
    and utilisation.rank_work keep it), so this costs a conversion, not a computation. With
    `compress=False` (a run of one rank, whose rows are written next anyway) the Arrow tables
    themselves: the stream's compression and reading back cost 0.17 s of CPU a 366k-row path."""
    from .critical_path import path_of
    from .utilisation import rank_work, work_table

    keep = _ipc if compress else (lambda table: table)
    return {"critical_path": keep(path_of(run, rank).table()),
            "work": keep(work_table(rank_work(run, rank), rank, _WORK_SCHEMA))}


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, table.schema, options=ipc.IpcWriteOptions(compression="zstd")) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _kept(parts: dict[int, dict[str, bytes | pa.Table]] | None, ranks: list[int], name: str) -> list[pa.Table] | None:
    """The tables `rank_parts` kept for every rank of `ranks`, in order; None when any is missing."""
    if not parts or any(name not in parts.get(r, {}) for r in ranks):
        return None
    return [t if isinstance(t := parts[r][name], pa.Table) else ipc.open_stream(t).read_all() for r in ranks]


def _critical_path(run, ranks: list[int], parts: dict | None = None) -> pa.Table:
    """The critical path of every step of every rank (docs/METRICS.md "Critical path") of the open
    `run` (`ranks`: those its events hold): the tables `parts` kept when it has every rank, else
    each rank's path on views over its partition."""
    from .critical_path import path_table, with_collective_waits

    tables = _kept(parts, ranks, "critical_path")
    if tables is None:
        if len(ranks) <= 1:
            return path_table(run)
        tables = []
        for rank in ranks:  # each rank on views over its own partition: cost grows with events, not ranks x events
            with run.with_ranks([rank]) as one:
                tables.append(path_table(one))
    table = pa.concat_tables(tables) if tables else path_table(run)
    return with_collective_waits(run, table) if len(ranks) > 1 else table


_WORK_SCHEMA = pa.schema([("rank", pa.int32()), ("event_id", pa.int64()), ("kind", pa.string()), ("name", pa.string()),
                          ("op_event_id", pa.int64()), ("step", pa.int64()), ("source_frame_id", pa.int64()), ("dur_ns", pa.int64()),
                          ("flops", pa.float64()), ("bytes", pa.float64()), ("dtype", pa.string()), ("how", pa.string())])


def _work(run, ranks: list[int], parts: dict | None = None) -> pa.Table:
    """FLOPs and bytes per counted operator and per kernel (docs/METRICS.md "Utilisation") of the
    open `run` (`ranks`: those its events hold): the tables `parts` kept when it has every rank,
    else from the per-rank work the summary already computed (utilisation.rank_work keeps it per analysis)."""
    from .utilisation import WORK_COLUMNS, rank_work, work_table

    assert tuple(_WORK_SCHEMA.names) == WORK_COLUMNS
    tables = _kept(parts, ranks, "work")
    if tables is None:
        tables = []
        for rank in ranks:
            with run.with_ranks([rank]) as one:
                tables.append(work_table(rank_work(one, rank), rank, _WORK_SCHEMA))
    return pa.concat_tables(tables) if tables else _WORK_SCHEMA.empty_table()
