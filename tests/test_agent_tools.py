"""The agent tools (what the MCP server exposes) on a hand-built trace whose right answers are known.

    pid 1 / tid 1 (host), times in us after baseTimeNanoseconds:
    0 ................................................................ 100  ProfilerStep#1
     1 ............................................................ 90    train.py(10): train_step
        5 ............................ 45                                  aten::linear
         6 .......................... 40                                   aten::addmm
          7..9 launch (corr 500)   20..22 launch (corr 501)
                                              50 ............ 80           train.py(20): loss_fn
                                                55 ........ 75             aten::mse_loss
                                                 56..58 launch (corr 502)
    pid 0 / tid 7 (device 0, stream 7):
             10 ......... 30 gemm  30 .. 35 bias        60 .. 64 mse

Right answers: line train.py:10 has device time 20 + 5 = 25 us over 2 kernels and 40 us of
outermost CPU operators (aten::linear); train.py:20 has 4 us over 1 kernel and 20 us (aten::mse_loss).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from neuron_explorer import open_run
from neuron_explorer.agent.tools import MAX_CHARS, AgentRuns, bound
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import TRACES, X, write_trace
from .test_sandbox import run_digest

BASE = 1_700_000_000_000_000_000
US = 1000


EVENTS = [
    X("ProfilerStep#1", "user_annotation", 0, 100),
    X("train.py(10): train_step", "python_function", 1, 89),
    X("aten::linear", "cpu_op", 5, 40, **{"External id": 100}),
    X("aten::addmm", "cpu_op", 6, 34, **{"External id": 101}),
    X("cudaLaunchKernel", "cuda_runtime", 7, 2, correlation=500, **{"External id": 101}),
    X("cudaLaunchKernel", "cuda_runtime", 20, 2, correlation=501, **{"External id": 101}),
    X("train.py(20): loss_fn", "python_function", 50, 30),
    X("aten::mse_loss", "cpu_op", 55, 20, **{"External id": 102}),
    X("cudaLaunchKernel", "cuda_runtime", 56, 2, correlation=502, **{"External id": 102}),
    X("gemm", "kernel", 10, 20, pid=0, tid=7, correlation=500, stream=7, device=0),
    X("bias", "kernel", 30, 5, pid=0, tid=7, correlation=501, stream=7, device=0),
    X("mse", "kernel", 60, 4, pid=0, tid=7, correlation=502, stream=7, device=0),
]


def build_hand_run(tmp: Path) -> Path:
    trace = write_trace(tmp / "hand.json", EVENTS, baseTimeNanoseconds=BASE)
    return import_traces(trace, tmp / "hand").run_dir


@pytest.fixture(scope="module")
def hand(tmp_path_factory):
    run_dir = build_hand_run(tmp_path_factory.mktemp("agent_tools"))
    rs = AgentRuns([run_dir])
    yield rs, run_dir
    rs.close()


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    run_dir = import_traces(TRACES / "cuda_train_68k_events.json.gz", tmp_path_factory.mktemp("agent_real") / "t68k").run_dir
    rs = AgentRuns([run_dir])
    yield rs, run_dir
    rs.close()


def eid(run_dir: Path, name: str, ts_us: int | None = None) -> int:
    with open_run(run_dir) as r:
        q = "SELECT event_id FROM events WHERE name = ?" + (" AND ts_ns = ?" if ts_us is not None else "")
        rows = r.sql(q, [name] + ([BASE + ts_us * US] if ts_us is not None else [])).fetchall()
    assert len(rows) == 1
    return rows[0][0]


def test_hot_source_lines_known_answer(hand):
    rs, _ = hand
    out = rs.hot_source_lines()
    assert out["ok"] and not out["truncated"]
    got = [(x["file"], x["line"], x["function"], x["device_ns"], x["kernels"], x["cpu_op_ns"]) for x in out["lines"]]
    assert got == [("train.py", 10, "train_step", 25 * US, 2, 40 * US), ("train.py", 20, "loss_fn", 4 * US, 1, 20 * US)]
    assert {"device_ns", "kernels", "cpu_ns", "cpu_backward_ns", "code"} <= set(out["definitions"])
    one = rs.hot_source_lines(k=1)
    assert [x["line"] for x in one["lines"]] == [10] and one["truncated"]


def test_event_context_of_a_kernel_walks_to_its_source_line(hand):
    rs, run_dir = hand
    out = rs.event_context(event_id=eid(run_dir, "gemm"))
    assert out["ok"]
    chain = out["chain"]
    assert (chain["source"]["file"], chain["source"]["line"]) == ("train.py", 10)
    assert chain["top_op"]["name"] == "aten::linear" and chain["op"]["name"] == "aten::addmm"
    assert chain["launch"]["name"] == "cudaLaunchKernel" and chain["launch"]["ts_ns"] == BASE + 7 * US
    assert [e["name"] for e in chain["device_events"]] == ["gemm"]
    nb = out["neighbours"]
    assert nb["before"] == []
    # gap_ns: from the event's end (30 us) to the neighbour's start
    assert [(e["name"], e["gap_ns"]) for e in nb["after"]] == [("bias", 0), ("mse", 30 * US)]


def test_event_context_of_an_operator_lists_its_kernels_and_neighbours(hand):
    rs, run_dir = hand
    out = rs.event_context(event_id=eid(run_dir, "aten::addmm"))
    assert [e["name"] for e in out["chain"]["device_events"]] == ["gemm", "bias"]
    assert out["chain"]["device_events_total"] == 2 and out["chain"]["launch"] is None
    launch2 = rs.event_context(event_id=eid(run_dir, "cudaLaunchKernel", ts_us=20))
    assert [e["name"] for e in launch2["chain"]["device_events"]] == ["bias"]
    # same track and depth: the other launches, with the gaps between them
    assert [(e["ts_ns"] - BASE, e["gap_ns"]) for e in launch2["neighbours"]["before"]] == [(7 * US, 11 * US)]
    assert [(e["ts_ns"] - BASE, e["gap_ns"]) for e in launch2["neighbours"]["after"]] == [(56 * US, 34 * US)]


def test_event_context_of_a_missing_event_is_an_error_envelope(hand):
    rs, _ = hand
    out = rs.event_context(event_id=999_999)
    assert out == {"ok": False, "error": "no event with event_id 999999 in run hand"}


def test_unknown_run_is_an_error_naming_the_runs(hand):
    rs, _ = hand
    out = rs.query("nope", "SELECT 1")
    assert not out["ok"] and "unknown run 'nope'" in out["error"] and "hand" in out["error"]


def test_findings_match_the_analyzer_and_nothing_is_written(real):
    from neuron_explorer.analyzers import analyze

    rs, run_dir = real
    before = run_digest(run_dir)
    report = analyze(run_dir, write=False).to_dict()
    assert report["findings"], "the 68k-event trace should yield findings"
    out = rs.findings(k=50)
    assert out["ok"] and out["total_findings"] == len(report["findings"])
    assert [f["rule_id"] for f in out["findings"]] == [f["rule_id"] for f in report["findings"]]
    assert [f["finding"] for f in out["findings"]] == list(range(len(report["findings"])))
    high = rs.findings(severity="high")
    assert all(f["severity"] == "high" for f in high["findings"])
    assert high["matching"] == sum(f["severity"] == "high" for f in report["findings"])
    cat = report["findings"][0]["category"]
    by_cat = rs.findings(category=cat)
    assert by_cat["findings"] and all(f["category"] == cat for f in by_cat["findings"])
    assert rs.findings(k=1)["findings"] == out["findings"][:1]
    assert "unknown category" in rs.findings(category="nonsense")["error"]
    assert "unknown severity" in rs.findings(severity="urgent")["error"]
    assert run_digest(run_dir) == before and not (run_dir / "analysis").exists()


def test_explain_finding_runs_its_evidence_in_the_sandbox(real):
    from neuron_explorer.analyzers import analyze

    rs, run_dir = real
    report = analyze(run_dir).to_dict()  # as a user does: analyze writes RUN/analysis/, which some evidence reads
    first = report["findings"][0]
    out = rs.explain_finding(finding=0, max_rows=5)
    assert out["ok"] and out["detail"]["rule_id"] == first["rule_id"]
    with open_run(run_dir) as r:
        expected = [list(x) for x in r.sql(first["evidence"]["sql"]).fetchmany(5)]
    assert out["evidence_result"]["ok"] and out["evidence_result"]["rows"] == expected
    assert sorted(e["event_id"] for e in out["sample_events"]) == sorted(first["evidence"]["sample_event_ids"])
    assert "no finding 999" in rs.explain_finding(finding=999)["error"]


def test_summary_has_run_info_and_report_summary(real):
    rs, run_dir = real
    out = rs.summary(detail="full")
    assert out["ok"] and out["findings"] > 0
    with open_run(run_dir) as r:
        assert out["info"]["ranks"][0]["events"] == r.sql("SELECT count(*) FROM events").fetchone()[0]
    assert out["report_summary"]["ranks"][0]["rank"] == 0


def test_without_the_analyzer_report_tools_say_so_and_the_rest_works(hand, monkeypatch):
    rs, run_dir = hand
    fresh = AgentRuns([run_dir])
    try:
        monkeypatch.setitem(sys.modules, "neuron_explorer.analyzers", None)  # import now fails
        for out in (fresh.findings(), fresh.explain_finding(finding=0)):
            assert out["ok"] is False and "the analyzer is not available" in out["error"]
        s = fresh.summary()
        assert s["ok"] and "the analyzer is not available" in s["analysis_error"]
        assert json.loads(fresh.report_json())["ok"] is False
        assert fresh.query(sql="SELECT count(*) AS n FROM events")["rows"] == [[len(EVENTS)]]
    finally:
        fresh.close()


def test_bound_cuts_lists_to_fit_and_says_so():
    payload = {"ok": True, "rows": [["x" * 100, i] for i in range(1000)], "row_count": 1000}
    out = bound(payload, max_chars=5000)
    assert len(json.dumps(out)) <= 5000
    assert out["truncated"] and "cut to fit 5000" in out["note"]
    assert out["rows"] == payload["rows"][: len(out["rows"])] and out["row_count"] == len(out["rows"]) > 0
    small = {"ok": True, "rows": [[1]]}
    assert bound(small) is small


def test_query_tool_is_bounded_in_rows_and_characters(hand):
    rs, _ = hand
    many = rs.query(sql="SELECT range FROM range(100000)", max_rows=100000)
    assert many["ok"] and many["row_count"] == 200 and many["truncated"]
    wide = rs.query(sql="SELECT repeat('y', 1500) AS s FROM range(150)", max_rows=150)
    assert len(json.dumps(wide)) <= MAX_CHARS and wide["truncated"] and 0 < wide["row_count"] < 150
