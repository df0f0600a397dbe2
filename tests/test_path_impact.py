"""Impact is what fixing an item could save on the step's critical path, not its duration.

A sync in a step (µs):

    host   ProfilerStep#1 [0 ............................................. 100]
           aten::mm [0-10]  cudaDeviceSynchronize [12 ------------ 50]  aten::relu [55-60]
    GPU                K1 [10 ----------------------------- 50]              K2 [62-70]
                                                                   idle 50 → 62: 12 µs
    after the step: cudaDeviceSynchronize [200 -- 300] (outside every step: not counted)

A CPU operator that runs while the device is busy (device-bound step):

    host   ProfilerStep#1 [0 ............................................. 100]
           aten::heavy_cpu [0 ------------ 60]   (launches K at 1)
    GPU      K [2 ..................................................... 120]  (still running when the step ends)
"""

from __future__ import annotations

from neuron_explorer.analyzers import analyze
from neuron_explorer.collectors.chrome_trace import import_traces

from .conftest import X, write_trace

US = 1000


def _launch(ts, corr, ext, dur=1, name="cudaLaunchKernel"):
    return X(name, "cuda_runtime", ts, dur, correlation=corr, **{"External id": ext})


def _kernel(name, ts, dur, corr):
    return X(name, "kernel", ts, dur, pid=0, tid=7, correlation=corr, stream=7, device=0)


def _report(tmp_path, events):
    return analyze(import_traces(write_trace(tmp_path / "t.json", events), tmp_path / "run").run_dir, write=False)


def test_a_sync_costs_the_device_idle_it_causes_inside_steps(tmp_path):
    events = [
        X("ProfilerStep#1", "user_annotation", 0, 100),
        X("aten::mm", "cpu_op", 0, 10, **{"External id": 1}), _launch(2, 100, 1), _kernel("K1", 10, 40, 100),
        _launch(12, 101, None, dur=38, name="cudaDeviceSynchronize"),
        X("aten::relu", "cpu_op", 55, 5, **{"External id": 2}), _launch(56, 102, 2), _kernel("K2", 62, 8, 102),
        _launch(200, 103, None, dur=100, name="cudaDeviceSynchronize"),
    ]
    f = next(x for x in _report(tmp_path, events).findings if x.rule_id == "host-sync")
    assert f.impact_ns == 12 * US  # 50 → 62 on the device, not the 38 µs wait nor the 100 µs after the step
    assert f.evidence.values["stalls"] == 1 and f.evidence.values["wait_ns"] == 38 * US
    assert f.evidence.values["outside_steps"] == 1 and f.evidence.values["outside_wait_ns"] == 100 * US


def test_a_sync_outside_every_step_is_no_finding(tmp_path):
    events = [
        X("ProfilerStep#1", "user_annotation", 0, 100),
        X("aten::mm", "cpu_op", 0, 10, **{"External id": 1}), _launch(2, 100, 1), _kernel("K1", 10, 80, 100),
        _launch(200, 103, None, dur=300, name="cudaDeviceSynchronize"),
    ]
    assert not [x for x in _report(tmp_path, events).findings if x.rule_id == "host-sync"]


def test_a_cpu_operator_under_a_busy_device_is_no_hotspot_but_its_kernel_is(tmp_path):
    events = [
        X("ProfilerStep#1", "user_annotation", 0, 100),
        X("aten::heavy_cpu", "cpu_op", 0, 60, **{"External id": 1}), _launch(1, 100, 1), _kernel("K", 2, 118, 100),
    ]
    report = _report(tmp_path, events)
    assert not [x for x in report.findings if x.title.startswith("Hotspot operator")]  # 60 µs of CPU time, none on the path
    # K is the whole of its class of device work on the path: one finding names it, the path's (the kernel's hotspot
    # leaves to the class it is most of), with the path's 98 µs of the 100 µs step, not the kernel's 118 µs in all (118%)
    (k,) = [x for x in report.findings if x.location.kernel == "K"]
    assert k.rule_id == "critical-path" and k.impact_ns == 98 * US
    assert k.title.startswith("other kernels (1 name): 0.10 ms on the critical path (98.0% of step time; ")


