"""Peak dense throughput and memory bandwidth of common accelerators, matched from device names.

Every figure is the vendor's published dense (not sparse) peak for the product named in `source`;
TFLOP/s per data type, GB/s of device memory. A device whose name matches no entry, and every CPU,
is reported as unknown: never guessed. Users override or add peaks with `--peak-tflops` /
`--peak-gbps`, or a JSON file (`--peaks FILE`: a list of entries shaped like PEAKS).

Next to the peaks, ARCHS is the one table of what each architecture's matrix units support (fp16,
bf16, TF32, FP8, ...), how a trace reveals it (device name, compute capability, kernel names) and
the lower-precision advice that fits it (`precision_advice`): fp16 autocast with GradScaler on a
V100, bf16 autocast or TF32 on an A100 and later (bf16 alone for kernels whose names say they run
TF32 already), FP8 where the device has it. Every Peak names
its Arch. `detect` picks the architecture from what a trace records (docs/METRICS.md "Device").

Must not: read runs (metrics and rules call `match` and `detect` with what they read).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError


@dataclass(frozen=True)
class Peak:
    """One device model: dense TFLOP/s per dtype ('fp64', 'fp32', 'tf32', 'bf16', 'fp16', 'fp8'),
    memory bandwidth in GB/s, and where the figures come from."""

    name: str
    pattern: str  # regexp, case-insensitive, searched in the device name the trace gives
    tflops: dict = field(default_factory=dict)
    gbps: float | None = None
    source: str = ""
    arch: str = ""  # the name of its ARCHS entry ("" for user-given peaks: arch_of finds it by name)

    def flops_per_s(self, dtype: str | None) -> float | None:
        """Peak FLOP/s for a dtype; fp32 work is compared with the fp32 (not TF32) peak."""
        t = self.tflops.get(dtype or "") if dtype else None
        return t * 1e12 if t else None

    def to_dict(self) -> dict:
        return {"name": self.name, "tflops": dict(self.tflops), "gbps": self.gbps, "source": self.source}


@dataclass(frozen=True)
class Arch:
    """One accelerator architecture: the dtypes its matrix units run faster than fp32, and how a
    trace shows it. `compute`: (major, minor) as deviceProperties give them (NVIDIA compute
    capability; ROCm's gfx version), valid only for `vendor`'s devices; `kernels`: a regexp
    (case-insensitive) that only kernels built for this architecture match."""

    name: str
    vendor: str  # "nvidia", "amd", "aws", "meta"
    matrix_dtypes: tuple  # faster than fp32 on its matrix units: "fp16", "bf16", "tf32", "fp8", "fp4"
    pattern: str  # regexp, case-insensitive, searched in the device name
    compute: tuple = ()
    kernels: str = ""
    autocast_device: str = "cuda"  # torch.autocast(device_type=...)

    def has(self, dtype: str) -> bool:
        return dtype in self.matrix_dtypes

    def to_dict(self) -> dict:
        return {"name": self.name, "vendor": self.vendor, "matrix_dtypes": list(self.matrix_dtypes)}


ARCHS: tuple[Arch, ...] = (
    Arch("NVIDIA Volta (sm70: V100)", "nvidia", ("fp16",), r"V100|TITAN V\b", ((7, 0), (7, 2)), r"(^|[^a-z0-9])(sm70_|volta_|cutlass_70)"),
    Arch("NVIDIA Turing (sm75: T4, RTX 20)", "nvidia", ("fp16",), r"\bT4\b|RTX 20\d0|TITAN RTX|Quadro RTX", ((7, 5),),
         r"(^|[^a-z0-9])(sm75_|turing_|cutlass_75)"),
    Arch("NVIDIA Ampere (sm80: A100, A30)", "nvidia", ("tf32", "bf16", "fp16"), r"A100|A800|\bA30\b", ((8, 0),),
         r"(^|[^a-z0-9])(sm80_|cutlass_80|ampere_)"),
    Arch("NVIDIA Ampere (sm86: A10, A40, RTX 30)", "nvidia", ("tf32", "bf16", "fp16"), r"\bA10G?\b|\bA40\b|RTX 30\d0|RTX A\d000", ((8, 6), (8, 7)),
         r"(^|[^a-z0-9])(sm86_|cutlass_86)"),
    Arch("NVIDIA Ada (sm89: L4, L40)", "nvidia", ("tf32", "bf16", "fp16", "fp8"), r"\bL4\b|L40|RTX 40\d0|RTX \d000 Ada", ((8, 9),),
         r"(^|[^a-z0-9])sm89_"),
    Arch("NVIDIA Hopper (sm90: H100, H200)", "nvidia", ("tf32", "bf16", "fp16", "fp8"), r"H100|H200|H800|GH200", ((9, 0),),
         r"(^|[^a-z0-9])(sm90a?_|cutlass3x_sm90|hopper_)"),
    Arch("NVIDIA Blackwell (sm100: B200)", "nvidia", ("tf32", "bf16", "fp16", "fp8", "fp4"), r"B200|B100|GB200", ((10, 0),),
         r"(^|[^a-z0-9])(sm100a?_|cutlass3x_sm100)"),
    Arch("AMD CDNA2 (gfx90a: MI210, MI250X)", "amd", ("bf16", "fp16"), r"MI2[1-5]0", ((9, 0),), r"(ISA90a|gfx90a)"),
    Arch("AMD CDNA3 (gfx942: MI300X)", "amd", ("tf32", "bf16", "fp16", "fp8"), r"MI30\dX?|MI325", ((9, 4),), r"(ISA942|gfx942)"),
    # TorchNeuron, the PrivateUse1 backend whose device is named 'neuron', runs on Trainium2 and later: its autocast device is
    # 'neuron'. Trainium (trn1) runs PyTorch through torch-neuronx (XLA) only.
    Arch("AWS Trainium2", "aws", ("tf32", "bf16", "fp16", "fp8"), r"trainium\s*2|trn2", autocast_device="neuron"),
    Arch("AWS Trainium (trn1)", "aws", ("tf32", "bf16", "fp16", "fp8"), r"trainium|trn1", autocast_device="xla"),
    Arch("Meta MTIA", "meta", ("bf16", "fp16"), r"MTIA|ARTEMIS", autocast_device="mtia"),
)
"""A kernel name shows the architecture it was built for (`cutlass_70`: sm70), the oldest it runs on:
a Turing GPU runs sm70 builds as well, with the same matrix dtypes (fp16).
Matrix-unit dtypes from the vendors' architecture documents (NVIDIA Volta/Turing: fp16 Tensor
Cores only; Ampere: TF32 and bf16; Ada, Hopper: FP8; Blackwell: FP4; AMD CDNA2: fp16/bf16 matrix
cores, no TF32 or FP8; CDNA3: XF32, FP8; AWS Trainium and Trainium2: cFP8/bf16/fp16/TF32 (the NeuronCore-v2 and
NeuronCore-v3 Tensor Engines, AWS Neuron documentation); MTIA: fp16/bf16)."""


_ARCH = {a.name: a for a in ARCHS}


def _named(prefix: str) -> str:
    (name,) = [a.name for a in ARCHS if a.name.startswith(prefix)]
    return name


_VOLTA, _AMPERE, _HOPPER, _BLACKWELL = map(_named, ("NVIDIA Volta", "NVIDIA Ampere (sm80", "NVIDIA Hopper", "NVIDIA Blackwell"))
_CDNA2, _CDNA3, _TRN2, _TRN1 = map(_named, ("AMD CDNA2", "AMD CDNA3", "AWS Trainium2", "AWS Trainium ("))

_NV = "NVIDIA data sheet"
_AMD = "AMD Instinct data sheet"
_AWS = "AWS Neuron documentation"
PEAKS: tuple[Peak, ...] = (
    Peak("NVIDIA H200 SXM", r"H200", {"fp64": 34, "fp32": 67, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}, 4800,
         f"{_NV}: H200 Tensor Core GPU (SXM), dense", arch=_HOPPER),
    Peak("NVIDIA H100 PCIe", r"H100.*PCIe", {"fp64": 26, "fp32": 51, "tf32": 378, "bf16": 756, "fp16": 756, "fp8": 1513}, 2000,
         f"{_NV}: H100 Tensor Core GPU (PCIe), dense", arch=_HOPPER),
    Peak("NVIDIA H100 SXM", r"H100", {"fp64": 34, "fp32": 67, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}, 3350,
         f"{_NV}: H100 Tensor Core GPU (SXM), dense", arch=_HOPPER),
    Peak("NVIDIA B200 (HGX)", r"B200", {"fp64": 40, "fp32": 80, "tf32": 1100, "bf16": 2250, "fp16": 2250, "fp8": 4500}, 8000,
         f"{_NV}: HGX B200 (1,000 W), dense", arch=_BLACKWELL),
    Peak("NVIDIA A100 80GB", r"A100.*80\s*GB", {"fp64": 9.7, "fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312}, 2039,
         f"{_NV}: A100 Tensor Core GPU, 80 GB SXM", arch=_AMPERE),
    Peak("NVIDIA A100", r"A100", {"fp64": 9.7, "fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312}, 1555,
         f"{_NV}: A100 Tensor Core GPU, 40 GB (the lower bandwidth where the name does not say 80 GB)", arch=_AMPERE),
    Peak("NVIDIA V100 PCIe", r"V100.*PCIe", {"fp64": 7, "fp32": 14, "fp16": 112}, 900, f"{_NV}: Tesla V100 (PCIe)", arch=_VOLTA),
    Peak("NVIDIA V100", r"V100", {"fp64": 7.8, "fp32": 15.7, "fp16": 125}, 900, f"{_NV}: Tesla V100 (SXM2)", arch=_VOLTA),
    Peak("AMD Instinct MI300X", r"MI300X", {"fp64": 81.7, "fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9},
         5300, f"{_AMD}: MI300X, dense", arch=_CDNA3),
    Peak("AMD Instinct MI250X", r"MI250X", {"fp64": 95.7, "fp32": 95.7, "bf16": 383, "fp16": 383}, 3276.8,
         f"{_AMD}: MI250X (matrix peaks)", arch=_CDNA2),
    Peak("AMD Instinct MI210", r"MI210", {"fp64": 45.3, "fp32": 45.3, "bf16": 181, "fp16": 181}, 1638.4,
         f"{_AMD}: MI210 (matrix peaks)", arch=_CDNA2),
    # Per chip, dense, as "Trainium2 chip components" gives them: 1,299 FP8, 667 BF16/FP16/TF32, 181 FP32 TFLOPS; 2.9 TB/sec
    # of device memory bandwidth. https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-hardware/trainium2.html
    # No fp64 figure is published: left out.
    Peak("AWS Trainium2", r"trainium\s*2|trn2", {"fp32": 181, "tf32": 667, "bf16": 667, "fp16": 667, "fp8": 1299}, 2900,
         f"{_AWS}: Trainium2 architecture (per chip, dense)", arch=_TRN2),
    # Per chip, as "Trainium Architecture" gives them: 190 FP16/BF16/cFP8/TF32 TFLOPS, 47.5 FP32 TFLOPS; 820 GB/sec of
    # device memory bandwidth (the v2.9.1 page says GB/sec, the current one GiB/sec; the table keeps the number AWS prints).
    # https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/arch/neuron-hardware/trainium.html
    # (the Trainium2 page's comparison table rounds them to 191 and 48). No fp64 figure is published: left out.
    Peak("AWS Trainium", r"trainium|trn1", {"fp32": 47.5, "tf32": 190, "bf16": 190, "fp16": 190, "fp8": 190}, 820,
         f"{_AWS}: Trainium architecture (per chip)", arch=_TRN1),
)


def match(device_name: str | None, peaks: tuple[Peak, ...] = PEAKS) -> Peak | None:
    """The first entry whose pattern the device name contains (case-insensitive), else None."""
    if not device_name:
        return None
    for p in peaks:
        if re.search(p.pattern, device_name, re.IGNORECASE):
            return p
    return None


def override(base: Peak | None, *, tflops: float | None = None, gbps: float | None = None, dtype: str | None = None) -> Peak | None:
    """`base` with the user's figures: --peak-tflops applies to `dtype` (every dtype when None)."""
    if tflops is None and gbps is None:
        return base
    if tflops is not None and not (tflops > 0 and tflops != float("inf")):
        raise InputError("--peak-tflops", "must be a positive number of TFLOP/s")
    if gbps is not None and not (gbps > 0 and gbps != float("inf")):
        raise InputError("--peak-gbps", "must be a positive number of GB/s")
    figures = dict(base.tflops) if base else {}
    if tflops is not None:
        for d in ([dtype] if dtype else ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")):
            figures[d] = tflops
    return Peak(name=(base.name if base else "user-given peak"), pattern="", tflops=figures,
                gbps=gbps if gbps is not None else (base.gbps if base else None),
                source="given on the command line" + (f" (else {base.source})" if base else ""), arch=base.arch if base else "")


def load_file(path: Path | str) -> tuple[Peak, ...]:
    """Entries from a JSON file: [{"name", "pattern", "tflops": {dtype: TFLOP/s}, "gbps", "source"}]; they are
    matched before the built-in table."""
    p = Path(path)
    try:
        rows = json.loads(p.read_text())
        extra = tuple(Peak(name=str(r["name"]), pattern=str(r.get("pattern") or re.escape(str(r["name"]))),
                           tflops={str(k): float(v) for k, v in (r.get("tflops") or {}).items()},
                           gbps=float(r["gbps"]) if r.get("gbps") is not None else None,
                           source=str(r.get("source") or f"from {p.name}")) for r in rows)
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        raise InputError(p, f"not a peaks file ({type(e).__name__}: {e}); expected a JSON list of "
                            '{"name", "pattern", "tflops": {"bf16": ...}, "gbps", "source"}') from None
    return extra + PEAKS


# ---- architectures: detection and advice ---------------------------------------------------------

@dataclass(frozen=True)
class Detected:
    """The architecture a rank ran on and how the trace shows it (`how`, in words), or arch None."""

    arch: Arch | None
    how: str

    def to_dict(self) -> dict:
        return {"arch": self.arch.name if self.arch else None, "matrix_dtypes": list(self.arch.matrix_dtypes) if self.arch else None,
                "how": self.how}


def _vendor(props: dict) -> str | None:
    name = str(props.get("name") or "")
    if re.search(r"AMD|Radeon|Instinct", name, re.IGNORECASE) or props.get("warpSize") == 64:
        return "amd"
    if re.search(r"NVIDIA|Tesla|GeForce|Quadro", name, re.IGNORECASE) or props.get("warpSize") == 32:
        return "nvidia"
    return None


def arch_named(device_name: str | None) -> Arch | None:
    """The architecture whose name pattern the device name contains (case-insensitive), else None."""
    if not device_name:
        return None
    return next((a for a in ARCHS if re.search(a.pattern, device_name, re.IGNORECASE)), None)


def arch_of(peak: Peak | None, device_name: str | None = None) -> Arch | None:
    """A peak's architecture (its `arch`, else found from its or the device's name)."""
    if peak is not None and peak.arch in _ARCH:
        return _ARCH[peak.arch]
    return arch_named(device_name) or (arch_named(peak.name) if peak is not None else None)


TORCHNEURON_DEVICE = "neuron"
"""The name TorchNeuron, AWS's native PyTorch backend, registers its PrivateUse1 device under
(`.to('neuron')`, `torch.neuron`); it runs on Trainium2 and Trainium3 (AWS Neuron documentation,
"What is TorchNeuron?"). A device of that name has Trainium2's matrix dtypes (Trainium3's are a
superset) but no peak: the name does not say which chip."""


def is_torchneuron_device(device_name: str | None, props: list[dict] | None = None) -> bool:
    """The device is TorchNeuron's: named `neuron` (`neuron 0`, `neuron:0`), or deviceProperties of
    that type (the live collector writes each backend's properties with its `type`)."""
    if device_name and re.fullmatch(rf"{TORCHNEURON_DEVICE}(\s*:?\s*\d+)?", device_name.strip(), re.IGNORECASE):
        return True
    return any(str(p.get("type") or "").lower() == TORCHNEURON_DEVICE for p in props or [] if isinstance(p, dict))


@functools.lru_cache(maxsize=65536)
def _kernel_arch(name: str) -> Arch | None:
    """The first architecture whose kernel-name pattern the kernel name contains (case-insensitive),
    remembered per name (every rank of a job asks about the same names)."""
    return next((a for a in ARCHS if a.kernels and re.search(a.kernels, name, re.IGNORECASE)), None)


RUNTIME_CATEGORY_ARCH = {"mtia_": "Meta MTIA"}
"""Kineto categories named after the one backend that records them (`mtia_runtime`, `mtia_ccp_events`:
Meta's MTIA), by prefix: they name the device's vendor where the trace names no device. (`cuda_runtime`
is NVIDIA's and AMD's both: ROCm records HIP under CUDA's names.)"""


def detect(device_name: str | None, props: list[dict] | None = None, kernel_counts: dict | None = None,
           categories=None) -> Detected:
    """The architecture from, in this order: the device name the trace gives; TorchNeuron's
    PrivateUse1 device (`is_torchneuron_device`: Trainium2's architecture); the compute
    capability in its deviceProperties (for the vendor they show: ROCm reports gfx versions in the
    same fields); a category only one backend records (`categories`: the trace's category names,
    RUNTIME_CATEGORY_ARCH: HTA's MTIA training trace has no deviceProperties, and its device was
    told CUDA graphs); the names of its kernels (the architecture most kernels name, e.g. `cutlass_80`,
    `sm90_`, `volta_`, `ISA942`). `kernel_counts`: {kernel name: count}, only the names that match
    some ARCHS kernel pattern are needed (`KERNELS_SQL` selects them)."""
    a = arch_named(device_name)
    if a is not None:
        return Detected(a, f"device name {device_name!r} in the trace")
    if is_torchneuron_device(device_name, props):
        return Detected(_ARCH[_TRN2], f"TorchNeuron's PrivateUse1 device {TORCHNEURON_DEVICE!r} in the trace (TorchNeuron runs on "
                                      "Trainium2 and later; the trace does not say which chip, so no peak)")
    for p in props or []:
        cc = (p.get("computeMajor"), p.get("computeMinor"))
        vendor = _vendor(p)
        for a in ARCHS:
            if cc in a.compute and vendor == a.vendor:
                return Detected(a, f"compute capability {cc[0]}.{cc[1]} of {p.get('name') or 'the device'} in deviceProperties")
    for c in sorted(str(c) for c in categories or ()):
        arch = next((_ARCH[a] for prefix, a in RUNTIME_CATEGORY_ARCH.items() if c.lower().startswith(prefix)), None)
        if arch is not None:
            return Detected(arch, f"the trace's {c!r} events (only that backend records them); the trace does not name the device")
    votes: dict[str, int] = {}
    sample: dict[str, str] = {}
    for name, n in (kernel_counts or {}).items():
        a = _kernel_arch(name or "")
        if a is not None:
            votes[a.name] = votes.get(a.name, 0) + int(n)
            sample.setdefault(a.name, name)
    if votes:
        best = max(votes, key=lambda k: (votes[k], k))
        short = sample[best] if len(sample[best]) <= 60 else sample[best][:57] + "..."
        n = votes[best]
        return Detected(_ARCH[best], f"kernel names ({n} kernel{'s' if n != 1 else ''} built for it, e.g. {short!r}); "
                                     "the trace does not name the device")
    if device_name:
        return Detected(None, f"device {device_name!r} is not in the architecture table")
    return Detected(None, "the trace names no device, and no kernel name shows its architecture")


KERNELS_PATTERN = "(?i)(" + "|".join(a.kernels for a in ARCHS if a.kernels) + ")"
"""A kernel name that shows the architecture it was built for (any ARCHS kernel pattern; RE2 and Python)."""


ENGINE_GRAPHS = {
    "vLLM": ("which vLLM captures itself unless it runs eager: enforce_eager=True (--enforce-eager) turns them off, "
             "and compilation_config's cudagraph_mode and cudagraph_capture_sizes choose which batches replay one",
             "which vLLM replays here already: what launches kernels one by one is what its graphs leave out, batches "
             "larger than its capture sizes (compilation_config's cudagraph_capture_sizes) or steps its cudagraph_mode "
             "runs eager"),
    "SGLang": ("which SGLang captures itself for decode batches up to --cuda-graph-max-bs unless --disable-cuda-graph "
               "turns them off",
               "which SGLang replays here already for decode: what launches kernels one by one is what its graphs "
               "leave out, such as prefill and batches above --cuda-graph-max-bs"),
}
"""How a serving engine (vocab.SERVING_ENGINES) is told to replay graphs: its own switches (vLLM's
engine arguments and `vllm serve` flags; SGLang's server arguments), since its model runner, not the
user's code, captures them. (Where the rank replays none, where it replays some.)"""


ENGINE_COMPILE = {"vLLM": "vLLM's compilation_config", "SGLang": "SGLang's --enable-torch-compile"}
"""Where a serving engine (vocab.SERVING_ENGINES) is told to torch.compile its model: it compiles the
model itself, so the switch is its, not a torch.compile call in the user's code."""


def compile_advice(engine: str | None = None) -> str:
    """'torch.compile', with the serving engine's own switch for it (ENGINE_COMPILE) where it runs one."""
    return f"torch.compile ({ENGINE_COMPILE[engine]})" if engine in ENGINE_COMPILE else "torch.compile"


def graph_advice(device_name: str | None, props: list[dict] | None = None, arch: Arch | None = None,
                 engine: str | None = None, replays: bool = False) -> str:
    """How to launch fewer, larger device programs, in the device's own terms: CUDA graphs on NVIDIA
    (and where the device is not known), HIP graphs on AMD (the same torch.cuda.graph API); on AWS Trainium (TorchNeuron's `neuron` device, or a
    device named Trainium) torch.compile, whose compiled region the Neuron compiler runs as one
    device program — CUDA graphs do not exist there; on Meta's MTIA torch.compile, which fuses the
    kernels (CUDA graphs are NVIDIA's and AMD's). `arch`: the rank's detected architecture, where the
    name does not say it (`detect`). `engine`: the serving engine the rank runs (vocab.SERVING_ENGINES):
    its graphs are its own switches' (ENGINE_GRAPHS), not torch.cuda.graph around its model runner;
    `replays`: the rank replays graphs already (metrics.graph_replays), which the engine's words say."""
    arch = arch_named(device_name) or arch
    if is_torchneuron_device(device_name, props) or (arch is not None and arch.vendor == "aws"):
        return "torch.compile (the Neuron compiler runs each compiled region as one device program)"
    if arch is not None and arch.vendor == "meta":
        return "torch.compile (it fuses kernels into fewer, larger ones)"
    kind = "HIP" if arch is not None and arch.vendor == "amd" else "CUDA"
    if engine in ENGINE_GRAPHS:
        return f"{kind} graphs ({ENGINE_GRAPHS[engine][1 if replays else 0]})"
    if kind == "HIP":  # (PyTorch's API is torch.cuda's on ROCm too)
        return "HIP graphs (torch.cuda.graph, which ROCm runs as HIP graphs, or torch.compile(mode='reduce-overhead'))"
    return "CUDA graphs (torch.cuda.graph, or torch.compile(mode='reduce-overhead'))"


SYSTEM_PROFILERS = {"nvidia": "Nsight Systems", "amd": "rocprof", "aws": "the Neuron profiler (neuron-profile)",
                    "meta": "the device vendor's profiler"}
"""Each vendor's system profiler: it shows what a device ran that the PyTorch trace does not hold
(another process's work, a graph's nodes, events the profiler dropped)."""


def profiler_advice(device_name: str | None, props: list[dict] | None = None, arch: Arch | None = None) -> str:
    """The profiler to see what held a device beyond the trace, in the device's own terms
    (SYSTEM_PROFILERS; TorchNeuron's `neuron` device is Trainium's); both NVIDIA's and AMD's where the
    vendor is unknown. `arch`: as graph_advice's."""
    arch = arch_named(device_name) or arch
    vendor = "aws" if is_torchneuron_device(device_name, props) else arch.vendor if arch is not None else ""
    return SYSTEM_PROFILERS.get(vendor, "Nsight Systems or rocprof")


MATRIX_UNITS = {
    "nvidia": ("Tensor Cores", "M, N and K (and channels) in multiples of 8 for fp16/bf16, 16 for fp8/int8"),
    "amd": ("matrix cores (MFMA)", "M, N and K in multiples of 16, the width of the MFMA instructions' tiles"),
    "aws": ("Tensor Engine", "M, N and K in multiples of 128, the size of the Tensor Engine's systolic array"),
}
"""Each vendor's matrix units in its own words, and the sizes they run at full speed (NVIDIA's Matrix
Multiplication Background guide; AMD's CDNA instruction set; AWS Neuron's NKI architecture guide).
A vendor not here (Meta's MTIA, an unknown device) gets `matrix_units`' generic words."""


CONV_LIBRARY = {"nvidia": "cuDNN", "amd": "MIOpen"}
"""The convolution library of each vendor whose convolutions torch runs through one."""


def conv_library(arch: Arch | None) -> str:
    """The library that runs the device's convolutions, in its vendor's name; both where the vendor is unknown."""
    return CONV_LIBRARY.get(arch.vendor if arch is not None else "", "cuDNN / MIOpen")


def matrix_units(arch: Arch | None) -> tuple[str, str]:
    """(what the device's matrix units are called, the sizes they run fastest at) for `arch`'s
    vendor, else generic words that promise no tile size."""
    if arch is not None and arch.vendor in MATRIX_UNITS:
        return MATRIX_UNITS[arch.vendor]
    return "matrix units", "M, N and K padded to a multiple of the matrix units' tile"


TUNED_GEMM = ("a kernel better tuned for its shapes (for cuBLAS/hipBLASLt GEMMs PyTorch's TunableOp, "
              "PYTORCH_TUNABLEOP_ENABLED=1; for Triton kernels their autotune configs; torch.compile(mode='max-autotune')) "
              "and fewer, larger products")
"""What is left for matrix work that runs in 16 bits or fewer already, at full-speed sizes."""


def matrix_sizes_advice(arch: Arch | None) -> str:
    """'shapes that run at full speed on the {units}: {sizes}' in the device's terms (matrix_units):
    the hotspot kernel's and the critical path's GEMM class's words alike (the class said 'multiples
    of 8 (16 for fp8)' on every device: AMD's MFMA tiles want 16, Trainium's Tensor Engine 128)."""
    units, sizes = matrix_units(arch)
    return f"shapes that run at full speed on the {units}: {sizes}"


def precision_advice(arch: Arch | None, *, tf32_already: bool = False, not_tf32: str = "") -> str:
    """What to run fp32 matrix work in, on this architecture: fp16 autocast with GradScaler where
    the matrix units have no bf16 (V100, T4), bf16 autocast or TF32 where they do (A100 and later,
    MI200 without TF32), FP8 where the device has it; generic advice for an unknown device.
    `tf32_already`: the kernels' names say the Tensor Cores run them as TF32 already
    (vocab.kernel_runs_tf32), so TF32 is not advised for them; `not_tf32`: those among them that
    run plain fp32 (their names and times, in words), the only ones TF32 is then advised for."""
    ran = ("they already run TF32 on the Tensor Cores (their kernel names say so: fp32 data on Tensor Core kernels), "
           "so allowing TF32 changes nothing for them")
    if not_tf32:
        ran = ("the kernels whose names say TF32 already run it on the Tensor Cores; allow TF32 for those that run plain "
               f"fp32 ({not_tf32}: torch.set_float32_matmul_precision('high'), torch.backends.cudnn.allow_tf32 = True)")
    if arch is None:
        text = ("run them in lower precision on the matrix units: bf16 autocast (torch.autocast(device_type='cuda', dtype=torch.bfloat16)) "
                "on GPUs that have bf16 (NVIDIA A100 and later, AMD MI200 and later), else fp16 autocast with torch.amp.GradScaler('cuda'); ")
        return text + (ran if tf32_already else "TF32 (torch.set_float32_matmul_precision('high')) on NVIDIA A100 and later")
    dev = arch.autocast_device
    if not arch.has("bf16") and arch.has("fp16"):
        return (f"run them in fp16 on the {arch.name} Tensor Cores: torch.autocast(device_type='{dev}', dtype=torch.float16) with "
                f"torch.amp.GradScaler('{dev}') for training (this device has no bf16 or TF32 matrix units)")
    text = (f"run them in bf16 on the {arch.name} matrix units: torch.autocast(device_type='{dev}', dtype=torch.bfloat16) "
            "(no GradScaler needed)")
    if arch.has("tf32") and arch.vendor == "aws":
        # torch.backends.cudnn and Transformer Engine are CUDA/ROCm's; the Neuron compiler casts matmuls itself
        text += ("; or TF32 for the fp32 matmuls (the Neuron compiler's auto-cast options: AWS Neuron documentation, "
                 "'Mixed Precision and Performance-accuracy Tuning')")
    elif arch.has("tf32") and tf32_already:
        text += "; " + ran
    elif arch.has("tf32"):
        text += ("; or allow TF32 for the fp32 matmuls and convolutions (torch.set_float32_matmul_precision('high'), "
                 "torch.backends.cudnn.allow_tf32 = True)")
    else:
        text += " (this device has no TF32)"
    if arch.has("fp8") and arch.vendor == "aws":
        text += "; FP8 (cFP8 on the Tensor Engine) for the largest GEMMs where accuracy allows"
    elif arch.has("fp8"):
        text += "; FP8 for the largest GEMMs (Transformer Engine, torchao float8) where accuracy allows"
    return text
