"""Device events through both live converters, on a real torch ProfilerResult (no GPU needed).

The C++ converter (collectors/native) reads torch's own objects, so the duck-typed fakes of
test_collector_device.py cannot reach it. native_fixture/fake_cuda_results.cpp builds a real
`torch._C._autograd._ProfilerResult` from torch's C++ types, shaped the way torch shapes one
cycle of a CUDA job (same scenario as test_collector_device.py):

    host thread 77:   <script>(1): <module>  0 .................................... 2000
                        <built-in method mm>  990 ....................... 1510   called from script.py:7
                          aten::mm (corr 10)   1000 .................... 1500
                            cudaLaunchKernel (corr 555, linked 10) 1100 .. 1150
    device 0 / stream 7:                          gemm (corr 555, linked 10) 1300 ..... 1500
    cuda:0 allocator:  +64 bytes at 1020 (inside aten::mm), -64 bytes at 1700 (back in the script)

Both converters must give the same raw tables, and after build_rank the kernel must link to its
launch, its operator and the user's line. `make_busy` adds copies on a second device, a kernel
Kineto could not link, a name that is not UTF-8, a record_function range, a forward-backward flow
and operator inputs that are not tensors (see the fixture's comments).

The fixture is compiled with torch.utils.cpp_extension into the native converter's build
directory (about 15 s the first time).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from neuron_explorer.collectors import _live_convert, native
from neuron_explorer.collectors.build import RawRank, build_rank
from neuron_explorer.schema import ID_STRIDE

pytestmark = pytest.mark.slow  # tier: compiles a torch C++ extension

BASE = 1_700_000_000_000_000_000
FIXTURE_SOURCE = Path(__file__).with_name("native_fixture") / "fake_cuda_results.cpp"
HOST_PID, HOST_TID = 5150, 77  # the recording process and system thread, as Kineto reports them
PID = 4242  # the pid the collector writes on host events
CONVERTERS = ["python", "native"]


@pytest.fixture(scope="module")
def fake_cuda():
    """The compiled fixture (built once per source and torch version, like the converter)."""
    import torch
    import torch.utils.cpp_extension as ext

    key = hashlib.sha256(FIXTURE_SOURCE.read_bytes() + torch.__version__.encode()).hexdigest()[:16]
    name = f"nx_test_fake_cuda_{key}"
    out = native.build_dir() / name
    out.mkdir(parents=True, exist_ok=True)
    opts = native.compile_options()  # at -O0: test code whose speed does not matter; its compile is a sixth shorter than at -O2
    opts["extra_cflags"] = [*(f for f in opts["extra_cflags"] if not f.startswith("-O")), "-O0"]
    return ext.load(name=name, sources=[str(FIXTURE_SOURCE)], build_directory=str(out), verbose=False, **opts)


@pytest.fixture(scope="module")
def native_converter():
    # this test is about the C++ converter: it must be built, whatever the environment prefers
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NEURON_EXPLORER_NATIVE", "require")
        module = native.load()
    assert module is not None, "the native converter was not built (an earlier load in this process failed?)"
    return module


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "script.py"  # a real file, so its frames count as user code
    path.write_text("\n" * 10)
    return path


def _convert(which: str, results, native_converter):
    frames = _live_convert.FrameTable()
    cyc = _live_convert.convert_cycle(results, frames, pid=PID, native=native_converter if which == "native" else None)
    return cyc, frames


def _plain(table: pa.Table) -> pa.Table:
    """Dictionary columns as plain strings: the two converters may number dictionaries differently."""
    cols = [c.cast(pa.string()) if pa.types.is_dictionary(c.type) else c for c in table.columns]
    return pa.table(cols, names=table.column_names)


def _diff(a: pa.Table, b: pa.Table) -> str:
    if a.schema != b.schema:
        return f"schemas differ:\npython: {a.schema}\nnative: {b.schema}"
    if a.num_rows != b.num_rows:
        return f"row counts differ: python {a.num_rows}, native {b.num_rows}"
    return "\n".join(f"{name}: python {a[name].to_pylist()} != native {b[name].to_pylist()}"
                     for name in a.column_names if not a[name].equals(b[name]))


def test_fixture_is_a_real_cuda_shaped_profiler_result(fake_cuda, script):
    """What torch's own bindings read from the fixture: guards the scenario the other tests rely on."""
    from torch._C._autograd import _ProfilerResult
    from torch._C._profiler import _EventType

    results = fake_cuda.make(BASE, str(script), HOST_PID, HOST_TID)
    assert isinstance(results, _ProfilerResult)
    ev = {e.name(): e for e in results.events()}
    assert [e.activity_type() for e in results.events()] == ["cpu_op", "cpu_instant_event", "cuda_runtime", "kernel",
                                                             "cpu_instant_event"]
    mm, launch, gemm = ev["aten::mm"], ev["cudaLaunchKernel"], ev["gemm"]
    assert (gemm.device_type().name, gemm.device_index(), gemm.device_resource_id()) == ("CUDA", 0, 7)
    assert (launch.device_type().name, launch.device_resource_id(), mm.device_resource_id()) == ("CPU", HOST_TID, HOST_TID)
    assert (launch.correlation_id(), launch.linked_correlation_id(), gemm.correlation_id(), gemm.linked_correlation_id()) == (555, 10, 555, 10)
    assert (mm.correlation_id(), mm.shapes(), mm.dtypes(), mm.flops()) == (10, [[4, 4], [4, 4]], ["float", "float"], 128)
    (root,) = results.experimental_event_tree()
    call = root.children[0]
    assert (root.tag, call.tag, call.children[0].tag) == (_EventType.PyCall, _EventType.PyCCall, _EventType.TorchOp)
    caller = call.extra_fields.caller
    assert (caller.file_name, caller.line_number) == (str(script), 7)
    alloc = call.children[0].children[1].extra_fields
    assert (alloc.device.type, alloc.device.index, alloc.alloc_size) == ("cuda", 0, 64)


