"""Timestamps and durations are exact integer nanoseconds, read from the decimal text of the trace.

The expected values are computed here with decimal arithmetic on the raw JSON text (never a
float): `ts` is microseconds, so ns = ts * 1000, rounded half to even below a nanosecond, plus
`baseTimeNanoseconds` where the trace has it.
"""

from __future__ import annotations

import decimal
import gzip
import json
from collections import Counter
from pathlib import Path

import pytest

from neuron_explorer import open_run
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.export import export_chrome
from neuron_explorer.schema import DEVICE_KINDS

from .conftest import TRACES, cli, real_traces

pytestmark = pytest.mark.slow  # tier: exports and reimports every real trace through the CLI (~30 s alone)


def ns_of(value) -> int:
    """Microseconds (int, Decimal from the JSON text, numeric string, None) → ns by decimal arithmetic."""
    if value is None:
        return 0
    us = value if isinstance(value, decimal.Decimal) else decimal.Decimal(str(value).strip())
    with decimal.localcontext() as ctx:
        ctx.prec = 80
        return int((us * 1000).to_integral_value(rounding=decimal.ROUND_HALF_EVEN))


def load_exact(path: Path) -> dict:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        doc = json.loads(f.read(), parse_float=decimal.Decimal)
    return doc if isinstance(doc, dict) else {"traceEvents": doc}


def expected_times(path: Path) -> dict[str, Counter]:
    """What the run must hold, per table, computed from the trace text alone."""
    doc = load_exact(path)
    base = doc.get("baseTimeNanoseconds")
    base = base if isinstance(base, int) and not isinstance(base, bool) else 0
    events, memory, flows, counters = Counter(), Counter(), Counter(), set()
    for e in doc["traceEvents"]:
        ph, ts = e.get("ph"), ns_of(e.get("ts")) + base
        name = e.get("name")
        name = name if name is None or isinstance(name, str) else str(name)
        if ph in ("X", "i", "I"):
            if name == "[memory]":
                memory[ts] += 1
            else:
                events[(e.get("cat") or "", ts, ns_of(e.get("dur")) if ph == "X" else 0)] += 1
        elif ph in ("s", "f", "t"):
            flows[(e.get("cat") or "", ph, ts)] += 1
        elif ph == "C":
            counters.add((name or "", ts))
    return {"events": events, "memory": memory, "flows": flows, "counters": Counter(counters)}


def run_times(run_dir: Path) -> dict[str, Counter]:
    """The run's times as the trace wrote them: a device whose clock the import moved to its launches
    (data_quality.device_clock_shift_ns, tests/test_device_clock.py) has the move added back to its
    events and the flow ends bound to them, so that every other nanosecond is compared exactly."""
    with open_run(run_dir) as run:
        (entry,) = run.manifest["ranks"]
        dq = entry["data_quality"]
        shift, device = dq.get("device_clock_shift_ns", 0), dq.get("device_clock_shift_device", -1)
        moved = f"CASE WHEN e.device = {int(device)} AND e.kind IN ({', '.join(repr(k) for k in sorted(DEVICE_KINDS))}) THEN {int(shift)} ELSE 0 END"
        return {
            "events": Counter(run.sql(f"SELECT category, ts_ns + {moved}, dur_ns FROM events e").fetchall()),
            "memory": Counter(t for (t,) in run.sql("SELECT ts_ns FROM memory").fetchall()),
            "flows": Counter(run.sql(f"SELECT f.category, f.phase, f.ts_ns + coalesce({moved}, 0) FROM flows f "
                                     "LEFT JOIN events e ON e.event_id = f.event_id").fetchall()),
            "counters": Counter(run.sql("SELECT DISTINCT name, ts_ns FROM counters").fetchall()),
        }


def assert_same(got: dict[str, Counter], want: dict[str, Counter]) -> None:
    for table in want:
        missing, extra = want[table] - got[table], got[table] - want[table]
        assert not missing and not extra, (table, list(missing.items())[:3], list(extra.items())[:3])


@pytest.mark.parametrize("trace", real_traces(), ids=lambda p: p.name)
def test_every_real_trace_keeps_every_nanosecond(trace: Path, tmp_path: Path):
    run_dir = import_traces(trace, tmp_path / "run").run_dir
    assert_same(run_times(run_dir), expected_times(trace))


def test_epoch_microseconds_are_not_rounded_to_256_ns(tmp_path: Path):
    # the first events of the V100 trace (torch 1.9, epoch µs, no baseTimeNanoseconds)
    trace = TRACES / "v100_resnet50_torch19_memory.json.gz"
    run_dir = import_traces(trace, tmp_path / "run").run_dir
    with open_run(run_dir) as run:
        odd = run.sql("SELECT count(*) FROM events WHERE ts_ns % 256 != 0").fetchone()[0]
        total = run.sql("SELECT count(*) FROM events").fetchone()[0]
    assert odd > total // 2  # exact µs are multiples of 1000, rarely of 256


