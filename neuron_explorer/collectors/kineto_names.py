"""The names torch.profiler / Kineto give things, in one place.

Every spelling that Neuron Explorer matches against a trace lives here: event-name prefixes and
patterns, category spellings (old and new torch, CUDA, ROCm, XPU, MTIA, PrivateUse1), flow
categories, `[memory]` args, synchronisation kinds and c10 device-type numbers. The JSON importer,
both live converters and the analyzers that match names import them from here, so a new spelling
is added once. The C++ live converter (collectors/native/live_convert.cpp) keeps its own copies of
the few it needs; tests/test_import_structure.py (test_the_native_converter_spells_the_names_as_kineto_names)
checks that they equal these, and that no other module of the collectors spells one itself.

Must not: import anything but the standard library (every layer may import it).
"""

from __future__ import annotations

import re

# --- event names ---------------------------------------------------------------------------------
MODULE_PREFIX = "nn.Module: "
"""`nn.Module: Linear_0`: the range torch records around a module's forward (with_modules)."""
MEMORY_EVENT_NAME = "[memory]"
"""The allocator's instant events (profile_memory)."""
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
"""A profiler step range; group 1 is the step number. torch >= 1.11 files it under
`user_annotation`, torch 1.8-1.10 under `Operator`."""
PY_FRAME = re.compile(r"^(?P<file>.+)\((?P<line>\d{1,9})\): (?P<func>.*)$")
"""A `python_function` event's name: `file(line): function`. A line number of ten digits or more
(beyond frames.line, an int32) is no source location."""
EVALUATE_PREFIX = "autograd::engine::evaluate_function: "
"""The operator autograd runs for one backward node."""
BACKWARD_NODE = re.compile(r"^(?:torch::autograd::)?(?:[A-Za-z_][A-Za-z0-9_]*Backward[0-9]*s?|AccumulateGrad|CopySlices|GraphRoot)$")
"""An autograd node's operator (`ConvolutionBackward0`, `AddmmBackward`, `torch::autograd::AccumulateGrad`,
`torch::autograd::CopyBackwards`): what a trace without `evaluate_function` (torch 1.8-1.10)
records for one backward node."""
COMPILED_REGION_PREFIX = "Torch-Compiled Region"
"""The range around a call of a torch.compile'd function (Dynamo: `Torch-Compiled Region: <frame>/<n>`;
it holds the function's graphs, the eager code between them and the resume functions after a graph break)."""
AOT_GRAPH_CALL = "CompiledFunction"
"""AOT autograd's range around one forward run of a compiled graph (aot_eager, inductor)."""
INDUCTOR_GRAPH_CALL_PREFIX = "## Call CompiledFxGraph"
"""Inductor's range around one call of a compiled graph (`## Call CompiledFxGraph <key> ##`)."""
BACKWARD_CALL = re.compile(r"(run_backward|^torch/autograd/__init__\.py\(\d+\): backward$|^torch/_tensor\.py\(\d+\): backward$)")
"""A Python call that starts the backward pass."""
OPTIMIZER_STEP = re.compile(r"^Optimizer\.(step|zero_grad)#")
DATALOADER_NEXT = re.compile(r"^enumerate\(DataLoader\)#")
SEQUENCE_NUMBER = "Sequence number"
"""An operator's arg: the autograd sequence number its backward node carries too."""
SEQUENCE_NUMBER_KEY = f'"{SEQUENCE_NUMBER}"'
"""Its key in an event's args JSON text."""
SEQUENCE_NUMBER_ARG = rf'"{SEQUENCE_NUMBER}"\s*:\s*(?P<seq>-?\d+)'
"""The `Sequence number` arg in an event's args JSON text (a regex for pyarrow's extract_regex)."""

# --- categories ----------------------------------------------------------------------------------
PRIVATEUSE1_DRIVER_CATEGORY = "privateuse1_driver"
"""A PrivateUse1 plugin's device interaction per stream (TorchNeuron). torch reports it as a CPU
activity, yet it lies on a device stream (pid = device, tid = stream): both collectors file it as
device work, on its device."""
CATEGORY_KINDS = {
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "python_function": "python",
    "user_annotation": "user_annotation",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "runtime": "runtime",
    "mtia_runtime": "runtime",
    "privateuse1_runtime": "runtime",
    # TorchNeuron's device interaction, one track per device stream: device work (docs/METRICS.md)
    "privateuse1_driver": "kernel",
    "xpu_runtime": "runtime",
    "xpu_driver": "runtime",
    "hip_runtime": "runtime",
    "kernel": "kernel",
    "mtia_ccp_events": "kernel",
    "privateuse1_kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "cuda_sync": "sync",
    "gpu_user_annotation": "gpu_annotation",
}
"""Kineto category (lower-cased) → the run's `events.kind`; any other category is 'other'."""
CPU_OP_CATEGORY = "cpu_op"
USER_ANNOTATION_CATEGORY = "user_annotation"
PYTHON_FUNCTION_CATEGORY = "python_function"
CPU_INSTANT_CATEGORY = "cpu_instant_event"
"""The category of `[memory]` events."""

