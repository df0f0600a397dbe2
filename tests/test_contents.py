"""What is inside a finding (analyzers/contents.py), its advice (analyzers/advice.py), and how the
report, the text report, the dashboard and the agent show it, on hand-built traces whose answers
are known.

    pid 1 / tid 1 (host), times in us; the same again from 1000 us (a second call):
    0 ......................................... 400  aten::matmul  [16,1024] x [1024,1024] float
      10 ................................... 390    aten::mm      [16,1024] x [1024,1024] float
        20 .. 30 cudaLaunchKernel (corr 7)
    450 ... 480 aten::add [16,1024] float            (outside the matmul: not inside it)
      455..460 cudaLaunchKernel (corr 8)
    device 0 / stream 7:
        40 ........ 240 gemm_a (corr 7)   240 ...... 390 gemm_b (corr 7)   490 .. 495 add_k (corr 8)

Right answers: the hotspot operator finding names aten::matmul (800 us of a 1495 us span); inside
its 2 calls: aten::mm x2 760 us, gemm_a x2 400 us, gemm_b x2 300 us, cudaLaunchKernel x2 20 us,
each with the inputs [16,1024] x [1024,1024] float; nothing of aten::add.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from neuron_explorer.analyzers import analyze
from neuron_explorer.analyzers.advice import REASSOCIATE_GAIN_MIN, advice, reassociate, solve_instead_of_inverse
from neuron_explorer.analyzers.render import text
from neuron_explorer.analyzers.report_schema import SCHEMA
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import X, write_trace

BASE = 1_700_000_000_000_000_000
US = 1000
MM = {"Input Dims": [[16, 1024], [1024, 1024]], "Input type": ["float", "float"]}


def _call(t0: int, corr: int) -> list[dict]:
    return [
        X("aten::matmul", "cpu_op", t0, 400, **{"External id": corr}, **MM),
        X("aten::mm", "cpu_op", t0 + 10, 380, **{"External id": corr + 100}, **MM),
        X("cudaLaunchKernel", "cuda_runtime", t0 + 20, 10, correlation=corr, **{"External id": corr + 100}),
        X("gemm_a", "kernel", t0 + 40, 200, pid=0, tid=7, correlation=corr, stream=7, device=0),
        X("gemm_b", "kernel", t0 + 240, 150, pid=0, tid=7, correlation=corr, stream=7, device=0),
    ]


EVENTS = _call(0, 7) + _call(1000, 9) + [
    X("aten::add", "cpu_op", 450, 30, **{"External id": 50, "Input Dims": [[16, 1024], [16, 1024]], "Input type": ["float", "float"]}),
    X("cudaLaunchKernel", "cuda_runtime", 455, 5, correlation=8, **{"External id": 50}),
    X("add_k", "kernel", 490, 5, pid=0, tid=7, correlation=8, stream=7, device=0),
]


@pytest.fixture(scope="module")
def matmul_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("contents")
    return import_traces(write_trace(tmp / "mm.json", EVENTS, baseTimeNanoseconds=BASE), tmp / "mm").run_dir


@pytest.fixture(scope="module")
def report(matmul_run):
    return analyze(matmul_run)  # writes RUN/analysis/report.json, as a user's `analyze` does


def _matmul_finding(doc: dict) -> dict:
    return next(f for f in doc["findings"] if f["rule_id"] == "hotspot" and f["location"]["op"] == "aten::matmul"
                and f["location"]["kernel"] is None)


def test_report_json_lists_the_children_with_their_shapes_dtypes_and_times(matmul_run, report):
    doc = json.loads((matmul_run / "analysis" / "report.json").read_text())
    jsonschema.validate(doc, SCHEMA)
    c = _matmul_finding(doc)["contents"]
    shapes, dtypes = [[16, 1024], [1024, 1024]], ["float", "float"]
    assert c["roots"] == {"what": "every 'aten::matmul' on rank 0", "count": 2, "total_ns": 800 * US,
                          "groups": [{"name": "aten::matmul", "shapes": shapes, "dtypes": dtypes, "count": 2, "total_ns": 800 * US}],
                          "names": [{"name": "aten::matmul", "count": 2, "total_ns": 800 * US}], "optimizer_steps": []}
    assert c["children"] == [
        {"kind": "cpu_op", "name": "aten::mm", "shapes": shapes, "dtypes": dtypes, "count": 2, "total_ns": 760 * US},
        {"kind": "kernel", "name": "gemm_a", "shapes": shapes, "dtypes": dtypes, "count": 2, "total_ns": 400 * US},
        {"kind": "kernel", "name": "gemm_b", "shapes": shapes, "dtypes": dtypes, "count": 2, "total_ns": 300 * US},
        {"kind": "runtime", "name": "cudaLaunchKernel", "shapes": shapes, "dtypes": dtypes, "count": 2, "total_ns": 20 * US},
    ]
    assert c["advice"] == []  # a [16,1024] x [1024,1024] product alone has nothing to reassociate


def test_the_contents_sql_reproduces_the_children(matmul_run, report):
    from neuron_explorer import open_run

    c = _matmul_finding(json.loads((matmul_run / "analysis" / "report.json").read_text()))["contents"]
    with open_run(matmul_run) as r:
        rows = r.sql(c["sql"]).fetchall()
    assert [(k, n, cnt, ns) for k, n, _, _, cnt, ns in rows] == [(ch["kind"], ch["name"], ch["count"], ch["total_ns"]) for ch in c["children"]]


def test_text_report_shows_what_is_inside_the_top_finding(report):
    top = report.findings[0]
    assert top.rule_id == "hotspot" and top.location.op == "aten::matmul"
    out = text(report, width=200)
    block = out.split("\n1. ", 1)[1].split("\n2. ", 1)[0]
    assert "inside every 'aten::matmul' on rank 0: 2 calls, 800.00 µs; inputs [16×1024], [1024×1024] float" in block
    assert "op aten::mm [16×1024], [1024×1024] float ×2 760.00 µs" in block
    assert "kernel gemm_a [16×1024], [1024×1024] float ×2 400.00 µs" in block
    assert "runtime cudaLaunchKernel [16×1024], [1024×1024] float ×2 20.00 µs" in block
    assert "add_k" not in block


def test_agent_findings_and_dashboard_show_the_same_children(matmul_run, report):
    from neuron_explorer.agent.tools import AgentRuns
    from neuron_explorer.dashboard.runs import RunSet
    from neuron_explorer.dashboard.views.findings import findings

    rs = AgentRuns([matmul_run])
    try:
        out = rs.findings(k=10)
    finally:
        rs.close()
    f = next(x for x in out["findings"] if x["rule_id"] == "hotspot" and "operator" in x["title"])
    assert f["inside"] == {"what": "every 'aten::matmul' on rank 0", "count": 2, "total_ns": 800 * US, "inputs": "[16x1024], [1024x1024] float"}
    assert [(c["kind"], c["name"], c["inputs"], c["count"], c["total_ns"]) for c in f["children"]] == [
        ("cpu_op", "aten::mm", "[16x1024], [1024x1024] float", 2, 760 * US), ("kernel", "gemm_a", "[16x1024], [1024x1024] float", 2, 400 * US),
        ("kernel", "gemm_b", "[16x1024], [1024x1024] float", 2, 300 * US),
        ("runtime", "cudaLaunchKernel", "[16x1024], [1024x1024] float", 2, 20 * US)]
    dash = RunSet([matmul_run])
    try:
        row = next(r for r in findings(dash)["rows"] if r["rule_id"] == "hotspot" and r["location"]["op"] == "aten::matmul"
                   and r["location"]["kernel"] is None)
    finally:
        dash.close()
    assert row["contents"]["children"] == _matmul_finding(report.to_dict())["contents"]["children"]
    assert row["inside"][1].strip() == "op aten::mm [16×1024], [1024×1024] float ×2 760.00 µs"


# ---- advice --------------------------------------------------------------------------------------

def _group(name, shapes, count=10, total_ns=1_000_000, dtypes=("float", "float")):
    return {"name": name, "shapes": shapes, "dtypes": list(dtypes), "count": count, "total_ns": total_ns}


def _contents(*groups, children=()):
    return {"roots": {"what": "x", "count": 1, "total_ns": 1, "groups": list(groups)}, "children": list(children)}


def test_reassociate_a_square_product_that_multiplies_a_small_batch():
    ab = _group("aten::mm", [[1024, 1024], [1024, 1024]])
    xab = _group("aten::mm", [[16, 1024], [1024, 1024]])
    got = reassociate(_contents(ab, xab))
    # now: 1024^3 + 16*1024^2 = 1,090,519,040; after: 16*1024*(1024+1024) = 33,554,432 multiply-adds: 32.5x
    assert got.startswith("reassociate: a [1024×1024] @ [1024×1024] product (aten::mm, 10 calls, 1.00 ms)")
    assert "33,554,432 instead of 1,090,519,040 multiply-adds per call (32x fewer)" in got
    assert "compute x @ (A @ B) as (x @ A) @ B" in got
    # as children of an operator too (kind cpu_op), not as kernels
    assert reassociate(_contents(children=[{"kind": "cpu_op", **ab}, {"kind": "cpu_op", **xab}])) == got
    assert reassociate(_contents(children=[{"kind": "kernel", **ab}, {"kind": "kernel", **xab}])) is None


def test_no_reassociation_when_it_does_not_clearly_pay_or_shapes_do_not_chain():
    ab = _group("aten::mm", [[1024, 1024], [1024, 1024]])
    # a batch as large as the matrices: (x @ A) @ B costs the same; below REASSOCIATE_GAIN_MIN
    assert reassociate(_contents(ab, _group("aten::mm", [[1024, 1024], [1024, 1024]]))) is None
    assert REASSOCIATE_GAIN_MIN > 1
    # the batch does not multiply A @ B's result ([1024, 512] here)
    assert reassociate(_contents(ab, _group("aten::mm", [[16, 1024], [1024, 512]]))) is None
    # A @ B computed once, used 10 times: already hoisted
    assert reassociate(_contents(_group("aten::mm", [[1024, 1024], [1024, 1024]], count=1), _group("aten::mm", [[16, 1024], [1024, 1024]]))) is None
    # linear's weight is [N, K]: not a plain product
    assert reassociate(_contents(_group("aten::linear", [[1024, 1024], [1024, 1024]]), _group("aten::linear", [[16, 1024], [1024, 1024]]))) is None


def test_solve_instead_of_inverse():
    inv = {"kind": "cpu_op", **_group("aten::linalg_inv", [[64, 64]], count=3, total_ns=2_500_000, dtypes=("float",))}
    got = solve_instead_of_inverse(_contents(children=[inv]))
    assert got == ("use torch.linalg.solve instead of inv: a matrix inverse runs inside (aten::linalg_inv, 3 calls, 2.50 ms); "
                   "torch.linalg.solve(A, B) in place of torch.linalg.inv(A) @ B is faster and more accurate")
    assert solve_instead_of_inverse(_contents(_group("aten::mm", [[16, 64], [64, 64]]))) is None
    assert advice({}) == [] and advice(_contents(children=[inv])) == [got]


def test_reassociation_advice_reaches_the_report(tmp_path):
    """x @ (A @ B) in a loop: a top-level aten::matmul of [1024,1024] x [1024,1024] and one of
    [16,1024] x [1024,1024], both 3 times."""
    ev = []
    for i in range(3):
        t = i * 1000
        ev += [X("aten::matmul", "cpu_op", t, 600, **{"Input Dims": [[1024, 1024], [1024, 1024]], "Input type": ["float", "float"]}),
               X("aten::matmul", "cpu_op", t + 700, 100, **{"Input Dims": [[16, 1024], [1024, 1024]], "Input type": ["float", "float"]})]
    run_dir = import_traces(write_trace(tmp_path / "chain.json", ev), tmp_path / "chain").run_dir
    rep = analyze(run_dir, write=False)
    f = next(f for f in rep.findings if f.rule_id == "hotspot" and f.location.op == "aten::matmul")
    assert [a.split(":")[0] for a in f.contents["advice"]] == ["reassociate"]
    assert "a [1024×1024] @ [1024×1024] product (aten::matmul, 3 calls, 1.80 ms)" in f.contents["advice"][0]
    assert "advice: reassociate" in text(rep, width=400)


def _optimizer_contents(cls: str, names: list[str], inside_ns: int, total_ns: int = 1_000_000) -> dict:
    return {"roots": {"total_ns": total_ns, "names": [{"name": n, "count": 12, "total_ns": total_ns // len(names)} for n in names],
                      "optimizer_steps": [{"optimizer": cls, "count": 12 * len(names), "total_ns": inside_ns}]}}


def test_an_optimizers_step_is_advised_the_implementation_its_class_has():
    """torch.optim runs a for-loop over the parameters unless every parameter is on a CUDA-like
    device (then foreach); fused never by itself. Adam, AdamW, SGD and Adagrad take fused=True;
    the others foreach=True only; another library's optimizer gets no advice."""
    from neuron_explorer.analyzers.advice import optimizer_implementation

    loop = ["aten::mul_", "aten::addcdiv_", "aten::sqrt"]
    (adamw,) = advice(_optimizer_contents("AdamW", loop, 900_000))
    assert adamw.startswith("AdamW runs its for-loop implementation here: 36 per-parameter operator calls, 900.00 µs. "
                            "Construct it with fused=True")
    rmsprop = optimizer_implementation(_optimizer_contents("RMSprop", loop, 900_000))
    assert "Construct it with foreach=True" in rmsprop and "fused=True" not in rmsprop
    foreach = optimizer_implementation(_optimizer_contents("Adam", ["aten::_foreach_mul_", "aten::_foreach_addcdiv_"], 900_000))
    assert foreach.startswith("Adam runs its foreach implementation here (24 multi-tensor operator calls, 900.00 µs)")
    assert optimizer_implementation(_optimizer_contents("RMSprop", ["aten::_foreach_mul_"], 900_000)) is None  # no fused RMSprop
    assert optimizer_implementation(_optimizer_contents("AdamW", ["aten::_fused_adamw_"], 900_000)) is None  # already fused
    assert optimizer_implementation(_optimizer_contents("AdamW", loop, 400_000)) is None  # most of the time is elsewhere
    assert optimizer_implementation({"roots": {"total_ns": 1, "names": []}}) is None
    # another library's optimizer (edge_no_rank's FusedAdam, not torch.optim's) takes neither argument; one slow
    # foreach call in a device-idle gap (rtx2080ti_linear_epoch_us's SGD) is no case for a faster implementation
    assert optimizer_implementation(_optimizer_contents("FusedAdam", loop, 900_000)) is None
    one = _optimizer_contents("SGD", ["aten::_foreach_add_", "aten::_foreach_mul_"], 900_000)
    assert optimizer_implementation(one).startswith("SGD runs its foreach implementation here (24 multi-tensor operator calls")
    one["roots"]["optimizer_steps"][0]["count"] = 1
    assert optimizer_implementation(one) is None


