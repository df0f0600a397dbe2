"""allocator-churn: driver allocations and frees inside the steps, on hand-built Kineto traces.

Three steps of 3 ms (µs, T = 3000 x k), the caching allocator off:

    tid 1  ProfilerStep#k [T ........................................................ T+3000]
           aten::conv2d [T ---------------------------------------- T+2200]  aten::relu [T+2200 - T+2300]
             launch T+5   hipFree x9 [T+100 .. T+1900] (200 µs each, back to back)   launch T+2205
    tid 2                                         hipFree [T+1800 - T+2000]  (overlaps tid 1's last by 100 µs)
    GPU      conv_fwd [T+10 ---- T+1010]                                     relu_k [T+2210 ---- T+2990]

The calls sum to 3 x 2000 µs; their union is 3 x (T+100 .. T+2000) = 3 x 1900 µs.
"""

from __future__ import annotations

import pytest

from neuron_explorer.analyzers import analyze
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import X, write_trace

US = 1000
STEP = 3000


def _launch(ts, corr, ext, dur=5):
    return X("cudaLaunchKernel", "cuda_runtime", ts, dur, correlation=corr, **{"External id": ext})


def _kernel(name, ts, dur, corr):
    return X(name, "kernel", ts, dur, pid=0, tid=7, correlation=corr, stream=7, device=0)


def _step(k: int, *, frees: bool = True, mallocs: list[tuple[int, int]] = (), name_malloc: str = "cudaMalloc") -> list[dict]:
    """Step k (1-based): conv2d and relu with their kernels; with `frees`, the 9 + 1 hipFree calls;
    `mallocs`: (offset, dur) of allocations inside conv2d."""
    t = (k - 1) * STEP
    ext, corr = 10 * k, 100 * k
    ev = [X(f"ProfilerStep#{k}", "user_annotation", t, STEP),
          X("aten::conv2d", "cpu_op", t, 2200, **{"External id": ext}), _launch(t + 5, corr, ext),
          _kernel("conv_fwd", t + 10, 1000, corr),
          X("aten::relu", "cpu_op", t + 2200, 100, **{"External id": ext + 1}), _launch(t + 2205, corr + 1, ext + 1),
          _kernel("relu_k", t + 2210, 780, corr + 1)]
    if frees:
        ev += [X("hipFree", "cuda_runtime", t + 100 + 200 * i, 200, correlation=corr + 10 + i) for i in range(9)]
        ev.append(X("hipFree", "cuda_runtime", t + 1800, 200, tid=2, correlation=corr + 19))
    ev += [X(name_malloc, "cuda_runtime", t + off, dur, correlation=corr + 30 + i) for i, (off, dur) in enumerate(mallocs)]
    return ev


def _report(tmp_path, events):
    return analyze(import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir, write=False)


def _churn(report):
    return [f for f in report.findings if f.rule_id == "allocator-churn"]


def test_frees_in_every_step_are_the_caching_allocator_off_and_rank_first(tmp_path):
    report = _report(tmp_path, [e for k in (1, 2, 3) for e in _step(k)])
    (f,) = _churn(report)
    v = f.evidence.values
    assert v["calls"] == 30 and v["frees"] == 30 and v["mallocs"] == 0
    assert v["frees_per_step"] == [10, 10, 10]
    assert v["call_ns"] == 30 * 200 * US  # the plain sum of the calls...
    assert f.impact_ns == 3 * 1900 * US == v["alloc_ns"]  # ...but the impact is their union
    assert f.saving_bound_ns == f.impact_ns
    assert f.impact_share == pytest.approx(5700 / 9000)
    assert f.severity == "high" and f.category == "memory"
    assert f.location.op == "aten::conv2d" and f.location.steps == [1, 2, 3]
    assert v["operators"][0] == {"op": "aten::conv2d", "top_level": "aten::conv2d", "calls": 27, "ns": 27 * 200 * US}
    assert v["operators"][1]["op"] is None and v["operators"][1]["calls"] == 3  # tid 2's calls, outside every operator
    assert v["frees_in_ops"] == 27
    assert "hipFree x30" in f.title
    assert report.findings[0] is f  # it ranks first: aten::conv2d's host time is the allocator's
    assert "caching allocator is off (PYTORCH_NO_HIP_MEMORY_CACHING=1, or PYTORCH_NO_CUDA_MEMORY_CACHING=1, which ROCm reads too" \
        in f.recommendation
    assert "expandable_segments" not in f.recommendation
    assert "aten::conv2d: 27 calls, 5.40 ms" in f.recommendation


def test_the_evidence_sql_reproduces_the_impact(tmp_path):
    from neuron_explorer.store import open_run

    run_dir = import_traces(write_trace(tmp_path / "t.json", [e for k in (1, 2, 3) for e in _step(k)]), tmp_path / "run").run_dir
    (f,) = _churn(analyze(run_dir, write=False))
    with open_run(run_dir) as run:
        rel = run.sql(f.evidence.sql)
        got = dict(zip([d[0] for d in rel.description], rel.fetchone()))
    assert got["alloc_ns"] == f.impact_ns and got["calls"] == 30


def test_two_small_mallocs_in_the_first_step_are_no_finding(tmp_path):
    events = [e for k in (1, 2, 3) for e in _step(k, frees=False, mallocs=[(300, 20), (400, 20)] if k == 1 else ())]
    report = _report(tmp_path, events)
    assert not _churn(report)  # 40 µs of 9 ms: below ALLOC_SHARE_MIN
    assert "allocator-churn" not in {n["rule_id"] for n in report.not_applicable}


