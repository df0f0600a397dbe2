"""Fuzzing run directories (issue 40.3, 40.4): hostile manifests and partitions, built with hypothesis.

A small run with several ranks, devices and steps is imported once; each example copies it and
changes one thing, the way a hand edit or another tool would:

- the manifest: any of its values (at any depth) replaced by a hostile one (numbers past int64,
  true for a number, text, lists for objects, nesting), or the whole document replaced;
- a partition (`rank=<r>/<table>.parquet`): a column dropped, cast to another type, or filled with
  values at the int64 (or int32) edge.

For every example, opening the run either raises a NeuronExplorerError whose message is one line
naming the manifest or the partition (the CLI prints it, exit 2), or `info`, `analyze` (and its text
and JSON), `export --chrome` and a sandboxed query all work. The inputs tried per kind are counted
(`test_the_fuzzing_counts_its_inputs`). Bounded and derandomized: the same examples every run.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neuron_explorer import schema
from neuron_explorer.analyzers.engine import analyze
from neuron_explorer.analyzers.outputs import report_json
from neuron_explorer.analyzers.render import text
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.errors import NeuronExplorerError
from neuron_explorer.export import export_chrome
from neuron_explorer.info import render_info, run_info
from neuron_explorer.store import open_run

from .conftest import X, write_trace
from .test_fuzz_import import EDGE_INTS, HOSTILE

pytestmark = pytest.mark.slow  # tier: hypothesis fuzzing over run directories

FUZZ = settings(max_examples=30, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
COUNTS: dict[str, dict[str, int]] = {"manifest": {}, "partition": {}}


def _rank_trace(root: Path, rank: int) -> Path:
    events = [X("ProfilerStep#1", "user_annotation", 0, 500), X("ProfilerStep#2", "user_annotation", 500, 500)]
    for i in range(4):
        events += [X("aten::mm", "cpu_op", 10 + 200 * i, 80, **{"External id": i + 1}),
                   X("cudaLaunchKernel", "cuda_runtime", 20 + 200 * i, 10, correlation=100 + i, **{"External id": i + 1}),
                   X("ampere_sgemm", "kernel", 40 + 200 * i, 60, pid=0, tid=7, correlation=100 + i, device=0, stream=7,
                     **{"External id": i + 1})]
    return write_trace(root / f"rank{rank}.json", events, distributedInfo={"rank": rank, "world_size": 2},
                       deviceProperties=[{"id": 0, "name": "NVIDIA A100"}])


@pytest.fixture(scope="module")
def base_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fuzz-runs")
    traces = root / "traces"
    for rank in (0, 1):
        _rank_trace(traces, rank)
    return import_traces(traces, root / "base", command=["fuzz"]).run_dir


def _paths(obj, path=()):
    yield path
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, path + (i,))


def _replace(obj, path, value):
    if not path:
        return value
    obj[path[0]] = _replace(obj[path[0]], path[1:], value)
    return obj


def check_run(run: Path, named: list[Path]) -> str:
    """Open and use `run`: every command works, or the error is one line naming one of `named`."""
    try:
        render_info(run_info(run))
        report = analyze(run, write=False)
        text(report)
        json.loads(report_json(report))
        export_chrome(run, run.parent / "exported")  # a directory: one file per rank
        with open_run(run) as r:
            r.sql("SELECT count(*), sum(dur_ns) FROM events").fetchall()
    except NeuronExplorerError as e:
        message = f"error: {e}"
        assert "\n" not in message, message
        assert any(str(p) in message for p in named), message
        return "refused"
    return "read"


@FUZZ
@given(data=st.data())
def test_hostile_manifests_open_or_fail_in_one_line(base_run, data):
    manifest = json.loads((base_run / "manifest.json").read_text())
    if data.draw(st.integers(0, 9)) == 0:
        edited = data.draw(HOSTILE)
    else:
        path = data.draw(st.sampled_from(list(_paths(manifest))[1:]))
        edited = _replace(manifest, path, data.draw(HOSTILE))
    tmp = Path(tempfile.mkdtemp(prefix="nx-fuzz-run-"))
    try:
        run = tmp / "run"
        shutil.copytree(base_run, run)
        (run / "manifest.json").write_text(json.dumps(edited))
        outcome = check_run(run, [run / "manifest.json"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    COUNTS["manifest"][outcome] = COUNTS["manifest"].get(outcome, 0) + 1


def _edge(t: pa.DataType, n: int, draw) -> pa.Array:
    values = [draw(st.sampled_from(EDGE_INTS)) for _ in range(n)]
    bits = 31 if t == pa.int32() else 63
    return pa.array([max(-(2**bits), min(2**bits - 1, v)) for v in values], t)


@FUZZ
@given(data=st.data())
def test_hostile_partitions_open_or_fail_in_one_line(base_run, data):
    table = data.draw(st.sampled_from([t for t in schema.RANK_TABLES if (base_run / "rank=0" / t.file).exists()]))
    rank = data.draw(st.sampled_from([0, 1]))
    tmp = Path(tempfile.mkdtemp(prefix="nx-fuzz-run-"))
    try:
        run = tmp / "run"
        shutil.copytree(base_run, run)
        path = run / f"rank={rank}" / table.file
        t = pq.read_table(path)
        col = data.draw(st.sampled_from(t.column_names))
        how = data.draw(st.sampled_from(["drop", "cast", "edge"]))
        i = t.schema.get_field_index(col)
        if how == "drop":
            t = t.remove_column(i)
        elif how == "cast":
            to = data.draw(st.sampled_from([pa.string(), pa.float64(), pa.int32(), pa.int64(), pa.bool_(), pa.int8()]))
            try:
                t = t.set_column(i, col, pc.cast(t[col], to, safe=False))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                t = t.set_column(i, col, pa.nulls(len(t), to))
        elif pa.types.is_integer(t.schema.field(col).type):
            t = t.set_column(i, col, _edge(t.schema.field(col).type, len(t), data.draw))
        pq.write_table(t, path)
        outcome = check_run(run, [path])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    COUNTS["partition"][outcome] = COUNTS["partition"].get(outcome, 0) + 1


def test_the_fuzzing_counts_its_inputs():
    """Both kinds reach both outcomes (all refused would test little). Runs after the fuzz tests."""
    for kind, seen in COUNTS.items():
        if not seen:
            pytest.skip("the fuzz tests did not run in this session")
        print(f"{kind}: {sum(seen.values())} inputs tried, {seen}")
        assert sum(seen.values()) >= FUZZ.max_examples // 2, (kind, seen)
        assert seen.get("read", 0) >= 3 and seen.get("refused", 0) >= 3, (kind, seen)
