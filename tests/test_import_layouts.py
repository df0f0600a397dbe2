"""Any valid trace imports whatever its top-level key order, whitespace and number formats.

Hand-built documents for the layouts that published traces use (traceEvents before
deviceProperties, INFO lines holding brackets after it), then a property test: random valid
Kineto documents, written with fixed seeds, import with exact counts and exact nanoseconds
(checked against decimal arithmetic on the document's own text), through every decoding path
(one piece, streamed pieces, byte ranges read by worker processes).
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from neuron_explorer.collectors import _kineto_json
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import cli
from .test_import_exact_ns import assert_same, expected_times, run_times

EVENTS = [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1700000000000001.5, "dur": 10.25,
     "args": {"External id": 7, "note": "a ] b }, {\"x\": 1"}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1700000000000002.0, "dur": 3,
     "args": {"External id": 7, "correlation": 11}},
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1700000000000005.125, "dur": 4.5,
     "args": {"correlation": 11, "device": 0, "stream": 7}},
]
DEVICES = [{"id": 0, "name": "NVIDIA H100"}, {"id": 1, "name": "NVIDIA H100"}]


def _write(path: Path, text: str) -> Path:
    path.write_bytes(gzip.compress(text.encode()) if path.name.endswith(".gz") else text.encode())
    return path


LAYOUTS = {
    "events_first": lambda ev: {"traceEvents": ev, "deviceProperties": DEVICES, "schemaVersion": 1},
    "events_between_arrays": lambda ev: {"deviceProperties": DEVICES, "traceEvents": ev,
                                         "INFO": ["log ] line", "}, {\"ph\": \"X\"}]"], "distributedInfo": {"rank": 0}},
    "events_last": lambda ev: {"schemaVersion": 1, "deviceProperties": DEVICES, "traceEvents": ev},
    "key_text_in_a_string_first": lambda ev: {"traceName": "\"traceEvents\": [", "traceEvents": ev, "deviceProperties": DEVICES},
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
@pytest.mark.parametrize("indent", [None, 2])
def test_key_order_and_whitespace(tmp_path: Path, layout: str, suffix: str, indent):
    path = _write(tmp_path / f"t{suffix}", json.dumps(LAYOUTS[layout](EVENTS), indent=indent))
    res = import_traces(path, tmp_path / "run")
    entry = res.manifest["ranks"][0]
    assert entry["events"] == 3
    assert [d["name"] for d in entry["device_properties"]] == ["NVIDIA H100", "NVIDIA H100"]
    assert_same(run_times(res.run_dir), expected_times(path))


def test_events_first_in_pieces_and_byte_ranges(tmp_path: Path, monkeypatch):
    """The array's end falls in an early piece, with a large array after it."""
    many = [dict(EVENTS[0], ts=1700000000000000 + i, args={"External id": i}) for i in range(3000)]
    devices = [{"id": i, "name": f"GPU {i}", "pad": "x" * 200} for i in range(400)]
    doc = json.dumps({"traceEvents": many, "deviceProperties": devices})
    monkeypatch.setattr(_kineto_json, "CHUNK_BYTES", 16 << 10)
    for name, parallel_min in (("t.json", 0), ("t.json.gz", 1 << 40), ("u.json", 1 << 40)):
        monkeypatch.setattr(_kineto_json, "PARALLEL_MIN_BYTES", parallel_min)
        path = _write(tmp_path / name, doc)
        res = import_traces(path, tmp_path / f"run-{name}")
        assert res.manifest["ranks"][0]["events"] == 3000, name
        assert len(res.manifest["ranks"][0]["device_properties"]) == 400, name
        assert_same(run_times(res.run_dir), expected_times(path))


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_empty_events_followed_by_other_arrays(tmp_path: Path, suffix: str):
    path = _write(tmp_path / f"t{suffix}", '{"traceEvents": [ ], "deviceProperties": [{"id": 0, "name": "G"}], "INFO": ["]"]}')
    entry = import_traces(path, tmp_path / "run").manifest["ranks"][0]
    assert entry["events"] == 0 and entry["device_properties"] == [{"id": 0, "name": "G"}]


