"""The importer's structure contract (issue 12):

- store.py imports no collector (directly, or through any module it imports): the layers point
  one way, and a trace becomes a run through the resolver the package registers;
- every Kineto spelling lives in collectors/kineto_names.py: no other module of the package spells
  one as a literal, and the C++ live converter's copies equal it;
- the raw tables of a rank have one schema (collectors/raw.py), checked where build_rank starts,
  for the JSON importer and the live collector alike;
- build_rank reads no source file: the collector fills the frames' `code` (collectors/sources.py).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pyarrow as pa
import pytest

import neuron_explorer
from neuron_explorer import open_run, schema
from neuron_explorer.collectors import kineto_names as kn
from neuron_explorer.collectors import raw
from neuron_explorer.collectors._packed_text import PackedText
from neuron_explorer.collectors.build import build_rank
from neuron_explorer.collectors.trace_rank import decode_rank

from .conftest import X, write_trace

PACKAGE = Path(neuron_explorer.__file__).parent


def _imports_of(module: str, lazy: bool = True) -> set[str]:
    """Every neuron_explorer module that `module`'s source imports: at top level, and with `lazy`
    also inside functions."""
    path = PACKAGE.joinpath(*module.split(".")[1:])
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree) if lazy else tree.body:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target] + [f"{target}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            if name.startswith("neuron_explorer") and _module_file(name):
                found.add(name)
    return found


def _module_file(name: str) -> bool:
    p = PACKAGE.joinpath(*name.split(".")[1:])
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def _closure(module: str, lazy: bool = True) -> set[str]:
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo += [i for i in _imports_of(m, lazy) if i != "neuron_explorer"]  # the package itself is the wiring
    return seen


def test_store_imports_no_collector():
    # nothing in store.py, not even inside a function
    assert sorted(m for m in _imports_of("neuron_explorer.store") if ".collectors" in m) == []
    # nor anything store.py loads when it is imported
    reached = _closure("neuron_explorer.store", lazy=False)
    assert "neuron_explorer.schema" in reached  # the walk follows imports
    assert sorted(m for m in reached if ".collectors" in m) == []


@pytest.mark.parametrize("module", ["store", "collectors.chrome_trace", "collectors._kineto_json", "collectors._json_read",
                                    "collectors._json_tables", "collectors._json_numbers", "collectors.build",
                                    "collectors._forest", "collectors.sources", "collectors.trace_rank",
                                    "collectors.rank_entry", "collectors.raw", "collectors.kineto_names",
                                    "collectors.trace_cache", "collectors._malloc", "collectors._packed_text"])
def test_the_importer_modules_import_in_one_direction(module):
    # (store's own lazy import of the notebook view is not the importer's: module-level imports for store)
    name = f"neuron_explorer.{module}"
    lazy = module != "store"
    reached = set().union(*(_closure(m, lazy) for m in _imports_of(name, lazy) if m != "neuron_explorer"))
    assert name not in reached  # no circle back to itself


def test_the_import_graph_check_sees_an_import_inside_a_function():
    # the walk must catch the kind of import that closed the circle before (inside a function)
    assert "neuron_explorer.collectors.chrome_trace" in _imports_of("neuron_explorer.collectors.trace_cache")
    assert "neuron_explorer.collectors.trace_cache" in _imports_of("neuron_explorer")


def test_open_run_still_takes_a_trace(tmp_path: Path):
    trace = write_trace(tmp_path / "t.json", [X("ProfilerStep#3", "user_annotation", 0, 100), X("aten::mm", "cpu_op", 10, 20)])
    with open_run(trace) as run:
        assert run.sql("SELECT name FROM events ORDER BY ts_ns").fetchall() == [("ProfilerStep#3",), ("aten::mm",)]
        assert run.path != trace and (run.path / "manifest.json").is_file()


_KINETO_LITERALS = {kn.MODULE_PREFIX, kn.MEMORY_EVENT_NAME, kn.EVALUATE_PREFIX, kn.COMPILED_REGION_PREFIX, kn.STREAM_SYNC,
                    kn.EVENT_SYNC, kn.SYNC_KIND_ARG, kn.WAIT_ON_STREAM_ARG, kn.CPU_INSTANT_CATEGORY,
                    kn.FORWARD_BACKWARD_FLOW, *kn.LAUNCH_FLOW_CATEGORIES, kn.EXTERNAL_ID_ARG, kn.PYTHON_ID_ARG,
                    kn.PYTHON_PARENT_ID_ARG, *kn.MEMORY_ARGS.values(), *kn.CATEGORY_KINDS} - set(schema.KINDS) - {"operator"}
# (a category that is also one of the run's kinds, 'kernel' or 'user_annotation', is the run's word
# there; 'operator' is an English word before it is old torch's category)
_NOT_YET: set[str] = set()
"""Modules not yet moved to kineto_names (none: analyzers/_path_index.py now reads the sync kinds
from kineto_names and what a sync call is from vocab.py)."""


def test_kineto_names_are_spelled_in_one_module():
    spelled = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "kineto_names.py" or str(path.relative_to(PACKAGE)) in _NOT_YET:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in _KINETO_LITERALS:
                spelled.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.value!r}")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and "ProfilerStep#(" in node.value:
                spelled.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.value!r}")
    assert spelled == []


_COLLECTOR_ONLY = {kn.CPU_OP_CATEGORY, kn.USER_ANNOTATION_CATEGORY, kn.PYTHON_FUNCTION_CATEGORY, kn.LAUNCH_FLOW,
                   kn.EXTERNAL_ID_ARG_OLD, kn.SEQUENCE_NUMBER, kn.INPUT_DIMS_ARG, kn.INPUT_TYPE_ARG, kn.FWD_THREAD_ARG,
                   kn.FLOPS_ARG, kn.CONTEXT_SYNC}
"""Spellings the collectors must take from kineto_names too, though elsewhere they are also the
run's words ('cpu_op', a kind) or analyzers still spell them (the args the FLOP counter reads)."""


