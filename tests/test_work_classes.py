"""Classes of device work (vocab.work_class), the architecture table (peaks.ARCHS) with its
detection and advice, and why MFU is missing: hand-built cases with known answers, and the real
V100 and A100 traces."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from neuron_explorer import vocab
from neuron_explorer.analyzers import analyze
from neuron_explorer.analyzers import peaks as P
from neuron_explorer.analyzers.render import text
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import TRACES, X, write_trace


def _text(report) -> str:
    """The text report with its line wrapping undone."""
    return " ".join(text(report).split())

US = 1000

CASES = [  # (kind, kernel name, top-level operator, operator args) -> class
    (("kernel", "volta_sgemm_128x64_nn", "aten::mm", None), "fp32_matmul"),
    (("kernel", "void cudnn::detail::dgrad_engine<float, 512, 6>", "CudnnConvolutionBackward", None), "fp32_matmul"),
    (("kernel", "volta_h884gemm_64x64_ldg8_nn", "aten::mm", json.dumps({"Input type": ["c10::Half"]})), "matmul"),
    (("kernel", "Cijk_Alik_Bljk_SB_MT64x16x32", "aten::addmm", json.dumps({"Input type": ["float"]})), "fp32_matmul"),
    (("kernel", "ampere_bf16_s16816gemm_bf16_128x128", "aten::linear", json.dumps({"Input type": ["float"]})), "matmul"),
    (("kernel", "gemv_kernel", "aten::linear", json.dumps({"Input type": ["float", "float"]})), "fp32_matmul"),
    # under autocast the top-level operator's inputs are float and its kernel is not: the name's precision decides
    (("kernel", "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn", "aten::linear",
      json.dumps({"Input type": ["float"]})), "matmul"),
    (("kernel", "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x32x128_MI16x16x1_SN", "aten::linear",
      json.dumps({"Input type": ["float"]})), "matmul"),
    (("kernel", "flash_fwd_kernel<Flash_fwd_kernel_traits>", "aten::scaled_dot_product_attention", None), "attention"),
    (("kernel", "some_kernel", "aten::_flash_attention_forward", None), "attention"),
    # SageAttention (xDiT FLUX on an MI300, TraceLens): its quantised attention and its Q/K quantisation, under no operator
    (("kernel", "sage_fwd", None, None), "attention"),
    (("kernel", "sage_quant_kernel", None, None), "attention"),
    (("kernel", "void format_message_kernel<float>", None, None), "other"),  # 'sage' inside a word: no attention
    (("kernel", "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float>", "aten::batch_norm", None), "norm"),
    (("kernel", "vectorized_layer_norm_kernel", "aten::layer_norm", None), "norm"),
    (("kernel", "void at::native::normal_kernel<float>", "aten::normal_", None), "other"),
    (("kernel", "void at::native::vectorized_elementwise_kernel<4, AddFunctor>", "aten::add_", None), "elementwise"),
    (("kernel", "add_kernel", "aten::add", None), "elementwise"),
    (("kernel", "ncclKernel_AllReduce_RING_LL_Sum_float", "c10d::allreduce_", None), "communication"),
    (("memcpy", "Memcpy HtoD (Pageable -> Device)", "aten::to", None), "memcpy"),
    (("memset", "Memset (Device)", None, None), "memcpy"),
    (("kernel", "max_pool_backward_nchw<float>", "MaxPool2DWithIndicesBackward0", None), "other"),
    # TF32 Tensor Core kernels are fp32 data (what they run in is kernel_runs_tf32's)
    (("kernel", "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>(x::Params)", "aten::mm", None), "fp32_matmul"),
    (("kernel", "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw", "aten::conv2d", None), "fp32_matmul"),
    # Volta's s884 and Ampere's s16816 MMAs take 16-bit operands only: never fp32, whatever the operator's input
    (("kernel", "volta_s884gemm_128x128_ldg8_f2f_nn", "aten::linear", json.dumps({"Input type": ["float"]})), "matmul"),
    (("kernel", "ampere_s16816gemm_64x64_nn", "aten::linear", json.dumps({"Input type": ["float"]})), "matmul"),
    # FBGEMM_GPU's embedding lookup (a100_train_blocking_dtoh) is no GEMM for its library's name
    (("kernel", "void split_embedding_codegen_forward_unweighted_kernel<float, float, float, false, long, 1ul, 16ul>"
                "(fbgemm_gpu::fbgemm_tensor_accessor<float>)", "fbgemm::split_embedding_codegen_lookup_rowwise_adagrad_function", None),
     "other"),
]


@pytest.mark.parametrize(("args", "cls"), CASES)
def test_work_class_and_its_sql_twin_agree(args, cls):
    assert vocab.work_class(*args) == cls
    con = duckdb.connect()
    con.execute("CREATE TABLE t (kind VARCHAR, name VARCHAR, op VARCHAR, args VARCHAR)")
    con.execute("INSERT INTO t VALUES (?, ?, ?, ?)", list(args))
    got = con.execute(f"SELECT {vocab.work_class_sql('kind', 'name', 'op', 'args')} FROM t").fetchone()[0]
    assert got == cls
    assert cls in vocab.WORK_CLASSES


@pytest.mark.parametrize(("name", "dtype"), [
    ("ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn", "fp16"),  # cuBLAS: fp16 data, fp32 accumulation
    ("volta_h884gemm_64x64_ldg8_nn", "fp16"),
    ("volta_s884gemm_128x128_ldg8_f2f_nn", "fp16"),  # Volta's MMA (m8n8k4) takes fp16 operands only, fp32 accumulation
    ("sm90_xmma_gemm_e4m3e4m3_e4m3f32_f32_tn_n_tilesize128x128x128", "fp8"),
    ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x32x128_MI16x16x1_SN", "bf16"),  # hipBLASLt (the MI300X traces)
    ("Cijk_Ailk_Bljk_HHS_BH_MT128x128x32_MI32x32x8x1", "fp16"),
    ("_matmul_ogs_NNT_bf16xbf16xmxfp4_128x128x128x1_swiglu", "bf16"),  # vLLM's Triton MoE GEMM
    ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1", None),  # rocBLAS fp32, batched (the MI250 trace)
    ("volta_sgemm_128x64_nn", None),
    ("void at::native::vectorized_elementwise_kernel<4, AddFunctor>", None),
])
def test_a_kernel_names_precision_is_the_dtype_it_computes_in(name, dtype):
    assert vocab.kernel_precision(name) == dtype


@pytest.mark.parametrize(("name", "tf32", "matrix"), [
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>(cutlass_80_tensorop_s1688gemm::Params)", True, True),
    ("sm80_xmma_wgrad_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x128x16", True, True),  # cuDNN
    ("void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688fprop_optimized_tf32_128x128_32x4_nhwc_align4>(x)", True, True),
    ("cutlass_tensorop_s1688tf32gemm_256x128_16x3_nn_align4", True, True),
    ("ampere_sgemm_128x64_nn", False, True),  # SIMT fp32: TF32 would move it onto the Tensor Cores
    ("volta_sgemm_64x64_nt", False, True),
    ("void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>(int, int)", False, True),
    ("void cutlass::Kernel<cutlass_simt_sgemm_128x128_8x4_nt_align1>(x)", False, True),
    ("void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_128x128_nn_align1>(x)", False, True),  # bf16 data
    ("void cutlass::Kernel<cutlass_75_tensorop_s1688gemm_f16_256x128_32x2_nt_align8>(x)", False, True),  # Turing: fp16 data
    ("volta_s884gemm_128x128_ldg8_f2f_nn", False, True),
    ("void splitKreduce_kernel<float, float, float, float, true, false, false>(cublasSplitKParams<float>, float const*)", False, False),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 2, 2, false, false, cublasGemvParamsEx<int>>(x)",
     False, False),
    ("void split_embedding_codegen_forward_unweighted_kernel<float, float, float>(fbgemm_gpu::fbgemm_tensor_accessor<float>)",
     False, False),
])
def test_a_kernel_name_says_whether_it_runs_tf32_and_whether_it_is_matrix_work(name, tf32, matrix):
    """kernel_runs_tf32: fp32 data the Tensor Cores run as TF32 (allowing TF32 changes nothing for it);
    is_matrix_kernel: by its own name, before its template arguments and parameters (what TF32 would
    move onto the Tensor Cores). Their SQL twins agree."""
    assert vocab.kernel_runs_tf32(name) is tf32 and vocab.is_matrix_kernel(name) is matrix
    con = duckdb.connect()
    got = con.execute(f"SELECT {vocab.kernel_runs_tf32_sql('n')}, {vocab.is_matrix_kernel_sql('n')} FROM (SELECT ? AS n)", [name]).fetchone()
    assert got == (tf32, matrix)


def test_every_peak_names_an_architecture_whose_matrix_dtypes_it_has():
    names = {a.name for a in P.ARCHS}
    for p in P.PEAKS:
        assert p.arch in names, p.name
        arch = P.arch_of(p)
        faster = {d for d, t in p.tflops.items() if d not in ("fp32", "fp64") and t > p.tflops.get("fp32", 0)}
        assert faster <= set(arch.matrix_dtypes), (p.name, faster, arch.matrix_dtypes)


@pytest.mark.parametrize(("name", "props", "kernels", "arch", "how"), [
    ("Tesla V100-SXM2-32GB", [], {}, "NVIDIA Volta (sm70: V100)", "device name"),
    ("NVIDIA H200", [], {}, "NVIDIA Hopper (sm90: H100, H200)", "device name"),
    ("AMD Instinct MI300X", [], {}, "AMD CDNA3 (gfx942: MI300X)", "device name"),
    ("ARTEMIS", [], {}, "Meta MTIA", "device name"),
    ("AWS Trainium2", [], {}, "AWS Trainium2", "device name"),
    ("AMD Radeon Graphics", [{"name": "AMD Radeon Graphics", "computeMajor": 9, "computeMinor": 0, "warpSize": 64}], {},
     "AMD CDNA2 (gfx90a: MI210, MI250X)", "compute capability 9.0"),
    ("NVIDIA Graphics Device", [{"name": "NVIDIA Graphics Device", "computeMajor": 9, "computeMinor": 0, "warpSize": 32}], {},
     "NVIDIA Hopper (sm90: H100, H200)", "compute capability 9.0"),
    (None, [], {"void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64>": 3, "volta_sgemm_64x64_nn": 1},
     "NVIDIA Ampere (sm80: A100, A30)", "kernel names (3 kernels"),
    (None, [], {"sm90_xmma_gemm_bf16bf16_bf16f32": 2}, "NVIDIA Hopper (sm90: H100, H200)", "kernel names (2 kernels"),
    # edge_old_category_names' one GEMM: CUTLASS's Volta build, named by cuBLAS
    (None, [], {"void cutlass::Kernel<cutlass_70_wmma_tensorop_f16_s161616gemm_f16_32x32_64x1_tn_align8>(T1::Params)": 1},
     "NVIDIA Volta (sm70: V100)", "kernel names (1 kernel built"),
    (None, [], {"cutlass_75_tensorop_f16_s1688gemm_f16_256x128_32x2_nn_align8": 4}, "NVIDIA Turing (sm75: T4, RTX 20)", "kernel names (4 kernels"),
    (None, [], {"Cijk_Alik_Bljk_SB_MT64x16x32_ISA942_WG64": 5}, "AMD CDNA3 (gfx942: MI300X)", "kernel names (5 kernels"),
])
def test_detect_reads_the_name_then_the_compute_capability_then_the_kernels(name, props, kernels, arch, how):
    found = P.detect(name, props, kernels)
    assert found.arch is not None and found.arch.name == arch and found.how.startswith(how)


def test_detect_says_when_it_cannot_tell():
    assert P.detect(None, [], {"elementwise_kernel": 9}).arch is None
    assert "not in the architecture table" in P.detect("Mystery Accelerator 9000").how


def test_precision_advice_fits_the_device():
    v100, a100, h100 = (P.detect(n).arch for n in ("Tesla V100", "NVIDIA A100", "NVIDIA H100"))
    mi250, trn = P.detect("AMD Instinct MI250X").arch, P.detect("AWS Trainium2").arch
    assert "torch.float16" in P.precision_advice(v100) and "GradScaler" in P.precision_advice(v100)
    assert "bfloat16" not in P.precision_advice(v100) and "TF32" in P.precision_advice(v100)  # "has no bf16 or TF32"
    assert "no bf16 or TF32" in P.precision_advice(v100)
    assert "torch.bfloat16" in P.precision_advice(a100) and "set_float32_matmul_precision" in P.precision_advice(a100)
    assert "FP8" not in P.precision_advice(a100) and "FP8" in P.precision_advice(h100)
    assert "has no TF32" in P.precision_advice(mi250) and "FP8" not in P.precision_advice(mi250)
    assert "device_type='neuron'" in P.precision_advice(trn)  # TorchNeuron (Trainium2 and later)
    generic = P.precision_advice(None)
    assert "bfloat16" in generic and "GradScaler" in generic
    # kernels whose names say they run TF32 already are told bf16, not TF32
    for arch in (a100, h100, None):
        ran = P.precision_advice(arch, tf32_already=True)
        assert "bfloat16" in ran and "set_float32_matmul_precision" not in ran and "allow_tf32" not in ran, ran
        assert "they already run TF32 on the Tensor Cores" in ran
    assert "FP8" in P.precision_advice(h100, tf32_already=True)
    some = P.precision_advice(a100, tf32_already=True, not_tf32="ampere_sgemm_128x64_nn 0.40 ms")
    assert ("allow TF32 for those that run plain fp32 (ampere_sgemm_128x64_nn 0.40 ms: torch.set_float32_matmul_precision('high'), "
            "torch.backends.cudnn.allow_tf32 = True)") in some


def _step_with_gemm(props: dict | None, shapes: bool) -> list[dict]:
    args = {"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]} if shapes else {}
    return [X("ProfilerStep#1", "user_annotation", 0, 1000),
            X("aten::mm", "cpu_op", 10, 10, **{"External id": 1, **args}),
            X("cudaLaunchKernel", "cuda_runtime", 12, 4, correlation=1, **{"External id": 1}),
            X("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64>", "kernel", 20, 300, pid=0, tid=7, correlation=1,
              stream=7, device=0)]


def test_mfu_missing_says_every_reason(tmp_path):
    """No shapes and an unnamed device (its kernels show sm80): both reasons; with --peak-tflops the
    shapes are still missing; with shapes and a named A100 MFU is there and no reason is given."""
    from neuron_explorer.analyzers.utilisation import peaks_in_force

    run = import_traces(write_trace(tmp_path / "a.json", _step_with_gemm(None, False)), tmp_path / "a").run_dir
    u = analyze(run).summary["ranks"][0]["utilisation"]
    assert u["mfu_median"] is None and u["device"]["arch"] == "NVIDIA Ampere (sm80: A100, A30)"
    assert u["mfu_missing"] == ("no operator shapes recorded (record with torch.profiler.profile(record_shapes=True)); the trace "
                                "does not name the device (its events show NVIDIA Ampere (sm80: A100, A30), whose models' peaks "
                                "differ): give --peak-tflops and --peak-dtype")
    with peaks_in_force(override={"tflops": 400.0, "dtype": "bf16"}):
        report = analyze(run)
    u = report.summary["ranks"][0]["utilisation"]
    assert u["mfu_missing"] == "no operator shapes recorded (record with torch.profiler.profile(record_shapes=True))"
    assert "MFU not computed: no operator shapes recorded" in _text(report)
    props = {"deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-40GB", "computeMajor": 8, "computeMinor": 0}]}
    run = import_traces(write_trace(tmp_path / "b.json", _step_with_gemm(props, True), **props), tmp_path / "b").run_dir
    u = analyze(run).summary["ranks"][0]["utilisation"]
    # 2 * 64^3 FLOPs in a 1 ms step against the A100's 19.5 TFLOP/s fp32 peak
    assert u["mfu_missing"] is None and u["mfu_median"] == pytest.approx(2 * 64 ** 3 / 1e-3 / 19.5e12)


def test_one_read_of_the_operators_args_answers_shapes_types_and_work(tmp_path):
    """A rank with an A100's properties: recorded without shapes, no operator's args name its inputs
    (utilisation.args_named, one read): no shapes, no input types and no work: no operator counted, MFU
    missing for want of shapes, no precision finding; recorded with them,
    the one float32 aten::mm is counted (2 * 64^3 FLOPs) and precision finds its 300 µs kernel."""
    from neuron_explorer.analyzers.utilisation import args_named
    from neuron_explorer.store import open_run

    props = {"deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-40GB", "computeMajor": 8, "computeMinor": 0}]}
    for shapes in (False, True):
        run_dir = import_traces(write_trace(tmp_path / f"{shapes}.json", _step_with_gemm(props, shapes), **props),
                                tmp_path / f"r{shapes}").run_dir
        with open_run(run_dir) as run:
            assert args_named(run, 0) is shapes
        report = analyze(run_dir)
        u = report.summary["ranks"][0]["utilisation"]
        precision = [f for f in report.findings if f.rule_id == "precision"]
        if shapes:
            assert u["ops_counted"] == 1 and u["flops"] == 2 * 64 ** 3 and u["mfu_missing"] is None
            assert len(precision) == 1 and precision[0].impact_ns == 300_000
        else:
            assert u["ops_counted"] == 0 and u["mfu_missing"] == ("no operator shapes recorded "
                                                                  "(record with torch.profiler.profile(record_shapes=True))")
            assert not precision


# ---- real traces --------------------------------------------------------------------------------

def _real(name: str, tmp_path: Path):
    path = TRACES / name
    if not path.exists():
        pytest.skip(f"{name} not in {TRACES}")
    return analyze(import_traces(path, tmp_path / "run").run_dir)


def test_v100_resnet50_gets_one_fp32_class_finding_with_fp16_advice(tmp_path):
    """The V100 ResNet-50: 26 fp32 convolution/GEMM kernel names on the critical path are one
    finding (239.34 ms, 26.1% of the 917.73 ms of steps), told fp16 autocast with GradScaler, not
    bf16 or TF32. Every class appears once. One cause, one finding: precision (the forward
    convolutions' 126.97 ms, charged 0 ns on the path) and device-underuse (dgrad_engine's 80.68 ms,
    80.27 ms of it inside the 239.34 ms) gave the same advice for the same cause, 447 ms claimed in
    all; they are left to this finding, which alone advises fp16 autocast."""
    report = _real("v100_resnet50_torch19_memory.json.gz", tmp_path)
    found = [f for f in report.findings if f.rule_id == "critical-path"]
    classes = [f.evidence.values["class"] for f in found]
    assert len(classes) == len(set(classes))
    (fp32,) = [f for f in found if f.evidence.values["class"] == "fp32_matmul"]
    assert fp32.impact_ns == 239_336_000 and fp32.evidence.values["items"] == 26
    assert fp32.title.startswith("fp32 GEMM/convolution kernels (26 names): 239.34 ms on the critical path (26.1% of step time;")
    assert "torch.float16" in fp32.recommendation and "GradScaler" in fp32.recommendation
    assert "bfloat16" not in fp32.recommendation and "set_float32_matmul_precision" not in fp32.recommendation
    assert fp32.severity == "high"
    assert not [f for f in report.findings if f.rule_id in ("precision", "device-underuse")]
    assert [f.rule_id for f in report.findings if "GradScaler" in f.recommendation] == ["critical-path"]
    text = _text(report)
    assert "fp32 GEMM/convolution kernels (26 names): 239.34 ms on the critical path" in text
    assert "float32 aten::cudnn_convolution and similar ops" not in text and "kernels reach 7.2% of the roofline" not in text
    assert "architecture: NVIDIA Volta (sm70: V100) (matrix units: fp16), from device name 'Tesla V100-DGXS-32GB'" in _text(report)


def test_the_cutlass_80_traces_name_their_device(tmp_path):
    """cuda_nccl_rank0_of_2 names its A100 in deviceProperties (and recorded no shapes);
    multirank_128's rank 0 has no deviceProperties: its cutlass_80 kernels show sm80."""
    report = _real("cuda_nccl_rank0_of_2.json.gz", tmp_path / "nccl")
    u = report.summary["ranks"][0]["utilisation"]
    assert u["device"]["arch"] == "NVIDIA Ampere (sm80: A100, A30)"
    assert u["device"]["how"] == "device name 'NVIDIA A100-PG509-200' in the trace"
    assert u["mfu_missing"] == "no operator shapes recorded (record with torch.profiler.profile(record_shapes=True))"
    assert "MFU not computed: no operator shapes recorded" in _text(report)
    report = _real("multirank_128/rank-0.json.gz", tmp_path / "mr")
    u = report.summary["ranks"][0]["utilisation"]
    assert u["device"]["arch"] == "NVIDIA Ampere (sm80: A100, A30)" and u["device"]["how"].startswith("kernel names (340 kernels")
    assert u["mfu_missing"].startswith("the trace does not name the device")
    assert "no device peak (CPU)" not in _text(report)


