"""The agent's `summary` tool: under 4,000 characters as the MCP server sends it, no null field, on
every real trace; its figures are the analyzer summary's own; detail='full' keeps everything."""

from __future__ import annotations

import json

import pytest

from neuron_explorer.agent.tools import SUMMARY_MAX_CHARS, AgentRuns
from neuron_explorer.store import open_run

from .conftest import TRACES, real_traces

TRACE_SETS = real_traces() + sorted(p for p in TRACES.iterdir() if p.is_dir() and any(p.glob('*.json*')))  # LICENSES/ holds no trace


def _run_dir(trace):
    with open_run(trace) as r:  # imported into the tests' cache
        return r.path


@pytest.mark.parametrize("trace", TRACE_SETS, ids=lambda p: p.name)
def test_short_summary_fits_and_has_no_null(trace):
    rs = AgentRuns([_run_dir(trace)])
    try:
        out = rs.summary()
        text = json.dumps(out, default=str)  # what the MCP server sends (mcp_server._register)
        assert out["ok"] and out["detail"] == "short" and "analysis_error" not in out
        assert len(text) <= SUMMARY_MAX_CHARS == 4000, len(text)
        assert "null" not in text and not out.get("truncated")
        report = rs.report(rs.names[0])
    finally:
        rs.close()
    # every figure is the analyzer summary's own (picked, not recomputed)
    by_rank = {r["rank"]: r for r in report["summary"]["ranks"]}
    for r in out["ranks"]:
        s = by_rank[r["rank"]]
        assert r["span_ns"] == s["span_ns"] and r["analysed_ns"] == s["analysed_ns"]
        if "steps" in r:
            assert r["steps"]["p50_ns"] == s["steps"]["p50_ns"] and r["steps"]["count"] == s["steps"]["count"]
        # a device's idle and exposed communication are over the analysed window, as the findings' (device time's)
        in_window = {d["device"]: d for d in s.get("device_time") or []}
        assert [(d["device"], d.get("busy_ns", 0), d.get("idle_ns", 0), d.get("comm_exposed_ns", 0)) for d in r.get("devices", [])] == \
               [(d["device"], d["busy_ns"], in_window[d["device"]]["idle_ns"], in_window[d["device"]]["communication_ns"])
                if d["device"] in in_window else (d["device"], d["busy_ns"], d["idle_ns"], d["comm_exposed_ns"]) for d in s["devices"]]
        exposed = {f["location"]["device"]: f["evidence"]["values"]["communication_ns"] for f in report["findings"]
                   if f["rule_id"] == "comm-exposed" and f["location"].get("rank") == r["rank"] and "communication_ns" in f["evidence"]["values"]}
        assert all(d["comm_exposed_ns"] == exposed[d["device"]] for d in r.get("devices", []) if d["device"] in exposed)
    assert out["findings"] == len(report["findings"])


def test_short_summary_shortens_kernel_names_and_full_keeps_them():
    """mi300x: its top kernel by time is `void at::native::batch_norm_collect_statistics_kernel<...>(...)` (350
    characters); the short summary names it as the text report does (fmt.kernel_name), in 60 characters."""
    rs = AgentRuns([_run_dir(TRACES / "mi300x_ddp_resnet_act_checkpoint.json.gz")])
    try:
        short, full = rs.summary(), rs.summary(detail="full")
        assert "unknown detail" in rs.summary(detail="everything")["error"]
    finally:
        rs.close()
    k_short = short["ranks"][0]["utilisation"]["top_counted_kernels"][0]
    k_full = full["report_summary"]["ranks"][0]["utilisation"]["top_kernels"][0]
    assert k_short["kernel"] == "batch_norm_collect_statistics_kernel<Var, BFloat16, BFloat1…"
    assert k_full["kernel"].startswith("void at::native::batch_norm_collect_statistics_kernel<at::native::Var, c10::BFloat16")
    assert k_short["dur_ns"] == k_full["dur_ns"] == 2_230_431


def test_short_summary_names_the_heaviest_kernels_and_what_the_flops_cover():
    """mi300x_vllm_hipgraph_piecewise: its heaviest kernel is the graph-replayed MoE matmul (83.29 ms
    of 156 ms of kernels); the kernels with counted FLOPs are a 0.35 ms GEMM and a few small ones.
    The short summary listed only those under `utilisation.top_kernels`, which an agent read as the
    heaviest kernels. Each device now lists its heaviest kernels in the analysed window (the report's
    device_time), and utilisation says what share of the kernels' time its FLOPs describe."""
    rs = AgentRuns([_run_dir(TRACES / "mi300x_vllm_hipgraph_piecewise.json.gz")])
    try:
        short = rs.summary()
        report = rs.report(rs.names[0])
    finally:
        rs.close()
    (r,), (s,) = short["ranks"], report["summary"]["ranks"]
    (dev,), (dt,) = r["devices"], s["device_time"]
    assert [(k["kernel"], k["dur_ns"]) for k in dev["top_kernels"]] == [(k["kernel"], k["dur_ns"]) for k in dt["top_kernels"][:2]]
    assert dev["top_kernels"][0]["kernel"] == "_matmul_ogs_NNT_bf16xbf16xmxfp4_128x128x128x1_swiglu"
    assert dev["top_kernels"][0]["dur_ns"] == 83_288_347
    u = r["utilisation"]
    assert u["counted_share"] == float(f"{s['achieved']['counted_share']:.3g}") < 0.01 and "top_kernels" not in u
    assert u["top_counted_kernels"][0]["dur_ns"] < dev["top_kernels"][0]["dur_ns"] / 100
