"""Pointwise kernels: a fused group of pointwise, layout and indexing nodes over a flat index."""

from __future__ import annotations

import math

from fusionsearch.codegen.emit import NameGen, Source
from fusionsearch.codegen.kernel import GeneratedKernel
from fusionsearch.codegen.tile import Buffers, Idx, TileEvaluator
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.plan import PointwiseKernel

XBLOCK = 1024
NUM_WARPS = 4


def generate_pointwise(g: OpGraph, k: PointwiseKernel, stored: set[str], name: str,
                       upcast: bool = True) -> GeneratedKernel | None:
    """One kernel writing every stored node of the group; all share one shape (the plan checks it).
    None when nothing it computes is read by anyone (dead nodes): no kernel at all."""
    targets = [n for n in k.nodes if n in stored]
    if not targets:
        return None
    # Stored values may differ in shape (an output read before an expand or a view): each shape gets its own
    # flat index over the one grid, sized for the largest.
    shapes = list(dict.fromkeys(g.node(n).shape for n in targets))
    numel = max(math.prod(s) for s in shapes)
    src = Source(1, NameGen())
    src.line(f"# fusionsearch pointwise kernel: {len(k.nodes)} ops over {list(shapes[0])}")
    src.line("xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)")
    buffers = Buffers(g)
    ev = TileEvaluator(g, set(k.nodes), buffers, src, upcast)
    for j, shape in enumerate(shapes):
        index = _flat_index(src, shape, "" if j == 0 else f"_{j}")
        for n in targets:
            if g.node(n).shape == shape:
                ev.store(n, index, ev.value(n, index))
    params = buffers.params() + ["XBLOCK: tl.constexpr"]
    head = Source(0)
    head.line("@triton.jit")
    head.line(f"def {name}({', '.join(params)}):")
    head.splice(src)
    grid = (max(1, math.ceil(numel / XBLOCK)), 1, 1)
    return GeneratedKernel(name, head.text(), buffers.args, grid, {"XBLOCK": XBLOCK}, num_warps=NUM_WARPS,
                          num_stages=1)


def _flat_index(src: Source, shape: tuple[int, ...], suffix: str) -> tuple[Idx, ...]:
    """Row-major index components of `shape` from the flat xindex, masked to its element count."""
    numel = math.prod(shape)
    mask = f"xmask{suffix}"
    src.line(f"{mask} = xindex < {numel}")
    index: list[Idx] = []
    inner = numel
    for d, size in enumerate(shape):
        inner //= max(size, 1)
        if size == 1:
            index.append(Idx("0"))
            continue
        var = f"x{d}{suffix}"
        expr = "xindex" if inner == 1 else f"xindex // {inner}"
        src.line(f"{var} = ({expr}) % {size}" if d > 0 else f"{var} = {expr}")
        index.append(Idx(var, mask))
    return tuple(index)