# ---- many findings at once: roots inside roots, an annotation's, the same roots twice ---------------

NESTED = [
    X("ProfilerStep#1", "user_annotation", 0, 2000),  # step 1: every event
    X("forward", "user_annotation", 90, 600),  # an annotation around both operators
    X("aten::matmul", "cpu_op", 100, 400, **{"External id": 1}, **MM),     # outer
    X("aten::matmul", "cpu_op", 110, 380, **{"External id": 2}, **MM),     # inner: a root inside a root
    X("aten::mm", "cpu_op", 120, 360, **{"External id": 3}, **MM),
    X("cudaLaunchKernel", "cuda_runtime", 130, 10, correlation=7, **{"External id": 3}),
    X("gemm", "kernel", 150, 200, pid=0, tid=7, correlation=7, stream=7, device=0),
    X("aten::add", "cpu_op", 550, 30, **{"External id": 4, "Input Dims": [[16, 1024], [16, 1024]], "Input type": ["float", "float"]}),
    X("cudaLaunchKernel", "cuda_runtime", 555, 5, correlation=8, **{"External id": 4}),
    X("add_k", "kernel", 590, 5, pid=0, tid=7, correlation=8, stream=7, device=0),
]


def test_contents_of_many_findings_count_each_child_once_and_equal_each_finding_alone(tmp_path):
    """All the findings' contents come from one query (findings_contents): an operator inside
    another of its name (aten::matmul inside aten::matmul) is a child of the outer one, not a second
    root (the roots' time is the outer call's 400 µs, not 780), and the kernel its launch launched
    is counted once; an annotation's children are every operator inside it; two findings whose
    roots are the same events (all steps, and step 1, the only one) get the same contents. Each
    finding's contents are the ones it gets alone (finding_contents, the query shown as evidence)."""
    from neuron_explorer import open_run
    from neuron_explorer.analyzers.contents import finding_contents, findings_contents

    run_dir = import_traces(write_trace(tmp_path / "n.json", NESTED, baseTimeNanoseconds=BASE), tmp_path / "n").run_dir
    with open_run(run_dir) as run:
        kernel = run.sql("SELECT event_id FROM events WHERE name = 'gemm'").fetchone()[0]
    found = [{"location": {"rank": 0, "op": "aten::matmul"}},
             {"location": {"rank": 0, "op": "aten::add"}},
             {"location": {"rank": 0, "op": "aten::add", "steps": [1]}},
             {"location": {"rank": 0, "op": "forward"}},
             {"location": {"rank": 0}, "evidence": {"sample_event_ids": [kernel]}},
             {"location": {"rank": 0, "op": "no such operator"}},
             {"location": {"rank": None, "op": "aten::add"}}]
    with open_run(run_dir) as run:
        together = findings_contents(run, found)
        assert together == [finding_contents(run, f) for f in found]

    def children(c):
        return [(ch["kind"], ch["name"], ch["count"], ch["total_ns"] // US) for ch in c["children"]]

    matmul, add, add_step1, forward, sample, none, no_rank = together
    assert (matmul["roots"]["count"], matmul["roots"]["total_ns"] // US) == (1, 400)
    assert children(matmul) == [("cpu_op", "aten::matmul", 1, 380), ("cpu_op", "aten::mm", 1, 360), ("kernel", "gemm", 1, 200),
                                ("runtime", "cudaLaunchKernel", 1, 10)]
    assert children(add) == [("kernel", "add_k", 1, 5), ("runtime", "cudaLaunchKernel", 1, 5)]
    assert add_step1["roots"]["what"] == "every 'aten::add' on rank 0 in step 1" and add["roots"]["what"] == "every 'aten::add' on rank 0"
    assert {k: v for k, v in add_step1.items() if k not in ("roots", "sql")} == {k: v for k, v in add.items() if k not in ("roots", "sql")}
    assert children(forward) == [("cpu_op", "aten::matmul", 2, 780), ("cpu_op", "aten::mm", 1, 360), ("kernel", "gemm", 1, 200),
                              ("cpu_op", "aten::add", 1, 30), ("runtime", "cudaLaunchKernel", 1, 10), ("kernel", "add_k", 1, 5),
                                 ("runtime", "cudaLaunchKernel", 1, 5)]  # two launches: under operators of other inputs
    assert sample["roots"]["count"] == 1 and children(sample) == children(matmul)[:2] + children(matmul)[2:] and \
        sample["roots"]["total_ns"] // US == 400  # the kernel's top-level operator: the outer matmul
    assert none == {} and no_rank == {}


def test_contents_after_the_analysis_read_the_args_equal_each_finding_alone_with_and_without_shapes(tmp_path):
    """Once the analysis has found whether a rank's operators name their inputs (utilisation.args_named:
    a trace recorded without shapes names none), the contents of many findings read the operators'
    args only where they can hold shapes: with shapes, the children keep theirs; without, they have
    none; either way each finding's contents are the ones it gets alone."""
    from neuron_explorer import open_run
    from neuron_explorer.analyzers.contents import finding_contents, findings_contents
    from neuron_explorer.analyzers.utilisation import args_named

    shapeless = [{**e, "args": {k: v for k, v in e.get("args", {}).items() if k not in ("Input Dims", "Input type")}} for e in NESTED]
    found = [{"location": {"rank": 0, "op": "aten::matmul"}}, {"location": {"rank": 0, "op": "forward"}}]
    for name, events, named in (("shaped", NESTED, True), ("shapeless", shapeless, False)):
        run_dir = import_traces(write_trace(tmp_path / f"{name}.json", events, baseTimeNanoseconds=BASE), tmp_path / name).run_dir
        with open_run(run_dir) as run:
            assert args_named(run, 0) is named
            together = findings_contents(run, found)
            alone = [finding_contents(run, f) for f in found]
        assert together == alone
        mm = next(ch for ch in together[0]["children"] if ch["name"] == "aten::mm")
        add = next(ch for ch in together[1]["children"] if ch["name"] == "aten::add")
        assert (mm["shapes"], add["dtypes"]) == (([[16, 1024], [1024, 1024]], ["float", "float"]) if named else ([], [])), name


def test_the_capture_scans_are_left_out_only_where_the_manifest_counts_no_graph_replay(tmp_path):
    """The roots charged at capture (graph-replayed work, `capture_op`) are looked for only on ranks
    whose manifest does not say they replayed nothing: a trace without graph launches says so and
    gets the same contents as each finding alone (whose SQL keeps the capture test); a manifest
    that does not count replays (an older run) keeps the scans."""
    from neuron_explorer import open_run
    from neuron_explorer.analyzers.contents import _may_have_replays, _roots_in, finding_contents, findings_contents

    run_dir = import_traces(write_trace(tmp_path / "n.json", NESTED, baseTimeNanoseconds=BASE), tmp_path / "n").run_dir
    found = [{"location": {"rank": 0, "op": "aten::matmul"}}, {"location": {"rank": 0, "op": "forward"}}]
    with open_run(run_dir) as run:
        assert _may_have_replays(run, 0) is False
        assert findings_contents(run, found) == [finding_contents(run, f) for f in found]
        del run.manifest["ranks"][0]["data_quality"]["graph_replay_device_events"]
        assert _may_have_replays(run, 0) is True
    spec = [(0, "", "", ("op", "aten::matmul", []))]
    assert "capture_top_op" in _roots_in(spec) and "capture_top_op" not in _roots_in(spec, replays=False)


# ---- a real trace ------------------------------------------------------------------------------

def test_real_trace_comm_exposed_contents(tmp_path):
    """mi300x (DDP ResNet, rank 0 of 8): the exposed-communication finding names the collective kernel
    and its callers (analyzers/device_time.py), so its contents are its sample events: the operators
    that launched the sampled kernels (a gradient hook's AccumulateGrad and a c10d::broadcast_), and
    inside them the NCCL kernels: the all-reduce of a bucket of 2,873,320 elements, 6.91 ms, and the
    broadcast of 9,600, 14.32 µs (checked with `neuron-explorer query`: the dur_ns of the
    ncclDevKernel_Generic kernels launched under the sampled record_param_comms)."""
    from .conftest import TRACES

    rep = analyze(TRACES / "mi300x_ddp_resnet_act_checkpoint.json.gz", write=False)
    f = next(f for f in rep.findings if f.rule_id == "comm-exposed")
    assert f.location.kernel == "ncclDevKernel_Generic" and f.location.op is None
    kernels = [(c["name"][:21], c["shapes"][0], c["count"], c["total_ns"]) for c in f.contents["children"] if c["kind"] == "kernel"]
    assert kernels[:2] == [("ncclDevKernel_Generic", [[2873320]], 1, 6_911_678), ("ncclDevKernel_Generic", [[9600]], 1, 14_319)]
    roots = f.contents["roots"]
    assert roots["what"].startswith("its sample events") and roots["count"] == 2
    # operators nested in the roots take no longer than the roots
    assert all(c["total_ns"] <= roots["total_ns"] for c in f.contents["children"] if c["kind"] in ("cpu_op", "runtime"))


# ---- the names and shapes as people read them (fmt) -------------------------------------------------

def test_kernel_names_are_shortened_and_demangled():
    """One shortening for every view (fmt.kernel_name), on names the shared traces hold."""
    from neuron_explorer.fmt import kernel_name

    assert kernel_name("volta_sgemm_64x64_tn") == "volta_sgemm_64x64_tn"  # names without a signature stay
    assert kernel_name("Memcpy HtoD (Pageable -> Device)") == "Memcpy HtoD (Pageable -> Device)"
    assert kernel_name("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)") == \
        "ncclKernel_AllReduce_RING_LL_Sum_float"
    # template arguments one level deep, without their namespaces; the return type and parameters go
    assert kernel_name("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >"
                       "(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)", 200) == \
        "at::native::vectorized_elementwise_kernel<4, FillFunctor<…>, Array<…> >"
    assert kernel_name("std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float>(int)") == \
        "internal::gemvx::kernel<int, int, float>"
    # a comparison inside a template argument's parentheses is no bracket (b200_vllm_eager's RMS norm)
    assert kernel_name("std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type "
                       "vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, long, float, int, int)") == \
        "vllm::fused_add_rms_norm_kernel<BFloat16, 8>"
    # h100_timesformer_inference's softmax (68.69 ms, its heaviest kernel): the anonymous namespace
    # cut it to `at::native::` before
    softmax = ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16, float, c10::BFloat16, "
               "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, int)")
    assert kernel_name(softmax, 200) == "at::native::cunn_SoftMaxForward<8, BFloat16, float, BFloat16, SoftMaxForwardEpilogue>"
    # too wide: the name's own namespaces go first, then the end
    assert kernel_name(softmax) == "cunn_SoftMaxForward<8, BFloat16, float, BFloat16, SoftMaxFo…"
    assert kernel_name("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false>(float*, float const*, int, int, int)") \
        == "softmax_warp_forward<float, float, float, 10, false>"
    # a function named in a template argument: its name, not its parameters and lambdas
    copy = ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::"
            "operator()() const::{lambda()#4}::operator()() const::{lambda(long)#1}, at::detail::Array<char*, 2>, "
            "TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, at::native::memory::LoadWithCast<1>, "
            "at::native::memory::StoreWithCast<1> >(int, at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::"
            "operator()() const::{lambda()#4}::operator()() const::{lambda(long)#1}, at::detail::Array<char*, 2>)")
    assert kernel_name(copy, 80) == "unrolled_elementwise_kernel<direct_copy_kernel_cuda, Array<…>, TrivialOffsetCal…"
    assert kernel_name("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>(cutlass_80_tensorop_s1688gemm_64x64_"
                       "32x6_tn_align4::Params)", 80) == "cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x6_tn_align4>"
    # mangled (a ROCm composable-kernel convolution): demangled to its qualified name
    assert kernel_name("_ZN2ck16tensor_operation6device12_GLOBAL__N_139kernel_grouped_conv_fwd_xdl_cshuffle_v3INS_28GridwiseGemm_xdl"
                       "_cshuffle_v3INS_13tensor_layout4gemm8RowMajorEEEEvT_", 80) == \
        "ck::tensor_operation::device::kernel_grouped_conv_fwd_xdl_cshuffle_v3"
    assert kernel_name("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_") \
        == "at::native::vectorized_elementwise_kernel"
    assert kernel_name("k" * 500, 60) == "k" * 59 + "…"
    assert kernel_name(None) is None and kernel_name("") == ""


def test_shapes_text():
    from neuron_explorer.fmt import shapes

    assert shapes([[16, 1024], [1024, 1024], []], ["float", "float", "Scalar"]) == "[16×1024], [1024×1024] float"
    assert shapes([[[8816192]], []], ["TensorList", ""], "x") == "[8816192] TensorList"
    assert shapes([], []) == "" and shapes(None) == ""


OPTIMIZER_LOOP = """\
import torch

torch.manual_seed(0)
params = [torch.nn.Parameter(torch.randn(64, 64)) for _ in range(100)]
opt = torch.optim.AdamW(params, lr=1e-3)
for _ in range(6):
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()  # THE STEP
"""


@pytest.mark.slow  # records a real torch loop
def test_adamw_on_cpu_is_advised_fused_with_its_calls_counted_from_the_run(tmp_path):
    """AdamW over 100 CPU parameters, recorded with `record`: torch runs its for-loop implementation
    (foreach is its default only on CUDA-like devices), a few operators per parameter per step. The
    hotspot on `opt.step()` says so and advises fused=True, with the calls and time of the operators
    inside the optimizer's steps, counted here from the run."""
    from neuron_explorer import open_run
    from neuron_explorer.fmt import duration

    from .conftest import cli

    (tmp_path / "train.py").write_text(OPTIMIZER_LOOP)
    res = cli("record", "-o", tmp_path / "run", tmp_path / "train.py", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    report = json.loads(cli("analyze", tmp_path / "run", "--json").stdout)
    (step,) = [f for f in report["findings"] if f["rule_id"] == "hotspot" and "# THE STEP" in f["title"]]
    with open_run(tmp_path / "run") as r:
        calls, ns = r.sql("""SELECT count(*), sum(o.dur_ns) FROM events o JOIN events a ON a.kind = 'user_annotation'
            AND a.name = 'Optimizer.step#AdamW.step' AND a.pid = o.pid AND a.tid = o.tid AND a.ts_ns <= o.ts_ns
            AND a.ts_ns + a.dur_ns >= o.ts_ns + o.dur_ns WHERE o.kind = 'cpu_op' AND o.top_op_id = o.event_id""").fetchone()
    assert calls >= 6 * 100 * 4 and step["contents"]["roots"]["optimizer_steps"] == [{"optimizer": "AdamW", "count": calls, "total_ns": ns}]
    assert step["contents"]["advice"] == [
        f"AdamW runs its for-loop implementation here: {calls:,} per-parameter operator calls, {duration(ns)}. Construct it with "
        "fused=True (one fused operator over all parameters per step; on CPU from torch 2.4) or foreach=True: torch picks foreach "
        "by itself only where every parameter is on a CUDA, XPU, MTIA or PrivateUse1 device, and never fused"]
    text = " ".join(cli("analyze", tmp_path / "run").stdout.split())
    assert "of them: aten::" in text and "advice: AdamW runs its for-loop implementation here" in text
