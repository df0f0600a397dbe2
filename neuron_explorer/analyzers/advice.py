"""Advice chosen from what is inside a finding (its `contents`, analyzers/contents.py), and the step
that gives every finding of a report its contents and advice (`attach`).

Each advice rule is a small function over a finding's contents that returns one sentence, or None
when what is inside does not clearly call for it; ADVICE lists them (docs/RULES.md "Advice from
what is inside"):

- `reassociate`: a plain matrix product `A @ B` ([p×q] @ [q×r]) whose result is multiplied by a
  batch `x` ([b×p] @ [p×r]) as often as it is computed: `(x @ A) @ B` costs b·q·(p + r)
  multiply-adds per call instead of p·q·r + b·p·r; advised when that is at least
  REASSOCIATE_GAIN_MIN times fewer.
- `solve_instead_of_inverse`: a matrix inverse (`torch.linalg.inv`, `torch.inverse`) inside:
  `torch.linalg.solve(A, B)` instead of `inv(A) @ B`.
- `optimizer_implementation`: most of the roots (OPTIMIZER_SHARE_MIN of their time, at least
  OPTIMIZER_CALLS_MIN of them) run inside the step of a torch.optim class (TORCH_OPTIMIZERS,
  `Optimizer.step#…`) as per-parameter operators (its for-loop implementation, the default off
  CUDA) or as `_foreach_` operators: `fused=True` where the class takes it (FUSED_OPTIMIZERS),
  else `foreach=True`.

Must not: compute a figure from the run (contents.py does) or render.
"""

from __future__ import annotations

from ..fmt import duration
from ..store import Run
from ..vocab import INVERSE_OPS, PLAIN_PRODUCT_OPS
from .contents import finding_contents, findings_contents
from .model import Finding

REASSOCIATE_GAIN_MIN = 2.0
"""Advise reassociating a chain of products when it needs at least this many times fewer multiply-adds."""


def _operators(contents: dict) -> list[dict]:
    """The operator groups of the contents: the roots' groups and the operator children."""
    roots = (contents.get("roots") or {}).get("groups") or []
    return list(roots) + [c for c in contents.get("children") or [] if c.get("kind") == "cpu_op"]


def _matrix(shape) -> tuple[int, int] | None:
    if isinstance(shape, list) and len(shape) == 2 and all(isinstance(x, int) and x > 0 for x in shape):
        return shape[0], shape[1]
    return None


def reassociate(contents: dict) -> str | None:
    products = []
    for g in _operators(contents):
        shapes = g.get("shapes") or []
        if g.get("name") in PLAIN_PRODUCT_OPS and len(shapes) >= 2 and _matrix(shapes[0]) and _matrix(shapes[1]):
            (m, k), (k2, n) = _matrix(shapes[0]), _matrix(shapes[1])
            if k == k2:
                products.append((m, k, n, g))
    for p, q, r, ab in products:
        for b, p2, r2, xab in products:
            if xab is ab or (p2, r2) != (p, r) or xab["count"] != ab["count"]:
                continue
            now, after = p * q * r + b * p * r, b * q * (p + r)
            if after * REASSOCIATE_GAIN_MIN <= now:
                return (f"reassociate: a [{p}×{q}] @ [{q}×{r}] product ({ab['name']}, {ab['count']} calls, {duration(ab['total_ns'])}) "
                        f"is computed each time its result multiplies a batch of {b} ([{b}×{p}] @ [{p}×{r}]); compute x @ (A @ B) "
                        f"as (x @ A) @ B: {after:,} instead of {now:,} multiply-adds per call ({now / after:.0f}x fewer), or compute "
                        "A @ B once, outside the loop, when A and B do not change")
    return None


def solve_instead_of_inverse(contents: dict) -> str | None:
    inv = [g for g in _operators(contents) if g.get("name") in INVERSE_OPS]
    if not inv:
        return None
    calls, ns = sum(g["count"] for g in inv), sum(g["total_ns"] for g in inv)
    return (f"use torch.linalg.solve instead of inv: a matrix inverse runs inside ({inv[0]['name']}, {calls} calls, {duration(ns)}); "
            "torch.linalg.solve(A, B) in place of torch.linalg.inv(A) @ B is faster and more accurate")


