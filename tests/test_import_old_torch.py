"""Old and odd traces (issue #33, item 10).

- torch 1.8-1.10 record no `autograd::engine::evaluate_function`: the backward pass is found by the
  autograd nodes' own operators (`CudnnConvolutionBackward`, `torch::autograd::AccumulateGrad`) and
  the autograd engine's thread that runs them; their events, everything nested in them and the
  device work they launched are `pass='backward'` (passes.py). A trace that has evaluate_function
  never takes a node by name.
- They write `"tid": "25738"` (text) on spans and `"tid": 25738` on flow starts: an integer's text
  is that integer, in the C++ reader and the Python decoder alike, so flows bind and the threads
  are two tracks.
- A trace with launches and ac2g flow starts but no device events lost its kernels: a warning,
  not a CPU-only rank.

v100_resnet50_torch19_memory.json.gz is a real torch 1.9 trace (string tids, no evaluate_function,
backward on thread 25772); the figures below are counted from its JSON independently of the importer.
"""

from __future__ import annotations

import collections
import gzip
import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from neuron_explorer.collectors import _json_native
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.store import open_run

from .conftest import TRACES, X, cli, write_trace
from .test_import_native import _events_file, _same

V100 = TRACES / "v100_resnet50_torch19_memory.json.gz"
NODE = re.compile(r"^(?:torch::autograd::)?(?:\w+Backward\d*|AccumulateGrad)$")
DEVICE = ("Kernel", "Memcpy", "Memset")


@pytest.fixture(scope="module")
def v100_json() -> list[dict]:
    with gzip.open(V100) as f:
        return json.load(f)["traceEvents"]


@pytest.fixture(scope="module")
def v100_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("v100") / "run"
    import_traces(V100, run_dir)
    with open_run(run_dir) as run:
        yield run


def test_the_v100_trace_is_old_style(v100_json):
    """What the other tests rely on: text tids on spans, integer tids on flow starts, no
    evaluate_function, the backward nodes on a second thread."""
    spans = [e for e in v100_json if e.get("ph") == "X" and e.get("cat") in ("Operator", "Runtime")]
    assert {e["tid"] for e in spans} == {"25738", "25772"}
    assert {e["tid"] for e in v100_json if e.get("ph") == "s"} == {25738, 25772}
    assert not any("evaluate_function" in e.get("name", "") for e in v100_json)
    assert {e["tid"] for e in spans if NODE.match(e["name"])} == {"25772"}


def test_v100_tids_are_numbers_and_the_threads_two_tracks(v100_run):
    rows = v100_run.sql("SELECT tid, tid_text, count(*) FROM events WHERE kind IN ('cpu_op', 'runtime', 'step') "
                        "GROUP BY ALL ORDER BY tid").fetchall()
    assert rows == [(25738, None, 14988 + 6583 + 6), (25772, None, 8652 + 5340)]


def test_v100_launch_flows_bind(v100_run, v100_json):
    pairs = {e["id"] for e in v100_json if e.get("ph") == "s"} & {e["id"] for e in v100_json if e.get("ph") == "f"}
    assert len(pairs) == 9096
    # each flow's start binds to the runtime call of its correlation, its finish to the device event,
    # whose launch_id is that call
    bound = v100_run.sql("""
        SELECT count(*), count_if(d.launch_id = s.event_id), count_if(r.kind = 'runtime' AND r.correlation = s.flow_id)
        FROM flows s JOIN flows f ON f.flow_id = s.flow_id AND s.phase = 's' AND f.phase = 'f'
        JOIN events d ON d.event_id = f.event_id JOIN events r ON r.event_id = s.event_id""").fetchone()
    assert bound == (9096, 9096, 9096)
    assert v100_run.sql("SELECT count(*) FROM flows WHERE event_id IS NULL").fetchone() == (0,)
    assert v100_run.sql("SELECT count(launch_id) FROM events WHERE kind IN ('kernel', 'memcpy', 'memset')").fetchone() == (9096,)


