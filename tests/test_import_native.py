"""The importer's C++ reader (collectors/native/kineto_json.cpp) returns exactly what the Python
decoder returns: on every real trace (read by C++), and on hand-written event shapes that it
must leave to the Python decoder (escapes, float ids, finer times, odd args, repeated keys,
non-ASCII names, malformed JSON), errors included. Without a compiler the Python decoder reads
everything and the run is the same.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from neuron_explorer import open_run
from neuron_explorer.collectors import _json_native, _kineto_json
from neuron_explorer.errors import InputError

from .conftest import REPO, real_traces


@pytest.fixture(autouse=True)
def _native_on(monkeypatch):
    monkeypatch.delenv("NEURON_EXPLORER_NATIVE", raising=False)
    assert _json_native.load() is not None, "the C++ reader did not build (is there a C++ compiler?)"


def _decode(path: Path, native: bool, monkeypatch, pack: bool = False) -> tuple[dict, dict]:
    """(tables and metadata, how many pieces C++ read / left to Python). With `pack`, the args are
    decoded packed (what the importer asks for) and unpacked here into the events' args column."""
    counts = {"native": 0, "python": 0}
    read = _json_native.read

    def counted(array, max_nesting, bare=False, may_end=False, pack_args=False):
        result = read(array, max_nesting, bare, may_end, pack_args) if native else None
        counts["native" if result is not None else "python"] += 1
        return result

    monkeypatch.setattr(_json_native, "read", counted)
    decoded = _kineto_json.decode_trace(str(path), workers=1, pack_args=pack)
    monkeypatch.setattr(_json_native, "read", read)
    for c in decoded.chunks:
        if pack:
            assert "args" not in c.events.column_names
            c.events = c.events.append_column("args", c.args.unpacked())
    out: dict = {"header": decoded.header, "metadata": [m for c in decoded.chunks for m in c.metadata],
                 "unsupported": [c.unsupported for c in decoded.chunks],
                 "odd_times": tuple(map(sum, zip(*(c.odd_times for c in decoded.chunks))))}
    for name in ("events", "flows", "memory", "counters"):
        table = pa.concat_tables([getattr(c, name) for c in decoded.chunks])
        out[name] = pa.table({n: c.cast(pa.string()) if pa.types.is_dictionary(c.type) else c
                              for n, c in zip(table.column_names, table.columns)}).combine_chunks()
    return out, counts


def _same(path: Path, monkeypatch, pack: bool = False) -> dict:
    py, _ = _decode(path, False, monkeypatch)
    nat, counts = _decode(path, True, monkeypatch)
    packed = [_decode(path, native, monkeypatch, pack=True)[0] for native in (True, False)] if pack else []
    for key in ("events", "flows", "memory", "counters"):
        assert nat[key].schema == py[key].schema, key
        assert nat[key].to_pylist() == py[key].to_pylist(), key
        for p in packed:  # the args packed where each piece is decoded, then taken back: the same text
            assert p[key].select(py[key].column_names).to_pylist() == py[key].to_pylist(), key
    assert (nat["metadata"], nat["header"], nat["unsupported"]) == (py["metadata"], py["header"], py["unsupported"])
    assert nat["odd_times"] == py["odd_times"]
    return counts


@pytest.mark.parametrize("trace", real_traces(), ids=lambda p: p.name)
def test_real_traces_read_the_same(trace: Path, monkeypatch):
    counts = _same(trace, monkeypatch, pack="memory" in trace.name or trace.name.startswith("cuda_train_68k"))
    if trace.name.startswith("cuda_train_68k"):
        assert counts == {"native": 1, "python": 0}  # the bench trace's events are all read by C++


