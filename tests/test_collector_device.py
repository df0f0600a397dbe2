"""Device events through the live converter, on a hand-built profiler result (no GPU needed).

This machine has no accelerator, so torch never produces kernels here. The converter reads
KinetoEvent and event-tree objects through a handful of methods; the fakes below answer those
methods the way torch does for a CUDA job, and the test checks the links a user relies on:

    host thread 77:   aten::mm (corr 10) 1000 ........ 1500      called from script.py:7
                        cudaLaunchKernel (corr 555, linked 10) 1100 .. 1150
    device 0 / stream 7:                   gemm (corr 555) 1300 ..... 1500
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import pyarrow.compute as pc
from torch._C._profiler import _EventType

from neuron_explorer.collectors import _live_convert
from neuron_explorer.collectors.build import RawRank, build_rank
from neuron_explorer.schema import ID_STRIDE

BASE = 1_700_000_000_000_000_000


@dataclass
class FakeKinetoEvent:
    category: str
    ev_name: str
    start: int
    dur: int
    device: str = "CPU"
    device_idx: int = -1
    resource: int = 77
    corr: int = 0
    linked: int = 0

    def activity_type(self): return self.category
    def name(self): return self.ev_name
    def start_ns(self): return BASE + self.start
    def duration_ns(self): return self.dur
    def device_type(self): return SimpleNamespace(name=self.device)
    def device_index(self): return self.device_idx
    def device_resource_id(self): return self.resource
    def start_thread_id(self): return 1
    def correlation_id(self): return self.corr
    def linked_correlation_id(self): return self.linked
    def shapes(self): return [[4, 4], [4, 4]]
    def dtypes(self): return ["float", "float"]
    def sequence_nr(self): return -1
    def fwd_thread_id(self): return 0
    def flops(self): return 128
    def flow_id(self): return 0


@dataclass
class FakeNode:
    tag: object
    name: str
    start: int
    end: int
    children: list = field(default_factory=list)
    caller: tuple | None = None
    correlation_id: int = 0
    start_tid: int = 1

    @property
    def start_time_ns(self): return BASE + self.start

    @property
    def end_time_ns(self): return BASE + self.end

    @property
    def extra_fields(self):
        file, line, func = self.caller
        return SimpleNamespace(caller=SimpleNamespace(file_name=file, line_number=line, function_name=func))


def test_kernels_link_to_their_launch_operator_and_source_line(tmp_path):
    script = tmp_path / "script.py"
    script.write_text("\n" * 10)
    op = FakeNode(_EventType.TorchOp, "aten::mm", 1000, 1500, correlation_id=10)
    call = FakeNode(_EventType.PyCCall, "<built-in method mm of Tensor object>", 990, 1510, [op], caller=(str(script), 7, "<module>"))
    root = FakeNode(_EventType.PyCall, f"{script}(1): <module>", 0, 2000, [call], caller=(str(script), 1, "<module>"))
    events = [
        FakeKinetoEvent("cpu_op", "aten::mm", 1000, 500, corr=10),
        FakeKinetoEvent("cuda_runtime", "cudaLaunchKernel", 1100, 50, corr=555, linked=10),
        FakeKinetoEvent("kernel", "gemm", 1300, 200, device="CUDA", device_idx=0, resource=7, corr=555, linked=10),
    ]
    results = SimpleNamespace(events=lambda: events, experimental_event_tree=lambda: [root])
    frames = _live_convert.FrameTable()
    cyc = _live_convert.convert_cycle(results, frames, pid=4242)
    built = build_rank(RawRank(0, cyc.events, cyc.flows, cyc.memory, _live_convert.empty_counters(), frames=frames.table()))
    tables = {k: (t.to_table() if hasattr(t, "to_table") else t) for k, t in built.tables.items()}
    ev = {r["name"]: r for r in tables["events"].to_pylist()}
    fr = {r["frame_id"]: r for r in tables["frames"].to_pylist()}

    mm, launch, gemm = ev["aten::mm"], ev["cudaLaunchKernel"], ev["gemm"]
    assert (gemm["kind"], gemm["device"], gemm["stream"], gemm["pid"], gemm["tid"]) == ("kernel", 0, 7, 0, 7)
    assert (mm["pid"], mm["tid"], launch["pid"], launch["tid"]) == (4242, 77, 4242, 77)
    assert gemm["launch_id"] == launch["event_id"]
    assert gemm["op_id"] == mm["event_id"] and launch["op_id"] == mm["event_id"]
    assert (fr[gemm["frame_id"]]["file"], fr[gemm["frame_id"]]["line"], fr[gemm["frame_id"]]["is_user"]) == (str(script), 7, True)
    assert launch["frame_id"] == mm["frame_id"] == gemm["frame_id"]
    assert mm["external_id"] == 10 and launch["correlation"] == 555 and gemm["correlation"] == 555
    assert gemm["ts_ns"] == BASE + 1300 and gemm["dur_ns"] == 200
    assert '"Input Dims":[[4, 4], [4, 4]]' in mm["args"] and '"flops":128' in mm["args"]
    # the root frame's "caller" (where the script was when recording began) is not a frame
    assert [(f["line"], f["parent_frame_id"]) for f in fr.values()] == [(7, None)]
    assert mm["event_id"] < ID_STRIDE
    assert pc.sum(pc.equal(tables["events"]["kind"], "python")).as_py() == 2
