"""Pointwise kernels: a fused group of pointwise, layout and indexing nodes over a flat index."""

from __future__ import annotations

import math

from fusionsearch.codegen.emit import NameGen, Source
from fusionsearch.codegen.kernel import GeneratedKernel
from fusionsearch.codegen.tile import Buffers, Idx, TileEvaluator
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.search.plan import PointwiseKernel

XBLOCK = 1024


def generate_pointwise(g: OpGraph, k: PointwiseKernel, stored: set[str], name: str,
                       upcast: bool = True) -> GeneratedKernel | None:
    """One kernel writing every stored node of the group; all share one shape (the plan checks it).
    None when nothing it computes is read by anyone (dead nodes): no kernel at all."""
    targets = [n for n in k.nodes if n in stored]
    if not targets:
        return None
    shape = g.node(targets[0]).shape
    numel = math.prod(shape)
    src = Source(1, NameGen())
    src.line(f"# fusionsearch pointwise kernel: {len(k.nodes)} ops over {list(shape)}")
    src.line("xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)")
    src.line(f"xmask = xindex < {numel}")
    index: list[Idx] = []
    inner = numel
    for d, size in enumerate(shape):
        inner //= max(size, 1)
        if size == 1:
            index.append(Idx("0"))
            continue
        var = f"x{d}"
        expr = "xindex" if inner == 1 else f"xindex // {inner}"
        src.line(f"{var} = ({expr}) % {size}" if d > 0 else f"{var} = {expr}")
        index.append(Idx(var, "xmask"))
    buffers = Buffers(g)
    ev = TileEvaluator(g, set(k.nodes), buffers, src, upcast)
    for n in targets:
        ev.store(n, tuple(index), ev.value(n, tuple(index)))
    params = buffers.params() + ["XBLOCK: tl.constexpr"]
    head = Source(0)
    head.line("@triton.jit")
    head.line(f"def {name}({', '.join(params)}):")
    head.splice(src)
    grid = (max(1, math.ceil(numel / XBLOCK)), 1, 1)
    return GeneratedKernel(name, head.text(), buffers.args, grid, {"XBLOCK": XBLOCK}, num_warps=4, num_stages=1)
