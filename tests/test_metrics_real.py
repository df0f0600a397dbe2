"""On the real traces, device busy and kernel times agree exactly with a plain-Python computation over the JSON."""

from __future__ import annotations

import decimal
import gzip
import json

import pytest

from neuron_explorer import open_run
from neuron_explorer.analyzers import metrics
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import TRACES

DEVICE_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset", "memset": "memset",
               "mtia_ccp_events": "kernel"}
NAMES = ["cuda_event_sync_multistream.json.gz", "cuda_nccl_rank0_of_2.json.gz", "rocm_mi250_train.json.gz",
         "edge_old_category_names.json.gz", "cuda_alexnet_train.json.gz", "mtia_inference.json.gz", "cuda_train_68k_events.json.gz"]


def _expected(path) -> dict[int, dict]:
    """Per device: union length of kernel+memcpy+memset intervals and the kernel sum, from the JSON."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f, parse_float=decimal.Decimal)  # exact: epoch-µs floats would round to 256 ns
    base = doc.get("baseTimeNanoseconds") or 0
    per: dict[int, dict] = {}
    for e in doc["traceEvents"]:
        kind = DEVICE_CATS.get(str(e.get("cat", "")).lower())
        if kind is None or e.get("ph") != "X" or not isinstance(e.get("pid"), int):
            continue
        start = base + int((decimal.Decimal(e["ts"]) * 1000).to_integral_value(decimal.ROUND_HALF_EVEN))
        dur = int((decimal.Decimal(e.get("dur", 0)) * 1000).to_integral_value(decimal.ROUND_HALF_EVEN))
        d = per.setdefault(e["pid"], {"iv": [], "kernel_ns": 0})
        if kind == "kernel":
            d["kernel_ns"] += dur
        if dur > 0:
            d["iv"].append((start, start + dur))
    out = {}
    for dev, d in per.items():
        busy, cur_s, cur_e = 0, None, None
        for s, e in sorted(d["iv"]):
            if cur_e is None or s > cur_e:
                if cur_e is not None:
                    busy += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        if cur_e is not None:
            busy += cur_e - cur_s
        out[dev] = {"busy_ns": busy, "kernel_ns": d["kernel_ns"]}
    return out


@pytest.mark.parametrize("name", NAMES)
def test_device_busy_and_kernel_time_match_an_independent_computation(name, tmp_path):
    path = TRACES / name
    run_dir = import_traces(path, tmp_path / "run").run_dir
    expected = _expected(path)
    assert expected, name
    with open_run(run_dir) as run:
        (rank,) = metrics.ranks(run)
        got = {d: metrics.device_summary(run, rank, d) for d in metrics.devices(run, rank)}
    assert set(got) == set(expected)
    for dev, exp in expected.items():
        assert got[dev]["busy_ns"] == exp["busy_ns"], (name, dev)
        assert got[dev]["kernel_ns"] == exp["kernel_ns"], (name, dev)