def test_a_kernel_less_than_half_its_class_keeps_its_hotspot_on_the_path(tmp_path):
    """Three kernels of no known kind bound the step one after another: K 40 µs, K2 and K3 30 µs each
    (K3 runs 2 µs past the step's end); K runs again after the step. K is a hotspot of its own (40% of
    the step), less than half of the class the path names (98 µs): its finding stays, with its time on
    the path against its time in all."""
    events = [
        X("ProfilerStep#1", "user_annotation", 0, 100),
        X("aten::a", "cpu_op", 0, 3, **{"External id": 1}), _launch(1, 100, 1), _kernel("K", 2, 40, 100),
        X("aten::b", "cpu_op", 4, 3, **{"External id": 2}), _launch(5, 101, 2), _kernel("K2", 42, 30, 101),
        X("aten::c", "cpu_op", 8, 3, **{"External id": 3}), _launch(9, 102, 3), _kernel("K3", 72, 30, 102),
        _launch(20, 103, None, dur=79, name="cudaDeviceSynchronize"),
        X("aten::a", "cpu_op", 200, 3, **{"External id": 4}), _launch(201, 104, 4), _kernel("K", 202, 40, 104),
    ]
    report = _report(tmp_path, events)
    (cls,) = [x for x in report.findings if x.rule_id == "critical-path" and x.evidence.values.get("class") == "other"]
    assert cls.impact_ns == 98 * US
    (hot,) = [x for x in report.findings if x.rule_id == "hotspot" and x.location.kernel == "K"]
    assert hot.impact_ns == hot.evidence.values["on_path_ns"] == 40 * US
    assert hot.title == "Hotspot kernel: K takes 40.0% on the critical path (0.04 ms; 0.08 ms over 2 calls in all)"


def test_a_kernel_on_two_streams_at_once_without_steps_is_a_share_of_the_span_below_100_percent(tmp_path):
    """No steps, so no critical path: a kernel's hotspot is its time. K runs on two streams at once,
    [10, 110) on each (µs), 200 µs summed in a span of 110 µs (0 to 110): it printed 'takes 181.8%'.
    Its impact is the 100 µs some call of it runs, 90.9% of the span."""
    events = [
        X("aten::mm", "cpu_op", 0, 10, **{"External id": 1}), _launch(1, 100, 1), _launch(3, 101, 1),
        _kernel("K", 10, 100, 100), X("K", "kernel", 10, 100, pid=0, tid=8, correlation=101, stream=8, device=0),
    ]
    report = _report(tmp_path, events)
    (hot,) = [x for x in report.findings if x.rule_id == "hotspot" and x.location.kernel]
    assert hot.impact_ns == hot.evidence.values["running_ns"] == 100 * US and hot.evidence.values["device_ns"] == 200 * US
    assert hot.title == "Hotspot kernel: K takes 90.9% (0.10 ms running; 0.20 ms over 2 calls in all)"


def test_a_cpu_bound_step_keeps_its_operator_hotspot(tmp_path):
    events = [X("ProfilerStep#1", "user_annotation", 0, 100), X("aten::heavy_cpu", "cpu_op", 0, 90, **{"External id": 1})]
    op = next(x for x in _report(tmp_path, events).findings if x.rule_id == "hotspot" and x.title.startswith("Hotspot operator"))
    assert op.impact_ns == 90 * US and op.evidence.values["on_path_ns"] == 90 * US


def test_an_idle_gap_that_comes_back_every_step_is_no_one_off(tmp_path):
    """Three 10 ms steps: each launches K (0.9 ms), then runs aten::cpu_heavy for 9 ms with the device
    idle. The longest gap holds half the idle with one operator through it, as a library's first
    call would, but the same operator runs through the next gap as long: a cost of every step, and
    the advice keeps to what every step pays (no 'one-off')."""
    events = []
    for i in range(3):
        t = i * 10_000
        events += [X(f"ProfilerStep#{i + 1}", "user_annotation", t, 10_000),
                   X("aten::mm", "cpu_op", t, 100, **{"External id": i + 1}), _launch(t + 10, 100 + i, i + 1),
                   _kernel("K", t + 100, 900, 100 + i)]
        if i < 2:
            events.append(X("aten::cpu_heavy", "cpu_op", t + 1_000, 9_000))
    (f,) = [x for x in _report(tmp_path, events).findings if x.rule_id == "device-idle"]
    assert f.recommendation.startswith("Keep the device fed: largest gaps — gap of 9.10 ms: host ran aten::cpu_heavy 9.00 ms")
    assert "one-off" not in f.recommendation