def test_the_collectors_spell_no_kineto_name_themselves():
    # every spelling of the Kineto names, the run's words among them, including the pieces of an
    # f-string (args JSON written as text): '"Input Dims":' is the arg's name spelled again
    names = (_KINETO_LITERALS | _COLLECTOR_ONLY | set(kn.CATEGORY_KINDS)) - {"operator"}
    quoted = {f'"{n}"' for n in names}
    spelled = []
    for path in sorted((PACKAGE / "collectors").rglob("*.py")):
        if path.name == "kineto_names.py":
            continue
        tree = ast.parse(path.read_text())
        keys = {id(n.slice) for n in ast.walk(tree) if isinstance(n, ast.Subscript)}  # K["cpu_op"]: the run's kind
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in keys:
                continue
            if node.value in names or any(q in node.value for q in quoted):
                spelled.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.value!r}")
    assert spelled == []


def test_the_native_converter_spells_the_names_as_kineto_names():
    cpp = (PACKAGE / "collectors" / "native" / "live_convert.cpp").read_text()
    assert re.search(r'kModulePrefix = "([^"]*)"', cpp).group(1) == kn.MODULE_PREFIX
    assert re.search(r'memory_name = "([^"]*)"', cpp).group(1) == kn.MEMORY_EVENT_NAME
    assert re.search(r'flow_cat\.append\(f\.fwdbwd \? "([^"]*)" : "([^"]*)"\)', cpp).groups() == (kn.FORWARD_BACKWARD_FLOW, kn.LAUNCH_FLOW)
    assert re.search(r'out\.assign\("\{\\"([^\\]*)\\":"\)', cpp).group(1) == kn.EXTERNAL_ID_ARG
    assert re.search(r'code_of\("([a-z_]*)"\)', cpp).group(1) == kn.PYTHON_FUNCTION_CATEGORY
    # the operator args written as the JSON trace does
    assert re.search(r'out \+= ",\\"([^\\]*)\\":\[";\n.*?out \+= "\],\\"([^\\]*)\\":\["', cpp, re.S).groups() == (
        kn.INPUT_DIMS_ARG, kn.INPUT_TYPE_ARG)
    assert re.search(r'out \+= ",\\"([^\\]*)\\":";\n.*?out \+= ",\\"([^\\]*)\\":";\n.*?out \+= ",\\"([^\\]*)\\":"',
                     cpp, re.S).groups() == (kn.SEQUENCE_NUMBER, kn.FWD_THREAD_ARG, kn.FLOPS_ARG)
    assert kn.LAUNCH_FLOW in kn.LAUNCH_FLOW_CATEGORIES


