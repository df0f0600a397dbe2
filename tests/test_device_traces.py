"""Issue #33's cases on the published device traces vendored for them (tests/data/traces/README.md).

Each test reads what a person would check in `analyze`'s report and holds it to a figure counted
here from the trace's raw JSON, independently of the importer (exact ns: `ts`/`dur` parsed as
decimals, `baseTimeNanoseconds` added):

- mi300x_ddp_resnet18_no_alloc_cache: ResNet-18 DDP training on an MI300X with the caching
  allocator off: 1,360 hipFree take 3,346 ms of the 3,401 ms span; allocator-churn is the top finding.
- mi300x_vllm_hipgraph_full_decode: vLLM replaying one hipGraph of 421 kernels: the replayed kernels
  pay no launch each, so no launch-overhead finding (it once charged the 0.51 ms graph launch once
  per short kernel: 140 ms in a 19 ms trace; then advised graphs to a graph replay).
- mi300x_vllm_hipgraph_piecewise: 24 piecewise graph launches: too few short kernels to report.
- mi300x_sglang_qwen3_decode: an inference trace without steps (device-idle was larger than the
  trace; its short kernels are graph replays; its idle is one blocking copy's wait, host-sync's alone).
- a100_train_blocking_dtoh: A100 training with 945 `aten::item` on CPU tensors (counted as syncs
  before: 3,080 ms on a 1,074 ms rank) and 30 blocking device-to-host `cudaMemcpyAsync` (up to 147 ms).
- h100_timesformer_inference: an H100 inference step with a blocking 126 ms device-to-host copy.
- cuda_resnet50_torch18: torch 1.8 (text tids, no evaluate_function, `Operator` categories).
- mtia_train_no_device_properties: MTIA training with no deviceProperties; its kernels are submitted by
  `runFunction - job_prep_and_submit_for_execution` (no 'launch' in the name): its device was unknown
  and told CUDA graphs, its launches 'runtime calls other than launches'.
- v100_ddp_compiled_aot_eager: a torch.compile'd model (AOT autograd, 2022) in DDP on a V100, host-bound
  inside its compiled graphs' runs, whose 13,300 kernels are ATen's: it was told to torch.compile.
"""

from __future__ import annotations

import bisect
import collections
import decimal
import gzip
import json
import re

import pytest

from neuron_explorer import open_run
from neuron_explorer.analyzers import analyze, peaks, render
from neuron_explorer.analyzers import critical_path as cp
from neuron_explorer.analyzers.rules.critical_path import LEFT_TO
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import TRACES, X, write_trace
from .test_invariants import violations

ALLOC = "mi300x_ddp_resnet18_no_alloc_cache"
GRAPH_FULL = "mi300x_vllm_hipgraph_full_decode"
GRAPH_PIECEWISE = "mi300x_vllm_hipgraph_piecewise"
SGLANG = "mi300x_sglang_qwen3_decode"
A100 = "a100_train_blocking_dtoh"
H100 = "h100_timesformer_inference"
TORCH18 = "cuda_resnet50_torch18"
COMPILED = "v100_ddp_compiled_aot_eager"
MTIA_TRAIN = "mtia_train_no_device_properties"
SLOW = {A100, H100, TORCH18, COMPILED, MTIA_TRAIN}  # 5-10 s each to import and analyse
VENDORED = [pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n
            for n in (ALLOC, GRAPH_FULL, GRAPH_PIECEWISE, SGLANG, A100, H100, TORCH18, COMPILED, MTIA_TRAIN)]

RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "runtime"}
OP_CATS = {"cpu_op", "operator"}
DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset"}
SHORT_KERNEL_NS = 10_000  # launch-overhead's SHORT_KERNEL_NS (docs/RULES.md)
TO_HOST = re.compile(r"(?i)(DtoH|D2H|Device ?-> ?(Host|Pageable|Pinned)|DeviceToHost)")


# ---- the raw JSON, read without the importer ---------------------------------------------------
class Raw:
    def __init__(self, name: str):
        with gzip.open(TRACES / f"{name}.json.gz", "rt") as f:
            doc = json.load(f, parse_float=decimal.Decimal)
        self.base = doc.get("baseTimeNanoseconds") or 0
        self.events = doc["traceEvents"]
        self.spans = [e for e in self.events if e.get("ph") == "X"]
        self.shift: dict = {}
        self.shift = self._clock_shift()

    def iv(self, e) -> tuple[int, int]:
        start = self.base + int((decimal.Decimal(e["ts"]) * 1000).to_integral_value(decimal.ROUND_HALF_EVEN))
        if str(e.get("cat", "")).lower() in DEVICE_CATS | {"gpu_user_annotation"}:
            start -= self.shift.get(e.get("pid"), 0)
        return start, start + int((decimal.Decimal(e.get("dur", 0)) * 1000).to_integral_value(decimal.ROUND_HALF_EVEN))

    def _clock_shift(self) -> dict:
        """{device: ns} the importer moves a device's events by (device_clock): where its first work
        (by start, longer first) has a launch and started 1 ms or more after it returned, and every
        launched work (two or more) started 1 ms or more after its launch began, the least of those delays."""
        launch, out = self.launch_of(), {}
        by_device = collections.defaultdict(list)
        for e in self.of(DEVICE_CATS):
            by_device[e["pid"]].append(e)
        for device, work in by_device.items():
            first = min(work, key=lambda e: (self.iv(e)[0], -self.dur(e)))
            call = launch.get(first.get("args", {}).get("correlation"))
            delays = [self.iv(e)[0] - self.iv(c)[0] for e in work if (c := launch.get(e.get("args", {}).get("correlation"))) is not None]
            if call is not None and self.iv(first)[0] - self.iv(call)[1] >= 1_000_000 and len(delays) >= 2 and min(delays) >= 1_000_000:
                out[device] = min(delays)
        return out

    def dur(self, e) -> int:
        a, b = self.iv(e)
        return b - a

    def of(self, cats: set[str]) -> list[dict]:
        return [e for e in self.spans if str(e.get("cat", "")).lower() in cats]

    def span_ns(self) -> int:
        """First to last span or instant (memory events are instants), but Kineto's own bookkeeping
        spans (category `Trace`: `PyTorch Profiler (0)`, `MTIA Activity Trace (-1)`), which may start
        before the first event and end after the last."""
        ivs = [self.iv(e) for e in self.events if e.get("ph") in ("X", "i", "I") and "ts" in e and e.get("cat") != "Trace"]
        return max(b for _, b in ivs) - min(a for a, _ in ivs)

    def top_op(self, e) -> dict | None:
        """The outermost operator on e's thread that holds e."""
        s, t = self.iv(e)
        key = (e["pid"], str(e["tid"]))
        held = [o for o in self._ops().get(key, []) if o[0] <= s and t <= o[1]]
        return min(held, key=lambda o: (o[0], -o[1]))[2] if held else None

    def _ops(self) -> dict:
        if not hasattr(self, "_ops_by_thread"):
            self._ops_by_thread = collections.defaultdict(list)
            for o in self.of(OP_CATS):
                self._ops_by_thread[(o["pid"], str(o["tid"]))].append((*self.iv(o), o))
        return self._ops_by_thread

    def launch_of(self) -> dict:
        """correlation -> the runtime call."""
        out = {}
        for r in self.of(RUNTIME_CATS):
            out.setdefault(r["args"].get("correlation"), r)
        return out


def union(ivs) -> int:
    total, cur = 0, None
    for s, e in sorted(ivs):
        if cur is None or s > cur[1]:
            total += cur[1] - cur[0] if cur else 0
            cur = [s, e]
        else:
            cur[1] = max(cur[1], e)
    return total + (cur[1] - cur[0] if cur else 0)


def short_kernel_launches(raw: Raw) -> dict:
    """launch-overhead's figures by its definition: kernels under 10 µs that no graph launch replays
    (a cudaGraphLaunch/hipGraphLaunch issues all its kernels in one call), the distinct runtime calls
    that launched them (by correlation) and the union of those calls' intervals; `replayed` counts
    the short kernels left out."""
    launch = raw.launch_of()

    def replayed(k):
        c = launch.get(k["args"].get("correlation"))
        return c is not None and "GraphLaunch" in c["name"]
    kernels = [k for k in raw.of({"kernel"}) if not replayed(k)]
    short = [k for k in kernels if raw.dur(k) < SHORT_KERNEL_NS]
    calls = {id(c): c for c in (launch.get(k["args"].get("correlation")) for k in short) if c is not None and raw.dur(c) > 0}
    return {"kernels": len(kernels), "short_kernels": len(short), "launches": len(calls),
            "launch_ns": union(raw.iv(c) for c in calls.values()),
            "calls": collections.Counter(c["name"] for c in calls.values()),
            "replayed": sum(1 for k in raw.of({"kernel"}) if replayed(k) and raw.dur(k) < SHORT_KERNEL_NS)}


def waiting_calls(raw: Raw) -> list[dict]:
    """Runtime calls that wait for the device: a *Synchronize call, or a copy call whose own
    device-to-host copy ended before the call returned."""
    copies = collections.defaultdict(list)
    for c in raw.of({"gpu_memcpy", "memcpy"}):
        copies[c["args"].get("correlation")].append(c)
    out = []
    for r in raw.of(RUNTIME_CATS):
        end = raw.iv(r)[1]
        if "Synchronize" in r["name"] or "emcpy" in r["name"] and any(
                TO_HOST.search(c["name"]) and raw.iv(c)[1] <= end for c in copies.get(r["args"].get("correlation"), [])):
            out.append(r)
    return out


# ---- one import and one report per trace, shared by the module -------------------------------
def merged(ivs) -> list[tuple[int, int]]:
    """The union of intervals, as sorted disjoint (start, end) pairs."""
    out: list[list[int]] = []
    for s, e in sorted(ivs):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def analysed_windows(raw: Raw, rank: dict) -> list[tuple[int, int]]:
    """The analysed window, as the summary's device time reads it (docs/METRICS.md): the range of each
    ProfilerStep#N in the JSON (first start to last end of its ranges), or without steps the rank's
    span (`rank`: the summary's, its start and end)."""
    steps = collections.defaultdict(list)
    for e in raw.spans:
        if re.fullmatch(r"ProfilerStep#\d+", str(e["name"])):
            steps[e["name"]].append(raw.iv(e))
    return [(min(a for a, _ in ivs), max(b for _, b in ivs)) for ivs in steps.values()] or [(rank["start_ns"], rank["end_ns"])]


def idle_gaps(raw: Raw, rank: dict) -> list[tuple[int, int]]:
    """The device's idle inside the analysed window, in time order: the pieces of the windows' union
    that the union of its device events does not cover (before its first, between, after its last)."""
    busy, gaps = merged(raw.iv(e) for e in raw.of(DEVICE_CATS)), []
    for lo, hi in merged(analysed_windows(raw, rank)):
        t = lo
        for a, b in busy:
            if b <= t or a >= hi:
                continue
            if a > t:
                gaps.append((t, a))
            t = max(t, b)
        if t < hi:
            gaps.append((t, hi))
    return gaps


def longest_idle_gap(raw: Raw, rank: dict) -> tuple[int, int]:
    """The device's longest idle gap outside the host's allocator calls (`idle_outside_allocator_calls`); ties: the earlier."""
    return max(idle_outside_allocator_calls(raw, rank), key=lambda g: g[1] - g[0])


def idle_outside_allocator_calls(raw: Raw, rank: dict) -> list[tuple[int, int]]:
    """The device's idle gaps (`idle_gaps`) less the host's allocator calls (the idle in those is
    allocator-churn's: device-idle names the rest), in time order."""
    gaps = idle_gaps(raw, rank)
    alloc = sorted(raw.iv(r) for r in raw.of(RUNTIME_CATS) if re.match(r"^(cuda|hip)(Malloc|Free)", r["name"]))
    pieces = []
    for a, b in gaps:
        for x, y in alloc:
            if a < x < b:
                pieces.append((a, x))
            a = max(a, min(y, b)) if x < b else a
        if b > a:
            pieces.append((a, b))
    return pieces


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    cache: dict[str, tuple] = {}

    def get(name: str):
        if name not in cache:
            run_dir = import_traces(TRACES / f"{name}.json.gz", tmp_path_factory.mktemp(name) / "run").run_dir
            cache[name] = (run_dir, analyze(run_dir, write=False).to_dict(), Raw(name))
        return cache[name]
    return get


def findings(report: dict, rule: str) -> list[dict]:
    return [f for f in report["findings"] if f["rule_id"] == rule]