# fixture function -> (events rows: KinetoEvents other than allocations, plus Python calls;
# memory rows; flow rows), so that the comparison cannot pass on empty tables
SCENARIOS = {"make": (3 + 2, 2, 0), "make_busy": (11 + 2, 2, 1)}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_both_converters_give_the_same_tables(fake_cuda, native_converter, script, scenario):
    results = getattr(fake_cuda, scenario)(BASE, str(script), HOST_PID, HOST_TID)
    py_cyc, py_frames = _convert("python", results, native_converter)
    c_cyc, c_frames = _convert("native", results, native_converter)
    assert (py_cyc.events.num_rows, py_cyc.memory.num_rows, py_cyc.flows.num_rows) == SCENARIOS[scenario]
    for table in ("events", "memory", "flows"):
        a, b = _plain(getattr(py_cyc, table)), _plain(getattr(c_cyc, table))
        assert a.equals(b), f"{table}:\n{_diff(a, b)}"
    a, b = py_frames.table(), c_frames.table()
    assert a.equals(b), f"frames:\n{_diff(a, b)}"


def _built(which: str, results, native_converter) -> tuple[dict, dict, dict[str, pa.Table]]:
    """(events by name, frames by id, all tables) of the rank built from one converter's columns."""
    cyc, frames = _convert(which, results, native_converter)
    built = build_rank(RawRank(0, cyc.events, cyc.flows, cyc.memory, _live_convert.empty_counters(), frames=frames.table()))
    tables = {k: (t.to_table() if hasattr(t, "to_table") else t) for k, t in built.tables.items()}
    ev = {r["name"]: r for r in tables["events"].to_pylist()}
    fr = {r["frame_id"]: r for r in tables["frames"].to_pylist()}
    return ev, fr, tables