def _events_file(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "t.json"
    p.write_text('{"schemaVersion": 1, "traceEvents": [' + text + "]}")
    return p


_PLAIN = ('{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 1700000000123456.789, "dur": 5.5, '
          '"args": {"External id": 7, "Sequence number": 3}}, '
          '{"ph": "s", "id": 9, "pid": 1, "tid": 2, "ts": 1700000000123457, "cat": "ac2g", "name": "ac2g"}, '
          '{"ph": "f", "id": 9, "pid": 0, "tid": 7, "ts": 1700000000123460.001, "cat": "ac2g", "name": "ac2g", "bp": "e"}')

# Each must give the same tables (or the same error) whichever reader reads it; the first few are
# read by C++, the rest are shapes it leaves to the Python decoder.
_SHAPES = {
    "plain": (_PLAIN, True),
    "instants and nulls": ('{"ph": "i", "name": null, "cat": null, "pid": null, "tid": "t 1", "ts": 0, "s": "t"}, '
                           '{"ph": "I", "name": "mark", "pid": "proc", "tid": 3, "ts": -0.5, "args": {}}', True),
    "empty args kept apart": ('{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": {  }}, {"ph": "X", "name": "b", "ts": 2, '
                              '"dur": 1, "args": null}, {"ph": "X", "name": "c", "ts": 3, "dur": 1, "args": { }}', True),
    "old external id, stream, python ids": ('{"ph": "X", "name": "k", "ts": 1, "dur": 2, "args": {"external id": 4, '
                                            '"stream": 7, "device": "cuda:0", "Python id": 3, "Python parent id": 1}}', True),
    "other phases mixed in": ('{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "x"}}, ' + _PLAIN +
                              ', {"ph": "C", "name": "util", "pid": 1, "ts": 4, "args": {"v": 1.5}}, '
                              '{"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 5, "args": {"Bytes": 64, "Addr": 1}}, '
                              '{"ph": "B", "name": "begin", "ts": 1}', True),
    "unicode name": ('{"ph": "X", "name": "matmul \u00e9\u4e2d\U0001F600", "ts": 1, "dur": 1}', True),
    "escaped name": ('{"ph": "X", "name": "a\\"b\\u00e9", "ts": 1, "dur": 1}', False),
    "numeric name": ('{"ph": "X", "name": 12.5, "ts": 1, "dur": 1}', False),
    "four decimals": ('{"ph": "X", "name": "a", "ts": 1.0005, "dur": 0.0015}', False),
    "exponent": ('{"ph": "X", "name": "a", "ts": 1e3, "dur": 1}', False),
    "ts as text": ('{"ph": "X", "name": "a", "ts": "12.5", "dur": 1}', False),
    # no time: the Python decoder drops these events (and counts them); C++ leaves the piece to it
    "null ts": ('{"ph": "i", "name": "a", "ts": null}, {"ph": "X", "name": "b", "ts": 1, "dur": 1}', False),
    "missing ts": ('{"ph": "X", "name": "a", "dur": 1}, {"ph": "X", "name": "b", "ts": 1, "dur": 1}', False),
    "null dur": ('{"ph": "X", "name": "a", "ts": 1, "dur": null}, {"ph": "X", "name": "b", "ts": 1, "dur": 1}', False),
    "missing dur": ('{"ph": "X", "name": "a", "ts": 1}, {"ph": "i", "name": "b", "ts": 1}', False),
    "text flow ts": ('{"ph": "s", "id": 1, "ts": "soon", "pid": 1, "tid": 1}, ' + _PLAIN, False),
    "true ts": ('{"ph": "X", "name": "a", "ts": true, "dur": 1}', False),
    "float flow id": ('{"ph": "s", "id": 1.5, "ts": 1, "pid": 1, "tid": 1}', False),
    "text flow id": ('{"ph": "s", "id": "12", "ts": 1, "pid": 1, "tid": 1}', False),
    "text stream": ('{"ph": "X", "name": "k", "ts": 1, "dur": 1, "args": {"stream": "7"}}', False),
    "odd arg type drops the args": ('{"ph": "X", "name": "k", "ts": 1, "dur": 1, "args": {"correlation": 1.5, "External id": 3}}', False),
    "args not an object": ('{"ph": "X", "name": "k", "ts": 1, "dur": 1, "args": [1, 2]}', False),
    "repeated key": ('{"ph": "X", "name": "a", "name": "b", "ts": 1, "dur": 1}', False),
    "pid beyond int64": ('{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 9223372036854775808}', False),
    "ts beyond int64 ns": ('{"ph": "X", "name": "a", "ts": 9223372036854775.808, "dur": 1}', False),
    "correlation beyond int64": ('{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": {"correlation": 9223372036854775808}}', False),
    # an operator of many inputs (a foreach op over a model's parameters): many lists, none deep
    "many inputs": ('{"ph": "X", "cat": "cpu_op", "name": "aten::_foreach_add_", "ts": 1, "dur": 1, "args": {"Input Dims": ['
                    + ", ".join(["[64, 3, 7, 7]", "[]", "[[1], [2]]"] * 100) + '], "Concrete Inputs": [' + ", ".join(['""'] * 300) + "]}}", True),
    "deep args": ('{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": {"x": ' + "[" * 120 + "]" * 120 + "}}", False),
    "float pid": ('{"ph": "X", "name": "a", "ts": 1, "dur": 1, "pid": 1.5}', False),
    "null phase": ('{"ph": null, "name": "a", "ts": 1}', False),
    "not an object": ('{"ph": "X", "name": "a", "ts": 1, "dur": 1}, 5', False),
    "bad escape": ('{"ph": "X", "name": "a", "ts": 1, "dur": 1, "args": {"s": "\\x"}}', False),
    "control character": ('{"ph": "X", "name": "a\tb", "ts": 1, "dur": 1}', False),
    "leading zero": ('{"ph": "X", "name": "a", "ts": 01, "dur": 1}', False),
    "trailing comma": ('{"ph": "X", "name": "a", "ts": 1, "dur": 1},', False),
    "repeated arg key": ('{"ph": "X", "name": "k", "ts": 1, "dur": 1, "args": {"External id": 1, "External id": 2}}', False),
    "escaped arg key": ('{"ph": "X", "name": "k", "ts": 1, "dur": 1, "args": {"Extern\\u0061l id": 1}}', False),
    # what would make a slice's args give up (a float correlation) is a counter's series
    "counter series named like slice args": ('{"ph": "C", "name": "util", "pid": 1, "ts": 4, "args": {"correlation": 1.5, '
                                             '"stream": 2.5}}, ' + _PLAIN, True),
    # strings longer than the 16 bytes the reader scans at a time, with what ends a scan at each place
    "long strings": ('{"ph": "X", "name": "aten::_scaled_dot_product_flash_attention_for_cpu \u00e9 tail", "ts": 1, "dur": 1, '
                     '"args": {"Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"], "Concrete Inputs": ["", "", '
                     '"0.125000000000000000"], "Call stack": "train.py(12): step\\nmodel.py(40): forward"}}', True),
    "long escaped name": ('{"ph": "X", "name": "aten::_scaled_dot_product_\\"flash\\"", "ts": 1, "dur": 1}', False),
}


def _same_or_same_error(path: Path, monkeypatch) -> dict | None:
    """`_same`'s counts; None when both readers refuse the file with the same error."""
    try:
        return _same(path, monkeypatch)
    except InputError as e:
        with pytest.raises(InputError) as py_error:
            _decode(path, False, monkeypatch)
        assert str(e) == str(py_error.value)
        return None


@pytest.mark.parametrize("name", list(_SHAPES))
def test_event_shapes_read_the_same(name: str, tmp_path: Path, monkeypatch):
    text, by_native = _SHAPES[name]
    counts = _same_or_same_error(_events_file(tmp_path, text), monkeypatch)
    if counts is None:
        assert not by_native
        return
    assert counts["native"] == (1 if by_native else 0), counts


# Documents whose traceEvents array is followed by more of the document: the C++ reader stops at
# the array's ']' and what follows is read as the header (brackets in strings, nested arrays, and
# a document that is broken after the array).
_TAILS = {
    "arrays after": '], "deviceProperties": [{"id": 0, "name": "NVIDIA H100 ]", "dims": [[1, 2], []]}], "x": "]"}',
    "whitespace before the bracket": ' \n\t ]  ,"distributedInfo": {"rank": 3}}\n',
    "broken after the array": '], "deviceProperties": [}',
    "not closed": '',
}


@pytest.mark.parametrize("name", list(_TAILS))
def test_the_array_end_is_found_by_the_cpp_reader(name: str, tmp_path: Path, monkeypatch):
    p = tmp_path / "t.json"
    p.write_text('{"schemaVersion": 1, "traceEvents": [' + _PLAIN + _TAILS[name])
    counts = _same_or_same_error(p, monkeypatch)
    if counts is None:
        assert name in ("broken after the array", "not closed")
        return
    assert counts == {"native": 1, "python": 0}
    assert name not in ("broken after the array", "not closed")


def test_invalid_utf8_is_left_to_python(tmp_path: Path, monkeypatch):
    p = tmp_path / "t.json"
    p.write_bytes(b'{"traceEvents": [{"ph": "X", "name": "a\xff", "ts": 1, "dur": 1}]}')
    with pytest.raises(InputError) as native_error:
        _decode(p, True, monkeypatch)
    with pytest.raises(InputError) as py_error:
        _decode(p, False, monkeypatch)
    assert str(native_error.value) == str(py_error.value)


def test_without_a_compiler_the_python_decoder_writes_the_same_run(tmp_path: Path):
    trace = REPO / "tests" / "data" / "traces" / "cuda_alexnet_train.json.gz"
    runs = {}
    for label, extra in (("native", {}), ("no compiler", {"CXX": "/bin/false", "NEURON_EXPLORER_NATIVE_DIR": str(tmp_path / "n")})):
        env = {**os.environ, **extra}
        env.pop("NEURON_EXPLORER_NATIVE", None)
        out = tmp_path / label.replace(" ", "_")
        res = subprocess.run([sys.executable, "-m", "neuron_explorer", "import", str(trace), "-o", str(out)],
                             capture_output=True, text=True, env=env, timeout=600)
        assert res.returncode == 0, res.stderr
        with open_run(out) as run:
            runs[label] = run.sql("SELECT kind, name, ts_ns, dur_ns, parent_id, launch_id, args FROM events ORDER BY event_id").fetchall()
        assert len(runs[label]) == 870
    assert (tmp_path / "n").is_dir() and list((tmp_path / "n").rglob("build-failed.txt"))  # it tried, and failed
    assert runs["native"] == runs["no compiler"]