# ---- every vendored trace ---------------------------------------------------------------------
@pytest.mark.parametrize("name", VENDORED)
def test_no_figure_exceeds_the_analysed_time_and_the_span_is_the_traces(traces, name):
    _, report, raw = traces(name)
    (rank,) = report["summary"]["ranks"]
    assert rank["span_ns"] == raw.span_ns()
    assert not violations(report)
    # one cause, one finding: no class of the critical path whose cause a rule that reported this rank
    # names (the A100's device idle was named by device-idle, 692.60 ms, and the path, 601.00 ms)
    reported = {f["rule_id"] for f in report["findings"]}
    assert not [f["title"] for f in findings(report, "critical-path") if LEFT_TO.get(f["evidence"]["values"]["class"]) in reported]


# ---- MI300X, ResNet-18 DDP, caching allocator off ----------------------------------------------
def test_allocator_off_top_finding_is_allocator_churn_with_the_calls_time(traces):
    _, report, raw = traces(ALLOC)
    calls = [r for r in raw.of(RUNTIME_CATS) if r["name"] in ("hipMalloc", "hipFree")]
    frees = [r for r in calls if r["name"] == "hipFree"]
    assert (len(frees), len(calls) - len(frees)) == (1360, 1460)
    assert union(raw.iv(r) for r in frees) == 3_346_152_150  # what a person checks: 3,346 ms of hipFree
    assert report["summary"]["ranks"][0]["analysed_ns"] == raw.span_ns() == 3_401_010_550

    top = report["findings"][0]
    assert top["rule_id"] == "allocator-churn" and top["severity"] == "high"
    assert top["impact_ns"] == union(raw.iv(r) for r in calls)  # 3,358.04 ms: hipFree's 3,346 ms and hipMalloc's 12 ms
    values = top["evidence"]["values"]
    assert values["calls_by_name"] == {"hipMalloc": 1460, "hipFree": 1360}
    assert values["frees_in_ops"] == sum(1 for r in frees if raw.top_op(r) is not None) == 1020
    # where the frees sit: the backward convolutions first, then conv2d and the batch-norm backward
    by_top = collections.Counter()
    for r in calls:
        if (o := raw.top_op(r)) is not None:
            by_top[o["name"]] += raw.dur(r)
    assert [o["top_level"] for o in values["operators"]] == [n for n, _ in by_top.most_common(3)] == [
        "autograd::engine::evaluate_function: ConvolutionBackward0", "aten::conv2d",
        "autograd::engine::evaluate_function: NativeBatchNormBackward0"]
    # the device idles 3,032 ms, 3,008 ms of it while the host is in those calls: allocator-churn's,
    # one cause named once; device-idle is left the 25 ms of the rest, under its 10% of the window
    (dev,) = report["summary"]["ranks"][0]["devices"]
    ivs = [raw.iv(e) for e in raw.of(DEVICE_CATS) if e["pid"] == dev["device"]]
    assert dev["idle_ns"] == max(b for _, b in ivs) - min(a for a, _ in ivs) - union(ivs) == 3_032_409_244
    assert findings(report, "device-idle") == []


def test_allocator_off_finding_names_hipfree_as_the_top_cause(traces):
    _, report, raw = traces(ALLOC)
    ns = collections.Counter()
    for r in raw.of(RUNTIME_CATS):
        if r["name"] in ("hipMalloc", "hipFree"):
            ns[r["name"]] += raw.dur(r)
    heaviest = ns.most_common(1)[0][0]
    assert heaviest == "hipFree"
    title = findings(report, "allocator-churn")[0]["title"]
    named = re.findall(r"(hip\w+) x(\d+) ([\d,.]+) ms", title)
    assert named and named[0][0] == heaviest, title  # the costliest call first, with its count and time
    assert int(named[0][1]) == 1360 and named[0][2] == f"{ns['hipFree'] / 1e6:,.2f}", title


# ---- vLLM replaying hipGraphs --------------------------------------------------------------------
def test_kernels_a_graph_replays_pay_no_launch(traces):
    """280 short kernels of 425; one hipGraphLaunch (0.51 ms) issued 277 of them. The graph is already
    what the rule would advise, so the 3 short kernels launched one by one are no finding (before:
    '280 short kernels ... (4 launch calls)' with 'Fuse them: torch.compile, HIP graphs')."""
    _, report, raw = traces(GRAPH_FULL)
    want = short_kernel_launches(raw)
    assert (want["replayed"], want["short_kernels"], want["launches"]) == (277, 3, 3)
    assert want["calls"] == {"hipLaunchKernel": 3}
    assert findings(report, "launch-overhead") == []


def test_a_statement_that_replays_a_graph_is_named_as_the_replay(traces):
    """vLLM's full-graph decode: `vllm/compilation/cuda_graph.py:208` (the replay call) is the
    hotspot statement, and every ns of its device time is replayed by its hipGraphLaunch (counted
    from the JSON: device work whose launch is a *GraphLaunch). Its advice names the graph's kernels
    and the capture's trace, not shapes and a Python loop. H100's statement keeps that advice."""
    _, report, raw = traces(GRAPH_FULL)
    launch = raw.launch_of()
    replayed = [raw.iv(e) for e in raw.of(DEVICE_CATS) if "GraphLaunch" in (launch.get(e["args"].get("correlation")) or {}).get("name", "")]
    (f,) = [f for f in findings(report, "hotspot") if f["title"].startswith("Hotspot source line")]
    assert f["location"]["source"] == "vllm/compilation/cuda_graph.py:208"
    values = f["evidence"]["values"]
    assert values["graph_replay_ns"] == values["device_ns"] == sum(b - a for a, b in replayed) == 10_388_482
    assert "is a HIP graph it replays" in f["recommendation"] and "--capture" in f["recommendation"]  # (an MI300X: HIP's graphs)
    # (the H100's statement is hand-written attention now, critical-path's finding: the MI300X training run's)
    _, report, _ = traces("mi300x_ddp_resnet_act_checkpoint")
    (g,) = [f for f in findings(report, "hotspot") if f["title"].startswith("Hotspot source line")]
    assert g["evidence"]["values"]["graph_replay_ns"] == 0 and g["recommendation"].startswith("Most time comes from the work")


def test_piecewise_graphs_have_too_few_short_kernels_to_report(traces):
    _, report, raw = traces(GRAPH_PIECEWISE)
    want = short_kernel_launches(raw)
    assert (want["kernels"], want["short_kernels"], want["replayed"]) == (52, 3, 96)
    assert findings(report, "launch-overhead") == []


# ---- an inference trace without steps ------------------------------------------------------------
def test_inference_without_steps_figures_stay_within_the_trace(traces):
    _, report, raw = traces(SGLANG)
    (rank,) = report["summary"]["ranks"]
    assert rank["steps"]["count"] == 0 and rank["analysed_ns"] == raw.span_ns() == 473_830_532
    want = short_kernel_launches(raw)
    # 370 short kernels, 360 of them replayed by hipGraphLaunch: no launch overhead to report
    assert (want["replayed"], want["short_kernels"]) == (360, 10)
    assert findings(report, "launch-overhead") == []
    # device idle: the device's window less its busy time (the union of its kernels, copies and sets)
    (dev,) = {e["pid"] for e in raw.of(DEVICE_CATS)}
    ivs = [raw.iv(e) for e in raw.of(DEVICE_CATS) if e["pid"] == dev]
    idle = max(b for _, b in ivs) - min(a for a, _ in ivs) - union(ivs)
    (dev_summary,) = rank["devices"]
    assert dev_summary["idle_ns"] == idle == 463_977_017
    # 463.03 ms of it while the host waits in one blocking aten::copy_: one cause, host-sync's
    # finding alone (its figure: the wait with no device running, 463.03 of its 463.06 ms), not
    # device-idle's too (the 0.95 ms left are under 10%)
    (hs,) = findings(report, "host-sync")
    assert hs["impact_ns"] == hs["evidence"]["values"]["waits_device_idle_ns"] == 463_034_952
    assert hs["evidence"]["values"]["sync_ns"] == 463_063_750 and hs["location"]["op"] == "aten::copy_"
    assert findings(report, "device-idle") == []


@pytest.mark.parametrize("name, bound", [(GRAPH_FULL, "device"), (GRAPH_PIECEWISE, "device"), (SGLANG, "idle")])
def test_an_inference_trace_without_steps_is_bound_over_its_span(traces, name, bound):
    """What bounds a server's trace, with no profiler steps: one path over its span. vLLM's graph
    replays keep the device busy (the host queues them and waits outside every traced call): device-bound.
    SGLang's device ran nothing the trace holds while the host waited 463 ms: idle-bound. The path never
    charges the device more than the device ran (the union of its work, from the JSON)."""
    _, report, raw = traces(name)
    (rank,) = report["summary"]["ranks"]
    o = rank["bound"]["overall"]
    assert rank["steps"]["count"] == 0 and o["over"] == "window"
    assert o["dur_ns"] == sum(o["ns"].values()) == rank["analysed_ns"] == raw.span_ns()
    on_device = o["ns"]["device_compute"] + o["ns"]["communication"] + o["ns"]["memcpy"]
    assert on_device <= union(raw.iv(e) for e in raw.of(DEVICE_CATS))
    assert o["bound"] == bound


# ---- a CPU rank of a gloo job ---------------------------------------------------------------------
def test_a_gloo_ranks_all_reduces_on_its_own_threads_are_its_exposed_communication(traces):
    """cpu_only_rank34_of_300: one 210 ms step in which the main thread records nothing while gloo runs
    two all-reduces on its own threads (`gloo:all_reduce` ranges; eight more outside the step). The
    report said nothing of them ('No findings above the thresholds'); comm-exposed now gives their
    union within the step (no operator runs beside them), from the JSON."""
    _, report, raw = traces("cpu_only_rank34_of_300")
    ((lo, hi),) = analysed_windows(raw, report["summary"]["ranks"][0])
    inside = merged((max(a, lo), min(b, hi)) for a, b in (raw.iv(e) for e in raw.spans if e["name"] == "gloo:all_reduce") if a < hi and b > lo)
    exposed = sum(b - a for a, b in inside)
    assert exposed == 178_777_427 and hi - lo == 210_109_162
    (f,) = findings(report, "comm-exposed")
    assert f["impact_ns"] == exposed and f["title"] == "178.78 ms of communication not overlapped with compute: gloo:all_reduce x2"


# ---- A100: aten::item on CPU tensors, blocking device-to-host copies -------------------------
@pytest.mark.slow  # imports a 1-1.4 MB trace (5-10 s)
def test_item_on_cpu_tensors_is_no_sync(traces):
    """The A100 training loop's 945 `aten::item` read CPU tensors: no sync. Its 76 syncs (75 blocking
    `aten::to` copies and a cudaDeviceSynchronize) wait 761 ms while the device works; what they cost
    the device is the idle before the next launch, at most what they waited: 3.56 ms (the longest
    gaps after them, up to 6.7 ms of autograd on the host after a 13 µs wait, are host work). That
    is 0.3% of the 1,074 ms of steps: no finding, where the idle after every sync said 45.7 ms."""
    from neuron_explorer.analyzers.rules import host_sync

    run_dir, report, raw = traces(A100)
    items = [e for e in raw.of(OP_CATS) if e["name"] == "aten::item"]
    starts = collections.defaultdict(list)  # per thread: the runtime calls' (start, end), sorted
    for r in raw.of(RUNTIME_CATS):
        starts[(r["pid"], str(r["tid"]))].append(raw.iv(r))
    for v in starts.values():
        v.sort()

    def has_call_beneath(op) -> bool:
        s, t = raw.iv(op)
        calls = starts[(op["pid"], str(op["tid"]))]
        return any(b <= t for _, b in calls[bisect.bisect_left(calls, (s, s)):bisect.bisect_right(calls, (t, t))])

    assert len(items) == 945 and not any(has_call_beneath(e) for e in items)
    waits = waiting_calls(raw)
    tops = {}
    for r in waits:
        o = raw.top_op(r)
        tops[(r["pid"], str(r["tid"]), *(raw.iv(o) if o else raw.iv(r)))] = o["name"] if o else r["name"]
    assert collections.Counter(tops.values()) == {"aten::to": 75, "cudaDeviceSynchronize": 1}
    with open_run(run_dir) as run:
        cur = run.sql(host_sync.figures_sql(None))
        (v,) = [dict(zip([c[0] for c in cur.description], r)) for r in cur.fetchall()]
    assert v["syncs"] == len(tops) == 76  # not 76 + the aten::item
    assert (v["stalls"], v["wait_ns"], v["idle_after_ns"], v["idle_summed_ns"]) == (75, 761_195_000, 3_560_000, 50_777_000)
    assert report["summary"]["ranks"][0]["analysed_ns"] == 1_074_033_000
    assert findings(report, "host-sync") == []  # 3.56 ms: under the rule's 1% of the steps