def _preprocessing_steps(python: bool) -> list:
    """Three 10 ms steps of an inference loop: Python prepares the input for 8 ms (no operator inside:
    numpy, PIL), then one operator launches K (1 ms); the device idles through the preparation."""
    events = []
    for i in range(3):
        t = i * 10_000
        events += [X(f"ProfilerStep#{i + 1}", "user_annotation", t, 10_000),
                   X("aten::mm", "cpu_op", t + 8_500, 100, **{"External id": i + 1}), _launch(t + 8_510, 100 + i, i + 1),
                   _kernel("K", t + 8_600, 1_000, 100 + i)]
        if python:
            events += [X("infer.py(30): run", "python_function", t + 10, 9_980),
                       X("prep.py(12): normalize", "python_function", t + 100, 8_000)]
    return events


def test_idle_while_the_path_runs_python_is_the_host_class_finding_alone(tmp_path):
    """The device idles 80% of each step while Python prepares the input. device-idle could only say
    that the host ran 'no traced call' in its gaps (and to record stacks, which the trace has), beside
    critical-path's host class naming prep.py's normalize: one cause, two findings (h100_timesformer:
    224.10 ms of idle and 225.02 ms of host time). The host class is the finding; the idle's evidence
    says how much of it lies under the path's host time. Without Python in the trace, the host class's
    time is in no traced call but for the three operators' 0.30 ms: it says so, and to record stacks
    or sample the process (it said to compile and capture graphs, which do not touch such time, beside
    device-idle saying the host ran no traced call: HTA's trace_compare base, 222.43 ms of host time
    and 220.76 ms of idle, one cause); device-idle leaves its finding to it."""
    rep = _report(tmp_path / "py", _preprocessing_steps(python=True))
    assert not [x for x in rep.findings if x.rule_id == "device-idle"]
    (host,) = [x for x in rep.findings if x.rule_id == "critical-path" and x.evidence.values["class"] == "host"]
    assert "prep.py(12): normalize" in host.title
    idle = rep.summary["ranks"][0]["device_time"][0]["idle_ns"]
    assert idle >= 0.8 * 30_000 * US and host.impact_ns >= 0.8 * idle
    assert "in no traced call" not in host.recommendation
    bare = _report(tmp_path / "bare", _preprocessing_steps(python=False))
    assert not [x for x in bare.findings if x.rule_id == "device-idle"]
    (host,) = [x for x in bare.findings if x.rule_id == "critical-path" and x.evidence.values["class"] == "host"]
    assert host.evidence.values["untraced_ns"] == 3 * (10_000 - 100) * US  # each step but its operator's 0.10 ms
    assert host.recommendation.startswith("29.70 ms of this time is in no traced call: ")
    assert host.recommendation.endswith("Record with with_stack=True, or sample the process (py-spy), to see what it did.")
    assert "torch.compile" not in host.recommendation


def test_host_time_outside_the_python_the_trace_records_is_native_code_or_a_wait(tmp_path):
    """The same steps where the trace records Python calls, but only one short call a step: the rest of
    the host's time is in no traced call, not even a Python one. Stacks are recorded already; what
    is left is native code or a wait outside Python, which a sampler with native frames shows."""
    events = [e for e in _preprocessing_steps(python=False)]
    events += [X("infer.py(30): run", "python_function", i * 10_000 + 10, 50) for i in range(3)]
    rep = _report(tmp_path, events)
    assert not [x for x in rep.findings if x.rule_id == "device-idle"]
    (host,) = [x for x in rep.findings if x.rule_id == "critical-path" and x.evidence.values["class"] == "host"]
    assert host.evidence.values["untraced_ns"] == 3 * (10_000 - 100 - 50) * US
    assert host.recommendation.startswith("29.55 ms of this time is in no traced call, not even a Python one: the host was in "
                                          "native code or waiting outside Python")
    assert host.recommendation.endswith("Sample the process with its native frames (py-spy record --native) to see it.")


