"""Kernel names in a listing never read alike (fmt.kernel_labels).

`fmt.kernel_name` shortens a kernel's name for people: template arguments one level deep, the rest
`<…>`, cut at a width. Kernels of one template then often read the same: ReLU's backward and a
multiply are both `vectorized_elementwise_kernel<4, BinaryFunctor<…>, Array<…> >`, and a grid or a
top-kernels table showed two rows alike with different times. In a listing each such label now
says, in brackets, what sets its kernel apart. The names below are the shared traces' own.
"""

from __future__ import annotations

import collections
import functools
import gzip
import json

import pytest

from neuron_explorer.fmt import kernel_labels, kernel_name

from .conftest import TRACES

MUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
       "at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3> >(int, at::native::BinaryFunctor<float, "
       "float, float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 3>)")
RELU_BACKWARD = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
                 "at::native::(anonymous namespace)::threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::"
                 "{lambda(float, float)#1}>, at::detail::Array<char*, 3> >(int, at::native::BinaryFunctor<float, float, float, "
                 "at::native::(anonymous namespace)::threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::"
                 "{lambda(float, float)#1}>, at::detail::Array<char*, 3>)")


@functools.lru_cache(maxsize=None)
def kernel_names(trace: str) -> tuple[str, ...]:
    opener = gzip.open if trace.endswith(".gz") else open
    with opener(TRACES / trace, "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    return tuple(collections.Counter(e["name"] for e in events if isinstance(e, dict) and str(e.get("cat", "")).lower() == "kernel"))


def test_a_multiply_and_relus_backward_are_told_apart_by_their_functors():
    assert kernel_name(MUL) == kernel_name(RELU_BACKWARD)  # what two rows read before
    labels = kernel_labels([MUL, RELU_BACKWARD, MUL])
    assert labels[MUL].endswith(" [MulFunctor]") and labels[RELU_BACKWARD].endswith(" [threshold_kernel_impl]")
    assert labels[MUL].startswith("vectorized_elementwise_kernel<4, BinaryFunctor")
    assert all(len(v) <= 60 for v in labels.values())


def test_a_kernel_alone_in_its_listing_keeps_its_short_name():
    assert kernel_labels([MUL]) == {MUL: kernel_name(MUL)}
    assert kernel_labels([MUL, "triton_poi_fused_add_0"], 80) == {MUL: kernel_name(MUL, 80), "triton_poi_fused_add_0": "triton_poi_fused_add_0"}


def test_long_generated_names_cut_at_the_width_show_where_they_part():
    """MIOpen's igemm names differ near their end (`..._gkgs` and `..._vs1_gkgs`); cut at the width
    both read `igemm_wrw_gtcx3_nhwc_bf16_bx0_ex1_bt128x256x32_wt32x32x8_ws…`."""
    names = [n for n in kernel_names("mi300x_ddp_resnet18_no_alloc_cache.json.gz") if n.startswith("igemm_wrw_gtcx3_nhwc_bf16_bx0_ex1_bt128x256x32_")]
    assert len(names) == 2 and kernel_name(names[0]) == kernel_name(names[1])
    labels = kernel_labels(names)
    tails = {n: labels[n][labels[n].index(" [") + 2:-1] for n in names}
    assert sorted(tails.values()) == ["…gkgs", "…vs1_gkgs"]
    assert all(n.endswith(t.lstrip("…")) for n, t in tails.items())


def test_mangled_instantiations_are_told_apart_by_their_template_numbers():
    """aiter's add_rmsnorm_quant_kernel, mangled, in three instantiations: block 256 and 64, and a
    third with the first flag set."""
    names = sorted(n for n in kernel_names("mi300x_sglang_qwen3_decode.json.gz") if n.startswith("_ZN5aiter24add_rmsnorm_quant_kernel"))
    assert len(names) == 3 and len({kernel_name(n) for n in names}) == 1
    labels = kernel_labels(names)
    assert len(set(labels.values())) == 3 and all(v.startswith("aiter::add_rmsnorm_quant_kernel [") for v in labels.values())
    assert labels[next(n for n in names if "Li64ELi8E" in n)] == "aiter::add_rmsnorm_quant_kernel [64]"


@pytest.mark.parametrize("width", [48, 60, 70, 120])
def test_no_two_kernels_of_a_shared_trace_read_alike_at_any_width_a_view_uses(width):
    """Every kernel name of every shared trace, as one listing (the dashboard's Kernels grid of the
    whole run): no two labels alike, none wider than the view's width, and each label's name part
    (before its tag) is a piece of the kernel's short name uncut: the cut only makes room for the tag."""
    collided = 0
    for trace in sorted(p.name for p in TRACES.glob("*.json*")):
        names = kernel_names(trace)
        labels = kernel_labels(names, width)
        assert len(set(labels.values())) == len(labels) == len(set(names)), trace
        assert all(len(v) <= width for v in labels.values()), trace
        for n, label in labels.items():
            part = label.rsplit(" [", 1)[0] if label.endswith("]") and label != kernel_name(n, width) else label
            assert len(part) >= 12 and part.rstrip("…") in kernel_name(n, 1 << 20), (trace, label)
        collided += sum(v != kernel_name(n, width) for n, v in labels.items())
    assert collided >= 20  # (the shared traces have such kernels: the test is about them)