def _blocking_copies_on_the_path(run_dir, raw: Raw) -> tuple[int, collections.Counter]:
    """(how many blocking device-to-host copy calls the trace has, ns the critical path charges to
    them per category and per cause); the calls matched to the run's events by their exact start and
    duration."""
    calls = {raw.iv(r) for r in waiting_calls(raw) if "emcpy" in r["name"]}
    by_cat = collections.Counter()
    with open_run(run_dir) as run:
        ids = {i for i, ts, dur in run.sql("SELECT event_id, ts_ns, dur_ns FROM events WHERE kind = 'runtime'").fetchall()
               if (ts, ts + dur) in calls}
        assert len(ids) == len(calls)
        (rank,) = [r for (r,) in run.sql("SELECT DISTINCT rank FROM events").fetchall()]
        for row in cp.rank_path(run, rank):
            if row["event_id"] in ids:
                by_cat[row["category"]] += row["charged_ns"]
                by_cat[row["cause"]] += row["charged_ns"]
    return len(calls), by_cat


@pytest.mark.slow  # imports a 1-1.4 MB trace (5-10 s)
def test_blocking_device_to_host_copies_are_syncs_not_launch_overhead(traces):
    """a100_train_blocking_dtoh: 30 blocking copies to the host (aten::to). The path charges them no
    launch time. Step 550's device runs 872 events whose launches the trace does not hold: their
    correlation ids are all below every runtime call's, so they were launched before the trace's host
    side began (the previous step's work, still queued). The path came back to the host at them, inside
    a blocking copy, and read step 550 as 'host-bound (72%)' with 130.18 ms of host waits, unlike the
    four steps after it (idle-bound, 63-66%). It now follows their stream (_path_index.F_EARLY): step
    550 reads as the others, and nothing of it is the host waiting in a copy."""
    run_dir, report, raw = traces(A100)
    n, by_cat = _blocking_copies_on_the_path(run_dir, raw)
    assert n == 30
    assert by_cat["launch_overhead"] == 0 and by_cat[cp.WAITING_IN_COPY] == 0, by_cat
    runtime = {r["args"].get("correlation") for r in raw.of(RUNTIME_CATS)}
    unlaunched = [e for e in raw.of(DEVICE_CATS) if e["args"].get("correlation") not in runtime]
    assert len(unlaunched) == 872 and max(e["args"]["correlation"] for e in unlaunched) < min(c for c in runtime if c is not None)
    with open_run(run_dir) as run:
        steps = {s["step"]: s["bound"] for s in cp.bound(run, 0)["steps"]}
    assert set(steps) == {550, 551, 552, 553, 554} and set(steps.values()) == {"idle"}
    assert not [g for g in findings(report, "critical-path") if g["evidence"]["values"]["class"] in ("host", "host_sync")
                and g["evidence"]["values"]["heaviest"][0]["item"] == "aten::to"]


@pytest.mark.slow  # imports a 1-1.4 MB trace (5-10 s)
def test_h100_blocking_copy_is_a_sync(traces):
    run_dir, report, raw = traces(H100)
    waits = waiting_calls(raw)
    copy = [r for r in waits if "emcpy" in r["name"]]
    assert [(r["name"], raw.dur(r)) for r in copy] == [("cudaMemcpyAsync", 125_948_634)]
    tops = {(r["pid"], str(r["tid"]), *raw.iv(raw.top_op(r) or r)) for r in waits}
    (f,) = findings(report, "host-sync")
    assert f["evidence"]["values"]["syncs"] == len(tops) == 4
    assert f["location"]["op"] == "aten::to"
    n, by_cat = _blocking_copies_on_the_path(run_dir, raw)
    assert n == 1 and by_cat["launch_overhead"] == 0, by_cat


# ---- torch 1.8 -----------------------------------------------------------------------------------
@pytest.mark.slow  # imports a 1-1.4 MB trace (5-10 s)
def test_torch18_steps_backward_and_data_loading(traces):
    _, report, raw = traces(TORCH18)
    ops = raw.of(OP_CATS)
    assert all(isinstance(e["tid"], str) for e in ops) and not any("evaluate_function" in e["name"] for e in raw.spans)
    steps = [raw.iv(e) for e in raw.spans if str(e.get("name", "")).startswith("ProfilerStep#")]
    (rank,) = report["summary"]["ranks"]
    assert rank["steps"]["count"] == len(steps) == 6
    assert rank["analysed_ns"] == sum(b - a for a, b in steps) == 928_470_000
    # the backward nodes run on the autograd thread as top-level operators
    conv_bwd = [e for e in ops if e["name"] == "CudnnConvolutionBackward" and raw.top_op(e) is e]
    top = {o["name"]: (o["calls"], o["cpu_ns"]) for o in rank["top_level_ops"]}
    assert top["CudnnConvolutionBackward"] == (len(conv_bwd), sum(raw.dur(e) for e in conv_bwd)) == (318, 90_857_000)
    # data loading: the enumerate(DataLoader) ranges inside the steps
    loads = [raw.iv(e) for e in ops if e["name"].startswith("enumerate(DataLoader)")
             and any(s <= raw.iv(e)[0] and raw.iv(e)[1] <= t for s, t in steps)]
    (f,) = findings(report, "input-pipeline")
    assert (f["evidence"]["values"]["fetches"], f["impact_ns"]) == (len(loads), sum(b - a for a, b in loads)) == (6, 279_738_000)
    # torch 1.8-1.10 file the fetch's range as an operator: the operators inside it are the data
    # pass too, so the critical path charges the whole fetch to data loading, not 124 ms of it to
    # host time under the fetch's name; and it leaves that cause to input-pipeline's finding (one
    # cause, one finding)
    assert rank["bound"]["overall"]["ns"]["input_pipeline"] == f["impact_ns"]
    assert not [g for g in findings(report, "critical-path") if g["evidence"]["values"]["class"] == "input"
                or "DataLoader" in g["title"]]
    # the device idles 274.45 ms, 188.44 ms of it while the host fetches (input-pipeline's): the
    # 86 ms left are under device-idle's 10% of the window, so the fetch is named once
    dev = sorted(raw.iv(e) for e in raw.of(DEVICE_CATS))
    gaps, end = [], dev[0][1]
    for a, b in dev:
        if a > end:
            gaps.append((end, a))
        end = max(end, b)
    fetches = [raw.iv(e) for e in ops if e["name"].startswith("enumerate(DataLoader)")]
    in_fetches = sum(max(0, min(b, d) - max(a, c)) for a, b in gaps for c, d in fetches)
    (d,) = report["summary"]["ranks"][0]["devices"]
    assert d["idle_ns"] == sum(b - a for a, b in gaps) == 274_446_000 and in_fetches == 188_444_000
    assert findings(report, "device-idle") == [] and (d["idle_ns"] - in_fetches) < 0.1 * d["window_ns"]


# ---- MTIA inference: a queue waiting on an event is no kernel to make cheaper -------------------
def test_mtia_hotspot_kernel_is_work_not_the_event_wait(traces):
    """MTIA's device events include `event_wait`: a queue waiting for an event, 352.57 ms over 48
    waits, more than any other name. The hotspot kernel is the heaviest name that does work,
    `merge` (its durations summed from the raw JSON), with advice for a kernel; the wait is named by
    no finding, since it has no shapes or dtype to tune."""
    _, report, raw = traces("mtia_inference")
    per_name = collections.Counter()
    for e in raw.events:
        if e.get("ph") == "X" and e.get("cat") == "mtia_ccp_events":
            per_name[e["name"]] += raw.dur(e)
    (top, _), (second, second_ns) = per_name.most_common(2)
    assert (top, second) == ("event_wait", "merge")
    (f,) = [f for f in findings(report, "hotspot") if f["location"].get("kernel")]
    assert f["location"]["kernel"] == "merge" and f["evidence"]["values"]["device_ns"] == second_ns == 257_869_750
    assert not [g for g in report["findings"] if "event_wait" in g["title"] or g["location"].get("kernel") == "event_wait"]
    # `merge` does no matrix work: no sizes for matrix units, no NVIDIA terms on Meta's device
    assert "Tensor Core" not in f["recommendation"] and "tensor-core" not in f["recommendation"]
    assert f["recommendation"].startswith("This kernel dominates device time: check what it does")


def test_a_bf16_matrix_kernel_on_an_mi300x_gets_its_sizes_not_lower_precision(traces):
    """The piecewise vLLM decode's heaviest kernel is a Triton MoE GEMM that already runs in bf16
    (`_matmul_ogs_NNT_bf16xbf16xmxfp4_...`) on an MI300X. The advice speaks of the MI300X's matrix
    cores and the sizes they tile, says the kernel is bf16 already, and offers no lower precision
    (it said 'tensor-core friendly sizes, bf16/fp16')."""
    _, report, _ = traces(GRAPH_PIECEWISE)
    (f,) = [f for f in findings(report, "hotspot") if f["location"].get("kernel")]
    assert f["location"]["kernel"].startswith("_matmul_ogs_NNT_bf16xbf16xmxfp4")
    rec = f["recommendation"]
    assert "matrix cores (MFMA)" in rec and "multiples of 16" in rec and "It already runs in bf16" in rec
    assert "tensor-core" not in rec and "Tensor Core" not in rec and "autocast" not in rec


@pytest.mark.slow
def test_hand_written_attentions_softmax_is_told_sdpa_not_a_fused_layernorm(traces):
    """h100_timesformer_inference: the critical path's normalisation/softmax class is 70.86 ms, 68.69 ms
    of it cunn_SoftMaxForward over the [8×12×3137×3137] bf16 scores of modeling_timesformer.py:200
    (linear → matmul → mul → softmax → dropout → matmul: hand-written attention). It was told 'fused
    implementations (torch.compile, apex / fused LayerNorm, RMSNorm) in lower precision' for a bf16
    kernel; it is told scaled_dot_product_attention, with the scores' size, and no lower precision."""
    from neuron_explorer.fmt import size

    _, report, raw = traces(H100)
    (f,) = [f for f in findings(report, "critical-path") if f["evidence"]["values"]["class"] == "norm"]
    softmax = collections.Counter()
    for k in raw.of({"kernel"}):
        if "cunn_SoftMaxForward" in k["name"] or "softmax_warp_forward" in k["name"]:
            softmax["cunn" if "cunn_" in k["name"] else "warp"] += raw.dur(k)
    # the attention softmaxes on the path: all of cunn_SoftMaxForward's time, at most all of softmax_warp_forward's
    assert softmax["cunn"] <= f["evidence"]["values"]["unfused_attention_ns"] <= softmax["cunn"] + softmax["warp"]
    # the finding is the attention's: its softmax, its products and its scores' arithmetic are one cause, one figure
    v = f["evidence"]["values"]
    (step,) = [e for e in raw.of({"user_annotation"}) if e["name"].startswith("ProfilerStep#")]
    assert f["impact_ns"] == v["attention_work_ns"] <= raw.dur(step)
    assert f["title"].startswith(f"hand-written attention (softmax {v['unfused_attention_ns'] / 1e6:.2f} ms, matrix products ")
    assert (f"): {f['impact_ns'] / 1e6:.2f} ms on the critical path ({100 * f['impact_ns'] / raw.dur(step):.1f}% of step time; "
            "steps host-bound (59%)); heaviest: cunn_SoftMaxForward") in f["title"]
    (dims, dtype), = {(tuple(o["args"]["Input Dims"][0]), o["args"]["Input type"][0]) for o in raw.of(OP_CATS)
                      if o["name"] == "aten::softmax" and len(o["args"]["Input Dims"][0]) == 4 and o["args"]["Input Dims"][0][-1] > 8}
    assert dims == (8, 12, 3137, 3137) and dtype == "c10::BFloat16"
    rec = f["recommendation"]
    assert rec.startswith(f"unfused attention: cunn_SoftMaxForward<8, BFloat16, float, BFloat1… of aten::softmax {softmax['cunn'] / 1e6:.2f} ms")
    assert ("is the softmax of hand-written attention (between two matrix products of one statement; at L=3137 each call's "
            f"[L×L] scores, [8×12×3137×3137] bf16, are {size(2 * 8 * 12 * 3137 * 3137)} written to memory and read back; ") in rec
    assert ". Use torch.nn.functional.scaled_dot_product_attention (flash / memory-efficient kernels): " in rec
    assert "LayerNorm" not in rec and "precision" not in rec and "bf16/fp16" not in rec
    assert f["location"]["source"] == "transformers/models/timesformer/modeling_timesformer.py:200"
    # one attention, one finding: its products (cutlass GEMMs of aten::matmul, 43.21 ms) and the scaling of its scores
    # (aten::mul over [8×12×3137×3137], 15.50 ms) were the GEMM and elementwise classes' findings, and the statement
    # a hotspot line: they are named in this one, with the attention's time on the path
    products = sum(raw.dur(k) for k in raw.of({"kernel"}) if "cutlass_75_tensorop_bf16_s1688gemm" in k["name"])
    assert v["attention_work_ns"] >= v["unfused_attention_ns"] + products
    assert f"the attention holds {v['attention_work_ns'] / 1e6:.2f} ms of the path" in rec
    classes = {g["evidence"]["values"]["class"] for g in findings(report, "critical-path")}
    assert not classes & {"matmul", "elementwise"}
    assert not [h for h in findings(report, "hotspot") if h["location"].get("source") == f["location"]["source"]]