# --- synchronisation (cuda_sync events) ----------------------------------------------------------
SYNC_KIND_ARG = "cuda_sync_kind"
"""The arg that names a cuda_sync event's kind (older traces name the event itself by its kind)."""
STREAM_SYNC = "Stream Sync"
EVENT_SYNC = "Event Sync"
CONTEXT_SYNC = "Context Sync"
WAIT_ON_STREAM_ARG = "wait_on_stream"
"""An Event Sync's arg: the stream whose recorded event it waits for."""

# --- flows ---------------------------------------------------------------------------------------
LAUNCH_FLOW_CATEGORIES = ("ac2g", "async_gpu")
"""Flows from a runtime call to the device work it launched (`ac2g`; `async_gpu` in old traces)."""
LAUNCH_FLOW = "ac2g"
"""The category (and name) a live converter gives launch flows."""
OLD_LAUNCH_FLOW = ("async", "launch")
"""(category, name) of torch 1.8-1.10's launch flows (their device events carry the launch's
correlation too, which binds them)."""
LAUNCH_CALL = re.compile(r"launch|runFunction", re.IGNORECASE)
"""A runtime call that launches device work: cudaLaunchKernel, cuLaunchKernel(Ex),
hipLaunchKernel, hipExtModuleLaunchKernel, cudaGraphLaunch, ...; MTIA's runtime submits a kernel as
`runFunction - job_prep_and_submit_for_execution` (HTA's MTIA training trace: each of its 3,453 calls
linked to the kernel it ran; named nothing with 'launch', they were 'runtime calls other than launches')."""
GRAPH_LAUNCH_CALL = re.compile(r"GraphLaunch")
"""A runtime call that replays a captured graph: cudaGraphLaunch, hipGraphLaunch, cuGraphLaunch."""
CAPTURE_BEGIN_CALL = "StreamBeginCapture"
"""Part of the runtime call that starts a graph capture on a stream (cudaStreamBeginCapture, hipStreamBeginCapture)."""
CAPTURE_END_CALL = "StreamEndCapture"
"""Part of the runtime call that ends it (cudaStreamEndCapture, hipStreamEndCapture)."""
KERNEL_ARG = "kernel"
"""A launch call's arg naming the kernel it launched (ROCm traces record it, and so graph captures, whose kernels do not run)."""
FORWARD_BACKWARD_FLOW = "fwdbwd"
"""Flows from a forward operator to the backward node it built."""
FLOW_PHASES = ("s", "f", "t")
SLICE_PHASES = ("X", "i", "I")

# --- args ----------------------------------------------------------------------------------------
EXTERNAL_ID_ARG = "External id"
EXTERNAL_ID_ARG_OLD = "external id"
PYTHON_ID_ARG = "Python id"
PYTHON_PARENT_ID_ARG = "Python parent id"
INPUT_DIMS_ARG = "Input Dims"
INPUT_TYPE_ARG = "Input type"
FWD_THREAD_ARG = "Fwd thread id"
FLOPS_ARG = "flops"
"""An operator's args that the live collectors write as the JSON trace does (record_shapes, with_flops)."""
ARGS_NAMING_INPUTS = ('"Input', f'"{FLOPS_ARG}"')
"""Text in an operator's args that names its inputs ("Input Dims", "Input type", ...) or its flops: a
trace recorded with shapes or flops (the build's `op_args_named`, utilisation's args_named)."""
MEMORY_ARGS = {"addr": "Addr", "bytes": "Bytes", "total_allocated": "Total Allocated",
               "total_reserved": "Total Reserved", "device_type": "Device Type", "device": "Device Id"}
"""raw memory column → the `[memory]` event's arg."""

# --- devices -------------------------------------------------------------------------------------
C10_DEVICE_TYPE = {"cpu": 0, "cuda": 1, "mkldnn": 2, "hip": 6, "xla": 9, "xpu": 12, "mps": 13, "meta": 14,
                   "hpu": 15, "lazy": 17, "ipu": 18, "mtia": 19}
"""c10::DeviceType values, as the JSON trace's `[memory]` events write them under "Device Type"."""
C10_PRIVATEUSE1 = 20


def launched_before_trace(correlation, has_correlation, ts, candidates, runtime):
    """Per row (arrays in, bool array out; no import needed): a device event of `candidates` (those
    with no recorded launch) launched before the trace's host side began recording. Kineto keeps the
    device work queued before its host side records. Correlation ids count up through a process, so
    such work with an id (`has_correlation`) has one below every runtime call's; work cannot start
    before its launch, so work that starts (`ts`) before the first runtime call does was launched
    earlier, id or not (mtia_inference: 305 of its 322 device events with no launch start in the
    100 ms before its first runtime call, with no correlation id). `runtime`: the rows of runtime
    calls. The importer counts it (data_quality.device_launched_before_trace) and the critical path
    lets it follow its stream (analyzers/_path_index.py F_EARLY)."""
    if not runtime.any():
        return candidates & False
    ids = correlation[runtime & has_correlation]
    by_id = has_correlation & (correlation < ids.min()) if len(ids) else has_correlation & False
    return candidates & (by_id | (ts < ts[runtime].min()))


def kind_of_category(category: str) -> str:
    """The normalised kind of a Kineto category (case-insensitive); unknown ones are 'other'."""
    return CATEGORY_KINDS.get(category.lower(), "other")
