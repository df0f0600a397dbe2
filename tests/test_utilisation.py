"""FLOPs, bytes, achieved FLOP/s, MFU and the roofline, on hand-built traces with known answers,
real traces (checked against hand computation) and a live CPU recording.

    thread 1 (µs)  0                                                                 1000
    ProfilerStep#1 [===================================================================]
      aten::linear  [64,128]x[256,128] bf16   [10 ---- 60]
        aten::addmm (inside: not counted again)  [12 - 58]  → cudaLaunchKernel → gemm (GPU, 100 µs)
      aten::conv2d  [8,16,32,32]x[32,16,3,3] stride 2 pad 1   [100 --- 200] → two kernels, 30 and 10 µs
      aten::mm      flops recorded by the profiler: 1000       [300 - 310]
"""

from __future__ import annotations

import json

import pytest

from neuron_explorer.analyzers import analyze
from neuron_explorer.analyzers import flops as F
from neuron_explorer.analyzers import peaks as P
from neuron_explorer.analyzers.rules import device_underuse
from neuron_explorer.analyzers.utilisation import kernel_table, peaks_in_force, rank_utilisation, rank_work
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.store import open_run

from .conftest import TRACES, X, cli, write_trace

pytestmark = pytest.mark.slow  # tier: imports torch and records live

US = 1000
BF16 = "c10::BFloat16"
LINEAR_FLOPS = 2 * 64 * 128 * 256
CONV_FLOPS = 2 * 8 * 32 * (16 * 16) * 16 * 9  # out 16x16 at stride 2, padding 1
H100_BF16 = 989.4e12


def _launch(ts, corr, ext):
    return X("cudaLaunchKernel", "cuda_runtime", ts, 1, correlation=corr, **{"External id": ext})


def _kernel(name, ts, dur, corr):
    return X(name, "kernel", ts, dur, pid=0, tid=7, correlation=corr, stream=7, device=0)


