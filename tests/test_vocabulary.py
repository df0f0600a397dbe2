"""One vocabulary: no module outside neuron_explorer/vocab.py spells an idea of the analysis itself.

The code's string literals (SQL text, name sets; not docstrings or comments) are searched for the
spellings of each idea that vocab.py defines. A new rule that writes `event_id = top_op_id` or its
own list of sync operators fails here, and says which fragment to use instead.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from neuron_explorer import vocab

PACKAGE = Path(vocab.__file__).parent

SPELLINGS = {
    "top-level operator (vocab.top_op / top_host_call)": re.compile(
        r"(?<![\w.])(?:(\w+)\.)?event_id\s*=\s*(?:coalesce\(\s*)?(?(1)\1\.)top_op_id"  # (e.)event_id = (e.)top_op_id, one alias
        r"|(?<![\w.])(?:(\w+)\.)?top_op_id\s*=\s*(?(2)\2\.)event_id\b"),  # a join to another alias is no spelling
    "device work (vocab.DEVICE_WORK_KINDS / device_work)": re.compile(r"""['"]kernel['"],\s*['"]memcpy['"],\s*['"]memset['"]"""),
    "communication (vocab.COMM_KERNEL_PATTERN / COMM_OP_PATTERN)": re.compile(r"(?i)nccl\|gloo|c10d::\|"),
    "sync operators (vocab.SYNC_OPS)": re.compile(r"^aten::(item|_local_scalar_dense|nonzero|is_nonzero)$"),
    "sync runtime calls (vocab.SYNC_CALL_PART / sync_call)": re.compile(r"^(cuda|hip)\w*Synchronize$|^Synchronize$"),
    "GEMM / convolution operators (vocab.GEMM_OPS / CONV_OPS)": re.compile(r"^aten::(mm|addmm|bmm|conv2d|convolution)$|'aten::(mm|addmm|conv2d)'"),
    "allocator calls (vocab.ALLOCATOR_CALL_PATTERN)": re.compile(r"^(cuda|hip)(Malloc|Free)"),
    "allocations and frees of the memory table (vocab.memory_allocation / memory_free)": re.compile(r"(?:^|[\s.])bytes\s*[<>]\s*0\b"),
    "copy direction (vocab.TO_HOST_COPY_PATTERN / PAGEABLE_TO_DEVICE_COPY_PATTERN)": re.compile(r"(?i)%(DtoH|HtoD|Pageable)%|\b(DtoH|HtoD)\|"),
    "a source line's key (vocab.line_key / line_key_sql)": re.compile(r"file\s*\|\|\s*':'\s*\|\|"),
    "kernel precision (vocab.FP32_KERNEL_PATTERN / LOWER_PRECISION_KERNEL_PATTERN, work_class)": re.compile(
        r"sgemm\||\|sgemm|bf16\|fp16|fp16\|bf16|h884\|"),
    "the operator device work is charged to (vocab.charged_top_op / charged_op / charged_at_capture)": re.compile(
        r"(?i)\bcapture_(top_)?op\s+IS\s+(NOT\s+)?NULL|coalesce\(\s*(\w+\.)?capture_(top_)?op\b"),
}

ALLOWED = {"vocab.py"}
"""The one home. Kineto's spellings (collectors/kineto_names.py) are a different thing: how a trace
names events, not what the analysis means by them."""


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """String constants of a module that are not docstrings, with their line numbers."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for i, stmt in enumerate(body):
                # a docstring, or an attribute docstring (a string statement after an assignment)
                if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
                    if i == 0 or isinstance(body[i - 1], (ast.Assign, ast.AnnAssign)):
                        docstrings.add(id(stmt.value))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def _modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name not in ALLOWED)


