"""Clock sanity of a device plugin's events (collectors/device_clock.py), on hand-built traces.

A plugin that reports microseconds where Kineto expects nanoseconds puts its events 1,000 times too
early. Host times below are absolute (no baseTimeNanoseconds), in the JSON's µs:

    host    |ProfilerStep#1 T .. T+200|  |aten::mm T+10 .. T+30|  |neuronLaunchKernel T+12 .. T+14 corr 1|
    device                                  |nrt_mm (T+15)/1000 µs, 5 µs/1000 long, corr 1|   <- in µs

Scaled ×1000 the kernel lands at T+15 (inside its operator, after its launch); a device clock that no
unit places (here: every event at the trace's base time, as an exporter clamps earlier times) is
refused with one line naming the file.

A device clock in ns can still be milliseconds behind the host's (ROCm traces). Three launches, the
device's clock 5 ms late (µs):

    host    |launch T+10 corr 1|   |launch T+40 corr 2|   |launch T+70 corr 3|        (2 µs each)
    device      |k1 T+5015|            |k2 T+5042|            |k3 T+5071|           (10 µs each)

k1, the device's first work, starts 5,003 µs after its launch returned; the delays from each launch's
start are 5,005, 5,002 and 5,001 µs: the device's events move 5,001 µs earlier (k1 at T+14, k2 at
T+41, k3 at T+70, each at or after its launch). A device busy with work queued before the trace (its
first work has no launch) waits behind it, and a first work that waits while later ones start at once
is no offset: neither is moved.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from neuron_explorer import open_run
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.collectors.device_clock import DeviceClockError, check_device_clock
from neuron_explorer.collectors.raw import RawRank
from neuron_explorer.errors import InputError

from .conftest import X, cli, write_trace

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


def _offset_events(kernels, first_corr=1):
    """Three operators each launching a kernel at T+10, T+40, T+70 (corr first_corr..+2); `kernels`:
    (ts, dur, correlation) of the device's work, each with its ac2g flow's end at its start."""
    out = [X("ProfilerStep#1", "user_annotation", T, 200)]
    for i, at in enumerate((10, 40, 70)):
        corr = first_corr + i
        out += [X("aten::mm", "cpu_op", T + at - 2, 6, **{"External id": 10 + corr}),
                X("hipLaunchKernel", "cuda_runtime", T + at, 2, correlation=corr, **{"External id": 10 + corr}),
                {"ph": "s", "id": corr, "pid": 1, "tid": 1, "ts": T + at, "cat": "ac2g", "name": "ac2g"}]
    for j, (ts, dur, corr) in enumerate(kernels):
        out += [X(f"k{j + 1}", "kernel", ts, dur, pid=0, tid=7, device=0, stream=7, correlation=corr),
                {"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": ts, "cat": "ac2g", "name": "ac2g", "bp": "e"}]
    return out


def _kernels(run_dir):
    with open_run(run_dir) as run:
        rows = run.sql("SELECT e.name, e.ts_ns, l.ts_ns FROM events e LEFT JOIN events l ON e.launch_id = l.event_id "
                       "WHERE e.kind = 'kernel' ORDER BY e.ts_ns").fetchall()
        flows = run.sql("SELECT f.ts_ns, e.name FROM flows f JOIN events e ON f.event_id = e.event_id "
                        "WHERE f.phase = 'f' ORDER BY f.ts_ns").fetchall()
        return rows, flows, run.manifest["warnings"], run.manifest["ranks"][0]["data_quality"]


def test_a_device_clock_behind_its_launches_is_moved_to_them(tmp_path: Path):
    trace = write_trace(tmp_path / "rocm.json", _offset_events([(T + 5015, 10, 1), (T + 5042, 10, 2), (T + 5071, 10, 3)]))
    run_dir = import_traces(trace, tmp_path / "run").run_dir
    rows, flows, warnings, quality = _kernels(run_dir)
    us = 1000
    assert rows == [("k1", (T + 14) * us, (T + 10) * us), ("k2", (T + 41) * us, (T + 40) * us), ("k3", (T + 70) * us, (T + 70) * us)]
    assert flows == [((T + 14) * us, "k1"), ((T + 41) * us, "k2"), ((T + 70) * us, "k3")]  # the flows' ends moved with them
    assert quality["device_clock_shift_ns"] == 5_001_000 and quality["device_clock_shift_device"] == 0
    assert quality["device_before_launch"] == 0
    (w,) = [w for w in warnings if "clock" in w]
    assert w.startswith("rocm.json: device 0's clock is offset from the host's: its first work, with nothing the trace holds before "
                        "it on the device, started 5.00 ms after its launch returned, and none of its 3 launched kernels and copies "
                        "started sooner than 5.00 ms after its launch began")
    assert "its events were moved 5.00 ms earlier" in w
    assert not any("first work started" in w for w in warnings)  # (the move says it)
    from neuron_explorer.analyzers import analyze
    report = analyze(run_dir, write=False).to_dict()
    (rank,) = report["summary"]["ranks"]
    assert rank["span_ns"] == 200 * us  # the step's, not 5.08 ms
    assert all(any(n.startswith("device 0's events moved 5.00 ms earlier, to its launches") for n in f["confidence_notes"])
               for f in report["findings"])


def test_a_moved_run_exported_and_imported_again_is_not_moved_again(tmp_path: Path):
    # the export writes the run's (moved) times: read back, the kernels start at their launches (k3 0 µs
    # after its launch), so nothing is moved twice and the times are the first run's
    from neuron_explorer.export import export_chrome

    trace = write_trace(tmp_path / "rocm.json", _offset_events([(T + 5015, 10, 1), (T + 5042, 10, 2), (T + 5071, 10, 3)]))
    first = import_traces(trace, tmp_path / "a").run_dir
    out = tmp_path / "again.json.gz"
    export_chrome(first, out)
    second = import_traces(out, tmp_path / "b").run_dir
    rows_a, flows_a, _, _ = _kernels(first)
    rows_b, flows_b, warnings, quality = _kernels(second)
    assert rows_b == rows_a and flows_b == flows_a
    assert "device_clock_shift_ns" not in quality and not any("clock is offset" in w for w in warnings)


def test_import_keep_device_clock_keeps_the_traces_times(tmp_path: Path):
    trace = write_trace(tmp_path / "rocm.json", _offset_events([(T + 5015, 10, 1), (T + 5042, 10, 2), (T + 5071, 10, 3)]))
    res = cli("import", trace, "-o", tmp_path / "run", "--keep-device-clock")
    assert res.returncode == 0, res.stderr
    rows, flows, warnings, quality = _kernels(tmp_path / "run")
    assert [r[1] for r in rows] == [(T + t) * 1000 for t in (5015, 5042, 5071)] and [f[0] for f in flows] == [r[1] for r in rows]
    assert "device_clock_shift_ns" not in quality and not any("clock is offset" in w for w in warnings)
    assert any("device 0's first work started 5.00 ms after its launch returned" in w for w in warnings)


def test_a_device_busy_with_work_queued_before_the_trace_is_not_moved(tmp_path: Path):
    # k0 (correlation 0: launched before the trace's first runtime call) holds the device 5 ms; the
    # launched kernels queue behind it and start 1+ ms after their launches: a queue, not a clock
    events = _offset_events([(T + 20, 5000, 0), (T + 5020, 10, 1), (T + 5030, 10, 2), (T + 5040, 10, 3)], first_corr=1)
    run_dir = import_traces(write_trace(tmp_path / "queued.json", events), tmp_path / "run").run_dir
    rows, _, warnings, quality = _kernels(run_dir)
    assert [r[1] for r in rows] == [(T + t) * 1000 for t in (20, 5020, 5030, 5040)]
    assert "device_clock_shift_ns" not in quality and not any("clock is offset" in w for w in warnings)


def test_a_first_work_that_waits_alone_is_warned_about_not_moved(tmp_path: Path):
    # k1 starts 5 ms after its launch; k2 and k3, launched after k1 began, 3 µs after theirs: the device
    # starts work at once, so k1 waited on something the trace does not hold; the times stay, the
    # first work's wait is warned about
    events = _offset_events([(T + 5015, 10, 1), (T + 6003, 10, 2), (T + 6033, 10, 3)])
    events[0]["dur"] = 7000  # the step
    for e in events:
        if e.get("cat") in ("cpu_op", "cuda_runtime", "ac2g") and e["ts"] >= T + 30 and e.get("ph") != "f":
            e["ts"] += 5960  # the second and third launches at T+6000 and T+6030
    run_dir = import_traces(write_trace(tmp_path / "late.json", events), tmp_path / "run").run_dir
    rows, _, warnings, quality = _kernels(run_dir)
    assert rows == [(n, (T + t) * 1000, (T + at) * 1000) for n, t, at in (("k1", 5015, 10), ("k2", 6003, 6000), ("k3", 6033, 6030))]
    assert "device_clock_shift_ns" not in quality and quality["first_work_wait_ns"] == 5003 * 1000
    assert any("device 0's first work started 5.00 ms after its launch returned" in w for w in warnings)
    assert not any("clock is offset" in w for w in warnings)


def _raw(chunks: list[list[tuple]]) -> RawRank:
    """A rank's events as the importer's decode hands them over: one table chunk per piece of the
    file. Rows: (category, ts_ns, dur_ns or None, pid, correlation)."""
    def table(rows):
        cat, ts, dur, pid, corr = zip(*rows)
        return pa.table({"category": pa.array(cat).dictionary_encode(), "ts_ns": pa.array(ts, pa.int64()),
                         "dur_ns": pa.array(dur, pa.int64()), "pid": pa.array(pid, pa.int64()), "tid": pa.array([1] * len(rows), pa.int64()),
                         "correlation": pa.array(corr, pa.int64())})
    empty = pa.table({"ts_ns": pa.array([], pa.int64()), "pid": pa.array([], pa.int64()), "tid": pa.array([], pa.int64())})
    return RawRank(rank=0, events=pa.concat_tables([table(c) for c in chunks]), flows=empty, memory=empty, counters=empty)


def test_the_units_are_judged_over_every_chunk_of_the_decode():
    """The host's span and each group's are taken over all the decode's chunks (the host's last event
    in the last chunk, the device's µs events in two others): the same scaling as of one chunk, on
    exactly the device's rows, a null duration read as none."""
    t = T * 1000  # ns
    rows = [[("cpu_op", t, 20_000, 1, None), ("kernel", (t + 15_000) // 1000, 5, 0, 1)],
            [("privateuse1_runtime", t + 12_000, 2_000, 1, 1), ("kernel", (t + 40_000) // 1000, None, 0, 2)],
            [("cpu_op", t + 30_000, 50_000, 1, None)]]
    chunked, whole = _raw(rows), _raw([[r for c in rows for r in c]])
    assert chunked.events["ts_ns"].num_chunks == 3
    warned = [check_device_clock(raw, align=False) for raw in (chunked, whole)]
    assert warned[0] == warned[1] and len(warned[0]) == 1 and "device events' timestamps were in µs" in warned[0][0]
    for raw in (chunked, whole):
        assert raw.events["ts_ns"].to_pylist() == [t, t + 15_000, t + 12_000, t + 40_000, t + 30_000]
        assert raw.events["dur_ns"].to_pylist() == [20_000, 5_000, 2_000, None, 50_000]


def test_a_refusal_names_the_hosts_span_over_every_chunk():
    """A device clock no unit places is refused with the host's span, its first start in the first
    chunk and its last end (30 ms + 50 ms on) in the last: 1,700,000,000.000 s to 1,700,000,000.080 s."""
    t = T * 1000
    raw = _raw([[("cpu_op", t, 20_000, 1, None)], [("kernel", 5, 5, 0, 1), ("kernel", 7, 5, 0, 2)],
                [("cpu_op", t + 30_000_000, 50_000_000, 1, None)]])
    with pytest.raises(DeviceClockError) as err:
        check_device_clock(raw)
    assert "(0.000 s to 0.000 s) lie outside the host's span (1,700,000,000.000 s to 1,700,000,000.080 s)" in str(err.value)