@pytest.mark.slow
def test_an_mtia_trace_without_device_properties_is_mtia_and_its_run_function_calls_are_launches(traces):
    """mtia_train_no_device_properties names no device (deviceProperties empty), but only MTIA's backend
    records `mtia_runtime` / `mtia_ccp_events`: the architecture is MTIA's, and the advice names
    torch.compile, not CUDA graphs, which MTIA does not have. Its kernels are submitted by
    `runFunction - job_prep_and_submit_for_execution`, each linked to the kernel it ran: those calls
    are its launches, so the bound is launch overhead (it read 'runtime calls other than launches:
    runFunction ... 63%' beside a critical-path finding titled 'kernel launches')."""
    run_dir, report, raw = traces(MTIA_TRAIN)
    (rank,) = report["summary"]["ranks"]
    assert rank["utilisation"]["device"]["arch"] == "Meta MTIA"
    # its 22,361 `dma_request` events (no correlation id) are the device's own DMA transfers: copies, not kernels, and
    # not launches the trace lost ('22,356 dropped?' had put every finding's confidence at 0.15)
    dma = [e for e in raw.spans if e.get("cat") == "mtia_ccp_events" and e["name"] == "dma_request"]
    assert len(dma) == 22_361 and not any("correlation" in e.get("args", {}) for e in dma)
    with open_run(run_dir) as run:
        assert run.sql("SELECT kind, count(*) FROM events WHERE name = 'dma_request' GROUP BY kind").fetchall() == [("memcpy", 22_361)]
        assert run.manifest["ranks"][0]["data_quality"]["device_events_without_launch"] == 0
    assert all(f["confidence"] > 0.15 for f in report["findings"])
    submit = [r for r in raw.of(RUNTIME_CATS | {"mtia_runtime"}) if r["name"] == "runFunction - job_prep_and_submit_for_execution"]
    linked = {k["args"].get("correlation") for k in raw.spans if str(k.get("cat", "")).lower() == "mtia_ccp_events"}
    assert len(submit) == 3453 and all(r["args"].get("correlation") in linked for r in submit)
    assert rank["bound"]["overall"]["words"].startswith("host-bound (100%): launch overhead")
    (launches,) = [f for f in findings(report, "critical-path") if f["evidence"]["values"]["class"] == "launch"]
    assert launches["title"].startswith("kernel launches: ")
    assert "torch.compile (it fuses kernels into fewer, larger ones)" in launches["recommendation"]
    assert not [f for f in report["findings"] if "CUDA graphs" in f["recommendation"] or "Nsight" in f["recommendation"]]
    # no graphs of any kind: the spread idle's words leave the device's way to launch fewer programs to the advice's end
    assert not [f for f in report["findings"] if "graphs" in f["recommendation"]], [f["recommendation"] for f in report["findings"]]


@pytest.mark.slow
def test_a_compiled_models_host_time_is_not_told_to_compile(traces):
    """v100_ddp_compiled_aot_eager: host-bound steps, most of whose host time is inside the compiled
    graphs' runs (AOT autograd's CompiledFunction and its backward node). Both the critical path's host
    class and the hotspot operator told it 'torch.compile' / 'a fused / compiled version'. Every kernel
    those runs launched is ATen's (no Triton kernel in the trace): the backend fuses nothing, which the
    advice says with the count, and the default backend is named instead."""
    _, report, raw = traces(COMPILED)
    compiled = ("CompiledFunction", "autograd::engine::evaluate_function: CompiledFunctionBackward")
    calls = collections.defaultdict(list)
    for o in raw.of(OP_CATS):
        if o["name"] in compiled:
            calls[o["tid"]].append(raw.iv(o))
    launch = raw.launch_of()
    kernels = [k for k in raw.of({"kernel"})
               if (c := launch.get(k["args"].get("correlation"))) is not None
               and any(a <= raw.iv(c)[0] and raw.iv(c)[1] <= b for a, b in calls[c["tid"]])]
    assert len(kernels) == 13_300 and not [k for k in raw.of({"kernel"}) if "triton" in k["name"].lower()]
    (host,) = [f for f in findings(report, "critical-path") if f["evidence"]["values"]["class"] == "host"]
    runs = sum(h["charged_ns"] for h in host["evidence"]["values"]["heaviest"] if h["item"] in compiled)
    assert runs * 2 >= host["impact_ns"]
    rec = host["recommendation"]
    assert rec.startswith(f"{runs / 1e6:,.2f} ms of this time is in calls of torch.compile'd code (")
    assert "the model runs compiled already, so compiling it again does not cut it" in rec
    assert f"None of the {len(kernels):,} kernels those calls launched was generated by the compiler (no Triton kernels)" in rec
    assert "torch.compile cuts" not in rec
    # the compiled runs head the host class: the hotspot operator on the same call leaves its finding to it (one cause);
    # alone, the hotspot rule's words for it are not 'compile' either
    assert not [f for f in findings(report, "hotspot") if f["location"].get("op") in compiled and not f["location"].get("kernel")]
    from neuron_explorer.analyzers.engine import analyze_run
    from neuron_explorer.analyzers.rules import hotspot

    run_dir = traces(COMPILED)[0]
    with open_run(run_dir) as run:
        (op,) = [f for f in analyze_run(run, [hotspot]).findings if f.location.op and not f.location.kernel]
    assert op.location.op in compiled
    assert op.recommendation.startswith("It runs torch.compile'd code already, so compiling again does not cut it.")
    assert "fused / compiled version" not in op.recommendation


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cuda_train_68k_events", "v100_resnet50_torch19_memory"])
def test_batchnorm_bound_steps_keep_the_normalisation_advice(traces, name):
    """The V100 ResNets' normalisation class is cuDNN's fp32 BatchNorm kernels (bn_bw/bn_fw) and their
    loss's log_softmax: the normalisation advice, lower precision included, and no attention."""
    _, report, raw = traces(name)
    (f,) = [f for f in findings(report, "critical-path") if f["evidence"]["values"]["class"] == "norm"]
    assert f["evidence"]["values"]["heaviest"][0]["item"].startswith("void cudnn::bn_bw_1C11_kernel_new<float, float, float2,")
    # their softmax kernels are the loss's log_softmax (`softmax_warp_forward<float, float, float, 10, true…`: is_log_softmax)
    assert [k for k in raw.of({"kernel"}) if "softmax_warp_forward<float, float, float, 10, true" in k["name"]]
    assert f["evidence"]["values"]["unfused_attention_ns"] == 0
    assert f["recommendation"] == ("normalisation bounds the step: fused implementations (torch.compile, apex / fused LayerNorm, "
                                   "RMSNorm) in lower precision.")


def test_code_torch_fx_generated_is_no_statement(traces):
    """The piecewise vLLM decode runs its model as 25 split GraphModules, whose forwards torch.fx
    generated (`<eval_with_key>.2(4): forward`, numbered per module made). Those frames were user
    code: the CPU source lines were 25 `<eval_with_key>.N:4` lines, which no one can open and whose
    numbers change between runs (`diff` against the full-graph decode listed each one [gone]). They
    are not user code now, and the operators inside them belong to the line that called the split
    model, vllm/compilation/caching.py:197."""
    from neuron_explorer import open_run

    run_dir, report, raw = traces(GRAPH_PIECEWISE)
    generated = {e["name"] for e in raw.events if str(e.get("name", "")).startswith("<eval_with_key>")}
    assert len(generated) == 25
    with open_run(run_dir) as run:
        user = run.sql("SELECT DISTINCT is_user FROM frames WHERE file LIKE '<eval_with_key>%'").fetchall()
    assert user == [(False,)]
    lines = report["summary"]["ranks"][0]["source_lines"]["cpu"]
    assert lines[0]["source"] == "vllm/compilation/caching.py:197"
    assert not any(x["source"].startswith("<eval_with_key>") for x in lines)


@pytest.mark.parametrize("name", VENDORED)
def test_a_device_clock_offset_from_its_launches_is_moved_or_warned_about(traces, name):
    """The first kernel or copy on a device, with nothing the trace holds before it, starts
    microseconds after its launch returns. In mi300x_vllm_hipgraph_piecewise it starts 149.00 ms
    after, and none of the device's 423 launched works starts sooner than 146.40 ms after its launch
    began, while the host launched all 25 graphs in 26 ms: the device's clock is offset from the
    host's, and the report read the device idle for 49.3% of a 307.70 ms span (151.61 ms, its top
    finding). The import moves such a device's events earlier by the least of those delays
    (data_quality.device_clock_shift_ns), says so, and each finding's confidence says so: the span is
    161.30 ms, the device busy 96.7% of it, and no device-idle finding. A first work that waits while
    later work starts at once is warned about as a wait (data_quality.first_work_wait_ns, from 1 ms;
    tests/test_device_clock.py builds one). By the raw JSON (Raw applies the same rule): each
    device's first work by start, its launch by correlation (the traces whose first work has no
    launch are left out, as the importer leaves them)."""
    from neuron_explorer import open_run

    run_dir, report, raw = traces(name)
    launch = raw.launch_of()
    first: dict = {}
    for e in sorted(raw.of(DEVICE_CATS), key=lambda e: raw.iv(e)):
        first.setdefault(e["pid"], e)
    waits = {}  # after the move, where there is one
    for dev, e in first.items():
        call = launch.get(e.get("args", {}).get("correlation"))
        if call is not None:
            waits[dev] = raw.iv(e)[0] - raw.iv(call)[1]
    with open_run(run_dir) as run:
        (entry,) = run.manifest["ranks"]
        warnings = entry.get("warnings", []) + run.manifest.get("warnings", [])
    dq, warned = entry["data_quality"], [w for w in warnings if "first work" in w]
    longest = max(waits.values(), default=0)
    assert dq.get("first_work_wait_ns", 0) == max(longest, 0)
    assert dq.get("device_clock_shift_ns", 0) == max(raw.shift.values(), default=0)
    (rank,) = report["summary"]["ranks"]
    if name == GRAPH_PIECEWISE:
        assert raw.shift == {2: 146_397_854} and waits[2] + raw.shift[2] == 148_998_872
        assert rank["span_ns"] == raw.span_ns() == 161_299_834 and not findings(report, "device-idle")
    if name == GRAPH_FULL:
        assert raw.shift == {2: 6_885_076}
    for dev, shift in raw.shift.items():
        (w,) = warned
        assert (f"device {dev}'s clock is offset from the host's: its first work, with nothing the trace holds before it on the "
                f"device, started {(waits[dev] + shift) / 1e6:,.2f} ms after its launch returned") in w
        assert f"its events were moved {shift / 1e6:,.2f} ms earlier" in w
        note = f"device {dev}'s events moved {shift / 1e6:,.2f} ms earlier, to its launches"
        assert report["findings"] and all(any(n.startswith(note) for n in f["confidence_notes"]) for f in report["findings"])
    if raw.shift:
        return
    note = f"device {dq.get('first_work_wait_device')}'s first work started {longest / 1e6:,.2f} ms after its launch"
    if longest >= 1_000_000:
        (w,) = warned
        assert w.startswith(f"rank 0: {note}")
        # and every finding's confidence says so: what it tells of host and device together may be off
        assert report["findings"] and all(any(n.startswith(note) for n in f["confidence_notes"]) for f in report["findings"])
    else:
        assert not warned and longest < 100_000  # the others: at most 0.1 ms


def test_mtia_event_waits_are_no_device_work(traces):
    """The device's busy time and compute are the union of the events that do work, not of the
    waits: with the 48 waits, the union is 424.23 ms; without them, 421.70 ms, which the report's
    busy time, the breakdown's compute and the critical path's device share all use. The top
    kernels' shares are of the work's time. Its 890 short kernels were launched in 0.87 ms of the
    459.67 ms window: no launch-overhead finding (under LAUNCH_SHARE_MIN), where the advice would be
    MTIA's (torch.compile, no CUDA graphs). Its 877 `dma_request` events are DMA transfers
    (vocab.DEVICE_DMA_PATTERN): memory copies, not kernels; the 220 with no host call linked to them are
    the device's own, not launches the trace lost."""
    run_dir, report, raw = traces("mtia_inference")
    device = raw.of({"mtia_ccp_events"})
    work = [raw.iv(e) for e in device if e["name"] != "event_wait"]
    kernels = [raw.iv(e) for e in device if e["name"] not in ("event_wait", "dma_request")]
    dma = [raw.iv(e) for e in device if e["name"] == "dma_request"]
    assert union(raw.iv(e) for e in device) == 424_229_939
    assert union(work) == 421_698_760 and len(dma) == 877
    (rank,) = report["summary"]["ranks"]
    (dev,) = rank["devices"]
    (dt,) = rank["device_time"]
    assert dev["busy_ns"] == union(work) and dt["compute_ns"] == union(kernels)
    assert dt["memory_ns"] == union(work) - union(kernels)
    assert dev["kernel_ns"] == sum(b - a for a, b in kernels) and dev["memcpy_ns"] == sum(b - a for a, b in dma)
    assert dt["compute_ns"] + dt["memory_ns"] + dt["idle_ns"] == dt["window_ns"] == rank["analysed_ns"]
    assert "event_wait" not in {k["name"] for k in dt["top_kernels"]}
    with open_run(run_dir) as run:
        assert run.sql("SELECT kind, count(*) FROM events WHERE name = 'event_wait' GROUP BY kind").fetchall() == [("sync", 48)]
    assert findings(report, "launch-overhead") == []
    from neuron_explorer.analyzers.rules import launch_overhead

    fuse = launch_overhead._fuse(peaks.graph_advice(dev.get("name") or "MTIA"))
    assert "CUDA graphs" not in fuse and fuse.startswith("torch.compile")