EVENTS = [
    X("ProfilerStep#1", "user_annotation", 0, 1000),
    X("aten::linear", "cpu_op", 10, 50, **{"External id": 1, "Input Dims": [[64, 128], [256, 128], [256]], "Input type": [BF16] * 3}),
    X("aten::addmm", "cpu_op", 12, 46, **{"External id": 2, "Input Dims": [[256], [64, 128], [128, 256], [], []],
                                          "Input type": [BF16] * 3 + ["Scalar", "Scalar"]}),
    _launch(20, 100, 2),
    _kernel("gemm", 30, 100, 100),
    X("aten::conv2d", "cpu_op", 100, 100, **{"External id": 3, "Input Dims": [[8, 16, 32, 32], [32, 16, 3, 3], [], [], [], [], []],
                                            "Input type": [BF16, BF16, "", "ScalarList", "ScalarList", "ScalarList", "Scalar"],
                                            "Concrete Inputs": ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"]}),
    _launch(110, 101, 3), _launch(120, 102, 3),
    _kernel("conv_main", 210, 30, 101), _kernel("conv_tail", 240, 10, 102),
    X("aten::mm", "cpu_op", 300, 10, **{"External id": 4, "Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"], "flops": 1000}),
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("util")
    trace = write_trace(tmp / "t.json", EVENTS, deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    run_dir = import_traces(trace, tmp / "run").run_dir
    with open_run(run_dir) as r:
        yield r


def test_operators_are_counted_once_with_their_flops(run):
    work = rank_work(run, 0)
    got = {o["name"]: (o["flops"], o["how"]) for o in work.ops}
    assert got == {"aten::linear": (LINEAR_FLOPS, "estimated"), "aten::conv2d": (CONV_FLOPS, "estimated"),
                   "aten::mm": (1000, "recorded")}  # aten::addmm is inside aten::linear: not counted twice
    linear = next(o for o in work.ops if o["name"] == "aten::linear")
    assert linear["bytes"] == (64 * 128 + 256 * 128 + 256 + 64 * 256) * 2 and linear["dtype"] == "bf16"


def test_kernels_share_their_operators_work_by_duration(run):
    k = {x["name"]: x for x in rank_work(run, 0).kernels}
    assert k["gemm"]["flops"] == LINEAR_FLOPS
    assert k["conv_main"]["flops"] == pytest.approx(CONV_FLOPS * 30 / 40) and k["conv_tail"]["flops"] == pytest.approx(CONV_FLOPS * 10 / 40)
    gemm = next(r for r in kernel_table(rank_work(run, 0)) if r["kernel"] == "gemm")
    nbytes = (64 * 128 + 256 * 128 + 256 + 64 * 256) * 2
    assert gemm["tflops_per_s"] == pytest.approx(LINEAR_FLOPS / 100e-6 / 1e12)
    assert gemm["intensity_flops_per_byte"] == pytest.approx(LINEAR_FLOPS / nbytes)
    # the roofline: bandwidth-bound at this intensity on an H100 (3,350 GB/s)
    assert gemm["bound_tflops_per_s"] == pytest.approx(min(989.4, LINEAR_FLOPS / nbytes * 3350e9 / 1e12))
    assert gemm["efficiency"] == pytest.approx(gemm["tflops_per_s"] / gemm["bound_tflops_per_s"])


def test_step_flops_and_mfu(run):
    u = rank_utilisation(run, 0)
    assert u["device_name"] == "NVIDIA H100 80GB HBM3" and u["peak"]["name"] == "NVIDIA H100 SXM" and u["dtype"] == "bf16"
    (step,) = u["steps"]
    total = LINEAR_FLOPS + CONV_FLOPS + 1000
    assert step["flops"] == total and step["dur_ns"] == 1000 * US
    assert step["mfu"] == pytest.approx(total / 1e-3 / H100_BF16)
    with peaks_in_force(override={"tflops": 100.0}):
        assert rank_utilisation(run, 0)["steps"][0]["mfu"] == pytest.approx(total / 1e-3 / 100e12)


@pytest.mark.parametrize("name, expected", [
    ("NVIDIA A100-PG509-200", "NVIDIA A100"), ("Tesla V100-SXM2-32GB", "NVIDIA V100"), ("Tesla V100-DGXS-32GB", "NVIDIA V100"),
    ("NVIDIA B200", "NVIDIA B200 (HGX)"), ("AMD Instinct MI300X", "AMD Instinct MI300X"), ("NVIDIA H200", "NVIDIA H200 SXM"),
    ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"), ("AMD Instinct MI250X", "AMD Instinct MI250X"),
    ("AMD Radeon Graphics", None), ("ARTEMIS", None), ("NVIDIA GeForce RTX 2080 Ti", None), ("", None)])
def test_peaks_match_the_device_names_of_the_shared_traces(name, expected):
    got = P.match(name)
    assert (got.name if got else None) == expected
    if got:
        assert got.source and got.gbps and all(v > 0 for v in got.tflops.values())


def test_real_v100_resnet50_against_hand_computation():
    """ResNet-50 at batch 32 on a V100 (torch 1.9: no stride in the trace; the output shape comes
    from the batch norm that follows each convolution)."""
    with open_run(TRACES / "v100_resnet50_torch19_memory.json.gz") as r:
        work = rank_work(r, 0)
        stem = next(o for o in work.ops if o["name"] == "aten::conv2d")  # 7x7/2 on 224x224 -> 112x112
        assert stem["flops"] == 2 * 32 * 64 * 112 * 112 * 3 * 7 * 7 and stem["how"] == "estimated"
        fc = next(o for o in work.ops if o["name"] == "aten::linear")
        assert fc["flops"] == 2 * 32 * 2048 * 1000
        u = rank_utilisation(r, 0)
    assert u["peak"]["name"] == "NVIDIA V100" and u["dtype"] == "fp32"
    per_step = {s["flops"] for s in u["steps"]}
    assert len(per_step) == 1  # the same model every step
    for s in u["steps"]:
        assert s["mfu"] == pytest.approx(s["flops"] / (s["dur_ns"] / 1e9) / 15.7e12)
    # forward + backward of ResNet-50 is about 3x its ~4.1 GMAC forward per image
    assert 0.9 * 3 * 2 * 4.1e9 * 32 < per_step.pop() < 1.1 * 3 * 2 * 4.1e9 * 32


def test_formulas_for_attention_and_norms():
    q = [2, 8, 128, 64]
    got = F.op_work("aten::_scaled_dot_product_flash_attention", {"Input Dims": [q, q, q], "Input type": [BF16] * 3})
    assert got[0] == 2 * 2 * 8 * 128 * 128 * (64 + 64)
    bwd = F.op_work("aten::_scaled_dot_product_flash_attention_backward", {"Input Dims": [q, q, q, q], "Input type": [BF16] * 4})
    assert bwd[0] == 2.5 * got[0]
    ln = F.op_work("aten::layer_norm", {"Input Dims": [[4, 10], [10], [10], [10]], "Input type": ["float"] * 4})
    assert ln[0] == 5 * 40
    assert F.op_work("aten::unknown_op", {"Input Dims": [[4]]}) is None


def test_live_recording_uses_the_profilers_own_flops(tmp_path):
    import torch

    import neuron_explorer as nx

    a, b = torch.randn(32, 48), torch.randn(48, 16)
    with nx.profile(tmp_path / "run"):
        torch.mm(a, b)
    with open_run(tmp_path / "run") as r:
        mm = next(o for o in rank_work(r, 0).ops if o["name"] == "aten::mm")
    assert mm["how"] == "recorded" and mm["flops"] == 2 * 32 * 48 * 16 and mm["dtype"] == "fp32"


def test_underused_fp32_gemm_on_a_tensor_core_device(tmp_path):
    """A heavy fp32 GEMM with odd sizes on an A100: far below the bf16 roofline it could reach."""
    m = k = n = 1001
    events = [X("ProfilerStep#1", "user_annotation", 0, 10_000),
              X("aten::mm", "cpu_op", 10, 50, **{"External id": 1, "Input Dims": [[m, k], [k, n]], "Input type": ["float", "float"]}),
              _launch(20, 100, 1), _kernel("sgemm_fp32", 100, 8_000, 100)]
    trace = write_trace(tmp_path / "t.json", events, deviceProperties=[{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}])
    report = analyze(import_traces(trace, tmp_path / "run").run_dir, write=False)
    f = next(x for x in report.findings if x.rule_id == "device-underuse")
    assert f.location.kernel == "sgemm_fp32" and f.location.op == "aten::mm"
    assert "torch.autocast(device_type='cuda', dtype=torch.bfloat16)" in f.recommendation and "allow_tf32" in f.recommendation
    assert "not all multiples of 8" in f.recommendation
    # a shape to fix is a cause critical-path's fp32 class does not name: such a finding is never left to it (leaves_to)
    assert f.evidence.values["causes"] == ["precision", "alignment"] and device_underuse.leaves_to(f) == []
    achieved = 2 * m * k * n / 8e-3
    assert f.evidence.values["tflops_per_s"] == pytest.approx(achieved / 1e12)
    assert f.evidence.values["target_dtype"] == "bf16"
    # saving bound: the time left at the bf16 roofline is removed from the kernel's 8 ms
    bound = f.evidence.values["target_tflops_per_s"] * 1e12
    assert f.saving_bound_ns == int(8_000 * US - 2 * m * k * n / bound * 1e9)


def test_cli_peak_options(tmp_path):
    trace = write_trace(tmp_path / "t.json", EVENTS, deviceProperties=[{"id": 0, "name": "Some New Accelerator"}])
    out = json.loads(cli("analyze", trace, "--json", "--peak-tflops", "50", "--peak-gbps", "1000").stdout)
    u = out["summary"]["ranks"][0]["utilisation"]
    assert u["peak"]["tflops"]["bf16"] == 50 and u["steps"][0]["mfu"] == pytest.approx((LINEAR_FLOPS + CONV_FLOPS + 1000) / 1e-3 / 50e12)
    plain = json.loads(cli("analyze", trace, "--json").stdout)["summary"]["ranks"][0]["utilisation"]
    assert plain["peak"] is None and plain["steps"][0]["mfu"] is None  # unknown device: not guessed
    bad = cli("analyze", trace, "--peak-tflops", "-1")
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0 and "--peak-tflops" in bad.stderr


def test_work_table_is_queryable_and_adds_up_to_the_summary(tmp_path):
    """`analyze` writes analysis/work.parquet: each counted operator with its FLOPs and bytes, and
    each kernel with its share; SQL over it gives the figures the report shows."""
    import duckdb

    trace = write_trace(tmp_path / "t.json", EVENTS, deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    run_dir = import_traces(trace, tmp_path / "run").run_dir
    cli("analyze", run_dir)
    work = str(run_dir / "analysis" / "work.parquet")
    ops = dict(duckdb.sql(f"SELECT name, flops FROM '{work}' WHERE kind = 'op'").fetchall())
    assert ops == {"aten::linear": LINEAR_FLOPS, "aten::conv2d": CONV_FLOPS, "aten::mm": 1000}
    kernels = {name: (flops, op) for name, flops, op in duckdb.sql(
        f"SELECT k.name, k.flops, o.name FROM '{work}' k JOIN '{work}' o ON o.event_id = k.op_event_id AND o.kind = 'op' "
        "WHERE k.kind = 'kernel'").fetchall()}
    assert kernels["gemm"] == (LINEAR_FLOPS, "aten::linear")
    assert kernels["conv_main"][0] == pytest.approx(CONV_FLOPS * 30 / 40) and kernels["conv_tail"][1] == "aten::conv2d"
    report = json.loads((run_dir / "analysis" / "report.json").read_text())
    ((total,),) = duckdb.sql(f"SELECT sum(flops) FROM '{work}' WHERE kind = 'op' AND step = 1").fetchall()
    assert total == report["summary"]["ranks"][0]["utilisation"]["steps"][0]["flops"]


def test_agent_tool_gives_mfu_and_roofline_per_rank(run):
    from neuron_explorer.agent.tools import AgentRuns

    tools = AgentRuns([run.path])
    try:
        res = tools.utilisation(k=2)
        (r,) = res["ranks"]
        total = LINEAR_FLOPS + CONV_FLOPS + 1000
        assert res["ok"] and r["device_name"] == "NVIDIA H100 80GB HBM3" and r["dtype"] == "bf16"
        assert r["steps"][0]["flops"] == total and r["mfu_median"] == pytest.approx(total / 1e-3 / H100_BF16)
        assert [k["kernel"] for k in r["top_kernels"]] == ["gemm", "conv_main"]  # by time, k of them
        bad = tools.utilisation(rank=3)
        assert not bad["ok"] and "rank 3" in bad["error"]
    finally:
        tools.close()


def test_achieved_throughput_per_operator_and_source_line(run):
    """Per operator and per line: FLOPs over the time the work took (its kernels' time when it
    launched any, else its CPU time), with the roofline of the device it ran on."""
    u = rank_utilisation(run, 0)
    ops = {r["op"]: r for r in u["top_ops"]}
    assert ops["aten::linear"]["flops"] == LINEAR_FLOPS and ops["aten::linear"]["dur_ns"] == 100 * US  # the gemm kernel
    assert ops["aten::linear"]["tflops_per_s"] == pytest.approx(LINEAR_FLOPS / 100e-6 / 1e12)
    assert ops["aten::conv2d"]["dur_ns"] == 40 * US and ops["aten::conv2d"]["tflops_per_s"] == pytest.approx(CONV_FLOPS / 40e-6 / 1e12)
    # aten::mm launched nothing: its own 10 us on the CPU, and no device roofline for it
    assert ops["aten::mm"]["dur_ns"] == 10 * US and ops["aten::mm"]["bound_tflops_per_s"] is None
    assert [r["op"] for r in u["top_ops"]] == ["aten::linear", "aten::conv2d", "aten::mm"]  # by time
    assert u["top_lines"] == []  # this hand-built trace has no Python frames


def test_the_achieved_rate_is_of_the_kernels_the_flops_describe(tmp_path):
    """The step above, plus an extension's operator with no FLOP formula launching a 300 µs kernel,
    and a 80 µs all-reduce (a collective: no compute). The FLOPs the counted operators' kernels carry
    (the linear's and the convolution's; the mm launched nothing) are over those kernels' 140 µs:
    164.78 GFLOP/s; they are 140 of the 440 µs of compute kernels (31.8%). The old figure divided
    all FLOPs by all compute time, a rate no kernel ran at (a vLLM piecewise-graph decode on an
    MI300X read 0.34 TFLOP/s while its counted kernels ran at 152)."""
    from neuron_explorer.analyzers import render

    events = EVENTS + [
        X("my_ext::fused_norm", "cpu_op", 400, 20, **{"External id": 5, "Input Dims": [[64, 256]], "Input type": [BF16]}),
        _launch(405, 103, 5), _kernel("fused_norm_kernel", 500, 300, 103),
        X("c10d::allreduce_", "cpu_op", 450, 10, **{"External id": 6}), _launch(452, 104, 6),
        X("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "kernel", 820, 80, pid=0, tid=9,
          correlation=104, stream=9, device=0),
    ]
    trace = write_trace(tmp_path / "t.json", events, deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    report = analyze(import_traces(trace, tmp_path / "run").run_dir, write=False)
    (r,) = report.summary["ranks"]
    u, a = r["utilisation"], r["achieved"]
    assert (u["kernel_flops"], u["kernel_ns"], u["compute_kernel_ns"]) == (LINEAR_FLOPS + CONV_FLOPS, 140 * US, 440 * US)
    assert a["kernel_ns"] == 140 * US and a["counted_share"] == pytest.approx(140 / 440)
    assert a["tflops_per_compute_s"] == pytest.approx((LINEAR_FLOPS + CONV_FLOPS) / 140e-6 / 1e12)
    assert a["tflops_per_s"] == pytest.approx((LINEAR_FLOPS + CONV_FLOPS + 1000) / 1e-3 / 1e12)  # over the step, as before
    text = " ".join(render.text(report, width=200).split())
    assert ("achieved: 23.07 GFLOP/s over the analysed window (MFU 0.0%), 164.78 GFLOP/s while the counted operators' kernels "
            "ran (140.00 µs, 31.8% of the compute kernels' time); the other 68.2% ran in no operator with a FLOP count") in text
    assert "so the window's rate and MFU leave it out" in text
    # no kernel carries counted FLOPs (the mm's are recorded, and it launched nothing): all of the
    # kernels' time is outside the count (MTIA's inference trace: 1.83 MFLOP beside 421.70 ms of kernels),
    # and a rate over the window would describe none of the device's work: none is given (under 1%)
    alone = [e for e in events if e["name"] not in ("aten::linear", "aten::addmm", "aten::conv2d")]
    trace = write_trace(tmp_path / "u.json", alone, deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])
    report = analyze(import_traces(trace, tmp_path / "run-u").run_dir, write=False)
    a = report.summary["ranks"][0]["achieved"]
    assert (a["counted_share"], a["tflops_per_compute_s"], a["kernel_ns"], a["tflops_per_s"], a["mfu"]) == (0.0, None, 0, None, None)
    assert ("achieved: not counted: 0.0% of the compute kernels' time ran in an operator with a FLOP count (no shapes recorded, "
            "no formula, or a graph's replay): too little to give the device's rate") in " ".join(render.text(report, width=200).split())