def test_v100_backward_pass(v100_run, v100_json):
    nodes = [e for e in v100_json if e.get("cat") == "Operator" and NODE.match(e["name"])]
    assert len(nodes) == 2034  # 1068 *Backward* nodes and 966 AccumulateGrad
    assert v100_run.sql(r"""SELECT count(*), count_if(pass = 'backward') FROM events
                            WHERE kind = 'cpu_op' AND regexp_full_match(name, '(torch::autograd::)?(\w+Backward\d*|AccumulateGrad)')"""
                        ).fetchone() == (2034, 2034)
    # everything on the autograd thread, nothing on the main thread; there, torch 1.9 files the
    # optimizer's and the DataLoader's ranges as operators: what they hold is their pass, by name
    marks = [(e["ts"], e["ts"] + e["dur"], "optimizer" if e["name"].startswith("Optimizer.") else "data") for e in v100_json
             if e.get("cat") == "Operator" and re.match(r"Optimizer\.(step|zero_grad)#|enumerate\(DataLoader\)#", e["name"])]
    main = collections.Counter(next((p for a, b, p in marks if a <= e["ts"] and e["ts"] + e["dur"] <= b), "forward")
                               for e in v100_json if e.get("cat") in ("Operator", "Runtime") and e.get("ph") == "X" and e["tid"] == "25738"
                               and not e["name"].startswith("ProfilerStep#"))  # (the steps: kind 'step')
    assert main == {"forward": 9697, "optimizer": 8718, "data": 3156}
    assert sum(main.values()) == 14988 + 6583
    assert v100_run.sql("SELECT tid, pass, count(*) FROM events WHERE kind IN ('cpu_op', 'runtime') GROUP BY ALL ORDER BY tid, pass"
                        ).fetchall() == [(25738, p, main[p]) for p in sorted(main)] + [(25772, "backward", 8652 + 5340)]
    # device work: the kernels and memsets launched from the autograd thread, counted from the JSON
    backward_launches = {e["args"]["correlation"] for e in v100_json if e.get("cat") == "Runtime" and e["tid"] == "25772"}
    device = [e for e in v100_json if e.get("cat") in DEVICE and e["args"]["correlation"] in backward_launches]
    expected_ns = sum(e["dur"] for e in device) * 1000
    assert (len(device), expected_ns) == (3540, 386_389_000)
    assert v100_run.sql("SELECT count(*), sum(dur_ns) FROM events WHERE kind IN ('kernel', 'memcpy', 'memset') "
                        "AND pass = 'backward'").fetchone() == (3540, expected_ns)
    # of it, what the node operators themselves launched (the rest: the engine's gradient sums between nodes)
    inside = v100_run.sql(r"""
        WITH RECURSIVE up(id, anc) AS (SELECT event_id, parent_id FROM events WHERE kind = 'runtime'
            UNION ALL SELECT up.id, e.parent_id FROM up JOIN events e ON e.event_id = up.anc WHERE e.parent_id IS NOT NULL),
        node_launch AS (SELECT DISTINCT up.id FROM up JOIN events e ON e.event_id = up.anc
                        WHERE regexp_full_match(e.name, '(torch::autograd::)?(\w+Backward\d*|AccumulateGrad)'))
        SELECT count(*), sum(dur_ns), count_if(pass = 'backward') FROM events WHERE launch_id IN (SELECT id FROM node_launch)""").fetchone()
    assert inside == (3438, 370_634_000, 3438)


def test_v100_backward_nodes_link_to_their_forward_operator(v100_run):
    # every *Backward* node carries a Sequence number: its forward operator is the main thread's with that number
    linked = v100_run.sql(r"""
        SELECT count(*), count(n.fwd_op_id), count_if(f.tid = 25738),
               count_if(regexp_extract(n.args, '"Sequence number": (\d+)', 1) = regexp_extract(f.args, '"Sequence number": (\d+)', 1))
        FROM events n LEFT JOIN events f ON f.event_id = n.fwd_op_id
        WHERE n.kind = 'cpu_op' AND regexp_full_match(n.name, '\w+Backward\d*')""").fetchone()
    assert linked == (1068, 1068, 1068, 1068)
    dq = v100_run.manifest["ranks"][0]["data_quality"]
    assert dq["backward_ns"] > 0 and dq["backward_linked_ns"] / dq["backward_ns"] > 0.95  # 96.5% measured
    # the allocations on the main thread now find their operator (none did with text tids)
    assert v100_run.sql("SELECT count(*), count(op_id) FROM memory").fetchone() == (12838, 8514)


def test_v100_reads_the_same_with_both_readers(monkeypatch):
    monkeypatch.delenv("NEURON_EXPLORER_NATIVE", raising=False)
    assert _json_native.load() is not None
    _same(V100, monkeypatch)


# --- a hand-written old-style trace -------------------------------------------------------------

MAIN, AUTOGRAD = "100", "200"