def _raw_of(tmp_path: Path):
    events = [X("ProfilerStep#1", "user_annotation", 0, 100), X("aten::mm", "cpu_op", 10, 20, **{"External id": 4}),
              {"ph": "i", "name": "[memory]", "cat": "cpu_instant_event", "pid": 1, "tid": 1, "ts": 12, "s": "t",
               "args": {"Bytes": 512, "Addr": 1, "Device Type": 0, "Device Id": -1, "Total Allocated": 512, "Total Reserved": 0}},
              {"ph": "C", "name": "util", "pid": 1, "ts": 5, "args": {"busy": 0.5}},
              {"ph": "s", "id": 1, "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1, "ts": 15}]
    return decode_rank(write_trace(tmp_path / "t.json", events))[0]


def test_the_importer_hands_over_the_raw_schema(tmp_path: Path):
    r = _raw_of(tmp_path)
    raw.check_raw_rank(r)  # what build_rank does first
    assert (r.events.num_rows, r.memory.num_rows, r.counters.num_rows, r.flows.num_rows) == (2, 1, 1, 1)
    for table, raw_schema in ((r.events, raw.RAW_EVENTS), (r.flows, raw.RAW_FLOWS), (r.memory, raw.RAW_MEMORY), (r.counters, raw.RAW_COUNTERS)):
        assert {f.name: f.type for f in table.schema}.items() <= {f.name: f.type for f in raw_schema}.items()


def test_the_live_converter_builds_on_the_raw_schema():
    # its tables are made with these schemas (each recording then passes build_rank's check: test_collector.py)
    from neuron_explorer.collectors import _live_convert

    cycle = _live_convert.empty_cycle()
    assert (cycle.events.schema, cycle.flows.schema, cycle.memory.schema) == (raw.RAW_EVENTS, raw.RAW_FLOWS, raw.RAW_MEMORY)
    assert _live_convert.empty_counters().schema == raw.RAW_COUNTERS
    assert _live_convert.RAW_EVENTS is raw.RAW_EVENTS


@pytest.mark.parametrize("table, column, value, message", [
    ("events", "ts_ns", pa.array([0.5, 1.5], pa.float64()), "raw events table: ts_ns is double, not int64"),
    ("events", "tid_text", None, "raw events table: missing tid_text"),
    ("memory", "bytes", pa.array([512], pa.int32()), "raw memory table: bytes is int32, not int64"),
    ("flows", "extra", pa.array([1], pa.int64()), "raw flows table: unknown extra"),
])
def test_build_rank_refuses_tables_off_the_raw_schema(tmp_path: Path, table, column, value, message):
    r = _raw_of(tmp_path)
    t = getattr(r, table)
    if value is None:
        t = t.drop_columns([column])
    elif column in t.column_names:
        t = t.set_column(t.schema.get_field_index(column), column, value)
    else:
        t = t.append_column(column, value)
    setattr(r, table, t)
    with pytest.raises(raw.RawTableError) as e:
        build_rank(r)
    assert str(e.value) == message


def test_build_rank_refuses_packed_args_that_do_not_match_the_events(tmp_path: Path):
    # the importer holds the args packed, apart from the events table: one per event row, and no args column
    r = _raw_of(tmp_path)
    assert r.packed_args is not None and "args" not in r.events.column_names
    args = r.packed_args
    r.packed_args = PackedText.pack(pa.array(['{"a": 1}'], pa.string()))
    with pytest.raises(raw.RawTableError) as e:
        build_rank(r)
    assert str(e.value) == "raw events table: 1 packed args for 2 rows"
    r.packed_args = args
    r.events = r.events.append_column("args", pa.array([None, None], pa.string()))
    with pytest.raises(raw.RawTableError) as e:
        build_rank(r)
    assert str(e.value) == "raw events table: 2 packed args for 2 rows, and an args column too"


def test_build_rank_refuses_a_phase_off_the_raw_schema(tmp_path: Path):
    r = _raw_of(tmp_path)
    phase = pa.array(["X", "B"], pa.string()).dictionary_encode()
    r.events = r.events.set_column(r.events.schema.get_field_index("phase"), "phase", phase)
    with pytest.raises(raw.RawTableError, match=r"phases \['B'\]"):
        build_rank(r)


def test_build_reads_no_source_file_the_collector_does(tmp_path: Path):
    # build_rank leaves the frames' code null; the importer reads the def line's text (sources.with_code)
    script = tmp_path / "train.py"
    script.write_text("import torch\ndef step(x):  # the def line\n    return x\n")
    trace = write_trace(tmp_path / "t.json", [X("ProfilerStep#1", "user_annotation", 0, 100),
                                              X(f"{script}(2): step", kn.PYTHON_FUNCTION_CATEGORY, 10, 20)])
    built = build_rank(decode_rank(trace)[0])
    frames = built.tables["frames"]
    assert frames["file"].to_pylist() == [str(script)] and frames["code"].to_pylist() == [None]
    from neuron_explorer.collectors import sources

    assert sources.with_code(frames)["code"].to_pylist() == ["def step(x):  # the def line"]
    assert sources.with_code(frames).schema == frames.schema
    with open_run(trace) as run:
        assert run.sql("SELECT file, line, code FROM frames").fetchall() == [(str(script), 2, "def step(x):  # the def line")]


def test_ids_and_durations_past_int32_keep_every_digit(tmp_path):
    """The build holds id and duration columns as int32 where every value fits (build.narrow); a
    trace whose thread ids, correlations, External ids or durations pass 2^31 (macOS-style thread
    ids, a 3 s kernel) keeps them whole, and the files' types are int64 either way."""
    from neuron_explorer.collectors.chrome_trace import import_traces

    from .conftest import X, write_trace

    big_tid, big_corr, big_ext = 2**40 + 7, 2**33 + 1, 2**35 + 3
    events = [X("aten::mm", "cpu_op", 0, 3_000_000, tid=big_tid, **{"External id": big_ext}),
              X("cudaLaunchKernel", "cuda_runtime", 10, 5, tid=big_tid, correlation=big_corr, **{"External id": big_ext}),
              X("gemm", "kernel", 20, 2_500_000, pid=0, tid=7, correlation=big_corr, stream=7, device=0),
              X("aten::add", "cpu_op", 3_000_100, 10, tid=3)]  # small values beside them
    run_dir = import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir
    with open_run(run_dir) as run:
        got = dict((r[0], r[1:]) for r in run.sql(
            "SELECT name, tid, correlation, external_id, dur_ns, stream FROM events ORDER BY ts_ns").fetchall())
    import pyarrow.parquet as pq

    schema_ = pq.read_schema(run_dir / "rank=0" / "events.parquet")
    types = {c: str(schema_.field(c).type) for c in ("tid", "correlation", "external_id", "dur_ns", "stream", "pid", "step", "self_ns")}
    assert got["aten::mm"] == (big_tid, None, big_ext, 3_000_000_000, None)
    assert got["cudaLaunchKernel"][:3] == (big_tid, big_corr, big_ext)
    assert got["gemm"][1:] == (big_corr, None, 2_500_000_000, 7) and got["aten::add"][0] == 3
    assert set(types.values()) == {"int64"}
    import numpy as np

    from neuron_explorer.collectors.build import narrow

    assert narrow(np.array([2**31 - 1, -(2**31)])).dtype == np.int32 and narrow(np.array([2**31, 0])).dtype == np.int64
