"""Fuzzing the importer with hostile Kineto documents (issue 13), built with hypothesis.

Two sources of documents: traces generated from scratch (events of every phase, with ids, times,
args and header keys drawn from values a program writes and values an attacker tries: ints beyond
int32 and int64, huge and negative times, numeric strings, wrong types, deep nesting), and small
real traces from tests/data/traces with a few of their fields, events or header keys replaced by
such values. For every document:

- `import` either writes a run or raises a NeuronExplorerError whose message is one line naming the
  input or the output (what the CLI prints, exit 2), and then leaves no run behind;
- on every run it wrote, `info` (and its text), `analyze` (and its text and JSON) and `export
  --chrome` work, and the exported trace imports again.

The package functions are called in process (the CLI is a thin wrapper around them; a few CLI runs
as subprocesses are at the end). Examples are bounded and derandomized, so CI runs the same
documents every time, in a few minutes on 2 cores.
"""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neuron_explorer.analyzers.engine import analyze
from neuron_explorer.analyzers.outputs import report_json
from neuron_explorer.analyzers.render import text
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.errors import NeuronExplorerError
from neuron_explorer.export import export_chrome
from neuron_explorer.info import render_info, run_info

from .conftest import TRACES, cli

pytestmark = pytest.mark.slow  # tier: hypothesis fuzzing through the importer (~70 s alone)

FUZZ = settings(max_examples=100, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much])

# --- values ------------------------------------------------------------------------------------

EDGE_INTS = [0, -1, 1, 2**31 - 1, 2**31, -(2**31) - 1, 2**53 + 1, 2**62, 2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64, 2**70]
INTS = st.one_of(st.integers(-2, 12), st.sampled_from(EDGE_INTS), st.integers())
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
DEEP = st.sampled_from([40, 101, 2000])
"""Nesting depths of arrays put in args and metadata: accepted, just past MAX_NESTING, and past
the JSON parsers' recursion limits. Written as text (see `_dumps`)."""


def _deep(n: int) -> str:
    return f"__DEEP_{n}__"


SCALARS = st.one_of(st.none(), st.booleans(), INTS, FLOATS, st.text(max_size=6))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                    max_leaves=8)
HOSTILE = st.one_of(INTS, FLOATS, st.text(max_size=6), st.none(), st.booleans(), JSON,
                    st.sampled_from(["12", "1.5", "-3", "soon", "", "1e400", "0x10"]))
