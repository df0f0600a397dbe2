"""Backward work linked to its forward operator (`fwd_op_id`), the pass of every event, and the
statement each event's time belongs to (`source_frame_id`), on a hand-built trace.

    thread 1 (µs)  0                                                                          100
    ProfilerStep#1 [==========================================================================]
    train.py(20): forward_fn   [4 ------------------------- 30]
      aten::linear  seq 7          [5 ------ 20]   ──fwdbwd flow──┐
        aten::addmm seq 8            [8 --- 18]                    │
      aten::relu    seq 9                         [22-25]          │
    train.py(30): backward_fn                              [35 ------------------------ 65]
      evaluate_function: ReluBackward0 (seq 9, no flow)      [40-45]  → aten::relu by number
        ReluBackward0 → aten::threshold_backward → cudaLaunchKernel → kernel on GPU 0
      evaluate_function: AddmmBackward0 (seq 8)                    [50-60] → aten::linear by flow
      evaluate_function: AccumulateGrad (seq -1)                          [61-63] → after the previous node
    Optimizer.step#SGD.step                                                    [70-80]
    enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__                        [85-90]
"""

from __future__ import annotations

import duckdb
import pytest

from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.store import open_run

from .conftest import REPO, X, write_trace

EVAL = "autograd::engine::evaluate_function: "


def _flow(ph, ts, flow_id=1):
    e = {"ph": ph, "cat": "fwdbwd", "name": "fwdbwd", "id": flow_id, "pid": 1, "tid": 1, "ts": ts}
    if ph == "f":
        e["bp"] = "e"
    return e