TORCH_OPTIMIZERS = ("Adam", "AdamW", "SGD", "Adagrad", "RMSprop", "Adamax", "NAdam", "RAdam", "ASGD", "Adadelta", "Rprop", "Adafactor")
"""torch.optim classes that take `foreach=`: another library's optimizer step range (a
`FusedAdam`, which has neither argument) gets no advice."""
FUSED_OPTIMIZERS = ("Adam", "AdamW", "SGD", "Adagrad")
"""torch.optim classes that take `fused=True` (one fused operator over all parameters: CUDA, CPU
from torch 2.4, MPS, XPU); the others take `foreach=True` only. torch picks foreach by itself only
where every parameter is on a CUDA, XPU, MTIA or PrivateUse1 device, and fused never."""
OPTIMIZER_SHARE_MIN = 0.5
"""Advise an optimizer's implementation when its step holds at least this share of the roots' time."""
OPTIMIZER_CALLS_MIN = 20
"""... and at least this many of the roots are inside its steps: the advice is about the cost of
many operator calls (a device-idle gap's one slow `_foreach_add_` is no case for it)."""


def optimizer_implementation(contents: dict) -> str | None:
    roots = contents.get("roots") or {}
    steps = roots.get("optimizer_steps") or []
    if not steps or not roots.get("total_ns") or steps[0]["total_ns"] < OPTIMIZER_SHARE_MIN * roots["total_ns"] \
            or steps[0]["count"] < OPTIMIZER_CALLS_MIN or steps[0]["optimizer"] not in TORCH_OPTIMIZERS:
        return None
    names = [g["name"] for g in roots.get("names") or []]
    if any(n.startswith("aten::_fused_") for n in names):
        return None
    cls, count, ns = steps[0]["optimizer"], steps[0]["count"], steps[0]["total_ns"]
    fused = cls in FUSED_OPTIMIZERS
    if any(n.startswith("aten::_foreach_") for n in names):
        if not fused:
            return None
        return (f"{cls} runs its foreach implementation here ({count:,} multi-tensor operator calls, {duration(ns)}): construct "
                f"it with fused=True for one fused operator over all parameters per step")
    how = ("fused=True (one fused operator over all parameters per step; on CPU from torch 2.4) or foreach=True"
           if fused else "foreach=True (a few multi-tensor operators per step instead of a loop over the parameters)")
    return (f"{cls} runs its for-loop implementation here: {count:,} per-parameter operator calls, {duration(ns)}. Construct it "
            f"with {how}: torch picks foreach by itself only where every parameter is on a CUDA, XPU, MTIA or PrivateUse1 "
            "device, and never fused")


ADVICE = (reassociate, solve_instead_of_inverse, optimizer_implementation)
"""The advice rules, in the order their sentences are listed."""


def advice(contents: dict) -> list[str]:
    """The sentences of every advice rule that applies to these contents."""
    if not contents:
        return []
    return [s for s in (rule(contents) for rule in ADVICE) if s]


def attach(run: Run, findings: list[Finding]) -> None:
    """Give each finding its contents (contents.findings_contents: of any ranks `run`'s views hold,
    all at once) with their advice, in place. A finding whose contents cannot be computed keeps
    none: it must not stop the report."""
    if not findings:
        return
    try:  # every finding's contents in two queries (grouped by finding), whatever their ranks
        got = findings_contents(run, [f.to_dict() for f in findings])
    except Exception:  # noqa: BLE001 - odd data in one finding's events: each finding alone, so that the others keep theirs
        got = None
    cache: dict = {}  # findings with the same roots share one query
    for i, f in enumerate(findings):
        try:
            c = got[i] if got is not None else finding_contents(run, f.to_dict(), cache=cache)
        except Exception:  # noqa: BLE001 - odd data in one finding's events: the finding stands without its contents
            c = {}
        if c:
            c["advice"] = advice(c)
        f.contents = c