def test_a_bf16_elementwise_kernel_bounding_the_step_is_not_told_a_lower_precision(tmp_path):
    """One step where a memory-bound kernel dominates the path (the host waits for it): a bf16 elementwise kernel is told to
    fuse (it runs in bf16 already: there is no lower precision to move fewer bytes in; h100_timesformer's
    bf16 softmax was told 'a lower precision'); the same kernel in fp32 is told the lower precision too. One finding
    names it: the path's elementwise class, which it is all of (its hotspot leaves to it)."""
    def advice(sub, kernel):
        events = [X("ProfilerStep#1", "user_annotation", 0, 1000),
                  X("aten::mul", "cpu_op", 5, 10, **{"External id": 1}), _launch(7, 100, 1), _kernel(kernel, 20, 900, 100),
                  _launch(20, 101, None, dur=905, name="cudaDeviceSynchronize")]
        (f,) = [x for x in _report(tmp_path / sub, events).findings if x.location.kernel == kernel]
        assert f.rule_id == "critical-path" and f.impact_ns == 900 * US
        return f.recommendation
    bf16 = advice("bf16", "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<c10::BFloat16, c10::BFloat16, "
                          "c10::BFloat16, at::native::binary_internal::MulFunctor<float> > >(int)")
    assert bf16 == ("elementwise kernels bound the step: they move bytes and do little arithmetic; fuse them with torch.compile or "
                    "make fewer passes over the tensors (they run in bf16 already).")
    fp32 = advice("fp32", "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
                          "at::native::binary_internal::MulFunctor<float> > >(int)")
    assert fp32.endswith("fuse them with torch.compile or make fewer passes over the tensors, or move fewer bytes (a lower precision).")


def test_elementwise_kernels_most_of_whose_time_runs_bf16_are_not_told_a_lower_precision(tmp_path):
    """h100 Qwen1.5 chat's elementwise class: 80% of its time in kernels of bf16 operators, the rest
    launched outside any operator, of no type the trace shows. The class is told it runs in bf16
    mostly, not to move fewer bytes in a lower precision; where the kernels of no known type hold
    most of the time, the lower precision is still said."""
    bf16 = ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<c10::BFloat16, c10::BFloat16, "
            "c10::BFloat16, at::native::binary_internal::MulFunctor<float> > >(int)")
    unknown = "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor> >(int)"

    def advice(sub, bf16_us, unknown_us):
        events = [X("ProfilerStep#1", "user_annotation", 0, 1000),
                  X("aten::mul", "cpu_op", 5, 10, **{"External id": 1}), _launch(7, 100, 1), _kernel(bf16, 20, bf16_us, 100),
                  X("aten::add", "cpu_op", 16, 3, **{"External id": 2}), _launch(17, 101, 2),
                  _kernel(unknown, 20 + bf16_us, unknown_us, 101),
                  _launch(20, 102, None, dur=905, name="cudaDeviceSynchronize")]
        (f,) = [x for x in _report(tmp_path / sub, events).findings
                if x.rule_id == "critical-path" and x.evidence.values["class"] == "elementwise"]
        assert f.impact_ns == (bf16_us + unknown_us) * US
        return f.recommendation
    assert advice("most", 600, 300).endswith("make fewer passes over the tensors (most of them run in bf16 already).")
    assert advice("least", 300, 600).endswith("make fewer passes over the tensors, or move fewer bytes (a lower precision).")


