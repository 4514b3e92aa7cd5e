"""Plan legality: every node covered once, dependencies first, fused sets that map onto their tiles, tiles
within shared memory, fused chains within the code generator's depth."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from fusionsearch.errors import PlanError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.registry import show
from fusionsearch.plan.kernel_checks import FUSABLE
from fusionsearch.plan.kernels import KernelValue, produced
from fusionsearch.plan.matmul import template_operands

if TYPE_CHECKING:
    from fusionsearch.plan.plan import Plan

# The longest chain of dependent nodes fused into one kernel: the code generator walks a fused chain recursively
# (kinds/triton_source/tile.py, three Python frames a node), so a chain of thousands would end in a RecursionError.
MAX_FUSED_DEPTH = 128


def check_plan(plan: Plan, shared_memory_bytes: int | None = None) -> None:
    """Every node covered once (or recomputed by choice), dependencies computed first, fused sets mapping onto
    their tiles, each tile's pipeline within `shared_memory_bytes` (per CTA; None: not checked) and no fused
    chain longer than MAX_FUSED_DEPTH. Raises PlanError naming the first problem."""
    g = plan.graph
    for r in sorted(plan.recompute, key=show):
        if not isinstance(r, str) or r not in g or g.node(r).op == "input":
            raise PlanError(f"plan lists {show(r)} under 'recompute', which is not a node of the graph it computes")
    count: dict[str, int] = {}
    for k in plan.kernels:
        for n in k.nodes:
            if n not in g:
                raise PlanError(f"plan names node {n!r}, which is not in the graph")
            count[n] = count.get(n, 0) + 1
    for node in g:
        if node.op == "input":
            if node.name in count:
                raise PlanError(f"graph input {node.name!r} cannot be computed by a kernel")
            continue
        c = count.get(node.name, 0)
        if c == 0:
            raise PlanError(f"node {node.name!r} is not computed by any kernel of the plan")
        if c > 1 and node.name not in plan.recompute:
            raise PlanError(f"node {node.name!r} is computed by {c} kernels; list it under 'recompute' to allow that")
    materialised = set(g.inputs)
    order = {n: j for j, n in enumerate(g.topo_order())}
    for i, k in enumerate(plan.kernels):
        k.check(g, i, shared_memory_bytes)
        if len(k.nodes) > MAX_FUSED_DEPTH:
            _check_depth(g, k, i, order)
        inside = set(k.nodes)
        for n in k.nodes:
            for src in g.node(n).inputs:
                if src not in inside and src not in materialised:
                    raise PlanError(f"kernel {i} reads {src!r} (input of {n!r}) before any kernel writes it")
        materialised |= set(produced(k))
    for o in g.outputs:
        if o not in materialised:  # a prologue keeps its values in registers: nothing would write the output
            raise PlanError(f"graph output {o!r} is computed only inside a matmul prologue, which never writes it; "
                            "compute it in its own kernel")
    for i, (k, stored) in enumerate(zip(plan.kernels, plan.stored(), strict=True)):
        k.check_stored(g, i, stored)


def _check_depth(g: OpGraph, k: KernelValue, i: int, order: Mapping[str, int]) -> None:
    """No chain of dependent nodes inside one kernel longer than MAX_FUSED_DEPTH (see there why)."""
    inside = set(k.nodes)
    depth: dict[str, int] = {}
    for n in sorted(inside, key=order.__getitem__):
        depth[n] = 1 + max((depth[s] for s in g.node(n).inputs if s in depth), default=0)
        if depth[n] > MAX_FUSED_DEPTH:
            raise PlanError(f"kernel {i} fuses a chain of more than {MAX_FUSED_DEPTH} dependent nodes (up to {n!r}); "
                            "split it into several kernels")


__all__ = ["FUSABLE", "MAX_FUSED_DEPTH", "check_plan", "template_operands"]
