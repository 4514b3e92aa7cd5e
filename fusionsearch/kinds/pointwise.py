"""The pointwise kind: a fused group of pointwise, layout and indexing nodes, one Triton kernel over a flat index."""

from __future__ import annotations

import math

from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.hardware import Hardware
from fusionsearch.kinds.base import KernelCode, KernelKind, ModuleContext
from fusionsearch.kinds.counting import MAX_THREADS_PER_SM, KernelEstimate, bandwidth_share, leaf_bytes, pointwise_work
from fusionsearch.kinds.triton_source.emit import NameGen, Source
from fusionsearch.kinds.triton_source.kernel import GeneratedKernel
from fusionsearch.kinds.triton_source.tile import Buffers, TileEvaluator
from fusionsearch.kinds.triton_source.tile_index import Idx
from fusionsearch.plan.kernels import PointwiseKernel

XBLOCK = 1024
NUM_WARPS = 4
_PRICED_BLOCK = XBLOCK  # the block the estimate prices (a test generating smaller blocks leaves it)


class PointwiseKind(KernelKind):
    """PointwiseKernel: its leaves read once, the values it stores written once, one CTA per XBLOCK elements."""

    name = "pointwise"
    onehot = "kind_pointwise"
    kernel_type = PointwiseKernel
    runs_triton = True

    def estimate(self, g: OpGraph, kernel: PointwiseKernel, i: int, stored: set[str], hw: Hardware
                 ) -> KernelEstimate:
        read = leaf_bytes(g, set(kernel.nodes), kernel.nodes)
        written = sum(g.node(n).nbytes for n in stored)
        flops = pointwise_work(g, kernel.nodes)
        numel = max((g.node(n).numel for n in stored), default=max(g.node(n).numel for n in kernel.nodes))
        blocks = max(1, math.ceil(numel / _PRICED_BLOCK))
        memory = (read + written) / (hw.bandwidth_bytes_per_s * bandwidth_share(blocks, hw)) * 1e6
        compute = flops / hw.elementwise_flops * 1e6
        slots = hw.multiprocessors * (MAX_THREADS_PER_SM // (32 * NUM_WARPS))
        return KernelEstimate(i, "pointwise", read, written, flops, max(memory, compute) + hw.launch_us, memory,
                              compute, math.ceil(blocks / slots), blocks)

    def regions(self, kernel: PointwiseKernel) -> dict[str, tuple[str, ...]]:
        return {"pro_a": (), "pro_b": (), "epi": (), "body": kernel.nodes}

    def generate(self, ctx: ModuleContext, kernel: PointwiseKernel, stored: set[str], name: str) -> KernelCode:
        gk = generate_pointwise(ctx.graph, kernel, stored, name, ctx.options.upcast_pointwise)
        if gk is None:
            return KernelCode(note="(dead nodes: nothing reads them)")
        return KernelCode([gk])


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
                          num_stages=1, index_flag=buffers.flagged)


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


POINTWISE = PointwiseKind()
