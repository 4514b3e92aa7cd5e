"""Plan legality: every node covered once, dependencies first, fused sets that map onto their tiles, tiles
within shared memory, fused chains within the code generator's depth."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import networkx as nx

from fusionsearch.errors import PlanError
from fusionsearch.graph.opgraph import Node, OpGraph
from fusionsearch.graph.registry import show
from fusionsearch.plan.kernels import ExternKernel, Kernel, LibraryKernel, PointwiseKernel, TemplateKernel, produced

if TYPE_CHECKING:
    from fusionsearch.plan.plan import Plan

FUSABLE = ("pointwise", "layout", "indexing")
# The longest chain of dependent nodes fused into one kernel: the code generator walks a fused chain recursively
# (codegen/tile.py, three Python frames a node), so a chain of thousands would end in a RecursionError.
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
        _check_kernel(g, k, i)
        if isinstance(k, TemplateKernel):
            if shared_memory_bytes is not None:
                _check_tile(g, k, i, shared_memory_bytes)
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
        if isinstance(k, TemplateKernel):
            shape = g.node(k.matmul).shape
            for n in stored:
                if g.node(n).shape != shape:
                    raise PlanError(f"kernel {i}: {n!r} is needed outside the kernel but its shape "
                                    f"{list(g.node(n).shape)} "
                                    f"is not the matmul's tile {list(shape)}; compute it in its own kernel")


def _check_tile(g: OpGraph, k: TemplateKernel, i: int, shared_memory_bytes: int) -> None:
    """The tile's pipeline fits the GPU's shared memory: Triton would compile it, then refuse to launch it."""
    dtype = g.node(template_operands(g, k.matmul)["A"]).dtype
    need = k.config.shared_memory_bytes(dtype.itemsize)
    if need > shared_memory_bytes:
        raise PlanError(f"kernel {i} ({k.matmul!r}): tile config {k.config.short()} needs {need} bytes of shared "
                        f"memory for {str(dtype).removeprefix('torch.')} operands, more than the {shared_memory_bytes} "
                        "the GPU has; use fewer stages or smaller blocks")


def _check_depth(g: OpGraph, k: Kernel, i: int, order: Mapping[str, int]) -> None:
    """No chain of dependent nodes inside one kernel longer than MAX_FUSED_DEPTH (see there why)."""
    inside = set(k.nodes)
    depth: dict[str, int] = {}
    for n in sorted(inside, key=order.__getitem__):
        depth[n] = 1 + max((depth[s] for s in g.node(n).inputs if s in depth), default=0)
        if depth[n] > MAX_FUSED_DEPTH:
            raise PlanError(f"kernel {i} fuses a chain of more than {MAX_FUSED_DEPTH} dependent nodes (up to {n!r}); "
                            "split it into several kernels")


def _check_kernel(g: OpGraph, k: Kernel, i: int) -> None:
    where = f"kernel {i}"
    if isinstance(k, ExternKernel):
        if g.node(k.node).kind != "extern":
            raise PlanError(f"{where}: {k.node!r} is a {g.node(k.node).op}, not an extern op")
        return
    if isinstance(k, LibraryKernel):
        if g.node(k.matmul).kind != "template":
            raise PlanError(f"{where}: {k.matmul!r} is a {g.node(k.matmul).op}, not a matmul")
        return
    if isinstance(k, PointwiseKernel):
        if not k.nodes:
            raise PlanError(f"{where}: a pointwise kernel needs at least one node")
        shapes = set()
        for n in k.nodes:
            if g.node(n).kind not in FUSABLE:
                raise PlanError(f"{where}: {n!r} ({g.node(n).op}) cannot go in a pointwise kernel")
        inside = set(k.nodes)
        sinks = [n for n in k.nodes if not any(c in inside for c in g.consumers(n))]
        shapes = {g.node(n).shape for n in sinks}
        if len(shapes) != 1:
            raise PlanError(f"{where}: the pointwise kernel's results have different shapes {sorted(shapes)}; split it")
        return
    mm = g.node(k.matmul)
    if mm.kind != "template":
        raise PlanError(f"{where}: {k.matmul!r} is a {mm.op}, not a matmul")
    operands = template_operands(g, k.matmul)
    for side, nodes in (("A", k.prologue_a), ("B", k.prologue_b)):
        if not nodes:
            continue
        root = operands[side]
        if root not in nodes:
            raise PlanError(f"{where}: prologue {side} must include the operand {root!r} itself")
        allowed = nx.ancestors(g.nx, root) | {root}
        for n in nodes:
            if g.node(n).kind not in FUSABLE:
                raise PlanError(f"{where}: {n!r} ({g.node(n).op}) cannot be fused into a matmul prologue")
            if n not in allowed:
                raise PlanError(f"{where}: {n!r} does not feed operand {side} ({root!r}), so it cannot be its prologue")
    out_shape = mm.shape
    inside = set(k.epilogue)
    # once a kernel, and only as far as its last epilogue node: a path from the matmul to one ends before it
    after = g.descendants_until(k.matmul, max(map(g.position, k.epilogue))) if k.epilogue else set()
    for n in k.epilogue:
        node = g.node(n)
        if node.kind not in ("pointwise", "layout", "indexing"):
            raise PlanError(f"{where}: {n!r} ({node.op}) cannot be fused into a matmul epilogue")
        downstream = n in after
        if downstream and node.shape != out_shape:
            raise PlanError(f"{where}: epilogue node {n!r} has shape {list(node.shape)}, "
                            f"the matmul's tile covers {list(out_shape)}")
        if downstream and _reads_elsewhere(g, k.matmul, node):
            raise PlanError(f"{where}: epilogue node {n!r} ({node.op}) reads the matmul's result at other positions "
                            "than its own, outside the tile; compute it in its own kernel")
        if not downstream and not _feeds_bias(g, k.matmul, n, inside):
            raise PlanError(f"{where}: {n!r} neither follows the matmul nor computes its bias, "
                            "so it is not an epilogue")


def _reads_elsewhere(g: OpGraph, mm: str, node: Node) -> bool:
    """True when a node downstream of the matmul reads its downstream operand at another index than its own
    (a transpose or permute, even of a square tile, or a gather from it): an epilogue only holds its own tile."""
    rank = len(node.shape)
    if node.op == "transpose":
        return node.attrs.get("dim0", 0) % rank != node.attrs.get("dim1", 1) % rank
    if node.op == "permute":
        return [d % rank for d in node.attrs["dims"]] != list(range(rank))
    if node.kind == "indexing":  # indices computed on the tile are fine, a table computed on it is not
        table = node.inputs[0]
        return table == mm or mm in nx.ancestors(g.nx, table)
    return False


def _feeds_bias(g: OpGraph, mm: str, n: str, inside: set[str]) -> bool:
    bias = template_operands(g, mm).get("bias")
    return bias is not None and (n == bias or n in nx.ancestors(g.nx, bias))


def template_operands(g: OpGraph, mm: str) -> dict[str, str]:
    """The matmul's operand nodes by role: A, B, and bias where the op has one."""
    node = g.node(mm)
    if node.op == "addmm":
        return {"bias": node.inputs[0], "A": node.inputs[1], "B": node.inputs[2]}
    roles = {"A": node.inputs[0], "B": node.inputs[1]}
    if node.op == "linear" and len(node.inputs) == 3:
        roles["bias"] = node.inputs[2]
    return roles


# ---- building plans from decisions -------------------------------------------------------------

Decision = tuple[str, ...]  # ("standalone",) | ("epilogue", mm) | ("prologue", mm, "A"|"B") | ("group", gid)