def test_no_module_spells_an_idea_of_the_vocabulary():
    found = []
    for path in _modules():
        for line, text in _code_strings(path):
            for idea, pattern in SPELLINGS.items():
                if pattern.search(text):
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: spells {idea}: {text.strip()[:80]!r}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize("idea", sorted(SPELLINGS))
def test_the_check_finds_each_spelling(idea, tmp_path):
    """The check is not blind: each idea's own definition, pasted into a module, is found."""
    samples = {
        "top-level operator": "SELECT 1 FROM events e WHERE e.kind = 'cpu_op' AND e.event_id = e.top_op_id",
        "device work": "kind IN ('kernel', 'memcpy', 'memset')",
        "communication": "(?i)(nccl|gloo|rccl)",
        "sync operators": "aten::item",
        "sync runtime calls": "cudaStreamSynchronize",
        "GEMM / convolution": "aten::addmm",
        "allocator calls": "hipFree",
        "allocations and frees": "SELECT sum(m.bytes) FROM memory m WHERE m.bytes > 0",
        "copy direction": "(name ILIKE '%DtoH%' AND step IS NOT NULL)",
        "a source line's key": "SELECT f.file || ':' || f.line AS source FROM frames f",
        "kernel precision": "(?i)(sgemm|f32|fp32)",
        "the operator device work is charged to": "SELECT coalesce(k.capture_top_op, o.name) FROM events k JOIN events o ON o.event_id = k.top_op_id",
    }
    text = next(v for k, v in samples.items() if idea.startswith(k))
    (tmp_path / "m.py").write_text(f'"""doc"""\nX = {text!r}\n')
    strings = [s for _, s in _code_strings(tmp_path / "m.py")]
    assert strings == [text]
    assert SPELLINGS[idea].search(text)


def test_fragments_select_what_they_name():
    """The fragments, run on a tiny events table, pick the rows their names promise."""
    import duckdb

    con = duckdb.connect()
    con.execute("CREATE TABLE events AS SELECT * FROM (VALUES "
                "(1, 'cpu_op', 'aten::linear', 1, NULL), (2, 'cpu_op', 'aten::addmm', 1, NULL), "
                "(3, 'runtime', 'cudaLaunchKernel', 1, NULL), (4, 'runtime', 'cudaStreamSynchronize', NULL, NULL), "
                "(5, 'kernel', 'ncclKernel_AllReduce_RING_LL_Sum_float', 1, 0), (6, 'kernel', 'sm80_xmma_gemm', 1, 0), "
                "(7, 'memcpy', 'Memcpy DtoH', 1, 0), (8, 'cpu_op', 'aten::item', 8, NULL), (9, 'runtime', 'hipFree', 8, NULL), "
                "(10, 'cpu_op', 'c10d::allreduce_', 10, NULL)"
                ") t(event_id, kind, name, top_op_id, device)")

    def ids(where):
        return [r[0] for r in con.execute(f"SELECT event_id FROM events e WHERE {where} ORDER BY 1").fetchall()]

    assert ids(vocab.top_op("e")) == [1, 8, 10]
    assert ids(vocab.top_host_call("e")) == [1, 4, 8, 10]
    assert ids(vocab.device_work("e")) == [5, 6, 7]
    assert ids(vocab.comm_kernel("e")) == [5]
    assert ids(vocab.comm_op("e")) == [10]
    assert ids(vocab.sync_call("e")) == [4]
    assert ids(vocab.sync_op("e")) == [8]
    assert ids(vocab.allocator_call("e")) == [9]
    def sizes(where):  # rows of a memory table: an allocation, a free, and a zero
        return [r[0] for r in con.execute(f"SELECT m.bytes FROM (VALUES (4096), (-4096), (0)) m(bytes) WHERE {where}").fetchall()]

    assert sizes(vocab.memory_allocation("m")) == [4096] and sizes(vocab.memory_free("m")) == [-4096]
    assert ids(vocab.op_in(vocab.GEMM_OPS, "e")) == [1, 2]
    assert ids(vocab.in_steps([], "e")) == []
    assert vocab.GEMM_KERNEL_RE.search("sm80_xmma_gemm") and not vocab.GEMM_KERNEL_RE.search("elementwise_kernel")
    assert vocab.is_comm_kernel_name("ncclDevKernel_AllGather") and not vocab.is_comm_kernel_name("gemm")