IDS = st.one_of(st.integers(0, 8), st.integers(0, 8), st.integers(0, 8), INTS, INTS, st.text(max_size=4), st.none())
"""(A float pid, tid or flow id is refused by the decoder; HOSTILE puts one in now and then.)"""
TIMES = st.one_of(st.integers(0, 10_000), st.decimals(0, 10_000, places=3).map(lambda d: float(d)),
                  st.sampled_from([1.7e15, 9.2e15, 9.3e15, -9.2e15, 1e300, -1, 0, 4.6e12, 2**62 // 1000, -(2**62 // 1000),
                                   2**62 // 2000]),  # around the ±2^62 ns an import accepts
                  st.sampled_from(["12.5", "1700000000000000.123", "soon", "", None]), st.integers(), FLOATS)

CATS = ["cpu_op", "python_function", "user_annotation", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy",
        "gpu_memset", "cuda_sync", "gpu_user_annotation", "ac2g", "fwdbwd", "Operator", "Trace", "privateuse1_kernel",
        "Memcpy", "", "weird"]
NAMES = ["aten::mm", "aten::add", "ProfilerStep#1", "ProfilerStep#2", "cudaLaunchKernel", "[memory]", "nn.Module: Linear_0",
         "train.py(12): step", "x.py(99999999999): f", "<built-in method add of Tensor object at 0x7f00>",
         "autograd::engine::evaluate_function: MmBackward0", "Torch-Compiled Region", "ampere_sgemm", "Memcpy HtoD", ""]
ARG_KEYS = ["External id", "external id", "correlation", "stream", "device", "Python id", "Python parent id", "Addr", "Bytes",
            "Total Allocated", "Total Reserved", "Device Type", "Device Id", "Sequence number", "Input Dims",
            "Input type", "Concrete Inputs", "flops", "Fwd thread id", "grid", "block"]
ARGS = st.one_of(st.none(), st.dictionaries(st.sampled_from(ARG_KEYS), HOSTILE, max_size=5),
                 st.dictionaries(st.sampled_from(ARG_KEYS), st.integers(0, 8), max_size=4),
                 st.fixed_dictionaries({"Input Dims": st.lists(st.lists(st.integers(0, 4096), max_size=3), max_size=3),
                                        "Input type": st.lists(st.sampled_from(["float", "c10::BFloat16", "int"]), max_size=3)}),
                 JSON)
EVENT = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X", "X", "X", "X", "i", "s", "f", "C", "M", "B", "E", "n", ""])},
    optional={"cat": st.one_of(st.sampled_from(CATS), st.sampled_from(CATS), st.text(max_size=4), st.none()),
              "name": st.one_of(st.sampled_from(NAMES), st.sampled_from(NAMES), st.text(max_size=6), INTS, st.none()),
              "pid": IDS, "tid": IDS, "ts": TIMES, "dur": TIMES, "id": IDS, "bp": st.sampled_from(["e", "s"]),
              "s": st.sampled_from(["t", "p", "g"]), "args": ARGS},
)
SANE_EVENTS = [  # a step, an operator, its launch and kernel, a frame, memory, a counter, a flow
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
    {"ph": "X", "cat": "python_function", "name": "train.py(7): step", "pid": 1, "tid": 1, "ts": 1, "dur": 50,
     "args": {"Python id": 1}},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 2, "dur": 10,
     "args": {"External id": 5, "Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 3, "dur": 3,
     "args": {"correlation": 7, "External id": 5}},
    {"ph": "X", "cat": "kernel", "name": "ampere_sgemm", "pid": 0, "tid": 7, "ts": 6, "dur": 4,
     "args": {"correlation": 7, "stream": 7, "device": 0, "External id": 5}},
    {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 7, "pid": 1, "tid": 1, "ts": 3},
    {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 7, "pid": 0, "tid": 7, "ts": 6, "bp": "e"},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 4, "s": "t",
     "args": {"Device Type": 1, "Device Id": 0, "Addr": 1000, "Bytes": 4096, "Total Allocated": 4096, "Total Reserved": 8192}},
    {"ph": "C", "name": "util", "pid": 1, "ts": 5, "args": {"v": 0.5}},
    {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
]
HEADER = st.fixed_dictionaries(
    {},
    optional={
        "schemaVersion": HOSTILE,
        "deviceProperties": st.one_of(
            HOSTILE,
            st.lists(st.fixed_dictionaries({"id": st.one_of(IDS, FLOATS), "name": st.one_of(st.sampled_from(["NVIDIA H100", "AMD MI300X"]), SCALARS)},
                                           optional={"totalGlobalMem": HOSTILE, "computeMajor": HOSTILE,
                                                     "numSms": HOSTILE, "extra": JSON}), max_size=3)),
        "computeProperties": HOSTILE,
        "distributedInfo": st.one_of(HOSTILE, st.fixed_dictionaries(
            {}, optional={"rank": INTS, "world_size": HOSTILE, "backend": HOSTILE, "pg_config": JSON})),
        "baseTimeNanoseconds": st.one_of(INTS, st.sampled_from([0, 1_700_000_000_000_000_000, 2**62, -(2**62), 2**62 + 1]),
                                         HOSTILE),
        "traceName": HOSTILE,
        "displayTimeUnit": HOSTILE,
        "metadata": HOSTILE,
    },
)


@st.composite
def generated_documents(draw) -> str:
    events = draw(st.lists(EVENT, max_size=20))
    if draw(st.booleans()):
        events = json.loads(json.dumps(SANE_EVENTS)) + events  # a copy: documents are changed in place below
    events = draw(st.permutations(events)) if len(events) < 12 else events
    doc = {**draw(HEADER), "traceEvents": events}
    _maybe_deepen(draw, doc)
    if draw(st.integers(0, 9)) == 0:
        return _dumps(events)  # the bare-array form
    return _dumps(doc)


MUTATION_SOURCES = ["cuda_triton.json.gz", "cuda_event_sync_multistream.json.gz", "edge_old_category_names.json.gz",
                    "rocm_mi250_train.json.gz", "cpu_only_rank34_of_300.json.gz", "edge_backward_thread.json"]


def _load(name: str) -> dict:
    path = TRACES / name
    data = gzip.decompress(path.read_bytes()) if name.endswith(".gz") else path.read_bytes()
    return json.loads(data)


_SOURCES: dict[str, dict] = {}


@st.composite
def mutated_documents(draw) -> str:
    name = draw(st.sampled_from(MUTATION_SOURCES))
    if name not in _SOURCES:
        _SOURCES[name] = _load(name)
    doc = json.loads(json.dumps(_SOURCES[name]))  # a private copy
    events = doc["traceEvents"]
    for _ in range(draw(st.integers(1, 4))):
        what = draw(st.sampled_from(["field", "field", "arg", "drop key", "new event", "header", "drop events"]))
        if what in ("field", "arg", "drop key") and events:
            ev = events[draw(st.integers(0, len(events) - 1))]
            if what == "field":
                ev[draw(st.sampled_from(["ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "args"]))] = draw(HOSTILE)
            elif what == "arg":
                args = ev.setdefault("args", {}) if isinstance(ev.get("args", {}), dict) else {}
                args[draw(st.sampled_from(ARG_KEYS))] = draw(HOSTILE)
            elif ev:
                ev.pop(draw(st.sampled_from(sorted(ev))), None)
        elif what == "new event":
            events.insert(draw(st.integers(0, len(events))), draw(EVENT))
        elif what == "header":
            key = draw(st.sampled_from(["deviceProperties", "distributedInfo", "baseTimeNanoseconds", "traceName", "schemaVersion"]))
            doc[key] = draw(HEADER.map(lambda h, k=key: h.get(k)) | HOSTILE)
        elif what == "drop events":
            del events[draw(st.integers(0, len(events))):]
    _maybe_deepen(draw, doc)
    return _dumps(doc)


def _maybe_deepen(draw, doc: dict) -> None:
    """One document in eight gets one deeply nested value: in an event's args, a counter's value,
    a metadata event's args or a header key."""
    if draw(st.integers(0, 7)):
        return
    deep = _deep(draw(DEEP))
    events = [e for e in doc["traceEvents"] if isinstance(e, dict)]
    where = draw(st.sampled_from(["args", "counter", "metadata", "header"]))
    if where == "header" or not events:
        doc[draw(st.sampled_from(["deviceProperties", "traceName", "distributedInfo"]))] = deep
    elif where == "args":
        draw(st.sampled_from(events))["args"] = {"Input Dims": deep}
    elif where == "counter":
        doc["traceEvents"].append({"ph": "C", "name": "c", "pid": 1, "ts": 1, "args": {"v": deep}})
    else:
        doc["traceEvents"].append({"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": deep}})


def _dumps(doc) -> str:
    """JSON text of `doc`; `__DEEP_n__` strings become arrays nested n levels (json.dumps itself
    cannot write those: it recurses)."""
    out = json.dumps(doc)
    for n in (40, 101, 2000):
        out = out.replace(json.dumps(_deep(n)), "[" * n + "1" + "]" * n)
    return out


# --- the property ------------------------------------------------------------------------------


def check_document(document: str, gz: bool = False) -> str:
    """Import `document`; a run that was written must be readable by every command. Returns
    'refused' or 'imported' (for the tests' tallies)."""
    tmp = Path(tempfile.mkdtemp(prefix="nx-fuzz-"))
    try:
        path = tmp / ("trace.json.gz" if gz else "trace.json")
        data = document.encode()
        path.write_bytes(gzip.compress(data, compresslevel=1) if gz else data)
        out = tmp / "run"
        try:
            import_traces(path, out, command=["fuzz"])
        except NeuronExplorerError as e:
            message = f"error: {e}"
            assert "\n" not in message and message.strip(), message
            assert str(path) in message or str(out) in message, message
            assert not out.exists(), "a refused import left a run"
            assert not [p.name for p in tmp.iterdir() if p.name.startswith(".run")], "temporary directories left behind"
            return "refused"
        render_info(run_info(out))
        report = analyze(out)
        text(report)
        json.loads(report_json(report))
        exported = export_chrome(out, tmp / "exported.json.gz")
        import_traces(exported[0], tmp / "again", command=["fuzz"])
        return "imported"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


OUTCOMES: dict[str, dict[str, int]] = {"generated": {}, "mutated": {}}


@FUZZ
@given(document=generated_documents(), gz=st.booleans())
def test_generated_traces_import_or_fail_in_one_line(document: str, gz: bool):
    outcome = check_document(document, gz)
    OUTCOMES["generated"][outcome] = OUTCOMES["generated"].get(outcome, 0) + 1


@FUZZ
@given(document=mutated_documents())
def test_mutated_real_traces_import_or_fail_in_one_line(document: str):
    outcome = check_document(document)
    OUTCOMES["mutated"][outcome] = OUTCOMES["mutated"].get(outcome, 0) + 1


def test_the_fuzzing_reaches_both_outcomes():
    """Generated documents that are all refused (or all accepted) would test little: both kinds of
    document must both write runs and be refused. Runs after the two fuzz tests (file order)."""
    for source in ("generated", "mutated"):
        seen = OUTCOMES[source]
        if not seen:
            pytest.skip("the fuzz tests did not run in this session")
        assert seen.get("imported", 0) >= 5 and seen.get("refused", 0) >= 5, (source, seen)


@pytest.mark.parametrize("document", [
    '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 9223372036854775808, "tid": 1, "ts": 1, "dur": 1}]}',
    '{"traceEvents": [{"ph": "C", "name": "c", "pid": 1, "ts": 1, "args": [1, 2]}]}',
    '{"traceEvents": []}',
    '{"deviceProperties": "x", "distributedInfo": {"rank": 0, "world_size": "two"}, "traceEvents": []}',
])
def test_the_cli_agrees(tmp_path: Path, document: str):
    """A few documents through the real CLI: exit 0 then info/analyze/export work, or exit 2 with one line."""
    path = tmp_path / "trace.json"
    path.write_text(document)
    res = cli("import", path, "-o", tmp_path / "run")
    if res.returncode == 2:
        assert len(res.stderr.strip().splitlines()) == 1 and str(path) in res.stderr, res.stderr
        return
    assert res.returncode == 0, res.stderr
    for args in (["info", tmp_path / "run"], ["analyze", tmp_path / "run"], ["export", tmp_path / "run", "--chrome", tmp_path / "e.json"]):
        res = cli(*args)
        assert res.returncode == 0, (args, res.stderr)
