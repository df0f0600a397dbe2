"""Peak dense throughput and memory bandwidth of common accelerators, matched from device names.

Every figure is the vendor's published dense (not sparse) peak for the product named in `source`;
TFLOP/s per data type, GB/s of device memory. A device whose name matches no entry, and every CPU,
is reported as unknown: never guessed. Users override or add peaks with `--peak-tflops` /
`--peak-gbps`, or a JSON file (`--peaks FILE`: a list of entries shaped like PEAKS).

Must not: read runs (metrics and rules call `match`).
"""

from __future__ import annotations

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

    def flops_per_s(self, dtype: str | None) -> float | None:
        """Peak FLOP/s for a dtype; fp32 work is compared with the fp32 (not TF32) peak."""
        t = self.tflops.get(dtype or "") if dtype else None
        return t * 1e12 if t else None

    def to_dict(self) -> dict:
        return {"name": self.name, "tflops": dict(self.tflops), "gbps": self.gbps, "source": self.source}


_NV = "NVIDIA data sheet"
_AMD = "AMD Instinct data sheet"
PEAKS: tuple[Peak, ...] = (
    Peak("NVIDIA H200 SXM", r"H200", {"fp64": 34, "fp32": 67, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}, 4800,
         f"{_NV}: H200 Tensor Core GPU (SXM), dense"),
    Peak("NVIDIA H100 PCIe", r"H100.*PCIe", {"fp64": 26, "fp32": 51, "tf32": 378, "bf16": 756, "fp16": 756, "fp8": 1513}, 2000,
         f"{_NV}: H100 Tensor Core GPU (PCIe), dense"),
    Peak("NVIDIA H100 SXM", r"H100", {"fp64": 34, "fp32": 67, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4, "fp8": 1978.9}, 3350,
         f"{_NV}: H100 Tensor Core GPU (SXM), dense"),
    Peak("NVIDIA B200 (HGX)", r"B200", {"fp64": 40, "fp32": 80, "tf32": 1100, "bf16": 2250, "fp16": 2250, "fp8": 4500}, 8000,
         f"{_NV}: HGX B200 (1,000 W), dense"),
    Peak("NVIDIA A100 80GB", r"A100.*80\s*GB", {"fp64": 9.7, "fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312}, 2039,
         f"{_NV}: A100 Tensor Core GPU, 80 GB SXM"),
    Peak("NVIDIA A100", r"A100", {"fp64": 9.7, "fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312}, 1555,
         f"{_NV}: A100 Tensor Core GPU, 40 GB (the lower bandwidth where the name does not say 80 GB)"),
    Peak("NVIDIA V100 PCIe", r"V100.*PCIe", {"fp64": 7, "fp32": 14, "fp16": 112}, 900, f"{_NV}: Tesla V100 (PCIe)"),
    Peak("NVIDIA V100", r"V100", {"fp64": 7.8, "fp32": 15.7, "fp16": 125}, 900, f"{_NV}: Tesla V100 (SXM2)"),
    Peak("AMD Instinct MI300X", r"MI300X", {"fp64": 81.7, "fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9},
         5300, f"{_AMD}: MI300X, dense"),
    Peak("AMD Instinct MI250X", r"MI250X", {"fp64": 95.7, "fp32": 95.7, "bf16": 383, "fp16": 383}, 3276.8,
         f"{_AMD}: MI250X (matrix peaks)"),
    Peak("AMD Instinct MI210", r"MI210", {"fp64": 45.3, "fp32": 45.3, "bf16": 181, "fp16": 181}, 1638.4,
         f"{_AMD}: MI210 (matrix peaks)"),
    Peak("AWS Trainium2", r"trainium\s*2|trn2", {"fp32": 181, "tf32": 667, "bf16": 667, "fp16": 667, "fp8": 1299}, 2900,
         "AWS Neuron documentation: Trainium2 architecture (per chip, dense)"),
    Peak("AWS Trainium", r"trainium|trn1", {"fp32": 48, "tf32": 191, "bf16": 191, "fp16": 191, "fp8": 191}, 820,
         "AWS Neuron documentation: Trainium architecture (per chip)"),
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
                source="given on the command line" + (f" (else {base.source})" if base else ""))


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