EVENTS = [
    X("ProfilerStep#1", "user_annotation", 0, 100),
    X("train.py(20): forward_fn", "python_function", 4, 26),
    X("aten::linear", "cpu_op", 5, 15, **{"Sequence number": 7, "Fwd thread id": 0, "External id": 1}),
    X("aten::addmm", "cpu_op", 8, 10, **{"Sequence number": 8, "Fwd thread id": 0, "External id": 2}),
    X("aten::relu", "cpu_op", 22, 3, **{"Sequence number": 9, "Fwd thread id": 0, "External id": 3}),
    X("train.py(30): backward_fn", "python_function", 35, 30),
    X(EVAL + "ReluBackward0", "cpu_op", 40, 5, **{"Sequence number": 9, "Fwd thread id": 1, "External id": 4}),
    X("ReluBackward0", "cpu_op", 41, 3, **{"Sequence number": 9, "Fwd thread id": 1, "External id": 5}),
    X("aten::threshold_backward", "cpu_op", 42, 1.5, **{"External id": 6}),
    X("cudaLaunchKernel", "cuda_runtime", 42.5, 0.5, correlation=100, **{"External id": 6}),
    X("threshold_kernel", "kernel", 47, 4, pid=0, tid=7, correlation=100, stream=7, device=0),
    X(EVAL + "AddmmBackward0", "cpu_op", 50, 10, **{"Sequence number": 8, "Fwd thread id": 1, "External id": 7}),
    X("AddmmBackward0", "cpu_op", 51, 8, **{"Sequence number": 8, "Fwd thread id": 1, "External id": 8}),
    X("aten::mm", "cpu_op", 52, 5, **{"External id": 9}),
    X(EVAL + "torch::autograd::AccumulateGrad", "cpu_op", 61, 2, **{"Sequence number": -1, "External id": 10}),
    X("aten::add_", "cpu_op", 61.5, 1, **{"External id": 11}),
    X("Optimizer.step#SGD.step", "user_annotation", 70, 10),
    X("aten::add_", "cpu_op", 71, 1, **{"External id": 12}),
    X("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "user_annotation", 85, 5),
    X("aten::stack", "cpu_op", 86, 1, **{"External id": 13}),
    _flow("s", 5), _flow("f", 51),
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("passes")
    run_dir = import_traces(write_trace(tmp / "t.json", EVENTS), tmp / "run").run_dir
    r = open_run(run_dir)
    yield r
    r.close()


def _rows(run):
    rows = run.sql("""SELECT e.name, e.ts_ns, e.pass, o.name AS fwd, f.function AS own_fn, s.function AS stmt_fn
        FROM events e LEFT JOIN events o ON o.event_id = e.fwd_op_id LEFT JOIN frames f ON f.frame_id = e.frame_id
        LEFT JOIN frames s ON s.frame_id = e.source_frame_id ORDER BY e.ts_ns, e.name""").fetchall()
    return {(name, ts // 1000): (p, fwd, own, stmt) for name, ts, p, fwd, own, stmt in rows}


def test_backward_nodes_link_to_their_forward_operator(run):
    got = _rows(run)
    # by the sequence number (no flow): the forward op that took number 9
    assert got[(EVAL + "ReluBackward0", 40)][1] == "aten::relu"
    assert got[("aten::threshold_backward", 42)][1] == "aten::relu"
    # the flow wins over the number (the node says 8, the flow starts at aten::linear)
    assert got[(EVAL + "AddmmBackward0", 50)][1] == "aten::linear"
    assert got[("aten::mm", 52)][1] == "aten::linear"
    # AccumulateGrad: with the node evaluated just before it on the thread
    assert got[(EVAL + "torch::autograd::AccumulateGrad", 61)][1] == "aten::linear"
    # device work takes its launch's link
    assert got[("threshold_kernel", 47)][1] == "aten::relu"
    # forward work has none
    assert got[("aten::relu", 22)][1] is None and got[("aten::linear", 5)][1] is None


def test_backward_time_belongs_to_the_forward_statement(run):
    got = _rows(run)
    for key in [(EVAL + "ReluBackward0", 40), ("threshold_kernel", 47), ("aten::mm", 52)]:
        _, _, own, stmt = got[key]
        assert (own, stmt) == ("backward_fn", "forward_fn"), key
    assert got[("aten::stack", 86)][2:] == (None, None)  # outside every Python frame


def test_every_event_has_a_pass(run):
    got = _rows(run)
    assert {k[0]: v[0] for k, v in got.items() if k[0] in ("aten::linear", "aten::relu", "aten::stack", "threshold_kernel",
                                                         "aten::mm", "ProfilerStep#1")} == {
        "aten::linear": "forward", "aten::relu": "forward", "aten::stack": "data", "threshold_kernel": "backward",
        "aten::mm": "backward", "ProfilerStep#1": "other"}
    assert got[("aten::add_", 61)][0] == "backward" and got[("aten::add_", 71)][0] == "optimizer"
    assert run.sql("SELECT count(*) FROM events WHERE pass IS NULL").fetchone()[0] == 0


def test_info_counts_linked_backward_time(run):
    dq = run.manifest["ranks"][0]["data_quality"]
    # outermost backward operators (5 + 10 + 2 µs) and the kernel (4 µs), all linked
    assert dq["backward_ns"] == 21_000 and dq["backward_linked_ns"] == 21_000


def test_a_run_of_format_v1_still_opens():
    """Runs written before fwd_op_id, pass and source_frame_id open with them derived on read."""
    old = REPO / "tests" / "data" / "runs" / "v1_edge_backward_thread"
    with open_run(old) as r:
        assert r.manifest["format_version"] == 1
        n, missing_link, same_frame = r.sql("SELECT count(*), count(fwd_op_id), count(*) FILTER "
                                           "(WHERE source_frame_id IS NOT DISTINCT FROM frame_id) FROM events").fetchone()
        assert n > 0 and missing_link == 0 and same_frame == n
    # and plain DuckDB over the files still reads them
    assert duckdb.sql(f"SELECT count(*) FROM '{old}/rank=*/events.parquet'").fetchall()[0][0] == n


# A DDP step on a GPU, as torch records it: the backward runs on the autograd engine's thread (no
# Python frames there), and when a parameter's AccumulateGrad completes a gradient bucket, DDP's hook
# all-reduces the bucket inside that node. A tensor-parallel layer's backward all-reduces inside its
# own (numbered) node.
#
#   thread 1    train.py(20): step  [0 ---------------------------------------------------- 100]
#                 aten::linear seq 3 [2-10]    aten::mm seq 4 [12-20]    train.py(25) loss.backward() [30-90]
#   thread 2                 evaluate_function: MmBackward0 (seq 4) [31-40], containing c10d::allreduce_ (TP)
#                            evaluate_function: AccumulateGrad [41-43]: aten::add_ only
#                            evaluate_function: AddmmBackward0 (seq 3) [44-50]
#                            evaluate_function: AccumulateGrad [51-60]: DDP's hook, c10d::allreduce_ → nccl kernel
DDP_EVENTS = [
    X("train.py(20): step", "python_function", 0, 100),
    X("aten::linear", "cpu_op", 2, 8, **{"Sequence number": 3, "Fwd thread id": 0, "External id": 1}),
    X("aten::mm", "cpu_op", 12, 8, **{"Sequence number": 4, "Fwd thread id": 0, "External id": 2}),
    X("train.py(25): step", "python_function", 30, 60),
    X(EVAL + "MmBackward0", "cpu_op", 31, 9, tid=2, **{"Sequence number": 4, "Fwd thread id": 1, "External id": 3}),
    X("c10d::allreduce_", "cpu_op", 33, 5, tid=2, **{"External id": 4}),
    X("cudaLaunchKernel", "cuda_runtime", 34, 1, tid=2, correlation=201, **{"External id": 4}),
    X("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "kernel", 36, 3, pid=0, tid=9, correlation=201, stream=9, device=0),
    X(EVAL + "torch::autograd::AccumulateGrad", "cpu_op", 41, 2, tid=2, **{"Sequence number": -1, "External id": 5}),
    X("aten::add_", "cpu_op", 41.5, 1, tid=2, **{"External id": 6}),
    X(EVAL + "AddmmBackward0", "cpu_op", 44, 6, tid=2, **{"Sequence number": 3, "Fwd thread id": 1, "External id": 7}),
    X("aten::mm", "cpu_op", 45, 4, tid=2, **{"External id": 8}),
    X(EVAL + "torch::autograd::AccumulateGrad", "cpu_op", 51, 9, tid=2, **{"Sequence number": -1, "External id": 9}),
    X("aten::add_", "cpu_op", 51.5, 1, tid=2, **{"External id": 10}),
    X("c10d::allreduce_", "cpu_op", 53, 5, tid=2, **{"External id": 11}),
    X("record_param_comms", "cpu_op", 53.5, 4, tid=2, **{"External id": 12, "Collective name": "allreduce"}),
    X("cudaLaunchKernel", "cuda_runtime", 54, 1, tid=2, correlation=202, **{"External id": 12}),
    X("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "kernel", 56, 30, pid=0, tid=9, correlation=202, stream=9, device=0),
]


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ddp")
    r = open_run(import_traces(write_trace(tmp / "t.json", DDP_EVENTS), tmp / "run").run_dir)
    yield r
    r.close()


def test_a_gradient_buckets_all_reduce_belongs_to_no_forward_statement(ddp_run):
    """The 30 µs bucket all-reduce was charged to aten::linear's statement (the node evaluated before
    its AccumulateGrad): a hotspot line then held the whole bucket's communication. It and its hook
    node now go with no forward operator; an AccumulateGrad without a collective keeps the node before
    it, and a tensor-parallel all-reduce inside a numbered node stays that node's."""
    got = _rows(ddp_run)
    assert got[("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 56)][1] is None
    assert got[("c10d::allreduce_", 53)][1] is None and got[(EVAL + "torch::autograd::AccumulateGrad", 51)][1] is None
    assert got[("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 56)][0] == "backward"
    # the plain AccumulateGrad still goes with the node before it (MmBackward0 → aten::mm)
    assert got[(EVAL + "torch::autograd::AccumulateGrad", 41)][1] == "aten::mm"
    # the tensor-parallel all-reduce is its layer's backward
    assert got[("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 36)][1:] == ("aten::mm", None, "step")
    # per statement: the line of the forward pass carries its backward, not the bucket's all-reduce
    by_line = dict(ddp_run.sql("""SELECT f.line, sum(e.dur_ns) FROM events e JOIN frames f ON f.frame_id = e.source_frame_id
        WHERE e.kind = 'kernel' GROUP BY f.line""").fetchall())
    assert by_line == {20: 3_000}
