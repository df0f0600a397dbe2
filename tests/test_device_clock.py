"""Clock sanity of a device plugin's events (collectors/device_clock.py), on hand-built traces.

A plugin that reports microseconds where Kineto expects nanoseconds puts its events 1,000 times too
early. Host times below are absolute (no baseTimeNanoseconds), in the JSON's µs:

    host    |ProfilerStep#1 T .. T+200|  |aten::mm T+10 .. T+30|  |neuronLaunchKernel T+12 .. T+14 corr 1|
    device                                  |nrt_mm (T+15)/1000 µs, 5 µs/1000 long, corr 1|   <- in µs

Scaled ×1000 the kernel lands at T+15 (inside its operator, after its launch); a device clock that no
unit places (here: every event at the trace's base time, as an exporter clamps earlier times) is
refused with one line naming the file.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from neuron_explorer import open_run
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.errors import InputError

from .conftest import X, write_trace

T = 1_700_000_000_000_000  # µs since the epoch (2023-11-14)


def _events(kernel_ts, kernel_dur, flow_ts):
    return [
        X("ProfilerStep#1", "user_annotation", T, 200),
        X("aten::mm", "cpu_op", T + 10, 20, **{"External id": 4}),
        X("neuronLaunchKernel", "privateuse1_runtime", T + 12, 2, correlation=1, **{"External id": 4}),
        X("nrt_mm", "kernel", kernel_ts, kernel_dur, pid=0, tid=7, device=0, stream=7, correlation=1, **{"External id": 4}),
        {"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": T + 12, "cat": "ac2g", "name": "ac2g"},
        {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": flow_ts, "cat": "ac2g", "name": "ac2g", "bp": "e"},
    ]


def test_device_times_in_microseconds_are_scaled(tmp_path: Path):
    trace = write_trace(tmp_path / "us.json", _events((T + 15) / 1000, 5 / 1000, (T + 15) / 1000))
    run_dir = import_traces(trace, tmp_path / "run").run_dir
    with open_run(run_dir) as run:
        mm, launch = (run.sql(f"SELECT event_id FROM events WHERE name = '{n}'").fetchone()[0] for n in ("aten::mm", "neuronLaunchKernel"))
        kernel = run.sql("SELECT ts_ns, dur_ns, launch_id, op_id, step FROM events WHERE kind = 'kernel'").fetchone()
        flow_end = run.sql("SELECT ts_ns, event_id FROM flows WHERE phase = 'f'").fetchone()
        warnings = run.manifest["warnings"]
        quality = run.manifest["ranks"][0]["data_quality"]
    assert kernel == ((T + 15) * 1000, 5000, launch, mm, 1)
    assert flow_end[0] == (T + 15) * 1000 and flow_end[1] is not None
    assert quality["device_before_launch"] == 0
    assert any("us.json: device events' timestamps were in µs, not ns" in w and "scaled ×1000" in w for w in warnings)


def test_a_device_clock_no_unit_places_is_refused_naming_the_file(tmp_path: Path):
    base = T * 1000
    events = _events(T, 0.005, T)
    for e in events:  # relative to the base, as torch writes; the device events clamped to it
        e["ts"] = 0.0 if e.get("pid") == 0 else e["ts"] - T + 100_000_000  # (the host 100 s after the base)
    trace = write_trace(tmp_path / "clamped.json", events, baseTimeNanoseconds=base)
    with pytest.raises(InputError) as err:
        import_traces(trace, tmp_path / "run")
    text = str(err.value)
    assert text.startswith(str(trace) + ": device events' timestamps") and "\n" not in text
    assert "baseTimeNanoseconds" in text and "not imported" in text
    assert not (tmp_path / "run").exists()


def test_a_device_clock_on_the_host_clock_is_left_alone(tmp_path: Path):
    trace = write_trace(tmp_path / "ns.json", _events(T + 15, 5, T + 15))
    run_dir = import_traces(trace, tmp_path / "run").run_dir
    with open_run(run_dir) as run:
        kernel = run.sql("SELECT ts_ns, dur_ns FROM events WHERE kind = 'kernel'").fetchone()
        warnings = run.manifest["warnings"]
    assert kernel == ((T + 15) * 1000, 5000)
    assert not any("µs, not ns" in w for w in warnings)