@pytest.mark.parametrize("text", [
    '{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}], "deviceProperties": [}',
    '{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}]} trailing',
    '{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1},',
    '{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}], "deviceProperties": [{"id": 0}]',
])
def test_malformed_documents_get_one_line_and_exit_2(tmp_path: Path, text: str):
    path = _write(tmp_path / "bad.json", text)
    res = cli("import", path, "-o", tmp_path / "run")
    assert res.returncode == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and str(path) in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "run").exists()


# --- property test: random valid documents ---------------------------------------------------


class Num:
    """A number written exactly as given."""

    def __init__(self, text: str):
        self.text = text


def us_text(rng: random.Random, magnitude: int) -> object:
    """A microsecond value up to `magnitude` in one of the spellings JSON allows (or a numeric string)."""
    scale = rng.choice([0, 0, 1, 3, 3, 3, 4, 6])
    digits = rng.randint(0, magnitude * 10**scale)
    sign = "-" if rng.random() < 0.03 else ""
    whole, frac = divmod(digits, 10**scale) if scale else (digits, None)
    form = rng.random()
    if form < 0.6:
        text = f"{whole}" + (f".{frac:0{scale}d}" if scale else "")
        if scale and rng.random() < 0.2:
            text += "0" * rng.randint(1, 3)  # trailing zeros: 12.500
    elif form < 0.85:  # scientific: the same digits, the point after the first
        s = str(digits)
        exp = len(s) - 1 - scale
        text = s[0] + (("." + s[1:]) if len(s) > 1 else "") + rng.choice(["e", "E"]) + rng.choice(["", "+"] if exp >= 0 else [""]) + str(exp)
    else:  # an integer mantissa with a negative exponent
        text = f"{digits}E-{scale}" if scale else f"{digits}"
    if sign and digits:
        text = sign + text
    if rng.random() < 0.03:
        return json.dumps(text)  # "12.5": a numeric string
    return Num(text)


def dump(obj, rng: random.Random) -> str:
    """JSON with random whitespace around every separator and random key order."""
    ws = lambda: rng.choice(["", " ", "\n", "  ", "\n\t ", "\r\n"])  # noqa: E731
    if isinstance(obj, Num):
        return obj.text
    if isinstance(obj, str) and obj.startswith('"'):
        return obj  # already JSON
    if isinstance(obj, dict):
        items = list(obj.items())
        rng.shuffle(items)
        return "{" + ws() + ("," + ws()).join(f"{json.dumps(k)}{ws()}:{ws()}{dump(v, rng)}" for k, v in items) + ws() + "}"
    if isinstance(obj, list):
        return "[" + ws() + ("," + ws()).join(dump(v, rng) for v in obj) + ws() + "]"
    return json.dumps(obj)


def random_event(rng: random.Random, epoch: bool, i: int) -> dict:
    ts = us_text(rng, 1_800_000_000_000_000 if epoch else 10**10)
    kind = rng.random()
    if kind < 0.45:
        cat = rng.choice(["cpu_op", "cuda_runtime", "kernel", "python_function", "user_annotation", "gpu_memcpy"])
        ev = {"ph": "X", "cat": cat, "name": f"op{i % 7}", "pid": rng.choice([0, 1, 2]), "tid": rng.choice([1, 7, "stream 7"]),
              "ts": ts, "dur": us_text(rng, 10**4), "args": {"External id": i, "s": "} , { ] ["}}
        if rng.random() < 0.3:
            del ev["args"]
        return ev
    if kind < 0.55:
        return {"ph": rng.choice(["i", "I"]), "cat": "cpu_instant_event", "name": "mark", "pid": 1, "tid": 1, "ts": ts, "s": "t"}
    if kind < 0.65:
        return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
                "args": {"Device Type": 1, "Device Id": 0, "Addr": 4096 + i, "Bytes": rng.choice([512, -512])}}
    if kind < 0.8:
        return {"ph": rng.choice(["s", "f"]), "cat": "ac2g", "name": "ac2g", "id": i, "pid": 1, "tid": 1, "ts": ts, "bp": "e"}
    if kind < 0.9:
        return {"ph": "C", "cat": "counter", "name": f"c{i % 3}", "pid": 1, "ts": ts, "args": {"v": Num("1.5e2")}}
    return {"ph": "M", "name": "thread_name", "pid": 1, "tid": i, "args": {"name": f"t{i}"}}


