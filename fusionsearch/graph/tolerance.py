"""How close to the float64 reference an output must be: the tolerance per dtype, per output of a graph, and
the relative error measured against it (validation, and the random graphs that must be validatable)."""

from __future__ import annotations

import networkx as nx
import torch

from fusionsearch.graph.opgraph import OpGraph

# Relative Frobenius error allowed per dtype, against the float64 reference.
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-9, torch.float16: 1e-3, torch.bfloat16: 1e-2}


def output_tolerances(g: OpGraph) -> list[float]:
    """Per output, the loosest tolerance among the floating dtypes its value is computed in: the output's own
    and every computed node it depends on. Eager PyTorch (and a plan that computes as it does) rounds at each of
    them, the float64 reference at none: `(x + y).float() @ z` with float16 x, y is an fp32 output held to
    float16's tolerance, since x + y was rounded to float16 on the way."""
    tolerances = []
    for o in g.outputs:
        computed = [g.node(n).dtype for n in {o} | nx.ancestors(g.nx, o) if g.node(n).op != "input"]
        floating = [TOLERANCE.get(d, 0.0) for d in computed if d.is_floating_point]
        tolerances.append(max(floating, default=TOLERANCE.get(g.node(o).dtype, 0.0)))
    return tolerances


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """Relative Frobenius error of `out` against `ref`; inf when shapes differ or `out` has NaN/Inf where
    the reference is finite."""
    if out.shape != ref.shape:
        return float("inf")
    if not out.dtype.is_floating_point:
        return 0.0 if torch.equal(out.to(ref.dtype), ref) else float("inf")
    o, r = out.double(), ref.double()
    if not torch.isfinite(o).all():
        return float("inf")
    denom = r.norm().item()
    diff = (o - r).norm().item()
    return diff / denom if denom > 0 else diff
