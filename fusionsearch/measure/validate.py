"""Validation: a plan's outputs against the float64 reference on fresh random inputs, outputs poisoned first."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fusionsearch.codegen.runtime import Built, compile_plan, naming_source
from fusionsearch.errors import failure_reason
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.reference import random_inputs, reference
from fusionsearch.graph.tolerance import TOLERANCE, output_tolerances, rel_error
from fusionsearch.kinds import reference_replacements


@dataclass(frozen=True)
class Validation:
    """ok when every output is within its tolerance (output_tolerances); rel_err is the worst output's error."""

    ok: bool
    rel_err: float
    reason: str = ""


def float64_reference(g: OpGraph, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The float64 reference plans are validated against, with what the kinds compute otherwise (a
    mixture-of-experts bmm per expert, its gathered expert weights never built)."""
    return reference(g, inputs, float64=True, replaced=reference_replacements(g))


def validate(plan: object, graph: object = None, inputs: Sequence[torch.Tensor] | None = None, seed: int = 0,
             device: str | torch.device | None = None, refs: Sequence[torch.Tensor] | None = None,
             built: Built | None = None, **options: object) -> Validation:
    """Compile and run `plan` on `inputs` (fresh random inputs when None) with poisoned outputs; compare each
    output to the float64 reference (`refs`, when the caller already computed it for these inputs). `built`:
    the plan's module generated already (codegen.runtime.build). Never raises for a failing kernel: the reason
    is returned."""
    g = graph if graph is not None else plan.graph  # type: ignore[attr-defined]
    if inputs is None:
        dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
        inputs = random_inputs(g, seed=seed, device=dev)  # type: ignore[arg-type]
    if refs is None:
        refs = float64_reference(g, inputs)  # type: ignore[arg-type]
    for i, r in enumerate(refs):
        if r.dtype.is_floating_point and not torch.isfinite(r).all():
            return Validation(False, float("inf"), f"the reference output {i} has NaN/Inf: inputs outside the domain")
    compiled = None
    try:
        compiled = compile_plan(plan, built, **options)
        if inputs[0].device.type == "cuda":  # the first call launches through Triton; check the direct launches
            compiled(*inputs)                # that every later call (and every timing) makes
        outs = compiled(*inputs, poison=True)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    except Exception as e:  # a failing kernel fails its own validation, not the caller
        return Validation(False, float("inf"), naming_source(failure_reason(e), compiled))
    worst, reason = 0.0, ""
    for i, (o, r, tol) in enumerate(zip(outs, refs, output_tolerances(g), strict=True)):  # type: ignore[arg-type]
        err = rel_error(o, r)
        if err > worst:
            worst = err
        if not err <= tol:
            what = "NaN/Inf or unwritten elements" if err == float("inf") else f"rel error {err:.3g} > {tol:g}"
            reason = reason or f"output {i} ({o.dtype}): {what}"
    return Validation(not reason, worst, reason)


__all__ = ["TOLERANCE", "Validation", "output_tolerances", "rel_error", "validate"]