def _old_style(backward_tid: str = AUTOGRAD, step: bool = True) -> list[dict]:
    """torch 1.9's shapes: text tids on spans, integer tids on flow starts, `Operator` and `Runtime`
    categories, async/launch flows, no evaluate_function; the nodes on thread `backward_tid`."""
    def op(name, ts, dur, tid, **args):
        return X(name, "Operator", ts, dur, pid=100, tid=tid, **args)

    def launch(ts, tid, corr):
        return [X("cudaLaunchKernel", "Runtime", ts, 1, pid=100, tid=tid, correlation=corr),
                X(f"kernel_{corr}", "Kernel", ts + 5, 3, pid=0, tid="stream 7", correlation=corr, stream=7, device=0),
                {"ph": "s", "id": corr, "pid": 100, "tid": int(tid), "ts": ts, "cat": "async", "name": "launch"},
                {"ph": "f", "id": corr, "pid": 0, "tid": "stream 7", "ts": ts + 5, "cat": "async", "name": "launch", "bp": "e"}]

    b = backward_tid
    events = [
        {"ph": "M", "name": "thread_name", "pid": 100, "tid": MAIN, "args": {"name": "thread 100 (python)"}},
        {"ph": "M", "name": "thread_name", "pid": 100, "tid": AUTOGRAD, "args": {"name": "thread 200 (python)"}},
        op("aten::addmm", 10, 10, MAIN, **{"Sequence number": 5, "Fwd thread id": 0}),
        *launch(12, MAIN, 1),
        op("aten::relu", 25, 5, MAIN, **{"Sequence number": 6, "Fwd thread id": 0}),
        *launch(26, MAIN, 2),
        op("ReluBackward0", 40, 10, b, **{"Sequence number": 6, "Fwd thread id": 1}),
        op("aten::threshold_backward", 41, 8, b),
        *launch(42, b, 3),
        op("AddmmBackward", 52, 10, b, **{"Sequence number": 5, "Fwd thread id": 1}),
        op("aten::mm", 53, 8, b),
        *launch(54, b, 4),
        op("torch::autograd::AccumulateGrad", 63, 3, b),
        op("aten::add_", 64, 1, b),
    ]
    if step:
        events.insert(2, op("ProfilerStep#1", 0, 100, MAIN))
    return events


@pytest.mark.parametrize("reader", ["native", "python"])
def test_an_old_style_trace(tmp_path: Path, monkeypatch, reader):
    if reader == "python":
        monkeypatch.setenv("NEURON_EXPLORER_NATIVE", "0")
    else:
        monkeypatch.delenv("NEURON_EXPLORER_NATIVE", raising=False)
    trace = write_trace(tmp_path / "old.json", _old_style())
    import_traces(trace, tmp_path / "run")
    with open_run(tmp_path / "run") as run:
        # the threads are numbers, two tracks, and every flow start binds to its launch
        assert run.sql("SELECT DISTINCT tid, tid_text FROM events WHERE kind = 'cpu_op' ORDER BY tid").fetchall() == \
            [(100, None), (200, None)]
        assert run.sql("SELECT f.tid, r.name, r.tid FROM flows f JOIN events r ON r.event_id = f.event_id "
                       "WHERE f.phase = 's' ORDER BY f.ts_ns").fetchall() == [(100, "cudaLaunchKernel", 100)] * 2 + \
            [(200, "cudaLaunchKernel", 200)] * 2
        assert run.sql("SELECT count(*) FROM flows WHERE event_id IS NULL").fetchone() == (0,)
        passes = dict(run.sql("SELECT name, pass FROM events WHERE kind IN ('cpu_op', 'kernel', 'step')").fetchall())
        assert passes == {"ProfilerStep#1": "other", "aten::addmm": "forward", "aten::relu": "forward", "kernel_1": "forward",
                          "kernel_2": "forward", "ReluBackward0": "backward", "aten::threshold_backward": "backward",
                          "kernel_3": "backward", "AddmmBackward": "backward", "aten::mm": "backward", "kernel_4": "backward",
                          "torch::autograd::AccumulateGrad": "backward", "aten::add_": "backward"}
        # the nodes link to the forward operators of their Sequence number; AccumulateGrad to the node before it
        links = run.sql("SELECT e.name, f.name FROM events e JOIN events f ON f.event_id = e.fwd_op_id "
                        "WHERE e.kind IN ('cpu_op', 'kernel') ORDER BY e.ts_ns").fetchall()
        assert links == [("ReluBackward0", "aten::relu"), ("aten::threshold_backward", "aten::relu"), ("kernel_3", "aten::relu"),
                         ("AddmmBackward", "aten::addmm"), ("aten::mm", "aten::addmm"), ("kernel_4", "aten::addmm"),
                         ("torch::autograd::AccumulateGrad", "aten::addmm"), ("aten::add_", "aten::addmm")]
        # the thread names (metadata, text tids too) name the integer threads
        names = {(m["pid"], m["tid"]) for m in run.manifest["ranks"][0]["metadata_events"] if m["name"] == "thread_name"}
        assert names == {(100, 100), (100, 200)}
    # the exported trace writes the threads as numbers
    assert cli("export", tmp_path / "run", "--chrome", tmp_path / "out.json").returncode == 0
    exported = json.loads((tmp_path / "out.json").read_text())
    exported = exported["traceEvents"] if isinstance(exported, dict) else exported
    assert {e["tid"] for e in exported if e.get("cat") == "Operator"} == {100, 200}