# ---- the first use of the device: a one-off, not an operator to tune ---------------------------
def test_an_operator_whose_time_is_one_first_call_gets_one_off_advice(traces, tmp_path):
    """cuda_alexnet_train: 18 `aten::to` calls, one of them the first `.to('cuda')`, 29.9 s inside
    cudaDeviceGetStreamPriorityRange (the device's context created), with the device idle throughout.
    That call was two findings: 'aten::to takes 69.0%' and the lead of 'Device 0 idle 80.3%'. One
    cause, one finding: device-idle's, which names the call as a one-off with the idle it caused and
    says to profile steady steps (the hotspot leaves it, hotspot.leaves_to). Where no device idles
    through it (a CPU run, hand-built: a first call of 1 ms, nine of 10 µs), the hotspot operator's
    advice says one call holds its time, a one-off, not shapes to tune; an operator spread over its
    calls keeps the advice to make it cheaper (ten calls of 90 µs)."""
    _, report, raw = traces("cuda_alexnet_train")
    tos = [e for e in raw.of(OP_CATS) if e["name"] == "aten::to" and raw.top_op(e) is e]
    longest = max(tos, key=raw.dur)
    inside = [r for r in raw.of(RUNTIME_CATS) if raw.iv(longest)[0] <= raw.iv(r)[0] and raw.iv(r)[1] <= raw.iv(longest)[1]]
    assert max(inside, key=raw.dur)["name"] == "cudaDeviceGetStreamPriorityRange"
    assert not [f for f in findings(report, "hotspot") if f["location"].get("op") == "aten::to"]
    (idle,) = findings(report, "device-idle")
    assert re.search(r"the host in aten::to for [\d,.]+ ms of it with no device work: a one-off", idle["recommendation"])
    assert "Profile steady steps" in idle["recommendation"]
    first = [X("aten::first", "cpu_op", 0, 1000)] + [X("aten::first", "cpu_op", 1100 + i * 20, 10) for i in range(9)]
    run_dir = import_traces(write_trace(tmp_path / "first.json", first), tmp_path / "first").run_dir
    (h,) = [f for f in analyze(run_dir, write=False).findings if f.rule_id == "hotspot" and f.location.op]
    assert h.evidence.values["calls"] == 10 and h.evidence.values["longest_ns"] == 1_000_000
    assert h.recommendation.startswith("One call of 1.00 ms holds 91.7% of this operator's time") and "Profile steady steps" in h.recommendation
    spread = [X("aten::heavy", "cpu_op", i * 100, 90) for i in range(10)]
    run_dir = import_traces(write_trace(tmp_path / "spread.json", spread), tmp_path / "spread").run_dir
    (g,) = [f for f in analyze(run_dir, write=False).findings if f.rule_id == "hotspot" and f.location.op]
    assert g.evidence.values["calls"] == 10 and g.recommendation.startswith("Make this operator cheaper")


def test_an_operator_whose_time_is_allocator_calls_is_allocator_churns_not_a_hotspot(traces):
    """The MI300X run without the caching allocator: ConvolutionBackward0's 100 calls took 1,539 ms,
    1,527 ms of it in hipFree beneath them. It was also the hotspot operator (45.3%, 'make this
    operator cheaper: check its shapes and dtype'), the same cause as allocator-churn's first
    finding. The operator's figure leaves out its allocator calls, as it leaves out syncs' waits,
    and what is left (12 ms) is no hotspot."""
    _, report, raw = traces(ALLOC)
    conv = "autograd::engine::evaluate_function: ConvolutionBackward0"
    ops = [e for e in raw.of(OP_CATS) if e["name"] == conv]
    in_alloc = [r for r in raw.of(RUNTIME_CATS) if re.match(r"^hip(Malloc|Free)", r["name"]) and (raw.top_op(r) or {}).get("name") == conv]
    assert len(ops) == 100 and sum(raw.dur(r) for r in in_alloc) / sum(raw.dur(o) for o in ops) > 0.99
    assert not findings(report, "hotspot")
    assert [f["rule_id"] for f in report["findings"]] == ["allocator-churn"]


def test_a_first_launch_that_loads_its_code_is_a_one_off_not_launch_overhead(traces):
    """rocm_mi250_train (2 steps): the critical path's kernel launches are 6.67 ms, 6.54 ms of them
    one hipLaunchKernel under the first AccumulateGrad, the kernel's code loaded at its first launch
    (the longest runtime call of the JSON). The advice says it is a one-off and to profile steady
    steps, not to capture graphs; the NCCL trace's launches, spread over many calls, keep that advice.
    The one-off is one finding: AccumulateGrad, the operator it runs under (6.68 ms, 98% of it this
    launch), was also reported as a hotspot; that finding is left to the path's, which names the
    narrower cause (hotspot.leaves_to). The device idled through that launch: device-idle leaves
    those 6.54 ms out (9.19 ms of idle in its two steps, 2.65 ms left), names why, and its gaps are the others."""
    _, report, raw = traces("rocm_mi250_train")
    launches = [e for e in raw.of(RUNTIME_CATS) if "LaunchKernel" in e["name"]]
    longest = max(launches, key=raw.dur)
    (f,) = [f for f in findings(report, "critical-path") if f["evidence"]["values"]["class"] == "launch"]
    assert raw.dur(longest) * 2 >= f["evidence"]["values"]["charged_ns"] and f["evidence"]["values"]["events"] > 1
    assert f["evidence"]["values"]["one_off_ns"] == raw.dur(longest) == 6_543_109
    # the bound says what the launch time was (its share of the two steps' 9.34 ms), the step it is in too, not the other
    bound = report["summary"]["ranks"][0]["bound"]
    assert bound["overall"]["words"] == "host-bound (99%): a kernel's first launch, loading its code: hipLaunchKernel 70%"
    assert f["title"].startswith("kernel launches: 6.67 ms on the critical path (71.4% of step time; steps host-bound (99%)), "
                                 "98.1% of it one call: a kernel's first launch, loading its code")
    assert bound["steps"][0]["words"] == "host-bound (99%): a kernel's first launch, loading its code: hipLaunchKernel 70%"  # 6.54 of 9.29 ms
    assert "first launch" not in bound["steps"][1]["words"]
    assert f["recommendation"].startswith("One launch call of 6.54 ms holds 98.1% of this time")
    accumulate = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"
    assert f["evidence"]["values"]["heaviest"][0]["op"] == accumulate
    assert not [h for h in findings(report, "hotspot") if h["evidence"]["values"].get("name") == accumulate]
    named = [g for g in report["findings"]
             if accumulate in json.dumps(g["evidence"]["values"].get("heaviest") or g["evidence"]["values"].get("name") or "")]
    assert named == [f]
    # the device's idle during that launch is the same cause: device-idle leaves it out and says so,
    # and the gaps it names are the rest (the evidence SQL's figures: test_device_idles_evidence_sql_gives_its_figures)
    (idle,) = findings(report, "device-idle")
    v = idle["evidence"]["values"]
    assert v["idle_in_first_launch_ns"] == v["idle_left_out_ns"] == raw.dur(longest)
    rank = report["summary"]["ranks"][0]
    in_steps = sum(b - a for a, b in idle_gaps(raw, rank))  # the device's idle in the steps, the summary's device time
    assert idle["impact_ns"] == v["idle_ns"] - raw.dur(longest) == in_steps - raw.dur(longest) == 9_188_322 - 6_543_109
    assert idle["title"] == (f"Device 2 idle {100 * idle['impact_ns'] / rank['analysed_ns']:.1f}% of the analysed window (2.65 ms, "
                             "besides 6.54 ms while the host was in a kernel's first launch, loading its code (critical-path's))")
    assert "gap of 6.63 ms" not in idle["recommendation"] and idle["recommendation"].startswith("Keep the device fed: largest gaps — gap of 0.31 ms")
    assert report["findings"].index(f) < report["findings"].index(idle)
    _, report, _ = traces("cuda_nccl_rank0_of_2")
    (g,) = [f for f in findings(report, "critical-path") if f["evidence"]["values"]["class"] == "launch"]
    assert g["recommendation"].startswith("Launch overhead bounds the step")



@pytest.mark.parametrize("name", ["v100_resnet50_torch19_memory", "cuda_alexnet_train", "rocm_mi250_train"])
def test_device_idles_evidence_sql_gives_its_figures(traces, name):
    """device-idle's evidence SQL, run over the run's events, gives the finding's impact and the
    idle it left to other rules: the V100's DataLoader fetches within its steps, cuda_alexnet's
    allocator calls and syncs without steps, the MI250's first launch of a kernel (loading its code)."""
    run_dir, report, _ = traces(name)
    (f,) = findings(report, "device-idle")
    with open_run(run_dir) as run:
        rel = run.sql(f["evidence"]["sql"])
        row = dict(zip([d[0] for d in rel.description], rel.fetchone()))
    values = f["evidence"]["values"]
    assert row["impact_ns"] == f["impact_ns"] and row["idle_left_out_ns"] == values["idle_left_out_ns"] > 0
    assert (row["idle_ns"], row["window_ns"], row["busy_ns"]) == (values["idle_ns"], values["window_ns"], values["busy_ns"])


def test_host_time_that_is_python_outside_the_model_gets_advice_for_it(traces):
    """H100 TimeSformer inference (recorded with stacks and nn.Module paths): the critical path's
    host time is 225.02 ms, 220.84 ms of it Python in no operator and no nn.Module, numpy
    preprocessing first (transformers' image normalize). The advice names it and says to take it
    off the step's path, not to compile the model or capture its graphs, which do not touch it. The
    NCCL trace's host time is torch operators and keeps that advice (after DDP's buffer broadcast, its
    own test's)."""
    _, report, _ = traces(H100)
    (f,) = [f for f in findings(report, "critical-path") if f["evidence"]["values"]["class"] == "host"]
    assert f["evidence"]["values"]["heaviest"][0]["item"] == "transformers/image_transforms.py(390): normalize"
    assert f["recommendation"].startswith(
        "Python outside the model (in no operator and no nn.Module) is 220.84 ms of this time (transformers/image_transforms.py(390)")
    assert "torch.compile cuts" not in f["recommendation"]
    _, report, _ = traces("cuda_nccl_rank0_of_2")
    (g,) = [f for f in findings(report, "critical-path") if f["evidence"]["values"]["class"] == "host"]
    assert "Host time bounds the step: torch.compile cuts Python and dispatcher overhead" in g["recommendation"]
    assert "Python outside the model" not in g["recommendation"]


@pytest.mark.slow
def test_the_text_report_names_kernels_as_people_read_them(traces):
    """H100 TimeSformer inference: its heaviest kernel, `void at::native::(anonymous namespace)::
    cunn_SoftMaxForward<8, c10::BFloat16, ...>(...)` (68.69 ms), was `at::native::` in the top
    kernels and `void at::native::(anonymous namespace)::cunn_…` on the critical path. The top
    kernels, the critical path's heaviest kernels and each finding's `where` now name a kernel by
    one shortening (fmt.kernel_name): no return type, no anonymous namespace, no cut inside one."""
    from neuron_explorer.analyzers import render

    run_dir, _, _ = traces(H100)
    text = render.text(analyze(run_dir, write=False), width=220)
    assert re.search(r"^ +cunn_SoftMaxForward<8, BFloat16, float, BFloat16, SoftMaxFo… +68\.69 ms +44\.4% +×12$", text, re.M), text
    assert "heaviest: cunn_SoftMaxForward<8, BFloat16, float, BFloat1… of aten::softmax 68.69 ms" in " ".join(text.split())
    assert "· aten::softmax · cunn_SoftMaxForward<8, BFloat16, float, BFloat16, SoftMaxFo… · steps 6" in text
    assert "(anonymous" not in text and not re.search(r"\bvoid |at::native::\s", text)


