"""The run format: self-described, versioned, generated docs, readable by plain DuckDB and pandas."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq

from neuron_explorer import schema
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import REPO, TRACES


def test_schema_doc_is_generated_from_schema_py():
    doc = (REPO / "docs" / "SCHEMA.md").read_text()
    assert doc == schema.markdown(), "docs/SCHEMA.md is stale: python -m neuron_explorer.schema > docs/SCHEMA.md"


def test_every_parquet_file_carries_the_format_version_and_matches_the_schema(tmp_path: Path):
    run = import_traces(TRACES / "multirank_128", tmp_path / "run").run_dir
    files = list(run.rglob("*.parquet"))
    assert len(files) == 2 * len(schema.RANK_TABLES) + 1
    for f in files:
        meta = pq.read_metadata(f).metadata
        assert meta[schema.FORMAT_VERSION_KEY] == str(schema.FORMAT_VERSION).encode(), f
        table = pq.read_table(f)
        spec = schema.TABLES[meta[b"neuron_explorer.table"].decode()]
        assert table.column_names == spec.column_names
        assert [str(t) for t in table.schema.types] == [str(c.arrow_type) for c in spec.columns]


def test_a_run_reads_with_plain_duckdb_and_pandas_without_the_package(tmp_path: Path):
    run = import_traces(TRACES / "cuda_alexnet_train.json.gz", tmp_path / "run").run_dir
    script = textwrap.dedent(f"""
        import sys, duckdb, pandas
        run = {str(run)!r}
        kinds = dict(duckdb.sql(f"SELECT kind, count(*) FROM '{{run}}/rank=*/events.parquet' GROUP BY 1").fetchall())
        assert kinds["kernel"] == 79 and kinds["cpu_op"] == 359, kinds
        per_kernel = duckdb.sql(f'''
            SELECT o.name, sum(k.dur_ns) FROM '{{run}}/rank=*/events.parquet' k
            JOIN '{{run}}/rank=*/events.parquet' o ON k.top_op_id = o.event_id
            WHERE k.kind = 'kernel' GROUP BY 1''').fetchall()
        assert per_kernel, "kernels join to their top-level operators"
        fields = duckdb.sql(f"SELECT table_name, column_name, unit, doc FROM '{{run}}/schema_fields.parquet'").fetchall()
        assert ("events", "ts_ns", "ns") in [f[:3] for f in fields]
        df = pandas.read_parquet(f"{{run}}/rank=0/events.parquet")
        assert str(df["ts_ns"].dtype) == "int64" and len(df) == sum(kinds.values())
        assert "neuron_explorer" not in sys.modules
        print("ok")
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr


def test_rows_are_sorted_by_time(tmp_path: Path):
    run = import_traces(TRACES / "cuda_nccl_rank0_of_2.json.gz", tmp_path / "run").run_dir
    ts = pq.read_table(run / "rank=0" / "events.parquet", columns=["ts_ns"])["ts_ns"].to_numpy()
    assert (ts[1:] >= ts[:-1]).all()
