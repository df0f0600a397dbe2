"""The analyzer on hand-built traces whose right answers are known, plus its outputs and robustness.

Trace A (one rank, device 0; times in us from baseTimeNanoseconds):
    host  0 ........ 100 ........ 200 ......................... 400   ProfilerStep#1, #2, #3
          1..30 DataLoader.__next__   101..130 DataLoader.__next__
          66..99 aten::slow_host          205 ... train.py(42): save ... 295
                                           210 .. aten::checkpoint .. 290
                                                                 300 .. cudaStreamSynchronize .. 390
    dev0  s7: 10..30 k1   50..60 memcpy   s8: 20..40 k2   s7: 60..65 memset
          s7: 300..350 k3    s9: 340..390 ncclKernel_AllReduce
  busy = [10,40) + [50,65) + [300,390) = 30 + 15 + 90 = 135; device window [10,390) = 380, idle 245;
  analysed window (the steps) [0,400): idle 265, 38 of it while the host fetches a batch at 1..30 and
  101..130 (input-pipeline's) and 10 after the last event at 390 (critical-path's): device-idle's 217
  comm 50, overlapping k3 by 10 → exposed 40; steps 100, 100, 200 (step 3 is the slow one)
"""

from __future__ import annotations

import json
import statistics

import duckdb
import jsonschema
import pytest

import neuron_explorer as nx
from neuron_explorer.analyzers.engine import all_rules, analyze, analyze_run
from neuron_explorer.analyzers.report_schema import SCHEMA
from neuron_explorer.collectors.chrome_trace import import_traces
from neuron_explorer.errors import InputError
from neuron_explorer.store import open_run

from .conftest import TRACES, X, cli, write_trace

BASE = 1_700_000_000_000_000_000
US = 1000


def K(name, ts, dur, stream=7, cat="kernel"):
    return X(name, cat, ts, dur, pid=0, tid=stream, device=0, stream=stream)


LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
TRACE_A = [
    X("ProfilerStep#1", "user_annotation", 0, 100), X("ProfilerStep#2", "user_annotation", 100, 100),
    X("ProfilerStep#3", "user_annotation", 200, 200),
    X(LOADER, "user_annotation", 1, 29), X(LOADER, "user_annotation", 101, 29),
    X("aten::slow_host", "cpu_op", 66, 33),
    X("train.py(42): save", "python_function", 205, 90), X("aten::checkpoint", "cpu_op", 210, 80),
    X("cudaStreamSynchronize", "cuda_runtime", 300, 90),
    K("k1", 10, 20), K("k2", 20, 20, stream=8), K("Memcpy DtoD (Device -> Device)", 50, 10, cat="gpu_memcpy"),
    K("Memset (Device)", 60, 5, cat="gpu_memset"), K("k3", 300, 50), K("ncclKernel_AllReduce_RING", 340, 50, stream=9),
]


def _cpu_trace() -> list[dict]:
    """Trace B, CPU only: 3 steps of 4200 us, each 300 tiny aten::add (5 us, 2 us apart) then one aten::mm of 2000 us."""
    ev = []
    for s in range(3):
        t0 = s * 4200
        ev.append(X(f"ProfilerStep#{s + 1}", "user_annotation", t0, 4200))
        ev += [X("aten::add", "cpu_op", t0 + 10 + i * 7, 5) for i in range(300)]
        ev.append(X("aten::mm", "cpu_op", t0 + 2200, 2000))
        ev.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": t0 + 2201, "s": "t",
                   "args": {"Device Type": 0, "Device Id": -1, "Addr": 1 + s, "Bytes": 2**27, "Total Allocated": 2**27 * (s + 1),
                            "Total Reserved": 0}})
    return ev