def test_a_step_set_selects_its_steps_as_ranges_or_a_list():
    """The steady steps (one run), a set in a few runs and one in many select exactly their steps,
    never a step between runs or an event outside any step; the usual case is written as a range
    a person can read in the evidence SQL."""
    import duckdb

    con = duckdb.connect()
    con.execute("CREATE TABLE events AS SELECT CASE WHEN i % 50 = 0 THEN NULL ELSE i % 40 END AS step FROM range(2000) t(i)")

    def steps(where):
        return sorted({r[0] for r in con.execute(f"SELECT step FROM events e WHERE {where}").fetchall()})

    steady = list(range(3, 31))
    assert vocab.in_steps(steady, "e") == "e.step BETWEEN 3 AND 30"
    assert steps(vocab.in_steps(steady, "e")) == steady
    few = [2, 3, 4, 9, 20, 21]
    assert vocab.in_steps(few) == "(step BETWEEN 2 AND 4 OR step = 9 OR step BETWEEN 20 AND 21)"
    assert steps(vocab.in_steps(few, "e")) == few
    many = list(range(1, 40, 3))  # 13 runs of one step
    assert "unnest" in vocab.in_steps(many)
    assert steps(vocab.in_steps(many, "e")) == many
    assert steps(vocab.in_steps([7, 5, 6, 5], "e")) == [5, 6, 7]  # unsorted, repeated
    assert steps(f"NOT {vocab.in_steps(few, 'e')}") == sorted(set(range(40)) - set(few))  # null steps: neither


def test_copy_direction_fragments_select_what_they_name():
    """Pageable host-to-device and device-to-host copies, by Kineto's and ROCm's names; a runtime call
    or a device-to-device copy is neither."""
    import duckdb

    con = duckdb.connect()
    con.execute("CREATE TABLE events AS SELECT * FROM (VALUES "
                "(1, 'memcpy', 'Memcpy HtoD (Pageable -> Device)'), (2, 'memcpy', 'Memcpy HtoD (Pinned -> Device)'), "
                "(3, 'memcpy', 'Memcpy DtoH (Device -> Pageable)'), (4, 'memcpy', 'CopyDeviceToHost'), "
                "(5, 'memcpy', 'Memcpy DtoD (Device -> Device)'), (6, 'runtime', 'cudaMemcpyAsync')) t(event_id, kind, name)")

    def ids(where):
        return [r[0] for r in con.execute(f"SELECT event_id FROM events e WHERE {where} ORDER BY 1").fetchall()]

    assert ids(vocab.pageable_to_device_copy("e")) == [1]
    assert ids(vocab.to_host_copy("e")) == [3, 4]
    assert ids(f"e.kind = 'runtime' AND {vocab.memcpy_call('e')}") == [6]


def test_privateuse1_names_of_the_test_backend_are_what_the_vocabulary_says():
    """The runtime and driver names our PrivateUse1 backend emits (tests/native_fixture/neuron_backend.cpp,
    TorchNeuron's shape): a launch is a launch, and none is taken for a sync, a copy or an allocator call."""
    import duckdb

    from neuron_explorer.collectors.kineto_names import LAUNCH_CALL, kind_of_category

    source = (Path(__file__).parent / "native_fixture" / "neuron_backend.cpp").read_text()
    for name in vocab.PRIVATEUSE1_RUNTIME_CALLS:
        assert f'"{name}"' in source, name  # the backend still emits it
    assert kind_of_category("privateuse1_runtime") == "runtime" and kind_of_category("privateuse1_driver") == "kernel"
    names = [*vocab.PRIVATEUSE1_RUNTIME_CALLS, "neuron::mm", "neuron::_local_scalar_dense", "neuron::copy_"]
    assert [n for n in names if LAUNCH_CALL.search(n)] == ["neuronLaunchKernel"]
    assert vocab.PRIVATEUSE1_RUNTIME_CALLS["neuronLaunchKernel"] == "launch"
    con = duckdb.connect()
    con.execute("CREATE TABLE events(event_id INT, kind VARCHAR, name VARCHAR)")
    con.executemany("INSERT INTO events VALUES (?, 'runtime', ?)", list(enumerate(names)))
    for fragment in (vocab.sync_call("e"), vocab.allocator_call("e"), f"e.kind = 'runtime' AND {vocab.memcpy_call('e')}"):
        assert con.execute(f"SELECT count(*) FROM events e WHERE {fragment}").fetchone()[0] == 0, fragment
    assert not any(vocab.is_sync_call_name(n) or vocab.is_memcpy_call_name(n) or vocab.ALLOCATOR_CALL_RE.search(n) for n in names)
    # the same fragments still select the CUDA/HIP spellings beside them
    con.executemany("INSERT INTO events VALUES (?, 'runtime', ?)", [(100, "cudaStreamSynchronize"), (101, "hipMalloc"), (102, "hipMemcpyAsync")])
    assert [r[0] for r in con.execute(f"SELECT event_id FROM events e WHERE {vocab.sync_call('e')} OR {vocab.allocator_call('e')} "
                                      f"OR e.kind = 'runtime' AND {vocab.memcpy_call('e')} ORDER BY 1").fetchall()] == [100, 101, 102]