def test_mallocs_in_one_step_only_are_fragmentation_not_the_allocator_off(tmp_path):
    events = [e for k in (1, 2, 3) for e in _step(k, frees=False, mallocs=[(300, 300), (700, 300)] if k == 2 else ())]
    (f,) = _churn(_report(tmp_path, events))
    v = f.evidence.values
    assert v["calls"] == 2 and v["mallocs"] == 2 and v["frees"] == 0
    assert v["mallocs_per_step"] == [0, 2, 0] and v["steps_with_calls"] == 1
    assert f.impact_ns == 600 * US and f.location.steps == [2]
    assert "Set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in f.recommendation
    assert "caching allocator is off" not in f.recommendation and "empty_cache" not in f.recommendation


def test_the_allocators_environment_variables_are_the_runtimes(tmp_path):
    """The advice names PyTorch's variables as they are spelled: the cache is turned off by
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 (it had said PYTORCH_NO_CUDA_CACHING_ALLOCATOR, which PyTorch does
    not read), on ROCm by PYTORCH_NO_HIP_MEMORY_CACHING=1, and its options go in PYTORCH_CUDA_ALLOC_CONF,
    on ROCm PYTORCH_HIP_ALLOC_CONF: the calls' own names (cudaFree, hipMalloc) say which runtime it is."""
    cuda_frees = [{**e, "name": "cudaFree"} if e["name"] == "hipFree" else e for k in (1, 2, 3) for e in _step(k)]
    (f,) = _churn(_report(tmp_path / "cuda", cuda_frees))
    assert "(PYTORCH_NO_CUDA_MEMORY_CACHING=1 is set in the environment: unset it)" in f.recommendation
    assert "HIP" not in f.recommendation and "CACHING_ALLOCATOR" not in f.recommendation
    hip_mallocs = [e for k in (1, 2, 3) for e in _step(k, frees=False, mallocs=[(300, 300), (700, 300)] if k == 2 else (),
                                                       name_malloc="hipMalloc")]
    (g,) = _churn(_report(tmp_path / "rocm", hip_mallocs))
    assert "Set PYTORCH_HIP_ALLOC_CONF=expandable_segments:True" in g.recommendation


def test_calls_outside_the_steps_or_partly_outside_count_only_inside(tmp_path):
    """A free that starts in the last step and runs 500 µs past its end counts to the step's end."""
    events = [e for k in (1, 2, 3) for e in _step(k)]
    events.append(X("hipFree", "cuda_runtime", 3 * STEP - 100, 600, tid=3, correlation=999))
    events.append(X("hipFree", "cuda_runtime", 3 * STEP + 1000, 5000, correlation=998))  # after every step
    (f,) = _churn(_report(tmp_path, events))
    assert f.evidence.values["calls"] == 31
    assert f.impact_ns == (3 * 1900 + 100) * US <= 3 * STEP * US


def test_no_steps_the_union_over_the_span_and_no_per_step_advice(tmp_path):
    events = [e for k in (1, 2, 3) for e in _step(k) if not e["name"].startswith("ProfilerStep")]
    (f,) = _churn(_report(tmp_path, events))
    assert f.impact_ns == 3 * 1900 * US and f.evidence.values["calls"] == 30
    assert "No profiler steps" in f.recommendation
    assert "One call of" not in f.recommendation  # 30 calls of 200 µs: no single long call
    assert "no profiler steps: shares are of the whole span" in f.confidence_notes


def test_no_steps_one_long_call_is_named_as_a_likely_one_off(tmp_path):
    """A trace of start-up: one 500 ms cudaFree on first use (as the real cuda_alexnet_train and
    rtx2080ti traces show) and three short cudaMalloc."""
    events = [X("aten::conv2d", "cpu_op", 0, 600_000, **{"External id": 1}), _launch(5, 1, 1), _kernel("conv_fwd", 10, 1000, 1),
              X("cudaFree", "cuda_runtime", 100, 500_000, correlation=2),
              *[X("cudaMalloc", "cuda_runtime", 500_200 + 100 * i, 50, correlation=3 + i) for i in range(3)]]
    (f,) = _churn(_report(tmp_path, events))
    assert f.impact_ns == (500_000 + 150) * US and f.evidence.values["longest_call_ns"] == 500_000 * US
    assert "One call of 500.00 ms is 100.0% of their time" in f.recommendation


def test_a_cpu_only_trace_is_not_applicable(tmp_path):
    events = [X("ProfilerStep#1", "user_annotation", 0, 1000), X("aten::conv2d", "cpu_op", 0, 900, **{"External id": 1})]
    report = _report(tmp_path, events)
    assert not _churn(report)
    (na,) = [n for n in report.not_applicable if n["rule_id"] == "allocator-churn"]
    assert "CPU-only" in na["reason"]


def test_a_trace_without_runtime_calls_is_not_applicable(tmp_path):
    """Kernels but no runtime API recorded: an allocator call could not have been seen."""
    events = [X("ProfilerStep#1", "user_annotation", 0, 1000), X("aten::conv2d", "cpu_op", 0, 900, **{"External id": 1}),
              _kernel("conv_fwd", 10, 500, 1)]
    report = _report(tmp_path, events)
    (na,) = [n for n in report.not_applicable if n["rule_id"] == "allocator-churn"]
    assert "no runtime calls" in na["reason"]