def _launch_trace() -> list[dict]:
    """Trace C, one 1000 us step: 120 aten::add each launching a 2 us kernel, a float32 aten::mm launching 240 us of sgemm,
    and a 60 us pageable host-to-device copy."""
    ev = [X("ProfilerStep#1", "user_annotation", 0, 1000)]
    for i in range(120):
        t = 10 + i * 6
        ev += [X("aten::add", "cpu_op", t, 5, **{"External id": i}),
               X("cudaLaunchKernel", "cuda_runtime", t + 1, 4, correlation=i, **{"External id": i}),
               X("add_kernel", "kernel", t + 6, 2, pid=0, tid=7, device=0, stream=7, correlation=i)]
    ev += [X("aten::mm", "cpu_op", 740, 20, **{"External id": 999, "Input type": ["float", "float"]}),
           X("cudaLaunchKernel", "cuda_runtime", 741, 4, correlation=9999, **{"External id": 999}),
           X("sgemm", "kernel", 750, 240, pid=0, tid=7, device=0, stream=7, correlation=9999),
           X("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 10, 60, pid=0, tid=8, device=0, stream=8)]
    return ev


PROPS = [{"id": 0, "name": "NVIDIA A100", "computeMajor": 8, "computeMinor": 0, "totalGlobalMem": 42297524224}]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("analyze")
    out = {}
    for name, events, extra in (("a", TRACE_A, {}), ("b", _cpu_trace(), {}), ("c", _launch_trace(), {"deviceProperties": PROPS})):
        trace = write_trace(tmp / f"{name}.json", events, baseTimeNanoseconds=BASE, **extra)
        out[name] = import_traces(trace, tmp / f"run_{name}").run_dir
    quiet = write_trace(tmp / "quiet.json", [X("ProfilerStep#1", "user_annotation", 0, 100), X("aten::relu", "cpu_op", 10, 10)])
    out["quiet"] = import_traces(quiet, tmp / "run_quiet").run_dir
    for name, waits in (("skew", (40, 5)), ("even", (20, 20))):
        for rank, w in enumerate(waits):
            write_trace(tmp / name / f"rank{rank}.json", [X("ProfilerStep#1", "user_annotation", 0, 100),
                                                          X("c10d::allreduce_", "cpu_op", 90 - w, w)],
                        baseTimeNanoseconds=BASE, distributedInfo={"rank": rank, "world_size": 2})
        out[name] = import_traces(tmp / name, tmp / f"run_{name}").run_dir
    return out


@pytest.fixture(scope="module")
def reports(runs):
    return {k: analyze(v) for k, v in runs.items()}


def by_rule(report, rule_id):
    return [f for f in report.findings if f.rule_id == rule_id]


# ---- summary numbers -------------------------------------------------------------------------

def test_device_busy_idle_kernel_copy_and_comm_numbers(reports):
    r = reports["a"].summary["ranks"][0]
    (d,) = r["devices"]
    assert d["busy_ns"] == 135 * US and d["window_ns"] == 380 * US and d["idle_ns"] == 245 * US
    assert d["kernel_ns"] == (20 + 20 + 50 + 50) * US and d["memcpy_ns"] == 10 * US and d["memset_ns"] == 5 * US
    assert d["comm_ns"] == 50 * US and d["comm_overlap_ns"] == 10 * US and d["comm_exposed_ns"] == 40 * US


def test_span_and_step_statistics(reports):
    r = reports["a"].summary["ranks"][0]
    assert r["span_ns"] == 400 * US and r["analysed_ns"] == 400 * US
    s, durs = r["steps"], [100 * US, 100 * US, 200 * US]
    assert s["count"] == 3 and s["total_ns"] == sum(durs) and s["max_ns"] == 200 * US
    assert s["mean_ns"] == pytest.approx(statistics.mean(durs)) and s["p50_ns"] == 100 * US
    assert s["p90_ns"] == pytest.approx(180 * US)  # linear interpolation: 100 + 0.8 * (200 - 100)
    assert s["cv"] == pytest.approx(statistics.pstdev(durs) / statistics.mean(durs))


def test_top_level_ops_and_source_lines(reports):
    r = reports["b"].summary["ranks"][0]
    ops = {o["name"]: o for o in r["top_level_ops"]}
    assert ops["aten::mm"] == {"name": "aten::mm", "calls": 3, "cpu_ns": 6000 * US, "compile_ns": 0}
    assert r["compile_ns"] == 0  # nothing compiled
    assert ops["aten::add"]["calls"] == 900 and ops["aten::add"]["cpu_ns"] == 4500 * US
    assert r["devices"] == [] and r["source_lines"]["has_frames"] is False
    lines = reports["a"].summary["ranks"][0]["source_lines"]
    assert lines["cpu"] == [{"source": "train.py:42", "self_ns": 80 * US, "total_ns": 80 * US, "backward_self_ns": 0, "calls": 1}]


def test_cpu_comm_time(reports):
    ranks = {r["rank"]: r for r in reports["skew"].summary["ranks"]}
    assert ranks[0]["comm_cpu_ns"] == 40 * US and ranks[1]["comm_cpu_ns"] == 5 * US
    assert ranks[0]["comm_cpu_exposed_ns"] == 40 * US  # the main thread blocked in it: nothing else ran


def test_gloo_all_reduces_on_their_own_threads_are_exposed_where_no_operator_runs(tmp_path):
    """A CPU DDP step as gloo records it: the main thread runs the backward (aten::mm 0-300 µs) and
    then waits, recording nothing; gloo runs the all-reduce on its own thread as a `gloo:all_reduce`
    range (200-900 µs; another one, 1200-1500 µs, after the step). In the step [0, 1000): the
    collectives' union 700 µs, 600 of it with no operator running (300-900): the finding's figure.

        main   ProfilerStep#1 [0 ------------------------------------------------- 1000)
               aten::mm [0 ---- 300)
        gloo               [200 ---- gloo:all_reduce ---- 900)          [1200 --- 1500)
    """
    events = [X("ProfilerStep#1", "user_annotation", 0, 1000), X("aten::mm", "cpu_op", 0, 300),
              X("gloo:all_reduce", "user_annotation", 200, 700, tid=7), X("gloo:all_reduce", "user_annotation", 1200, 300, tid=7)]
    run_dir = import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir
    report = analyze(run_dir, write=False)
    (r,) = report.summary["ranks"]
    assert (r["comm_cpu_ns"], r["comm_cpu_exposed_ns"], r["comm_cpu_intervals"]) == (700 * US, 600 * US, 1)
    (f,) = by_rule(report, "comm-exposed")
    assert f.impact_ns == 600 * US and f.title == "0.60 ms of communication not overlapped with compute: gloo:all_reduce x1"
    with open_run(run_dir) as run:  # the evidence gives the figures in plain DuckDB
        assert run.sql(f.evidence.sql).fetchall() == [(0, 700 * US, 600 * US, 1)]


# ---- rules: positive and negative cases ------------------------------------------------------

def test_device_idle_names_host_work_in_the_largest_gap(reports):
    (f,) = by_rule(reports["a"], "device-idle")
    # the summary's device time over the analysed window (the steps), less what other rules name
    assert f.evidence.values["idle_ns"] == reports["a"].summary["ranks"][0]["device_time"][0]["idle_ns"] == 265 * US
    assert (f.evidence.values["idle_in_loader_ns"], f.evidence.values["idle_unrecorded_ns"]) == (38 * US, 10 * US)
    assert f.impact_ns == 217 * US and f.location.device == 0 and f.severity == "high"
    assert f.title == ("Device 0 idle 54.2% of the analysed window (0.22 ms, besides 0.04 ms while the host waited for the DataLoader "
                       "(input-pipeline's) and 0.01 ms after the last event the trace holds (critical-path's))")
    assert "aten::checkpoint" in f.recommendation and f.impact_share == pytest.approx(217 / 400)
    # the gaps named: 130..300 (after the fetch), 65..101 (aten::slow_host), 40..50
    assert "largest gaps — gap of 0.17 ms: host ran aten::checkpoint 0.08 ms; gap of 0.04 ms: host ran aten::slow_host 0.03 ms; " \
        "gap of 0.01 ms: host ran no recorded host activity." in f.recommendation
    assert LOADER not in f.recommendation  # the gaps named are the idle left: the fetch is input-pipeline's


def test_host_sync_input_pipeline_comm_and_step_outliers(reports):
    (sync,) = by_rule(reports["a"], "host-sync")
    # the sync returns at 390 and the device then idles to the end of step 3 at 400: that is its cost
    assert sync.impact_ns == 10 * US and sync.location.op == "cudaStreamSynchronize"
    assert sync.evidence.values["wait_ns"] == 90 * US
    (loader,) = by_rule(reports["a"], "input-pipeline")
    assert loader.impact_ns == 58 * US and loader.location.op == LOADER
    (comm,) = by_rule(reports["a"], "comm-exposed")
    assert comm.impact_ns == 40 * US
    (slow,) = by_rule(reports["a"], "step-outliers")
    assert slow.location.steps == [3] and slow.impact_ns == 100 * US and slow.location.source == "train.py:42"


def test_cpu_only_run_hotspot_tiny_ops_memory_and_device_rules_not_applicable(reports):
    rep = reports["b"]
    hot = [f for f in by_rule(rep, "hotspot") if f.location.op == "aten::mm"]
    assert hot and hot[0].impact_ns == 6000 * US
    (tiny,) = by_rule(rep, "tiny-ops")
    assert tiny.evidence.values["tiny_ops"] == 900 and tiny.impact_ns == (4500 + 3 * 299 * 2) * US
    assert "(mostly aten::add)" in tiny.recommendation  # no source line recorded: no count per line
    (mem,) = by_rule(rep, "memory")
    assert mem.evidence.values["peak_bytes"] == 3 * 2**27 and mem.severity == "info"
    assert mem.evidence.values["allocated_in_steps_bytes"] == 3 * 2**27
    na = {n["rule_id"] for n in rep.not_applicable}
    assert {"device-idle", "launch-overhead", "host-sync", "copies", "precision"} <= na
    assert not by_rule(rep, "input-pipeline") and not by_rule(rep, "step-outliers")


def _not_applicable_block(out: str) -> str:
    """The text report's list of rules that did not apply, its lines (wrapped at the report's width,
    each no wider) joined again; the list is the report's last paragraph but for warnings."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("not applicable here"))
    block = []
    for line in lines[start:]:
        if not line.strip() or line.startswith("warning:"):
            break
        block.append(line.strip())
    width = max(map(len, block))
    assert width <= 100, width
    return " ".join(block)


def test_the_text_report_names_rules_not_applicable_in_one_list_and_json_keeps_why(reports):
    from neuron_explorer.analyzers.outputs import report_json
    from neuron_explorer.analyzers.render import text

    rep = reports["b"]  # the CPU-only run: the device rules do not apply
    ids = list(dict.fromkeys(n["rule_id"] for n in rep.not_applicable))
    assert "device-idle" in ids
    assert _not_applicable_block(text(rep, width=80)) == "not applicable here (why: --json or --markdown): " + ", ".join(ids)
    reasons = {n["rule_id"]: n["reason"] for n in json.loads(report_json(rep))["not_applicable"]}
    assert set(reasons) == set(ids) and "CPU-only" in reasons["device-idle"]


def test_a_real_cpu_report_ends_with_one_list_of_rules(tmp_path):
    res = cli("analyze", TRACES / "cpu_only_rank34_of_300.json.gz")
    assert res.returncode == 0
    assert _not_applicable_block(res.stdout) == (
        "not applicable here (why: --json or --markdown): allocator-churn, collective-wait, copies, critical-path, device-idle, "
        "device-underuse, host-sync, launch-overhead, load-imbalance, memory, precision, rank-skew, step-outliers")


def test_launch_overhead_copies_and_precision(reports):
    rep = reports["c"]
    (launch,) = by_rule(rep, "launch-overhead")
    assert launch.evidence.values["short_kernels"] == 120 and launch.impact_ns == 120 * 4 * US and launch.location.op == "aten::add"
    (copy,) = by_rule(rep, "copies")
    assert copy.impact_ns == 60 * US and copy.evidence.values["pageable_h2d"] == 1
    (prec,) = by_rule(rep, "precision")
    assert prec.impact_ns == 240 * US and prec.saving_bound_ns == 120 * US and prec.location.op == "aten::mm"
    assert "one profiler step only" in " ".join(prec.confidence_notes) and prec.confidence < 1.0


def test_negative_cases_stay_quiet(reports):
    a = reports["a"]
    assert not by_rule(a, "launch-overhead") and not by_rule(a, "tiny-ops") and not by_rule(a, "copies")
    assert not by_rule(reports["c"], "input-pipeline") and not by_rule(reports["c"], "step-outliers")
    assert reports["quiet"].findings == []
    assert not by_rule(reports["skew"], "memory")  # no allocator events: not applicable
    assert {"memory"} <= {n["rule_id"] for n in reports["skew"].not_applicable}
    assert not by_rule(reports["even"], "rank-skew")
    assert {n["rule_id"] for n in a.not_applicable} >= {"rank-skew", "precision"}


def test_a_ranks_wait_for_the_late_rank_is_the_jobs_finding_not_its_exposed_communication(runs, reports, tmp_path):
    """In `skew`, rank 0 sits 40 µs in c10d::allreduce_, 35 µs of it waiting for rank 1 to arrive: its
    exposed communication is the late rank's doing, which collective-wait and rank-skew name; overlap
    advice would not hide it. Rank 1's 5 µs are its own. Rank 0 imported alone (no job to see the
    wait) keeps the finding."""
    rep = reports["skew"]
    assert [(f.location.rank, f.impact_ns) for f in by_rule(rep, "comm-exposed")] == [(1, 5 * US)]
    assert by_rule(rep, "collective-wait") and by_rule(rep, "rank-skew")
    assert {r["rank"]: r["wait_ns"] for r in rep.summary["cross_rank"]["ranks"]} == {0: 35 * US, 1: 0}
    alone = import_traces(runs["skew"].parent / "skew" / "rank0.json", tmp_path / "alone").run_dir
    assert [(f.location.rank, f.impact_ns) for f in by_rule(analyze(alone), "comm-exposed")] == [(0, 40 * US)]


def test_rank_skew_names_the_straggler(reports):
    (f,) = by_rule(reports["skew"], "rank-skew")
    assert f.location.rank == 1 and f.impact_ns == 35 * US and f.location.op == "c10d::allreduce_"


# ---- the finding contract, outputs ------------------------------------------------------------

def test_findings_are_ranked_by_impact_and_evidence_sql_reproduces_them_in_plain_duckdb(runs, reports):
    checked = 0
    for name, rep in reports.items():
        impacts = [f.impact_ns for f in rep.findings]
        assert impacts == sorted(impacts, reverse=True)
        con = duckdb.connect()
        for t in ("events", "frames", "flows", "memory", "counters"):
            con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{runs[name]}/rank=*/{t}.parquet')")
        for f in rep.findings:
            rel = con.execute(f.evidence.sql)
            cols = [d[0] for d in rel.description]
            row = dict(zip(cols, rel.fetchone()))
            shared = [k for k in f.evidence.values if k in row]
            assert shared, (f.rule_id, cols)
            for k in shared:
                assert row[k] == f.evidence.values[k], (name, f.rule_id, k)
            checked += 1
    assert checked >= 12


def test_report_json_validates_and_outputs_are_written(runs, reports):
    for _name, run_dir in runs.items():
        doc = json.loads((run_dir / "analysis" / "report.json").read_text())
        jsonschema.validate(doc, SCHEMA)
        assert doc["schema_version"] == 2
        assert (run_dir / "analysis" / "report.md").read_text().startswith("# Performance report")
    t = duckdb.sql(f"SELECT rule_id, impact_ns FROM '{runs['a']}/analysis/findings.parquet' ORDER BY rank_order").fetchall()
    assert t == [(f.rule_id, f.impact_ns) for f in reports["a"].findings]


def test_python_api(runs):
    report = nx.analyze(runs["a"], write=False)
    # host time on the path (Python 129 µs, aten::checkpoint 80 µs, ...) is one cause, 252 µs: above device-idle's 217 µs (265 less the
    # fetches' 38 and the 10 after the last event)
    assert [(f.rule_id, f.impact_ns) for f in report.findings[:2]] == [("critical-path", 252 * 1000), ("device-idle", 217 * 1000)]
    slow = [f for f in report.findings if f.rule_id == "step-outliers"][0]
    assert slow.source == "train.py:42"


def test_cli_text_json_markdown_and_fail_on(runs):
    r = cli("analyze", runs["a"])
    assert r.returncode == 0 and "device-idle" in r.stdout and max(map(len, r.stdout.splitlines())) <= 100
    assert json.loads(cli("analyze", runs["a"], "--json").stdout)["findings"][1]["rule_id"] == "device-idle"
    assert "| 1 | high |" in cli("analyze", runs["a"], "--markdown").stdout
    assert cli("analyze", runs["a"], "--fail-on", "high").returncode == 1
    quiet = cli("analyze", runs["quiet"], "--fail-on", "low")
    assert quiet.returncode == 0 and "No findings above the thresholds" in quiet.stdout
    bad = cli("analyze", runs["a"], "--fail-on", "urgent")
    assert bad.returncode == 2 and "high, medium or low" in bad.stderr


# ---- robustness --------------------------------------------------------------------------------

def test_a_failing_rule_becomes_a_warning_and_the_others_run(runs):
    class Broken:
        RULE_ID, TITLE, CATEGORY, SCOPE, THRESHOLDS = "broken", "Broken", "hotspot", "rank", {}

        @staticmethod
        def check(ctx):
            return 1 / 0

    with nx.open_run(runs["a"]) as run:
        rep = analyze_run(run, [Broken, *all_rules()])
    assert any("broken" in w and "ZeroDivisionError" in w for w in rep.warnings)
    assert by_rule(rep, "device-idle")


def test_newer_run_format_is_a_clear_error(runs, tmp_path):
    import shutil

    newer = tmp_path / "newer"
    shutil.copytree(runs["a"], newer)
    m = json.loads((newer / "manifest.json").read_text())
    m["format_version"] = 99
    (newer / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(InputError, match="newer"):
        analyze(newer)
    r = cli("analyze", newer)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "newer" in r.stderr



def test_the_dataloader_fetch_is_input_pipelines_not_a_hotspot_operator():
    """V100 ResNet-50 (torch 1.9): `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__` is the
    heaviest top-level range (272.77 ms over 6 fetches). input-pipeline reports it with loader advice;
    hotspot no longer also calls it an operator to make cheaper with 'lower precision, channels_last'."""
    rep = analyze(TRACES / "v100_resnet50_torch19_memory.json.gz", write=False)
    (loader,) = by_rule(rep, "input-pipeline")
    assert loader.impact_ns == 272_769_000 and "num_workers" in loader.recommendation  # its 6 fetches in the raw JSON: 272,769 µs
    assert not [f for f in by_rule(rep, "hotspot") if "DataLoader" in (f.location.op or "") or "DataLoader" in f.title]


def test_the_analysis_connections_draw_no_progress_bar_into_stdout():
    """DuckDB draws a progress bar on stdout for a statement over 2 s (a big rank on a busy
    machine): in `analyze --json > report.json` it came before the JSON. Every connection the
    analysis makes, and the cursors made from it, have the bar off."""
    from neuron_explorer.store import new_connection

    con = new_connection()
    try:
        setting = "SELECT current_setting('enable_progress_bar')"
        assert con.execute(setting).fetchone()[0] is False
        assert con.cursor().execute(setting).fetchone()[0] is False
    finally:
        con.close()


def test_report_json_text_is_the_standard_librarys_json_of_the_report(reports):
    """report.json's text (encoded by msgspec) is what `json.dumps(report.to_dict(), indent=1)`
    writes, character for character: non-ASCII escaped as \\uXXXX (a surrogate pair beyond the
    BMP), key order the same; a float of 1e16 or more reads the same with its exponent written
    1e16, not 1e+16; a non-finite number is null (JSON has none)."""
    import dataclasses
    import math

    from neuron_explorer.analyzers.outputs import report_json

    for rep in reports.values():
        assert report_json(rep) == json.dumps(rep.to_dict(), indent=1, default=str)
    rep = next(iter(reports.values()))
    # Latin-1 (µ), beyond the BMP (😀), and backslashes of the text beside what looks like an escape
    f = dataclasses.replace(rep.findings[0], title="copy … to the host 😀 in 3 µs", recommendation="C:\\x41 \\\\U0001f600 \\µ")
    odd = dataclasses.replace(rep, findings=[f], warnings=["naïve"], summary={"ratio": 0.1, "n": 3})
    assert report_json(odd) == json.dumps(odd.to_dict(), indent=1, default=str)
    assert "\\u2026" in report_json(odd) and "\\ud83d\\ude00" in report_json(odd) and "\\u00b5" in report_json(odd)
    assert json.loads(report_json(odd))["findings"][0]["recommendation"] == "C:\\x41 \\\\U0001f600 \\µ"
    big = dataclasses.replace(odd, summary={"flops": 2.0**60, "tiny": 1e-7})
    assert json.loads(report_json(big)) == json.loads(json.dumps(big.to_dict(), default=str))
    assert '"flops": 1.152921504606847e18' in report_json(big)
    nan = dataclasses.replace(odd, summary={"share": math.nan, "inf": math.inf})
    assert json.loads(report_json(nan))["summary"] == {"share": None, "inf": None}


def _first_calls_trace(shapes: bool) -> list[dict]:
    """An eager inference loop: aten::linear with two input shapes, A and B, called in turn, each
    launching one 20 µs kernel as it returns; the next call starts 5 µs after that kernel ends, so the
    device idles for each call's time plus 5 µs. The first call of each shape is slow (1,000 µs for A,
    800 µs for B: a library choosing a kernel for a new shape); the later ones take 50-90 µs (A, median
    70) and 40 µs (B)."""
    dims = {"A": [[8, 16], [32, 16], [32]], "B": [[8, 32], [16, 32], [16]]}
    calls = [("A", 1000), ("B", 800), ("A", 50), ("B", 40), ("A", 60), ("B", 40), ("A", 70), ("B", 40), ("A", 80), ("B", 40), ("A", 90)]
    events = [X("aten::zeros", "cpu_op", 0, 10), X("cudaLaunchKernel", "cuda_runtime", 5, 3, correlation=1),
              {**K("zeros_kernel", 10, 5), "args": {"device": 0, "stream": 7, "correlation": 1}}]
    t = 20
    for i, (shape, dur) in enumerate(calls, start=2):
        args = {"Input Dims": dims[shape], "Input type": ["float", "float", "float"]} if shapes else {}
        events += [X("aten::linear", "cpu_op", t, dur, **args), X("cudaLaunchKernel", "cuda_runtime", t + dur - 5, 3, correlation=i),
                   {**K("gemm_kernel", t + dur, 20), "args": {"device": 0, "stream": 7, "correlation": i}}]
        t += dur + 20 + 5
    return events


@pytest.mark.parametrize("shapes", [True, False], ids=["shapes", "no-shapes"])
def test_device_idle_names_a_gap_that_is_a_first_call_with_new_inputs(tmp_path, shapes):
    """The device's longest gaps are the first call of each shape (1,005 µs and 805 µs of idle, 1.81
    ms of the three longest's 1.90 ms); the advice says so, with the count and the later calls'
    median a person would check (vocab.call_inputs: the same name with the same shapes and types).
    Without shapes recorded, the calls are compared by name alone and the words say no 'inputs'."""
    run = import_traces(write_trace(tmp_path / "t.json", _first_calls_trace(shapes)), tmp_path / "run").run_dir
    (f,) = by_rule(analyze(run, write=False), "device-idle")
    rec = f.recommendation
    if shapes:  # the evidence holds the two calls compared, for an agent
        assert [(c["others"], c["median_ns"], c["first"], c["inputs"]) for c in f.evidence.values["outlier_calls"]] == [
            (5, 70 * US, True, True), (4, 40 * US, True, True)]
        assert rec.startswith("2 of the 3 longest gaps (1.81 ms) are first calls of aten::linear with inputs not seen before")
        assert ("gap of 1.00 ms: host ran aten::linear 1.00 ms (the first of 6 calls with these inputs; the others took 0.07 ms "
                "at the median); gap of 0.81 ms: host ran aten::linear 0.80 ms (the first of 5 calls with these inputs; the others "
                "took 0.04 ms at the median); gap of 0.10 ms: host ran aten::linear 0.09 ms.") in rec
    else:  # one name: A's first call is the first of all 11; B's first (800 µs) is one of the 10 others
        assert rec.startswith("The longest gap (1.00 ms) is the first call of aten::linear, many times the later calls: a library")
        assert "host ran aten::linear 1.00 ms (the first of 11 calls; the others took " in rec
        assert "with these inputs" not in rec and "gap of 0.81 ms: host ran aten::linear 0.80 ms (the other 10 calls took " in rec


def test_device_idle_says_when_its_gaps_are_the_host_waiting_on_the_device(tmp_path):
    """One profiler step (without steps the syncs' waits are host-sync's, left out of device-idle),
    two gaps: 100 µs with the host in cudaDeviceSynchronize throughout (nothing recorded on the device:
    both sides wait), 50 µs with the host in an operator. The waits are 100 of the named gaps' 150 µs:
    the advice says neither side worked there instead of telling the host to feed the device."""
    events = [X("ProfilerStep#1", "user_annotation", 0, 180),
              K("k1", 0, 10), X("cudaDeviceSynchronize", "cuda_runtime", 10, 100), K("k2", 110, 10),
              X("aten::foo", "cpu_op", 120, 50), K("k3", 170, 10)]
    run = import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir
    (f,) = by_rule(analyze(run, write=False), "device-idle")
    assert f.evidence.values["waited_in_gaps_ns"] == 100 * US
    assert f.recommendation.startswith("In the longest gaps the host was waiting on the device (synchronize calls, blocking copies) "
                                       "for 0.10 ms of 0.15 ms, while the trace shows nothing running on it")
    assert "gap of 0.10 ms: host ran cudaDeviceSynchronize 0.10 ms (waiting on the device for 0.10 ms of it)" in f.recommendation
    assert "gap of 0.05 ms: host ran aten::foo 0.05 ms." in f.recommendation and "Keep the device fed" not in f.recommendation


def test_host_sync_with_nothing_on_the_device_is_a_wait_on_unseen_work(tmp_path):
    """A step where the host synchronises for 100 µs with no device work recorded in it, then the
    device idles 10 µs more until the next kernel: host-sync's impact is those 10 µs, and its advice
    says the sync waited on work the trace does not show (100 of its 100 µs), not to remove it."""
    events = [X("ProfilerStep#1", "user_annotation", 0, 200), K("k1", 0, 10),
              X("cudaStreamSynchronize", "cuda_runtime", 10, 100), K("k2", 120, 10)]
    run = import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir
    (f,) = by_rule(analyze(run, write=False), "host-sync")
    assert f.impact_ns == 10 * US
    assert (f.evidence.values["waits_ns"], f.evidence.values["waits_device_idle_ns"]) == (100 * US, 100 * US)
    assert f.recommendation.startswith("For 0.10 ms of the 0.10 ms the host waited (")
    assert "Remove host syncs" not in f.recommendation


def test_critical_path_host_waits_with_nothing_on_the_device_are_waits_on_unseen_work(tmp_path):
    """A step whose path runs through a 100 µs cudaStreamSynchronize while nothing is recorded on the
    device: the path's host-wait class says it is a wait on work the trace does not show (its 100 µs,
    all of it with no device running), after its advice for host waits. (The next kernel starts 1 µs after the
    sync returns: host-sync's figure, that idle, is under its share and the class stays the path's.)"""
    def kernel(name, ts, corr):
        return {**K(name, ts, 10), "args": {"device": 0, "stream": 7, "correlation": corr}}
    events = [X("ProfilerStep#1", "user_annotation", 0, 200),
              X("cudaLaunchKernel", "cuda_runtime", 0, 2, correlation=1), kernel("k1", 2, 1),
              X("cudaStreamSynchronize", "cuda_runtime", 12, 100),
              X("cudaLaunchKernel", "cuda_runtime", 112, 1, correlation=2), kernel("k2", 113, 2),
              X("aten::foo", "cpu_op", 123, 77)]
    run = import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir
    (f,) = [f for f in by_rule(analyze(run, write=False), "critical-path") if f.evidence.values["class"] == "host_sync"]
    assert (f.evidence.values["waits_ns"], f.evidence.values["waits_device_idle_ns"]) == (100 * US, 100 * US)
    assert ("For 0.10 ms of the 0.10 ms the host waited (cudaStreamSynchronize 0.10 ms), no device of this rank ran anything the "
            "trace holds") in f.recommendation


def test_memory_lines_that_allocate_alike_are_listed_in_the_same_order_every_run(tmp_path):
    """Two statements allocate 256 MiB each: the memory finding lists its largest allocating lines by
    bytes, ties by line (mi300 bert-small's two lines of 0.30 GiB swapped places between two analyses
    of the same run)."""
    def mem(ts, addr):
        return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts, "s": "t",
                "args": {"Device Type": 0, "Device Id": -1, "Addr": addr, "Bytes": 2**28, "Total Allocated": 2**28 * addr,
                         "Total Reserved": 0}}
    events = [X("ProfilerStep#1", "user_annotation", 0, 1000)]
    for i, line in enumerate(("z.py(30): h", "b.py(20): g", "a.py(10): f")):
        events += [X(line, "python_function", 10 + i * 100, 50), mem(20 + i * 100, i + 1)]
    run = import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir
    for _ in range(3):
        (f,) = [f for f in analyze(run, write=False).findings if f.rule_id == "memory"]
        assert "Largest allocating lines: a.py:10 0.25 GiB, b.py:20 0.25 GiB, z.py:30 0.25 GiB." in f.recommendation


def test_device_idle_spread_over_many_gaps_says_so_first(tmp_path):
    """An eager loop: 20 calls of aten::add, each 50 µs on the host, launching a 10 µs kernel as it
    ends; the device idles 50 µs before each kernel, 1,000 µs in 20 equal gaps. The 3 longest gaps are
    15% of it: the advice says first that the idle is spread, not a few stalls (b200 vLLM eager decode:
    its 3 longest gaps 9.5% of 75.82 ms of idle over 856 gaps)."""
    events = []
    for i in range(20):
        t = i * 60
        events += [X("aten::add", "cpu_op", t, 50, **{"External id": i + 1}),
                   X("cudaLaunchKernel", "cuda_runtime", t + 45, 4, correlation=i + 1, **{"External id": i + 1}),
                   {**K("add_kernel", t + 50, 10), "args": {"device": 0, "stream": 7, "correlation": i + 1}}]
    run = import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir
    (f,) = by_rule(analyze(run, write=False), "device-idle")
    assert f.impact_ns == 1000 * US and f.evidence.values["gaps_ns"] == 150 * US
    assert f.recommendation.startswith("The idle is spread over 20 gaps, the 3 longest 0.15 ms (15.0% of it): not a few stalls"), \
        f.recommendation
