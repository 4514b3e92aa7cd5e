"""The legality of one kernel of each built-in kind against its graph: what the kernel values' `check` and
`check_stored` methods run (kept apart from the values so that kernels.py stays a list of plain records)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import networkx as nx

from fusionsearch.errors import PlanError
from fusionsearch.graph.opgraph import Node, OpGraph
from fusionsearch.plan.matmul import problem, shared_a_matmuls, template_operands

if TYPE_CHECKING:
    from fusionsearch.plan.kernels import ExternKernel, LibraryKernel, PointwiseKernel, TemplateKernel

FUSABLE = ("pointwise", "layout", "indexing")


def check_extern(g: OpGraph, k: ExternKernel, i: int) -> None:
    if g.node(k.node).kind != "extern":
        raise PlanError(f"kernel {i}: {k.node!r} is a {g.node(k.node).op}, not an extern op")


def check_library(g: OpGraph, k: LibraryKernel, i: int) -> None:
    if g.node(k.matmul).kind != "template":
        raise PlanError(f"kernel {i}: {k.matmul!r} is a {g.node(k.matmul).op}, not a matmul")


def check_pointwise(g: OpGraph, k: PointwiseKernel, i: int) -> None:
    where = f"kernel {i}"
    if not k.nodes:
        raise PlanError(f"{where}: a pointwise kernel needs at least one node")
    for n in k.nodes:
        if g.node(n).kind not in FUSABLE:
            raise PlanError(f"{where}: {n!r} ({g.node(n).op}) cannot go in a pointwise kernel")
    inside = set(k.nodes)
    sinks = [n for n in k.nodes if not any(c in inside for c in g.consumers(n))]
    shapes = {g.node(n).shape for n in sinks}
    if len(shapes) != 1:
        raise PlanError(f"{where}: the pointwise kernel's results have different shapes {sorted(shapes)}; split it")


def check_template(g: OpGraph, k: TemplateKernel, i: int, shared_memory_bytes: int | None) -> None:
    """Prologues that feed their operand, an epilogue on the matmul's tile, and (given `shared_memory_bytes`,
    per CTA) a tile pipeline that fits the GPU's shared memory."""
    where = f"kernel {i}"
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
    shared = shared_a_matmuls(g, k.epilogue)
    for s in shared:
        _check_shared_a(g, k, s, where)
    # once a kernel, and only as far as its last epilogue node: a path from a matmul to one ends before it
    last = max(map(g.position, k.epilogue)) if k.epilogue else 0
    after = set().union(*(g.descendants_until(m, last) for m in (k.matmul, *shared))) if k.epilogue else set()
    for n in (n for n in k.epilogue if n not in shared):
        node = g.node(n)
        if node.kind not in ("pointwise", "layout", "indexing"):
            raise PlanError(f"{where}: {n!r} ({node.op}) cannot be fused into a matmul epilogue")
        downstream = n in after
        if downstream and node.shape != out_shape:
            raise PlanError(f"{where}: epilogue node {n!r} has shape {list(node.shape)}, "
                            f"the matmul's tile covers {list(out_shape)}")
        if downstream and any(_reads_elsewhere(g, m, node) for m in (k.matmul, *shared)):
            raise PlanError(f"{where}: epilogue node {n!r} ({node.op}) reads the matmul's result at other positions "
                            "than its own, outside the tile; compute it in its own kernel")
        if not downstream and not _feeds_bias(g, k.matmul, n, inside):
            raise PlanError(f"{where}: {n!r} neither follows the matmul nor computes its bias, "
                            "so it is not an epilogue")
    if shared_memory_bytes is not None:
        _check_tile(g, k, i, shared_memory_bytes)


def _check_shared_a(g: OpGraph, k: TemplateKernel, s: str, where: str) -> None:
    """A matmul in the epilogue runs in the kernel's K loop on its A tile: the same A, sizes and op, its own B
    read from memory, no bias, and no split of K (each split would need its own partial sums of both)."""
    main = template_operands(g, k.matmul)
    ops = template_operands(g, s)
    if not getattr(k, "has_tile_config", False):
        raise PlanError(f"{where}: only the template kind runs a second matmul ({s!r}) in its K loop")
    if g.node(s).op != g.node(k.matmul).op or ops["A"] != main["A"] or problem(g, s) != problem(g, k.matmul):
        raise PlanError(f"{where}: matmul {s!r} in the epilogue must be a {g.node(k.matmul).op} on the same A operand "
                        f"({main['A']!r}) with the sizes of {k.matmul!r}")
    if "bias" in ops:
        raise PlanError(f"{where}: matmul {s!r} in the epilogue has a bias; only a bias-free one can share the K loop")
    if ops["B"] in set(k.prologue_a) | set(k.prologue_b) | set(k.epilogue):
        raise PlanError(f"{where}: matmul {s!r} in the epilogue reads its B operand from memory, so "
                        f"{ops['B']!r} cannot be computed in this kernel")
    if k.config.split_k != 1:
        raise PlanError(f"{where}: a kernel with matmul {s!r} in its epilogue runs K unsplit; use split_k 1, "
                        f"not {k.config.split_k}")


def check_template_stored(g: OpGraph, k: TemplateKernel, i: int, stored: set[str]) -> None:
    """Every value the template stores is on the matmul's output tile."""
    shape = g.node(k.matmul).shape
    for n in stored:
        if g.node(n).shape != shape:
            raise PlanError(f"kernel {i}: {n!r} is needed outside the kernel but its shape {list(g.node(n).shape)} "
                            f"is not the matmul's tile {list(shape)}; compute it in its own kernel")


def _check_tile(g: OpGraph, k: TemplateKernel, i: int, shared_memory_bytes: int) -> None:
    """The tile's pipeline fits the GPU's shared memory: Triton would compile it, then refuse to launch it."""
    dtype = g.node(template_operands(g, k.matmul)["A"]).dtype
    cfg = k.config
    # each matmul sharing the K loop pipelines its own B tiles beside the kernel's
    need = cfg.shared_memory_bytes(dtype.itemsize) + len(shared_a_matmuls(g, k.epilogue)) * (
        cfg.num_stages * cfg.block_k * cfg.block_n * dtype.itemsize)
    if need > shared_memory_bytes:
        raise PlanError(f"kernel {i} ({k.matmul!r}): tile config {k.config.short()} needs {need} bytes of shared "
                        f"memory for {str(dtype).removeprefix('torch.')} operands, more than the {shared_memory_bytes} "
                        "the GPU has; use fewer stages or smaller blocks")


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