def test_an_operator_whose_time_is_launches_is_left_to_the_paths_launch_finding(tmp_path):
    """HTA's MTIA training trace: AddmmBackward0 held 4,348.60 ms of the path, 3,680.42 ms of it the
    launches it made; it was a hotspot operator told 'lower precision, channels_last' beside the
    path's 'kernel launches' led by it. Here aten::heavy_launcher runs 100 µs per step, 80 of them in
    eight 10 µs launches of 2 µs kernels: one finding, the launches', which names it."""
    events, corr = [], 0
    for step in range(3):
        t0 = step * 120
        events += [X(f"ProfilerStep#{step + 1}", "user_annotation", t0, 120),
                   X("aten::heavy_launcher", "cpu_op", t0 + 5, 100, **{"External id": step + 1})]
        for i in range(8):
            corr += 1
            t = t0 + 10 + i * 12
            events += [_launch(t, corr, step + 1, dur=10), _kernel("k", t + 11, 2, corr)]
    report = _report(tmp_path, events)
    assert not [x for x in report.findings if x.title.startswith("Hotspot operator")]
    (launches,) = [x for x in report.findings if x.rule_id == "critical-path" and x.evidence.values["class"] == "launch"]
    assert launches.impact_ns == 3 * 8 * 10 * US and launches.location.op == "aten::heavy_launcher"


def _tiny_loop(big_kernel: bool) -> list[dict]:
    """One step: 300 aten::add of 10 µs, 2 µs apart from 0 µs on (3,598 µs of host time with the gaps),
    each launching a 1 µs kernel as it ends. With `big_kernel`, a 5,000 µs kernel launched first keeps
    the device busy past the host's loop, and a sync waits for it: the step is device-bound."""
    events = [X("ProfilerStep#1", "user_annotation", 0, 5100 if big_kernel else 3700)]
    corr = 0
    if big_kernel:
        corr += 1
        events += [_launch(0, corr, None), _kernel("big_kernel", 1, 5000, corr)]
    for i in range(300):
        t = 1 + i * 12 if big_kernel else i * 12
        corr += 1
        events += [X("aten::add", "cpu_op", t, 10, **{"External id": corr}), _launch(t + 8, corr, corr),
                   _kernel("add_kernel", (5001 if big_kernel else t + 10) + (i if big_kernel else 0), 1, corr)]
    if big_kernel:
        events.append(_launch(3610, 9999, None, dur=1700, name="cudaDeviceSynchronize"))
    return events


def test_tiny_operators_and_launches_cost_their_time_on_the_critical_path(tmp_path):
    """Tiny operators and their launches while the device works through a long kernel cost the step
    nothing: no finding (h100 Qwen1.5 chat, device-bound: 1,161 tiny operators of 14.80 ms of host time,
    1.06 ms of it on the path, were its second finding at 14.80 ms; the V100 ResNet-50's launches, 52.19 ms,
    13.45 ms on the path). The same loop with nothing else to run bounds the step: their host time is on
    the path, and the findings say so."""
    device_bound = _report(tmp_path / "busy", _tiny_loop(True))
    assert not [f for f in device_bound.findings if f.rule_id in ("tiny-ops", "launch-overhead")], \
        [f.title for f in device_bound.findings]
    host_bound = _report(tmp_path / "host", _tiny_loop(False)).findings
    (f,) = [f for f in host_bound if f.rule_id == "tiny-ops"]
    v = f.evidence.values
    assert v["overhead_ns"] == (300 * 10 + 299 * 2) * US and f.impact_ns == v["on_path_ns"] > 0.9 * v["overhead_ns"]
    assert f.title.startswith("300 tiny operators (300/step) cost 3.60 ms, ") and f.title.endswith(" of it on the critical path")
    (launches,) = [f for f in host_bound if f.rule_id == "launch-overhead"]
    assert launches.evidence.values["launch_ns"] == 300 * 1 * US and launches.impact_ns == launches.evidence.values["on_path_ns"] > 0
    assert launches.title.endswith(f"0.30 ms launching them, {launches.impact_ns / 1e6:.2f} ms of it on the critical path")