def test_old_style_backward_on_the_main_thread_marks_the_nodes_only(tmp_path: Path):
    """A CPU run's backward runs on the calling thread: there only the nodes (and what is in them)
    are backward; the thread's forward operators stay forward."""
    events = [e for e in _old_style(backward_tid=MAIN) if e.get("name") != "thread_name" or e["tid"] == MAIN]
    import_traces(write_trace(tmp_path / "old.json", events), tmp_path / "run")
    with open_run(tmp_path / "run") as run:
        passes = dict(run.sql("SELECT name, pass FROM events WHERE kind IN ('cpu_op', 'kernel')").fetchall())
        assert {k: passes[k] for k in ("aten::addmm", "kernel_1", "ReluBackward0", "aten::mm", "kernel_3", "aten::add_")} == \
            {"aten::addmm": "forward", "kernel_1": "forward", "ReluBackward0": "backward", "aten::mm": "backward",
             "kernel_3": "backward", "aten::add_": "backward"}


def test_a_thread_without_nodes_is_no_autograd_thread(tmp_path: Path):
    """Without a step, the main thread is told from the autograd thread by its forward operators
    (they carry Sequence numbers); a top-level op on the autograd thread outside any node is backward."""
    events = _old_style(step=False) + [X("aten::add", "Operator", 70, 2, pid=100, tid=AUTOGRAD),
                                       X("aten::empty", "Operator", 72, 1, pid=100, tid=MAIN)]
    import_traces(write_trace(tmp_path / "old.json", events), tmp_path / "run")
    with open_run(tmp_path / "run") as run:
        assert run.sql("SELECT tid, pass, count(*) FROM events WHERE kind = 'cpu_op' GROUP BY ALL ORDER BY tid").fetchall() == \
            [(100, "forward", 3), (200, "backward", 7)]


def test_a_trace_with_evaluate_function_takes_no_node_by_name(tmp_path: Path):
    events = [X("autograd::engine::evaluate_function: MulBackward0", "cpu_op", 10, 10, tid=2),
              X("MulBackward0", "cpu_op", 11, 8, tid=2),
              X("MyOpBackward", "cpu_op", 30, 5, tid=3),  # a node by name, but this trace has evaluate_function
              X("aten::mul", "cpu_op", 31, 3, tid=3)]
    import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run")
    with open_run(tmp_path / "run") as run:
        assert dict(run.sql("SELECT name, pass FROM events").fetchall()) == {
            "autograd::engine::evaluate_function: MulBackward0": "backward", "MulBackward0": "backward",
            "MyOpBackward": "forward", "aten::mul": "forward"}


def test_integer_text_ids_read_the_same_with_both_readers(tmp_path: Path, monkeypatch):
    monkeypatch.delenv("NEURON_EXPLORER_NATIVE", raising=False)
    assert _json_native.load() is not None
    tids = ['"25738"', '"-12"', '"0"', '"007"', '"-0"', '"+5"', '" 5"', '"5 "', '"9223372036854775807"',
            '"9223372036854775808"', '"-9223372036854775808"', '"stream 7"', '""', '"-"', "25738"]
    text = ", ".join(f'{{"ph": "X", "cat": "cpu_op", "name": "a", "ts": {i}, "dur": 1, "pid": {t}, "tid": {t}}}, '
                     f'{{"ph": "s", "id": {i}, "cat": "ac2g", "name": "ac2g", "ts": {i}, "pid": {t}, "tid": {t}}}'
                     for i, t in enumerate(tids))
    path = _events_file(tmp_path, text)
    assert _same(path, monkeypatch) == {"native": 1, "python": 0}
    from neuron_explorer.collectors import _kineto_json

    chunk = _kineto_json.decode_trace(str(path), workers=1).chunks[0]
    ev = pa.concat_tables([chunk.events])
    assert list(zip(ev["tid"].to_pylist(), ev["tid_text"].to_pylist())) == [
        (25738, None), (-12, None), (0, None), (None, "007"), (None, "-0"), (None, "+5"), (None, " 5"), (None, "5 "),
        (9223372036854775807, None), (None, "9223372036854775808"), (-9223372036854775808, None), (None, "stream 7"),
        (None, ""), (None, "-"), (25738, None)]
    assert chunk.flows["tid"].to_pylist() == [25738, -12, 0, None, None, None, None, None, 9223372036854775807, None,
                                              -9223372036854775808, None, None, None, 25738]