def test_the_operator_charged_is_the_capture_operator_of_a_linked_replay():
    """A graph-replayed kernel linked to its capture counts on its operators at capture; one not
    linked, and any other kernel, on the operators of its launch (op_id, top_op_id); a kernel with
    no operator on none."""
    import duckdb

    con = duckdb.connect()
    con.execute("CREATE TABLE events AS SELECT * FROM (VALUES "
                "(1, 'cpu_op', 'CUDAGraph::replay', 1, 1, NULL, NULL), (2, 'cpu_op', 'aten::linear', 2, 2, NULL, NULL), "
                "(3, 'cpu_op', 'aten::addmm', 3, 2, NULL, NULL), "
                "(10, 'kernel', 'gemm', 1, 1, 'aten::mm', 'my::mlp'), (11, 'kernel', 'extra', 1, 1, NULL, NULL), "
                "(12, 'kernel', 'gemm', 3, 2, NULL, NULL), (13, 'kernel', 'memset', NULL, NULL, NULL, NULL)"
                ") t(event_id, kind, name, op_id, top_op_id, capture_op, capture_top_op)")
    rows = con.execute(f"""SELECT k.event_id, {vocab.charged_op('k', 'o')}, {vocab.charged_top_op('k', 't')}, {vocab.charged_at_capture('k')}
      FROM events k LEFT JOIN events o ON o.event_id = k.op_id LEFT JOIN events t ON t.event_id = k.top_op_id
      WHERE k.kind = 'kernel' ORDER BY 1""").fetchall()
    assert rows == [(10, "aten::mm", "my::mlp", True), (11, "CUDAGraph::replay", "CUDAGraph::replay", False),
                    (12, "aten::addmm", "aten::linear", False), (13, None, None, False)]


def test_collective_kernel_names_in_sql_are_the_regexps():
    """`comm_kernel_name` (case-insensitive contains tests, what the queries run) answers what
    COMM_KERNEL_PATTERN does, null included, on names spelled as the vendors spell them."""
    import duckdb

    from neuron_explorer.vocab import COMM_KERNEL_PATTERN, comm_kernel_name, is_comm_kernel_name, sql_literal

    names = ["ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "NCCL_AllGather",
             "rcclKernel_Generic", "gloo::allreduce", "GLOO", "void at::native::elementwise_kernel<128, 4>", "Cijk_Ailk_Bljk",
             "n_c_c_l", "ncc", "", None]
    con = duckdb.connect()
    con.execute("CREATE TABLE k (name VARCHAR)")
    con.executemany("INSERT INTO k VALUES (?)", [[n] for n in names])
    got = con.execute(f"SELECT name, {comm_kernel_name()}, regexp_matches(name, {sql_literal(COMM_KERNEL_PATTERN)}) FROM k").fetchall()
    assert [(n, a) for n, a, _ in got] == [(n, b) for n, _, b in got]
    assert [n for n, a, _ in got if a] == names[:5] == [n for n in names if is_comm_kernel_name(n)]


def test_device_waits_are_named_only_where_the_device_waits():
    """vocab.DEVICE_WAIT_KERNEL_PATTERN over every device event name of the shared traces (NVIDIA,
    AMD, MTIA): only MTIA's `event_wait` is a wait; no CUDA or ROCm kernel, copy or collective is."""
    import gzip
    import json

    from .conftest import real_traces

    pattern = re.compile(vocab.DEVICE_WAIT_KERNEL_PATTERN)
    names = set()
    for path in real_traces():
        with (gzip.open(path, "rt") if path.suffix == ".gz" else open(path)) as f:
            events = json.load(f).get("traceEvents", [])
        names |= {str(e.get("name")) for e in events if isinstance(e, dict) and e.get("ph") == "X"
                  and str(e.get("cat", "")).lower() in ("kernel", "gpu_memcpy", "gpu_memset", "mtia_ccp_events")}
    assert len(names) > 400
    assert {n for n in names if pattern.search(n)} == {"event_wait"}
    assert all(pattern.search(n) for n in ("event_wait", "EventWait", "stream_wait_event", "wait_event"))
