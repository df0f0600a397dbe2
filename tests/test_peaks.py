"""The Trainium rows of the device table (analyzers/peaks.py) hold AWS's published figures, and a run
on TorchNeuron's PrivateUse1 device 'neuron' gets Trainium's precision advice, not CUDA's."""

from __future__ import annotations

import pytest

from neuron_explorer.analyzers import analyze
from neuron_explorer.analyzers import peaks as P
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import X, write_trace


def _peak(name: str) -> P.Peak:
    (p,) = [p for p in P.PEAKS if p.name == name]
    return p


def test_trainium_rows_are_the_published_figures():
    # https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-hardware/trainium2.html:
    # 1,299 FP8, 667 BF16/FP16/TF32, 181 FP32 TFLOPS; 2.9 TB/sec
    trn2 = _peak("AWS Trainium2")
    assert trn2.tflops == {"fp32": 181, "tf32": 667, "bf16": 667, "fp16": 667, "fp8": 1299} and trn2.gbps == 2900
    # https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-hardware/trainium.html:
    # 190 FP16/BF16/cFP8/TF32 TFLOPS, 47.5 FP32 TFLOPS; 820 GB/sec
    trn1 = _peak("AWS Trainium")
    assert trn1.tflops == {"fp32": 47.5, "tf32": 190, "bf16": 190, "fp16": 190, "fp8": 190} and trn1.gbps == 820
    assert "fp64" not in trn1.tflops and "fp64" not in trn2.tflops  # not published: left out
    assert trn2.source.startswith("AWS Neuron documentation") and trn1.source.startswith("AWS Neuron documentation")


@pytest.mark.parametrize(("name", "peak", "arch"), [
    ("AWS Trainium2", "AWS Trainium2", "AWS Trainium2"),
    ("trn2.48xlarge", "AWS Trainium2", "AWS Trainium2"),
    ("Trainium", "AWS Trainium", "AWS Trainium (trn1)"),
    ("trn1.32xlarge", "AWS Trainium", "AWS Trainium (trn1)"),
    ("neuron", None, "AWS Trainium2"),
    ("neuron 0", None, "AWS Trainium2"),
    ("neuron:1", None, "AWS Trainium2"),
    ("NeuronCore-v2", None, None),  # Trainium and Inferentia2 both have it: no guess
    ("neuronx-cc", None, None),
])
def test_device_names_map_to_the_trainium_rows(name, peak, arch):
    found = P.match(name)
    assert (found.name if found else None) == peak
    detected = P.detect(name).arch
    assert (detected.name if detected else None) == arch


def test_torchneuron_device_properties_name_the_architecture_but_no_peak():
    found = P.detect(None, [{"id": 0, "type": "neuron", "name": "some board name"}])
    assert found.arch is not None and found.arch.name == "AWS Trainium2" and "no peak" in found.how
    assert P.detect(None, [{"id": 0, "type": "cuda", "name": "some board name"}]).arch is None


def test_trainium_precision_advice_is_trainium_shaped():
    trn2, trn1 = P.detect("neuron").arch, P.detect("trn1").arch
    for arch, device in ((trn2, "neuron"), (trn1, "xla")):
        advice = P.precision_advice(arch)
        assert f"torch.autocast(device_type='{device}', dtype=torch.bfloat16)" in advice
        assert "TF32" in advice and "FP8" in advice
        assert "cudnn" not in advice and "Transformer Engine" not in advice and "GradScaler needed" in advice
    assert "cudnn.allow_tf32" in P.precision_advice(P.detect("NVIDIA H100").arch)  # CUDA devices keep theirs


M = 1001
FLOPS = 2 * M * M * M
STEP_US = 10_000
KERNEL_US = 8_000


def _fp32_mm_on(device_name: str, tmp_path) -> object:
    """One 10 ms step: an fp32 1001x1001x1001 aten::mm, its PrivateUse1 launch and an 8 ms kernel."""
    events = [X("ProfilerStep#1", "user_annotation", 0, STEP_US),
              X("aten::mm", "cpu_op", 10, 50, **{"External id": 1, "Input Dims": [[M, M], [M, M]], "Input type": ["float", "float"]}),
              X("neuronLaunchKernel", "privateuse1_runtime", 20, 1, correlation=100, **{"External id": 1}),
              X("nrt_mm", "kernel", 100, KERNEL_US, pid=0, tid=7, correlation=100, stream=7, device=0)]
    trace = write_trace(tmp_path / "t.json", events, deviceProperties=[{"id": 0, "name": device_name}])
    return analyze(import_traces(trace, tmp_path / "run").run_dir, write=False)


def test_a_run_on_the_neuron_device_gets_trainium2_advice_and_no_peak(tmp_path):
    """Before: no compute capability, so the precision rule did not apply on a Trainium at all."""
    report = _fp32_mm_on("neuron", tmp_path)
    u = report.summary["ranks"][0]["utilisation"]
    assert u["device"]["arch"] == "AWS Trainium2" and u["peak"] is None and u["mfu_median"] is None
    f = next(x for x in report.findings if x.rule_id == "precision")
    assert f.impact_ns == KERNEL_US * 1000 and f.saving_bound_ns == KERNEL_US * 1000 // 2
    assert "torch.autocast(device_type='neuron', dtype=torch.bfloat16)" in f.recommendation and "cudnn" not in f.recommendation


def test_a_run_on_a_named_trainium_uses_its_published_peak(tmp_path):
    """trn1: MFU against 47.5 fp32 TFLOP/s; its bf16 peak (190) is 4x fp32, so device-underuse advises
    autocast on 'xla' (torch-neuronx), not CUDA's TF32 switch."""
    report = _fp32_mm_on("trn1", tmp_path)
    u = report.summary["ranks"][0]["utilisation"]
    assert u["peak"]["name"] == "AWS Trainium"
    assert u["mfu_median"] == pytest.approx(FLOPS / (STEP_US * 1e-6 * 47.5e12))
    f = next(x for x in report.findings if x.rule_id == "device-underuse")
    assert "whose bf16 peak is 190 TFLOP/s against 47.5 for fp32" in f.recommendation
    assert "device_type='xla'" in f.recommendation and "allow_tf32" not in f.recommendation