@pytest.mark.parametrize("which", CONVERTERS)
def test_kernels_link_to_their_launch_operator_and_source_line(fake_cuda, native_converter, script, which):
    ev, fr, tables = _built(which, fake_cuda.make(BASE, str(script), HOST_PID, HOST_TID), native_converter)

    mm, launch, gemm = ev["aten::mm"], ev["cudaLaunchKernel"], ev["gemm"]
    assert (gemm["kind"], gemm["device"], gemm["stream"], gemm["pid"], gemm["tid"]) == ("kernel", 0, 7, 0, 7)
    assert (mm["pid"], mm["tid"], launch["pid"], launch["tid"]) == (PID, HOST_TID, PID, HOST_TID)
    assert gemm["launch_id"] == launch["event_id"]
    assert gemm["op_id"] == mm["event_id"] and launch["op_id"] == mm["event_id"]
    gemm_frame = fr[gemm["frame_id"]]
    assert (gemm_frame["file"], gemm_frame["line"], gemm_frame["is_user"]) == (str(script), 7, True)
    assert launch["frame_id"] == mm["frame_id"] == gemm["frame_id"]
    assert mm["external_id"] == 10 and launch["correlation"] == 555 and gemm["correlation"] == 555
    assert (gemm["ts_ns"], gemm["dur_ns"], launch["ts_ns"], launch["dur_ns"]) == (BASE + 1300, 200, BASE + 1100, 50)
    assert '"Input Dims":[[4, 4], [4, 4]]' in mm["args"] and '"Input type":["float", "float"]' in mm["args"]
    assert '"flops":128' in mm["args"]
    # the root frame's "caller" (where the script was when recording began) is not a frame
    assert [(f["line"], f["parent_frame_id"]) for f in fr.values()] == [(7, None)]
    assert mm["event_id"] < ID_STRIDE
    python = tables["events"].filter(pc.equal(tables["events"]["kind"], "python"))
    assert sorted(python["name"].to_pylist()) == sorted([f"{script}(1): <module>", "<built-in method mm of Tensor object>"])
    assert set(python["tid"].to_pylist()) == {HOST_TID}  # the profiler's thread id mapped to the system one

    alloc, release = tables["memory"].to_pylist()
    assert (alloc["device_type"], alloc["device"], alloc["bytes"], alloc["total_allocated"]) == (1, 0, 64, 64)
    assert (alloc["pid"], alloc["tid"], alloc["ts_ns"], alloc["addr"]) == (PID, HOST_TID, BASE + 1020, 0x7F0000200000)
    assert alloc["op_id"] == mm["event_id"] and alloc["frame_id"] == mm["frame_id"]
    assert (release["bytes"], release["total_allocated"], release["op_id"]) == (-64, 0, None)


@pytest.mark.parametrize("which", CONVERTERS)
def test_copies_unlinked_kernels_and_undecodable_names(fake_cuda, native_converter, script, which):
    ev, fr, _ = _built(which, fake_cuda.make_busy(BASE, str(script), HOST_PID, HOST_TID), native_converter)
    mm, launch, copy = ev["aten::mm"], ev["cudaLaunchKernel"], ev["cudaMemcpyAsync"]
    kernel = ev[_live_convert.UNDECODABLE]  # "gemm_\xff\xfe": kept under a placeholder, still linked
    assert (kernel["kind"], kernel["device"], kernel["stream"], kernel["launch_id"], kernel["op_id"]) == \
        ("kernel", 0, 7, launch["event_id"], mm["event_id"])
    memcpy = ev["Memcpy HtoD (Pageable -> Device)"]
    assert (memcpy["kind"], memcpy["device"], memcpy["stream"], memcpy["pid"], memcpy["tid"]) == ("memcpy", 1, 13, 1, 13)
    assert memcpy["launch_id"] == copy["event_id"] and memcpy["op_id"] == mm["event_id"]
    assert (fr[memcpy["frame_id"]]["file"], fr[memcpy["frame_id"]]["line"]) == (str(script), 7)
    orphan = ev["orphan_kernel"]
    assert (orphan["kind"], orphan["device"], orphan["stream"], orphan["launch_id"], orphan["op_id"]) == ("kernel", 1, 3, None, None)
    driver, region = ev["cuDeviceSynchronize"], ev["## forward ##"]
    assert (driver["kind"], driver["pid"], driver["tid"], driver["op_id"]) == ("runtime", PID, HOST_TID, mm["event_id"])
    assert (region["kind"], region["pid"], region["tid"]) == ("user_annotation", PID, HOST_TID)
    assert '"Sequence number":3' in mm["args"]
    cat = ev["aten::cat"]
    assert '"Input Dims":[[], [], []],"Input type":["TensorList", "Scalar", ""]' in cat["args"]
    assert cat["parent_id"] == region["event_id"]