def random_document(rng: random.Random, n_events: int) -> str:
    epoch = rng.random() < 0.5
    doc = {"traceEvents": [random_event(rng, epoch, i) for i in range(n_events)]}
    optional = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": d, "name": f"GPU {d}", "totalGlobalMem": 1 << 34} for d in range(rng.randint(0, 3))],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
        "traceName": "random ] trace }, {",
        "INFO": ["]", "}, {\"ph\": \"X\", \"ts\": 1}", "[x]"],
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 1700000000000000000,
    }
    for key in rng.sample(sorted(optional), rng.randint(0, len(optional))):
        if key == "baseTimeNanoseconds" and epoch:
            continue
        doc[key] = optional[key]
    return dump(doc, rng)


@pytest.mark.parametrize("seed", range(24))
def test_random_valid_documents_import_exactly(tmp_path: Path, seed: int):
    rng = random.Random(seed)
    path = _write(tmp_path / ("t.json.gz" if seed % 3 == 0 else "t.json"), random_document(rng, rng.randint(0, 60)))
    res = import_traces(path, tmp_path / "run")
    assert_same(run_times(res.run_dir), expected_times(path))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("path_kind", ["streamed", "byte_ranges"])
def test_random_large_documents_decode_the_same_in_pieces(tmp_path: Path, monkeypatch, seed: int, path_kind: str):
    rng = random.Random(1000 + seed)
    text = random_document(rng, 2500)
    path = _write(tmp_path / ("t.json" if path_kind == "byte_ranges" else "t.json.gz"), text)
    monkeypatch.setattr(_kineto_json, "CHUNK_BYTES", 24 << 10)
    monkeypatch.setattr(_kineto_json, "PARALLEL_MIN_BYTES", 0 if path_kind == "byte_ranges" else 1 << 40)
    if path_kind == "byte_ranges":
        plan = _kineto_json._plan_ranges(str(path), path.stat().st_size)
        assert plan is not None and len(plan.ranges) > 3
    res = import_traces(path, tmp_path / "run")
    assert_same(run_times(res.run_dir), expected_times(path))


def test_cuts_that_fall_inside_args_fall_back_to_a_whole_parse(tmp_path: Path, monkeypatch):
    """Args holding lists of objects that look like events ({"ph": ..., "name": ...}, ...) offer
    false cuts between them; the import must still be exact, through both piece paths."""
    inputs = [{"ph": "X", "name": f"in{k}", "ts": k, "shape": [k, k]} for k in range(40)]
    many = [dict(EVENTS[0], ts=1700000000000000 + i, args={"External id": i, "inputs": inputs}) for i in range(300)]
    doc = json.dumps({"traceEvents": many, "deviceProperties": DEVICES})
    monkeypatch.setattr(_kineto_json, "CHUNK_BYTES", 16 << 10)
    for name, parallel_min in (("t.json", 0), ("t.json.gz", 1 << 40)):
        monkeypatch.setattr(_kineto_json, "PARALLEL_MIN_BYTES", parallel_min)
        path = _write(tmp_path / name, doc)
        res = import_traces(path, tmp_path / f"run-{name}")
        assert res.manifest["ranks"][0]["events"] == 300, name
        assert_same(run_times(res.run_dir), expected_times(path))