# ---- TF32 kernels are not told to allow TF32 -----------------------------------------------------
@pytest.mark.slow
def test_gemms_that_run_tf32_already_are_told_bf16_not_tf32(traces):
    """a100_train_blocking_dtoh's fp32 GEMMs are CUTLASS `cutlass_80_tensorop_s1688gemm` kernels: fp32
    data the Tensor Cores run as TF32 (NVIDIA/cutlass#466), and one plain fp32 SIMT `ampere_sgemm`.
    The critical path's fp32 class told them all to allow TF32. It tells them bf16 autocast, and TF32
    only for the SIMT sgemm, by name. (FBGEMM's embedding kernels, classed GEMMs for the `gemm` in
    `fbgemm_gpu`, are no longer in the class: 12 names, not 16.)"""
    _, report, raw = traces(A100)
    names = {e["name"] for e in raw.of({"kernel"})}
    s1688 = {n for n in names if "cutlass_80_tensorop_s1688gemm" in n}
    assert len(s1688) == 8 and "ampere_sgemm_128x64_nn" in names
    (f,) = [f for f in findings(report, "critical-path") if f["evidence"]["values"]["class"] == "fp32_matmul"]
    assert f["title"].startswith(f"fp32 GEMM/convolution kernels (12 names): {f['impact_ns'] / 1e6:.2f} ms on the critical path")
    heaviest = [h["item"] for h in f["evidence"]["values"]["heaviest"]]
    assert set(heaviest) <= s1688 and f["evidence"]["values"]["tf32_ns"] >= sum(h["charged_ns"] for h in f["evidence"]["values"]["heaviest"])
    rec = f["recommendation"]
    assert "torch.autocast(device_type='cuda', dtype=torch.bfloat16)" in rec
    assert ("the kernels whose names say TF32 already run it on the Tensor Cores; allow TF32 for those that run plain fp32 "
            "(ampere_sgemm_128x64_nn of autograd::engine::evaluate_function: AddmmBackward0 0.40 ms, "
            # (and one launched before the trace began, in step 550: no operator)
            "ampere_sgemm_128x64_nn 0.10 ms: torch.set_float32_matmul_precision('high')") in rec, rec
    assert rec.count("allow TF32") == 1 and "split_embedding" not in rec