def test_an_operator_heading_the_paths_host_time_is_the_host_class_finding_alone(tmp_path):
    """Three host-bound steps, each one call of a compiled region that runs 800 µs on the host and
    launches a 20 µs kernel, beside 100 µs of other operators. xDiT SD3.5 on an MI300X read 'Hotspot
    operator: Torch-Compiled Region: 0/0 … 993.07 ms' beside the path's host time led by it (969.65 of
    1,107.28 ms): one cause in two findings, with two figures for the one operator. The host class is
    the finding, and names it; where the operator is less than half of the host time, its hotspot stays."""
    def report(sub, region_us, other_us):
        events, corr = [], 0
        for step in range(3):
            t0 = step * 1000
            corr += 1
            events += [X(f"ProfilerStep#{step + 1}", "user_annotation", t0, 990),
                       X("Torch-Compiled Region: 0/0", "cpu_op", t0 + 5, region_us, **{"External id": corr}),
                       _launch(t0 + 5 + region_us - 10, corr, corr, dur=5), _kernel("triton_poi_fused_add_0", t0 + 5 + region_us, 20, corr)]
            for i, name in enumerate(("aten::index_put_", "aten::add", "aten::mul", "aten::cat")):
                corr += 1
                events.append(X(name, "cpu_op", t0 + 30 + region_us + i * (other_us // 4), other_us // 4 - 2, **{"External id": corr}))
        return _report(tmp_path / sub, events)
    rep = report("heads", 800, 100)
    (host,) = [x for x in rep.findings if x.rule_id == "critical-path" and x.evidence.values["class"] == "host"]
    assert host.evidence.values["heaviest"][0]["op"] == "Torch-Compiled Region: 0/0"
    assert host.evidence.values["heaviest"][0]["charged_ns"] * 2 >= host.impact_ns
    assert not [x for x in rep.findings if x.title.startswith("Hotspot operator")], [x.title for x in rep.findings]
    rep = report("less", 400, 480)  # (the heaviest operator still, each other one 120 µs a step)
    (host,) = [x for x in rep.findings if x.rule_id == "critical-path" and x.evidence.values["class"] == "host"]
    assert [x for x in rep.findings if x.title.startswith("Hotspot operator: Torch-Compiled Region: 0/0")], \
        [x.title for x in rep.findings]


def _python_loop(stall_us: int) -> list[dict]:
    """Three steps of 200 aten::mul (20 µs of host time each, a 4 µs launch of a 2 µs kernel, 30 µs
    apart), then, with `stall_us`, one host call of that long with no kernel."""
    events, corr, t = [], 0, 0
    for step in range(3):
        t0, body = t, []
        for _ in range(200):
            corr += 1
            body += [X("aten::mul", "cpu_op", t + 2, 20, **{"External id": corr}), _launch(t + 15, corr, corr, dur=4),
                     _kernel("vectorized_elementwise_kernel", t + 20, 2, corr)]
            t += 30
        if stall_us:
            body.append(X("aten::index", "cpu_op", t, stall_us))
            t += stall_us
        events += [X(f"ProfilerStep#{step + 1}", "user_annotation", t0, t - t0)] + body
        t += 5
    return events


def test_idle_spread_over_a_host_bound_loop_is_the_paths_host_finding(tmp_path):
    """A host-bound loop whose device idles 93% of the time in 600 gaps of 28 µs: the time between its
    kernels all through, which the path's host class names with what the host ran (HTA's MTIA training
    trace: 'Device 9 idle 42.2% (5,634.54 ms)' spread over 22,268 gaps beside the path's launches and
    host time, its steps host-bound (100%): one cause, three findings). One stall of 8 ms a step is a
    few gaps that hold the idle: device-idle names them, beside the host class."""
    spread = _report(tmp_path / "spread", _python_loop(0)).findings
    assert not [f for f in spread if f.rule_id == "device-idle"], [f.title for f in spread]
    (host,) = [f for f in spread if f.rule_id == "critical-path" and f.evidence.values["class"] == "host"]
    assert host.evidence.values["bound"] == "host" and host.evidence.values["heaviest"][0]["op"] == "aten::mul"
    stalls = _report(tmp_path / "stalls", _python_loop(8000)).findings
    (idle,) = [f for f in stalls if f.rule_id == "device-idle"]
    assert idle.evidence.values["gaps_ns"] >= 3 * 8000 * US and "aten::index" in idle.recommendation
    assert [f for f in stalls if f.rule_id == "critical-path" and f.evidence.values["class"] == "host"]