def _queries_of(run) -> list[str]:
    """The queries `run.sql` runs from now on."""
    queries: list[str] = []
    sql = run.sql
    run.sql = lambda q, params=None: queries.append(q) or sql(q, params)
    return queries


def test_whether_operators_name_their_inputs_is_kept_in_the_manifest_and_read_back(tmp_path):
    """The import finds whether any operator's args name its inputs or flops (the rank's op_args_named
    in the manifest: False without shapes, True with them), and the analysis takes it from there
    without reading the operators' args; a run whose manifest does not say (written before the key)
    reads them, with the same answer."""
    import json

    from neuron_explorer.analyzers import utilisation
    from neuron_explorer.store import open_run

    props = {"deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-40GB", "computeMajor": 8, "computeMinor": 0}]}
    for shapes in (False, True):
        run_dir = import_traces(write_trace(tmp_path / f"{shapes}.json", _step_with_gemm(props, shapes), **props),
                                tmp_path / f"r{shapes}").run_dir
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["ranks"][0]["op_args_named"] is shapes
        with open_run(run_dir) as run:
            queries = _queries_of(run)
            assert utilisation.args_named(run, 0) is shapes
            assert utilisation._ARGS_NAMED not in queries
        del manifest["ranks"][0]["op_args_named"]
        (run_dir / "manifest.json").write_text(json.dumps(manifest))
        with open_run(run_dir) as run:
            queries = _queries_of(run)
            assert utilisation.args_named_known(run, 0) is None
            assert utilisation.args_named(run, 0) is shapes
            assert utilisation._ARGS_NAMED in queries