# --- a GPU trace that lost its kernels -------------------------------------------------------------

def _lost_kernels() -> list[dict]:
    events = [X("ProfilerStep#1", "user_annotation", 0, 100, pid=1, tid=1)]
    for i in range(3):
        events += [X("aten::mm", "cpu_op", 10 + 20 * i, 10),
                   X("cudaLaunchKernel", "cuda_runtime", 12 + 20 * i, 2, correlation=i + 1),
                   {"ph": "s", "id": i + 1, "pid": 1, "tid": 1, "ts": 12 + 20 * i, "cat": "ac2g", "name": "ac2g"},
                   {"ph": "f", "id": i + 1, "pid": 0, "tid": 7, "ts": 15 + 20 * i, "cat": "ac2g", "name": "ac2g", "bp": "e"}]
    return events + [X("cudaDeviceSynchronize", "cuda_runtime", 80, 5)]


def test_launches_without_device_events_are_a_warning_not_a_cpu_only_rank(tmp_path: Path):
    trace = write_trace(tmp_path / "lost.json", _lost_kernels())
    assert cli("import", trace, "-o", tmp_path / "run").returncode == 0
    out = cli("info", tmp_path / "run", "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    rank = info["ranks"][0]
    assert rank["devices"] == []
    assert rank["data_quality"]["launches_without_device_events"] == 3
    assert rank["data_quality"]["launch_flows_without_device_events"] == 3
    lost = [w for w in info["warnings"] if "no device events" in w]
    assert len(lost) == 1
    assert lost[0].startswith("rank 0: 3 kernel launches (3 ac2g flow starts) but no device events: the trace lost its kernels (")
    text = cli("info", tmp_path / "run").stdout
    assert "devices: none (device events lost (3 launches recorded, no kernels))" in text and "CPU only" not in text


@pytest.mark.parametrize("name", ["cpu_only_rank34_of_300.json.gz", "cuda_simple_add.json.gz"])
def test_cpu_only_and_gpu_traces_get_no_lost_kernels_warning(tmp_path: Path, name):
    run = import_traces(TRACES / name, tmp_path / "run")
    dq = run.manifest["ranks"][0]["data_quality"]
    assert "launches_without_device_events" not in dq and "launch_flows_without_device_events" not in dq
    assert not any("lost its kernels" in w for w in run.manifest["warnings"])


def test_a_gpu_job_profiled_without_its_device_activity_is_not_called_cpu_only(tmp_path: Path):
    """edge_no_rank: operators only (cpu_op, user_annotation), no launches, and distributedInfo's
    backend is NCCL, a library that runs on GPUs: a GPU job profiled with the CPU activity alone
    (its aten::linear of [1024×1705]·[512×1705]ᵀ, 1.79 GFLOP, takes 117 µs of CPU: the dispatch, not
    the work). It read 'CPU only'; the report and info now say its device events were lost, and
    why. A gloo job with no device events (cpu_only_rank34_of_300) stays CPU only."""
    from neuron_explorer.analyzers import analyze, render

    run = import_traces(TRACES / "edge_no_rank.json.gz", tmp_path / "nccl").run_dir
    words = "device events lost (its process group's backend, nccl, runs on devices; no kernels recorded)"
    report = analyze(run, write=False)
    assert report.summary["ranks"][0]["device_events_lost"] == {"launches": 0, "launch_flows": 0, "backend": "nccl"}
    text = " ".join(render.text(report, width=200).split())
    assert words in text and "CPU only" not in text
    assert f"devices: none ({words})" in cli("info", run).stdout
    gloo = import_traces(TRACES / "cpu_only_rank34_of_300.json.gz", tmp_path / "gloo").run_dir
    assert analyze(gloo, write=False).summary["ranks"][0]["device_events_lost"] is None
    assert "devices: none (CPU only)" in cli("info", gloo).stdout