# ---- a step whose range runs on after the last recorded event ----------------------------------
def test_a_step_running_on_after_the_last_event_is_unrecorded_not_python(traces):
    """cuda_triton's one ProfilerStep lasts 13.3 s; its 7 events end 1.5 ms in (the profiler's own
    range ends before the step does). The path charges the rest to no event, host time: it was
    read as Python to compile away. It is the step's range running on where nothing was recorded,
    counted from the JSON: the step's end less the last event's end (steps and the profiler's range
    left out). Then it was still a high finding titled 'host-bound (100%): CPU operators and Python'
    with the whole step, 13,336.25 ms, as its saving: time not recorded is no one's to save. The
    finding says first that it was not recorded, and its impact and saving bound are the host time
    the trace shows (1.77 ms): info."""
    run_dir, report, raw = traces("cuda_triton")
    (step,) = [raw.iv(e) for e in raw.spans if str(e["name"]).startswith("ProfilerStep#")]
    last = max(raw.iv(e)[1] for e in raw.events if e.get("ph") in ("X", "i") and "ts" in e
               and not str(e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") != "Trace")
    (host,) = [f for f in findings(report, "critical-path") if f["evidence"]["values"]["class"] == "host"]
    assert host["evidence"]["values"]["unrecorded_ns"] == step[1] - last == 13_334_478_472
    assert "nothing was recorded there" in host["recommendation"] and "torch.compile" not in host["recommendation"]
    values = host["evidence"]["values"]
    assert values["left_out_ns"] == values["unrecorded_ns"] and values["charged_ns"] == 13_336_251_191
    assert host["impact_ns"] == values["charged_ns"] - values["unrecorded_ns"] == 1_772_719
    assert 0 < host["saving_bound_ns"] <= host["impact_ns"] and host["severity"] == "info"
    # its figures as every figure of 1 s or more is written: thousands separated (it read "13336.25 ms")
    assert host["title"].startswith("not recorded: 13,334.48 ms of step time (100.0%) lies after the last event the trace holds; "
                                    "on the critical path: host time in operators and Python 1.77 ms recorded (0.0% of step time); "
                                    "heaviest: Torch-Compiled Region: 0/0 1.31 ms, host time outside every traced call 0.43 ms"), host["title"]
    assert "bound" not in host["title"]
    # nor does the summary call the step host-bound: the report says what the step's time was
    (rank,) = report["summary"]["ranks"]
    assert rank["bound"]["overall"]["unrecorded_ns"] == values["unrecorded_ns"]
    text = " ".join(render.text(analyze(run_dir, write=False), width=200).split())
    assert text.count("bound: not recorded (100%): the steps run on 13,334.48 ms after the last event the trace holds") == 1


def test_device_idle_names_the_parts_it_leaves_out_as_its_evidence_gives_them(traces):
    """The RTX 2080 Ti trace (no steps: its analysed window is its span) idles 983.89 ms of it while
    the host is in allocator calls (most before the first kernel, as the job starts) and 9 µs while
    it waits in syncs: both left out of the idle figure and named in the title with the figures of
    the evidence, which add up to the summary's idle (a part that prints as 0.00 ms is not named:
    tests/test_host_sync_device.py)."""
    _, report, _ = traces("rtx2080ti_linear_epoch_us")
    (f,) = findings(report, "device-idle")
    v = f["evidence"]["values"]
    (dt,) = report["summary"]["ranks"][0]["device_time"]
    assert 5_000 <= v["idle_in_syncs_ns"] < 10_000 < v["idle_in_allocator_calls_ns"]
    assert f["impact_ns"] == v["idle_ns"] - v["idle_left_out_ns"] == dt["idle_ns"] - v["idle_in_syncs_ns"] - v["idle_in_allocator_calls_ns"]
    assert f["title"].endswith(f"besides {v['idle_in_allocator_calls_ns'] / 1e6:,.2f} ms while the host was in device allocator "
                               f"calls (allocator-churn's) and {v['idle_in_syncs_ns'] / 1e6:,.2f} ms while the host waited in syncs)")


def test_an_idle_gap_that_is_one_first_call_is_named_a_one_off(traces):
    """cuda_alexnet_train (no steps: its analysed window is its span): the device's longest idle gap
    outside allocator calls, 30,455 ms before its first kernel, is nearly all the first aten::to (the
    model moved to the device: CUDA initialised), most of the idle left after the allocator calls;
    the next falls inside the first aten::conv2d call (cuDNN loaded at the first convolution). The
    advice said to keep the device fed (DataLoader workers, CUDA graphs); it names the gap a likely
    one-off first and says to profile steady steps."""
    _, report, raw = traces("cuda_alexnet_train")
    rank = report["summary"]["ranks"][0]
    s, t = longest_idle_gap(raw, rank)
    to = max((e for e in raw.of(OP_CATS) if e["name"] == "aten::to"), key=raw.dur)
    inside = min(raw.iv(to)[1], t) - max(raw.iv(to)[0], s)
    assert inside >= 0.9 * (t - s) and t <= min(raw.iv(e)[0] for e in raw.of(DEVICE_CATS))  # the first aten::to, before any device work
    (f,) = findings(report, "device-idle")
    assert (t - s) * 2 >= f["impact_ns"]
    assert f["recommendation"].startswith(f"One gap of {(t - s) / 1e6:,.2f} ms holds {100 * (t - s) / f['impact_ns']:.1f}% of this "
                                          f"idle, the host in aten::to for {inside / 1e6:,.2f} ms of it with no device work: a one-off")
    assert "Profile steady steps" in f["recommendation"]
    conv = max((e for e in raw.of(OP_CATS) if e["name"] == "aten::conv2d"), key=raw.dur)
    c = max((g for g in idle_outside_allocator_calls(raw, rank) if raw.iv(conv)[0] <= g[0] and g[1] <= raw.iv(conv)[1]),
            key=lambda g: g[1] - g[0])  # the longest in the first convolution
    assert f"gap of {(c[1] - c[0]) / 1e6:,.2f} ms: host ran aten::conv2d {(c[1] - c[0]) / 1e6:,.2f} ms (the first of 10" in f["recommendation"]


def test_an_idle_gap_with_no_traced_host_call_says_so(traces):
    """cuda_event_sync_multistream (no steps: its analysed window is its span): the device's longest
    idle gap holds most of its idle while the host runs traced calls for a few microseconds of it
    (Python, or a wait the profiler does not record). The advice said to prepare inputs ahead and
    capture graphs; it now says first that the host ran no traced call there, and how to see what it did."""
    _, report, raw = traces("cuda_event_sync_multistream")
    s, t = longest_idle_gap(raw, report["summary"]["ranks"][0])
    host = [e for e in raw.of(OP_CATS | RUNTIME_CATS) if raw.top_op(e) is e or (e["cat"] in RUNTIME_CATS and raw.top_op(e) is None)]
    traced = sum(max(0, min(raw.iv(e)[1], t) - max(raw.iv(e)[0], s)) for e in host)
    assert traced * 10 < t - s
    (f,) = findings(report, "device-idle")
    assert f["recommendation"].startswith(f"One gap of {(t - s) / 1e6:,.2f} ms holds ")
    assert f"the host's traced calls in it take {traced / 1e6:,.2f} ms: for the rest the host ran no traced call" in f["recommendation"]
    assert "with_stack=True" in f["recommendation"]


@pytest.mark.parametrize("mul_us, untraced", [(50, True), (1400, False)])
def test_idle_gaps_mostly_in_no_traced_call_say_so(tmp_path, mul_us, untraced):
    """multirank_128's shape: four iterations 2 ms apart, each an aten::add launching a 490 µs kernel,
    then the host inside a `## backward ##` range with nothing recorded beneath it but an aten::mul of
    `mul_us` (no kernel). The device idles 1.51 ms between kernels, three gaps (4.53 ms of the 6.50 ms
    span; 10 µs more before the first kernel). With the aten::mul of 50 µs the host's traced calls take 0.18 ms of the gaps (the mul and the
    next add's first 10 µs, each gap): the advice says first that the host ran no traced call for the
    rest, not only to keep the device fed; with 1.4 ms of aten::mul in each gap it names the host's work."""
    events = []
    for i in range(4):
        base = 2000 * i
        events += [X("aten::add", "cpu_op", base, 20, **{"External id": i + 1}),
                   X("cudaLaunchKernel", "cuda_runtime", base + 5, 5, correlation=i + 1, **{"External id": i + 1}),
                   X("elementwise_kernel", "kernel", base + 10, 490, pid=0, tid=7, correlation=i + 1, stream=7, device=0)]
        if i < 3:
            events += [X("## backward ##", "user_annotation", base + 500, 1490),
                       X("aten::mul", "cpu_op", base + 1990 - mul_us, mul_us, **{"External id": 100 + i})]
    run_dir = import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir
    (f,) = findings(analyze(run_dir, write=False).to_dict(), "device-idle")
    v = f["evidence"]["values"]
    assert (v["idle_ns"], v["window_ns"], v["gaps_ns"]) == (4540 * 1000, 6500 * 1000, 4530 * 1000)  # (idle: the first 10 µs too)
    assert v["host_calls_in_gaps_ns"] == 3 * (mul_us + 10) * 1000
    words = (f"In the longest gaps (4.53 ms) the host's traced calls take {3 * (mul_us + 10) / 1000:.2f} ms: for the rest it ran no "
             "traced call (Python between operators, a sleep, or a wait the profiler does not record, such as a sync inside a library). "
             "Record with with_stack=True, or sample the process (py-spy), to see what it did, before moving work off the host. "
             "Keep the device fed: largest gaps — gap of 1.51 ms: host ran aten::mul")
    if untraced:
        assert f["recommendation"].startswith(words)
    else:
        assert f["recommendation"].startswith("Keep the device fed: largest gaps — gap of 1.51 ms: host ran aten::mul 1.40 ms")


def test_idle_gaps_that_are_first_calls_of_their_inputs_say_so(traces):
    """b200_vllm_eager (vLLM eager decode, no steps: its analysed window is its span): after the idle
    before its first kernel (the host copying inputs to the device, vLLM's copy_to_gpu), the device's
    two longest idle gaps are each one aten::linear of 1.7-2.5 ms, the first call with its input
    shapes; the other 35 calls with those shapes take well under 0.1 ms (cuBLAS choosing a kernel for
    a shape it has not seen). The advice listed them as host work to keep the device fed; it now
    says they are first calls, with the count and the median a person would check. They are a small
    part of the idle, which is spread over the whole window: that leads the advice."""
    _, report, raw = traces("b200_vllm_eager_rank0_of_8")
    rank = report["summary"]["ranks"][0]
    (a, b), (s, t) = sorted(idle_gaps(raw, rank), key=lambda g: (g[0] - g[1], g[1]))[:2]
    assert a == rank["start_ns"] and b == min(raw.iv(e)[0] for e in raw.of(DEVICE_CATS))  # before the first device event
    tops = [e for e in raw.of(OP_CATS) if raw.top_op(e) is e]
    linear = max(tops, key=lambda e: min(raw.iv(e)[1], t) - max(raw.iv(e)[0], s))
    assert linear["name"] == "aten::linear"
    key = (json.dumps(linear["args"].get("Input Dims")), json.dumps(linear["args"].get("Input type")))
    same = sorted((e for e in raw.of(OP_CATS) if e["name"] == "aten::linear"
                   and (json.dumps(e["args"].get("Input Dims")), json.dumps(e["args"].get("Input type"))) == key), key=raw.iv)
    assert same[0] is linear  # the first call with these inputs
    others = sorted(raw.dur(e) for e in same[1:])
    median = (others[(len(others) - 1) // 2] + others[len(others) // 2]) / 2
    assert raw.dur(linear) > 20 * median
    (f,) = findings(report, "device-idle")
    overlap = min(raw.iv(linear)[1], t) - max(raw.iv(linear)[0], s)
    assert (f"gap of {(t - s) / 1e6:,.2f} ms: host ran aten::linear {overlap / 1e6:,.2f} ms (the first of {len(same)} calls with "
            f"these inputs; the others took {median / 1e6:,.2f} ms at the median)") in f["recommendation"]
    # those two gaps are 6% of the device's 75.82 ms of idle: the advice leads with the idle spread over the window,
    # not with the first calls (the gaps' list names them)
    gaps_ns, idle_ns = f["evidence"]["values"]["gaps_ns"], f["impact_ns"]
    assert gaps_ns < 0.25 * idle_ns
    assert f["recommendation"].startswith("The idle is spread over ") and "are first calls" not in f["recommendation"]
    assert f"gaps, the 3 longest {gaps_ns / 1e6:,.2f} ms ({100 * gaps_ns / idle_ns:.1f}% of it): not a few stalls" in f["recommendation"]
    assert f"gap of {(b - a) / 1e6:,.2f} ms: host ran aten::copy_ " in f["recommendation"]
    assert f["location"]["source"] == "vllm/v1/utils.py:131"  # the longest gap's heaviest call's statement: copy_to_gpu


def test_host_time_in_no_traced_call_is_one_finding_that_says_to_see_it(traces):
    """HTA's trace_compare base: two profiler steps (100.30 and 122.15 ms) in which the host's traced
    calls take a few µs and the device idles 99% of the time; the trace records no Python. The path's
    host class (222.43 ms, nearly all in no traced call) was told "torch.compile cuts Python and
    dispatcher overhead, CUDA graphs remove per-kernel launches", beside device-idle's 220.76 ms saying
    the host ran no traced call and to record stacks: one cause, two findings and two fixes. The host
    class now says its time is in no traced call and how to see it; device-idle leaves its finding to it."""
    _, report, raw = traces("hta_trace_compare_base")
    steps = [e for e in raw.spans if e["name"].startswith("ProfilerStep#")]
    step_ns = sum(raw.dur(e) for e in steps)
    traced = sum(raw.dur(e) for e in raw.of(OP_CATS | RUNTIME_CATS | {"user_annotation"}) if e not in steps)
    assert len(steps) == 2 and traced < 0.01 * step_ns
    assert not findings(report, "device-idle")
    (host,) = [f for f in findings(report, "critical-path") if f["evidence"]["values"]["class"] == "host"]
    untraced = host["evidence"]["values"]["untraced_ns"]
    assert step_ns - traced <= untraced <= step_ns
    assert f"heaviest: host time outside every traced call {untraced / 1e6:,.2f} ms" in host["title"]
    assert host["recommendation"] == (
        f"{untraced / 1e6:,.2f} ms of this time is in no traced call: the host ran code or waited where the trace records no "
        "operator, Python call or range (Python between operators, a sleep, a wait the profiler does not record such as a sync "
        "inside a library), so it does not say what to make faster, and compiling or capturing graphs may not touch it. "
        "Record with with_stack=True, or sample the process (py-spy), to see what it did.")


def test_ddp_buffer_broadcast_on_the_host_path_is_named_with_its_fix(traces):
    """cuda_nccl_rank0_of_2 (ResNet-50, DDP, host-bound): at every forward DistributedDataParallel
    broadcasts the model's 106 BatchNorm buffers (c10d::broadcast_, with flatten_dense_tensors before
    and unflatten_dense_tensors after, one narrow per buffer): about 14% of the host time on the
    path. The advice was the generic torch.compile / CUDA graphs; it now names the broadcast, its
    time (at most the three operators' time in the analysed steps: the host is the path there) and
    broadcast_buffers=False. The MI300X DDP run broadcasts too, for under 5% of its host time: not named."""
    _, report, raw = traces("cuda_nccl_rank0_of_2")
    (f,) = [f for f in findings(report, "critical-path") if f["evidence"]["values"]["class"] == "host"]
    steps = [raw.iv(e) for e in raw.spans if re.fullmatch(r"ProfilerStep#(\d+)", e["name"])
             and int(e["name"].split("#")[1]) in f["location"]["steps"]]
    ops = [e for e in raw.of(OP_CATS) if e["name"] in ("c10d::broadcast_", "aten::flatten_dense_tensors", "aten::unflatten_dense_tensors")
           and any(a <= raw.iv(e)[0] and raw.iv(e)[1] <= b for a, b in steps)]
    assert {e["name"] for e in ops} == {"c10d::broadcast_", "aten::flatten_dense_tensors", "aten::unflatten_dense_tensors"}
    in_steps = sum(raw.dur(e) for e in ops)
    said = float(re.search(r"^DistributedDataParallel's broadcast of the module's buffers is ([\d.]+) ms of this time",
                           f["recommendation"]).group(1)) * 1e6
    assert 0.9 * in_steps <= said <= in_steps + 5_000  # (printed to 10 µs)
    assert said >= 0.05 * f["impact_ns"] and "DistributedDataParallel(model, broadcast_buffers=False)" in f["recommendation"]
    _, other, _ = traces("mi300x_ddp_resnet_act_checkpoint")
    assert not any("broadcast_buffers" in g["recommendation"] for g in other["findings"])


def test_zero_grad_kernels_of_old_torch_are_named_with_set_to_none(traces):
    """v100_resnet50_torch19_memory (torch 1.9): zero_grad's default then was set_to_none=False, so
    Optimizer.zero_grad zeroes each of ResNet-50's 161 gradients with a kernel of its own, most of
    them under 10 µs: 156 of the 911 short kernels a step. launch-overhead's advice said to fuse
    kernels; it now names zero_grad's share (counted here from the kernels whose launch call lies
    inside the zero_grad range, in the steady steps) and set_to_none=True, which launches none."""
    _, report, raw = traces("v100_resnet50_torch19_memory")
    steady = report["summary"]["ranks"][0]["steps"]["steady_steps"]
    steps = [raw.iv(e) for e in raw.spans if e["name"] in {f"ProfilerStep#{s}" for s in steady}]
    zero = [raw.iv(e) for e in raw.spans if e["name"].startswith("Optimizer.zero_grad#")]
    launch = raw.launch_of()
    short = [k for k in raw.of({"kernel"}) if raw.dur(k) < SHORT_KERNEL_NS and any(a <= raw.iv(k)[0] < b for a, b in steps)]

    def in_zero_grad(k) -> bool:
        c = launch.get(k["args"].get("correlation"))
        return c is not None and any(a <= raw.iv(c)[0] and raw.iv(c)[1] <= b for a, b in zero)
    n = sum(1 for k in short if in_zero_grad(k))
    assert n >= 0.1 * len(short)
    (f,) = findings(report, "launch-overhead")
    assert (f"Optimizer.zero_grad launches {n / len(steps):.0f} of them a step, one for each gradient it zeroes: "
            "optimizer.zero_grad(set_to_none=True)") in f["recommendation"]


@pytest.mark.slow
def test_a_hotspot_statements_advice_mentions_backward_only_where_it_has_one(traces):
    """h100_timesformer_inference runs no backward: its hotspot statement's advice said 'its backward
    included' all the same (that statement is hand-written attention now, critical-path's finding: the
    vLLM piecewise decode's statement, inference too, stands in). The MI300X training run's statement
    has 12 ms of backward: it says so."""
    (inference,) = [f for f in findings(traces(GRAPH_PIECEWISE)[1], "hotspot") if f["title"].startswith("Hotspot source line")]
    assert inference["evidence"]["values"]["device_backward_ns"] == 0 and "backward" not in inference["recommendation"]
    (training,) = [f for f in findings(traces("mi300x_ddp_resnet_act_checkpoint")[1], "hotspot") if f["title"].startswith("Hotspot source line")]
    assert training["evidence"]["values"]["device_backward_ns"] > 0 and "(its backward included)" in training["recommendation"]


@pytest.mark.slow  # imports a 1-1.4 MB trace (5-10 s)
def test_zero_grad_host_time_on_the_path_is_named_with_set_to_none(traces):
    """cuda_resnet50_torch18: the heaviest host item on the critical path is Optimizer.zero_grad
    (47.45 ms of 128.22 ms, a launch per gradient): the host class's advice names it with its time
    (the path's, at most the range's own time in the analysed steps) and set_to_none=True."""
    _, report, raw = traces(TORCH18)
    (f,) = [f for f in findings(report, "critical-path") if f["evidence"]["values"]["class"] == "host"]
    steps = [raw.iv(e) for e in raw.spans if re.fullmatch(r"ProfilerStep#(\d+)", e["name"])
             and int(e["name"].split("#")[1]) in f["location"]["steps"]]
    own = sum(raw.dur(e) for e in raw.spans if e["name"].startswith("Optimizer.zero_grad#")
              and any(a <= raw.iv(e)[0] and raw.iv(e)[1] <= b for a, b in steps))
    said = float(re.search(r"^The optimizer's zero_grad is ([\d.]+) ms of this time \(Optimizer.zero_grad#SGD.zero_grad\)",
                           f["recommendation"]).group(1)) * 1e6
    assert 0.05 * f["impact_ns"] <= said <= own + 5_000
    assert "optimizer.zero_grad(set_to_none=True)" in f["recommendation"]


def test_a_collective_no_traced_operator_launched_says_so(traces):
    """mi300x_ddp_resnet_act_checkpoint: 5 of the NCCL kernels have no launch call in the trace (their
    correlation ids match no runtime call): comm-exposed named them 'from an unknown caller'; it says
    what is known, that no traced operator launched them."""
    _, report, raw = traces("mi300x_ddp_resnet_act_checkpoint")
    launch = raw.launch_of()
    orphans = [k for k in raw.of({"kernel"}) if k["name"].startswith("ncclDevKernel") and launch.get(k["args"].get("correlation")) is None]
    assert len(orphans) == 5
    (f,) = findings(report, "comm-exposed")
    assert "ncclDevKernel_Generic from no traced operator " in f["title"] and "unknown" not in f["title"]


def test_ddps_bucket_all_reduces_are_no_statements_hotspot(traces):
    """mi300x_ddp_resnet_act_checkpoint: DDP's hook all-reduces each gradient bucket inside the
    AccumulateGrad node of its last parameter. Those all-reduces (three of 6.7-6.9 ms, launched from the
    AccumulateGrad nodes) were charged to the convolution evaluated just before: 'resnet.py:89 takes
    76.2% (37.07 ms)', 20.34 ms of it NCCL. The statement now holds its own work only, and comm-exposed
    says who launched them: a gradient hook in backward, not a line of resnet.py."""
    _, report, raw = traces("mi300x_ddp_resnet_act_checkpoint")
    hooks = [e for e in raw.spans if e["name"].endswith("evaluate_function: torch::autograd::AccumulateGrad")]
    launch = raw.launch_of()
    hooked = [k for k in raw.of({"kernel"}) if k["name"].startswith("ncclDevKernel")
              and (c := launch.get(k["args"].get("correlation"))) is not None
              and any(h["tid"] == c["tid"] and raw.iv(h)[0] <= raw.iv(c)[0] < raw.iv(h)[1] for h in hooks)]
    assert len(hooked) == 6
    (line,) = [f for f in findings(report, "hotspot") if f["title"].startswith("Hotspot source line: torchvision/models/resnet.py:89")]
    assert "ncclDevKernel" not in json.dumps(line["contents"])
    assert line["impact_ns"] < 20_340_000  # its own work, no bucket's all-reduce
    (f,) = findings(report, "comm-exposed")
    named = {x["source"] or x["op"]: x["ns"] for x in f["evidence"]["values"]["collectives"]}
    assert not [s for s in named if s and "resnet.py" in s]
    assert "ncclDevKernel_Generic from a gradient hook in backward (after AccumulateGrad) " in f["title"]
    # and the collective is that one finding's: no 'Hotspot kernel: ncclDevKernel_Generic takes 32.7% on the critical path'
    # beside it with the same fix
    assert not [h for h in findings(report, "hotspot") if (h["location"].get("kernel") or "").startswith("ncclDevKernel")]


@pytest.mark.slow  # imports a 1-1.4 MB trace (5-10 s)
def test_device_idle_is_the_summarys_idle_in_the_analysed_window(traces):
    """a100_train_blocking_dtoh (5 profiler steps, 1,074.03 ms): its device runs on 158 ms after the
    last step. device-idle counted idle over the device's own window (first to last device event,
    1,231.46 ms): 'idle 64.4% of its window (793.04 ms)', 73.8% of the analysed time, beside the
    summary's 'idle 692.60 ms (64.5%)', and its longest gap named (64.65 ms, a cudaDeviceSynchronize)
    lay after the steps. It is now the summary's idle over the analysed window, counted here from the
    raw JSON (the ProfilerStep ranges less the device events), and the gaps it names are the longest
    pieces of that idle, all inside the steps; its evidence SQL gives the same figures."""
    run_dir, report, raw = traces(A100)
    rank = report["summary"]["ranks"][0]
    wins = analysed_windows(raw, rank)
    assert max(raw.iv(e)[1] for e in raw.of(DEVICE_CATS)) > max(b for _, b in wins) + 150_000_000  # the device runs on after the steps
    gaps = idle_gaps(raw, rank)
    idle = sum(b - a for a, b in gaps)
    (dt,) = rank["device_time"]
    assert (dt["idle_ns"], dt["window_ns"]) == (idle, rank["analysed_ns"]) == (idle, sum(b - a for a, b in wins))
    (f,) = findings(report, "device-idle")
    assert f["impact_ns"] == idle and f["impact_share"] == pytest.approx(idle / rank["analysed_ns"])
    assert f["title"] == f"Device 0 idle {100 * idle / rank['analysed_ns']:.1f}% of the analysed window ({idle / 1e6:,.2f} ms)"
    assert f["title"] == "Device 0 idle 64.5% of the analysed window (692.60 ms)"
    top = sorted(gaps, key=lambda g: (g[0] - g[1], g[1]))[:3]
    assert re.findall(r"gap of ([\d,.]+) ms", f["recommendation"]) == [f"{(b - a) / 1e6:,.2f}" for a, b in top]
    assert all(any(lo <= a and b <= hi for lo, hi in wins) for a, b in top)
    with open_run(run_dir) as run:
        rel = run.sql(f["evidence"]["sql"])
        row = dict(zip([d[0] for d in rel.description], rel.fetchone()))
    assert row == {"busy_ns": rank["analysed_ns"] - idle, "window_ns": rank["analysed_ns"], "idle_ns": idle, "idle_left_out_ns": 0,
                   "impact_ns": idle}


@pytest.mark.parametrize("name, rule, says, never", [(A100, "device-idle", "; Nsight Systems shows which.", "rocprof"),
                                                    (SGLANG, "host-sync", "(rocprof, or the trace of the process that launched it)",
                                                     "Nsight")])
def test_work_the_trace_does_not_show_is_looked_for_with_the_devices_own_profiler(traces, name, rule, says, never):
    """Where the device waited on work the trace does not hold, the advice named 'Nsight Systems or
    rocprof' on every device: the A100's device-idle now names NVIDIA's, the MI300X's host-sync AMD's
    (peaks.profiler_advice; Trainium's and an unknown device's below)."""
    _, report, _ = traces(name)
    (f,) = findings(report, rule)
    assert says in f["recommendation"] and never not in f["recommendation"]
    assert peaks.profiler_advice("Trainium2") == "the Neuron profiler (neuron-profile)"
    assert peaks.profiler_advice(None) == "Nsight Systems or rocprof"


@pytest.mark.slow  # imports a 1-1.4 MB trace (5-10 s)
def test_idle_gaps_the_host_spent_waiting_on_the_device_are_no_host_work_to_move(traces):
    """a100_train_blocking_dtoh: the device's three longest gaps in its steps (about 64 ms each) are
    blocking device-to-host copies, waiting with nothing on the device (the work after them was
    queued before: a copy queued 25 ms earlier).
    device-idle advised moving host work out of the step; it now says that neither side worked, by
    how much (the waiting calls' union inside the gaps, counted here from the raw JSON), and what can
    hold a device the trace does not show."""
    _, report, raw = traces(A100)
    top = sorted(idle_gaps(raw, report["summary"]["ranks"][0]), key=lambda g: (g[0] - g[1], g[1]))[:3]
    waits = [raw.iv(c) for c in waiting_calls(raw)]
    waited = sum(union([(max(a, s), min(b, t)) for a, b in waits if a < t and b > s]) for s, t in top)
    total = sum(t - s for s, t in top)
    assert waited > 0.9 * total
    (f,) = findings(report, "device-idle")
    assert f["recommendation"].startswith(f"In the longest gaps the host was waiting on the device (synchronize calls, blocking copies) "
                                          f"for {waited / 1e6:,.2f} ms of {total / 1e6:,.2f} ms, while the trace shows nothing running on it")
    assert f["evidence"]["values"]["waited_in_gaps_ns"] == waited
    assert "Move host work out of the step" not in f["recommendation"] and "Keep the device fed" not in f["recommendation"]
    # the critical path runs through those gaps (a CUDA graph's nodes waiting, 64 ms at a time, with nothing on the device):
    # their idle is work waiting behind work the trace does not show, and so is the bound's reading, not "device idle"
    run_dir, _, _ = traces(A100)
    with open_run(run_dir) as run:
        path = cp.path_of(run, 0)
    unseen = path.ns[path.cause == path.causes.index(cp.UNSEEN_QUEUE)]
    assert sorted(unseen.tolist(), reverse=True)[:3] == sorted((t - s for s, t in top), reverse=True)
    assert report["summary"]["ranks"][0]["bound"]["overall"]["words"] == (
        "idle-bound (64%): device work queued behind work the trace does not show")


def test_a_sync_waiting_while_no_device_runs_is_named_a_wait_on_unseen_work(traces):
    """mi300x_sglang_qwen3_decode (an inference server's scheduler, no steps): its one blocking copy
    (hipMemcpyWithStream, 463.06 ms) waits while no device event of the trace runs: the work it
    waited for is not in this trace (the model's forward runs elsewhere). host-sync advised removing
    the sync and keeping values on the device; it now says the sync is not what costs, with the
    figures counted here from the raw JSON (the waiting call's interval less the device events in it)."""
    _, report, raw = traces(SGLANG)
    (wait,) = [raw.iv(c) for c in waiting_calls(raw)]
    busy = [(max(a, wait[0]), min(b, wait[1])) for a, b in (raw.iv(e) for e in raw.of(DEVICE_CATS)) if a < wait[1] and b > wait[0]]
    unseen = (wait[1] - wait[0]) - union(busy)
    assert unseen > 0.99 * (wait[1] - wait[0])
    (f,) = findings(report, "host-sync")
    assert f["evidence"]["values"]["waits_device_idle_ns"] == unseen == f["impact_ns"]
    assert f["recommendation"].startswith(f"For {unseen / 1e6:,.2f} ms of the {(wait[1] - wait[0]) / 1e6:,.2f} ms the host waited (")
    assert "no device of this rank ran anything the trace holds" in f["recommendation"] and ".item()" not in f["recommendation"]
    # the bound: the device was not seen idle for want of work. Its first kernel, launched at 0.12 ms after the stream's
    # hipStreamWaitEvent, started 463 ms later behind work the trace does not hold (the batch launched before it began)
    (first,) = [e for e in raw.of(DEVICE_CATS) if raw.iv(e)[0] > wait[0] and raw.iv(e)[0] == min(raw.iv(d)[0] for d in raw.of(DEVICE_CATS)
                                                                                                      if raw.iv(d)[0] > wait[0])]
    assert raw.iv(first)[0] - wait[0] > 0.99 * (wait[1] - wait[0])
    assert report["summary"]["ranks"][0]["bound"]["overall"]["words"] == (
        "idle-bound (98%): device work queued behind work the trace does not show")
    # what is inside it: the copies on the rank, an aten::copy_ inside another one its child, not a
    # second root (counted twice, the roots were 926.20 ms in a 473.83 ms trace); by the raw JSON,
    # the summed time of the copies no other copy on their thread holds
    copies = [(e["pid"], str(e["tid"]), *raw.iv(e)) for e in raw.of(OP_CATS) if e["name"] == "aten::copy_"]
    outer = [c for c in copies if not any(o is not c and o[:2] == c[:2] and o[2] <= c[2] and c[3] <= o[3]
                                          and (o[2], -o[3]) < (c[2], -c[3]) for o in copies)]
    roots = f["contents"]["roots"]
    assert (roots["count"], roots["total_ns"]) == (len(outer), sum(b - a for _, _, a, b in outer)) and len(outer) < len(copies)
    assert roots["total_ns"] < report["summary"]["ranks"][0]["span_ns"]


@pytest.mark.parametrize("name, says, never", [
    ("mi300x_ddp_resnet_act_checkpoint", "so that MIOpen runs them with its NHWC kernels on the matrix cores (MFMA)",
     ("Tensor Core", "cuDNN")),
    ("v100_resnet50_torch19_memory", "so that cuDNN runs them with its NHWC kernels on the Tensor Cores", ("MIOpen", "MFMA"))])
def test_channels_last_advice_names_the_devices_own_library_and_units(traces, name, says, never):
    """The critical path's NCHW-convolution advice said 'cuDNN / MIOpen use their NHWC Tensor Core
    kernels' on the MI300X ResNet, which has neither Tensor Cores nor cuDNN (its architecture was read
    only for the fp32 class, not for the convolutions' own). Each device's library and matrix units
    now (peaks.conv_library, peaks.matrix_units)."""
    _, report, _ = traces(name)
    (f,) = [f for f in findings(report, "critical-path") if "NCHW convolutions" in f["recommendation"]]
    assert says in f["recommendation"], f["recommendation"]
    assert not any(w in f["recommendation"] for w in never)


def test_two_kernels_of_one_template_are_told_apart_in_the_top_kernels(traces):
    """mi300x_sglang_qwen3_decode: aiter's add_rmsnorm_quant_kernel runs in two instantiations, the
    block size 256 and 64 (`_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16E...` and
    `...Li64ELi8E...`). Both are in device 9's top kernels, and both read
    `aiter::add_rmsnorm_quant_kernel`, two rows alike with different times. Each row now says what
    sets it apart (fmt.kernel_labels): the first template number that differs, from the JSON."""
    _, report, raw = traces(SGLANG)
    durations = collections.defaultdict(int)
    for e in raw.of(DEVICE_CATS):
        if e["name"].startswith("_ZN5aiter24add_rmsnorm_quant_kernel") and e.get("args", {}).get("device") == 9:
            durations[e["name"]] += raw.dur(e)
    size = {n: re.search(r"IDF16bDF16bLi(\d+)E", n).group(1) for n in durations}
    (dev,) = [d for r in report["summary"]["ranks"] for d in r["device_time"] if d["device"] == 9]
    rows = {k["name"]: k for k in dev["top_kernels"] if k["name"] in durations}
    assert len(rows) == 2 and {size[n] for n in rows} == {"256", "64"}, sorted(durations)
    for name, k in rows.items():
        assert k["kernel"] == f"aiter::add_rmsnorm_quant_kernel [{size[name]}]" and k["dur_ns"] == durations[name]


@pytest.mark.slow  # imports a 1-1.4 MB trace (5-10 s)
def test_timesformers_idle_device_is_one_finding_naming_the_preprocessing(traces):
    """h100_timesformer_inference: the device idles 224.10 ms of the 382.54 ms step while the pipeline
    normalises frames in numpy. Two findings said it: device-idle ('idle 58.6% … 224.10 ms', advising
    to record stacks the trace has) and critical-path's host class (225.02 ms, naming
    image_transforms.py's normalize). The host class is the one finding; the idle figure is the
    summary's, as it was."""
    _, report, raw = traces(H100)
    assert not findings(report, "device-idle")
    (rank,) = report["summary"]["ranks"]
    (dev,) = rank["device_time"]
    (host,) = [f for f in findings(report, "critical-path") if f["evidence"]["values"]["class"] == "host"]
    assert "image_transforms.py(390): normalize" in host["title"]
    idle = sum(b - a for a, b in idle_gaps(raw, rank))  # the device's idle in the step, read from the JSON
    assert dev["idle_ns"] == idle and 0.5 * rank["analysed_ns"] < idle <= host["impact_ns"] <= rank["analysed_ns"]