def _write(path: Path, text: str) -> Path:
    path.write_bytes(gzip.compress(text.encode()) if path.name.endswith(".gz") else text.encode())
    return path


@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_number_formats_give_exact_ns(tmp_path: Path, suffix: str):
    # ts text → expected ns, written by hand
    cases = [
        ("1623143093496534", 1623143093496534000),
        ("1623143093496534.016", 1623143093496534016),
        ("1712195495521131.0", 1712195495521131000),
        ("12.500", 12500),
        ("1e3", 1000000),
        ("1.5E+2", 150000),
        ("25E-3", 25),
        ("0.0005", 0),  # half a nanosecond: to even
        ("0.0015", 2),
        ("0.0025", 2),
        ("3.0004999", 3000),
        ("-2.5", -2500),
        ('"7.25"', 7250),  # a numeric string
    ]
    events = ",\n".join(
        f'{{"ph": "X", "cat": "cpu_op", "name": "op{i}", "pid": 1, "tid": {i}, "ts": {ts}, "dur": {ts if not ts.startswith("-") else "1"}}}'
        for i, (ts, _) in enumerate(cases))
    path = _write(tmp_path / f"t{suffix}", '{"schemaVersion": 1, "traceEvents": [' + events + "]}")
    run_dir = import_traces(path, tmp_path / "run").run_dir
    with open_run(run_dir) as run:
        got = dict(run.sql("SELECT name, ts_ns FROM events").fetchall())
        durs = dict(run.sql("SELECT name, dur_ns FROM events").fetchall())
    for i, (text, want) in enumerate(cases):
        assert got[f"op{i}"] == want, text
        if not text.startswith("-"):
            assert durs[f"op{i}"] == want, text


def test_base_time_plus_relative_microseconds(tmp_path: Path):
    text = ('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1234567.891, "dur": 0.001}],'
            ' "baseTimeNanoseconds": 1700000000123456789}')
    run_dir = import_traces(_write(tmp_path / "t.json", text), tmp_path / "run").run_dir
    with open_run(run_dir) as run:
        assert run.sql("SELECT ts_ns, dur_ns FROM events").fetchone() == (1700000000123456789 + 1234567891, 1)


def test_timestamp_that_does_not_fit_is_a_one_line_error(tmp_path: Path):
    text = '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1e30, "dur": 1}]}'
    path = _write(tmp_path / "t.json", text)
    res = cli("import", path, "-o", tmp_path / "run")
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "ts" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("name", ["v100_resnet50_torch19_memory.json.gz", "rtx2080ti_linear_epoch_us.json.gz",
                                  "b200_vllm_eager_rank0_of_8.json.gz"])
def test_export_writes_times_that_reimport_to_the_same_ns(tmp_path: Path, name: str):
    first = import_traces(TRACES / name, tmp_path / "a").run_dir
    out = tmp_path / "out.json.gz"
    export_chrome(first, out)
    second = import_traces(out, tmp_path / "b").run_dir
    assert_same(run_times(second), run_times(first))
    assert_same(run_times(first), expected_times(TRACES / name))


def _overlaps_by_decimal_arithmetic(path: Path) -> int:
    """Slices that start inside an open slice of their thread and end after it, from the exact times."""
    tracks: dict[tuple, list] = {}
    for e in load_exact(path)["traceEvents"]:
        if e.get("ph") == "X" and e.get("name") != "[memory]":
            tracks.setdefault((str(e.get("pid")), str(e.get("tid"))), []).append((ns_of(e.get("ts")), ns_of(e.get("dur"))))
    overlaps = 0
    for slices in tracks.values():
        open_ends: list[int] = []  # ends of the nested slices still open, innermost last
        for ts, dur in sorted(slices, key=lambda s: (s[0], -s[1])):
            end = ts + max(dur, 0)
            while open_ends and open_ends[-1] <= ts:
                open_ends.pop()
            if open_ends and open_ends[-1] < end:
                overlaps += 1
            elif dur > 0:
                open_ends.append(end)
    return overlaps


@pytest.mark.parametrize("name", ["rtx2080ti_linear_epoch_us.json.gz", "v100_resnet50_torch19_memory.json.gz",
                                  "cuda_train_68k_events.json.gz", "cuda_alexnet_train.json.gz"])
def test_epoch_traces_have_no_false_overlaps(tmp_path: Path, name: str):
    # rounding epoch µs to 256 ns made children end after their parents: hundreds of false overlaps
    entry = import_traces(TRACES / name, tmp_path / "run").manifest["ranks"][0]
    assert entry["data_quality"]["overlapping_slices"] == _overlaps_by_decimal_arithmetic(TRACES / name)
