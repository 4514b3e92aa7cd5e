"""The grouped matmul kind (issue 27): every expert's matmul of a mixture-of-experts bmm in one launch, the
token gather and the expert-weight gather fused, each touched expert's weight read once for all its tokens
(the template and decode kinds read the gathered weight once per token). Estimate and features here; source
in source.py; configs in configs.py; which bmm qualifies in routing.py."""

from __future__ import annotations

import math
from collections.abc import Callable

from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.reference import Replacement
from fusionsearch.hardware import Hardware
from fusionsearch.kinds.base import KernelCode, MatmulKind, ModuleContext, Scratch
from fusionsearch.kinds.counting import KernelEstimate, bandwidth_share, ctas_per_sm, leaf_bytes, pointwise_work
from fusionsearch.kinds.grouped_matmul.configs import grouped_candidates
from fusionsearch.kinds.grouped_matmul.kernel import GroupedConfig, GroupedKernel
from fusionsearch.kinds.grouped_matmul.reference import expert_bmm_replacements
from fusionsearch.kinds.grouped_matmul.routing import expert_routing
from fusionsearch.kinds.grouped_matmul.source import blocks_bound, generate_grouped, routing, tile_shape
from fusionsearch.kinds.matmul_template.kind import TEMPLATE
from fusionsearch.kinds.triton_source.kernel import GeneratedKernel
from fusionsearch.plan.resources import KernelResources
from fusionsearch.plan.tile import TileConfig


class GroupedKind(MatmulKind):
    """GroupedKernel: one choice per grouped config, offered for the bmms routing.expert_routing recognises."""

    name = "grouped"
    onehot = "kind_grouped"
    kernel_type = GroupedKernel
    runs_triton = True
    compiled_features = True

    def accepts(self, g: OpGraph, mm: str) -> bool:
        return expert_routing(g, mm) is not None

    def reference_replacements(self, g: OpGraph) -> dict[str, Replacement]:
        """Each expert bmm evaluated per expert, its gathered weights never built (reference.py)."""
        return expert_bmm_replacements(g)

    def required_prologue(self, g: OpGraph, mm: str) -> dict[str, tuple[str, ...]]:
        """The expert-weight gather and what follows it: the grouped kernel reads each expert's weight itself."""
        return {"B": routing(g, mm).chain}

    def choices(self, g: OpGraph, mm: str, fits: Callable[[OpGraph, str, TileConfig], bool] | None,
                limit: int) -> tuple[str, ...]:
        return tuple(c.short() for c in grouped_candidates(g, mm, routing(g, mm), limit))

    def kernel(self, mm: str, label: str, prologue_a: tuple[str, ...], prologue_b: tuple[str, ...],
               epilogue: tuple[str, ...]) -> GroupedKernel:
        return GroupedKernel(mm, prologue_a, prologue_b, epilogue, GroupedConfig.from_short(label))

    def regions(self, kernel: GroupedKernel) -> dict[str, tuple[str, ...]]:
        return TEMPLATE.regions(kernel)  # type: ignore[arg-type]

    def estimate(self, g: OpGraph, kernel: GroupedKernel, i: int, stored: set[str], hw: Hardware
                 ) -> KernelEstimate:
        return grouped_estimate(g, kernel, i, stored, hw)

    def features(self, g: OpGraph, kernel: GroupedKernel, stored: set[str], hw: Hardware,
                 resources: KernelResources | None) -> dict[str, float]:
        """The template's features of the same blocks, the problem seen per expert: M the pairs an expert gets
        on average, N its columns, the batch the experts the tokens touch on average."""
        f = TEMPLATE.tile_features(g, kernel, tile_shape(kernel), hw)
        r = routing(g, kernel.matmul)
        touched = r.expected_experts()
        f["log2_m"], f["log2_n"], f["log2_batch"] = (math.log2(max(r.pairs / touched, 1.0)), math.log2(r.cols),
                                                     math.log2(max(touched, 1.0)))
        return f

    def generate(self, ctx: ModuleContext, kernel: GroupedKernel, stored: set[str], name: str) -> KernelCode:
        return KernelCode(generate_grouped(ctx.graph, kernel, stored, name, ctx.options))

    def scratch(self, step: list[GeneratedKernel], i: int) -> Scratch:
        """The default's, and the routing table its first kernel writes (the pairs sorted by expert) and the
        later ones read: poisoned, a fresh table of int32 max, so that an entry the routing kernel failed to
        write points far outside every buffer instead of at a pair of the previous call."""
        out = super().scratch(step, i)
        table = next((gk for gk in step if gk.routing), None)
        if table is not None:
            out.lines.append(f"rt{i} = _alloc(({table.routing},), torch.int32, device, True) if poison else "
                             f"_workspace({table.name + '_routing'!r}, {table.routing}, device, torch.int32)")
        for gk, args in zip(step, out.args, strict=True):
            if gk.routing:
                args.append(f"rt{i}")
        return out


def grouped_estimate(g: OpGraph, k: GroupedKernel, i: int, stored: set[str], hw: Hardware) -> KernelEstimate:
    """The weight of each expert the tokens touch (on average, before the router runs) read once per block of
    its pairs; A's rows once per column block (from L2 after the first); the B prologue's work once per block,
    A's per column block; the tensor cores work on whole blocks of BLOCK_M pairs; split-K adds the fp32
    workspace round trip; the routing kernel adds a launch."""
    cfg, r = k.config, routing(g, k.matmul)
    shape = tile_shape(k)
    p = GROUPED.problem(g, k.matmul)
    ops = GROUPED.operands(g, k.matmul)
    a_dtype = g.node(ops["A"]).dtype
    touched = r.expected_experts()
    blocks = max(touched, math.ceil(r.pairs / cfg.block_m))  # blocks of pairs that do work
    k_blocks = math.ceil(p.k / cfg.block_k)
    split = max(1, min(cfg.split_k, k_blocks))
    col_tiles = math.ceil(r.cols / cfg.block_n)
    ctas = col_tiles * split * blocks
    slots = hw.multiprocessors * ctas_per_sm(shape, a_dtype.itemsize, hw)  # type: ignore[arg-type]
    waves = math.ceil(ctas / slots)
    # One expert's weight (what the B chain reads for one pair's columns), times the blocks that read it
    # (leaf_bytes counts a gathered table's rows once each, never more than the whole table: E experts).
    b_all = leaf_bytes(g, set(k.prologue_b), k.prologue_b)
    b_expert = b_all / max(min(r.pairs, r.experts), 1)
    b_read = round(b_expert * blocks)
    a_read = leaf_bytes(g, set(k.prologue_a), k.prologue_a) if k.prologue_a else g.node(ops["A"]).nbytes
    epi_read = leaf_bytes(g, {k.matmul, *k.epilogue}, k.epilogue)
    written = sum(g.node(n).nbytes for n in stored)
    pro_flops = (pointwise_work(g, k.prologue_a) * col_tiles
                 + round(pointwise_work(g, k.prologue_b) / max(r.pairs, 1) * blocks))
    epi_flops = pointwise_work(g, k.epilogue)
    padded = 2 * blocks * cfg.block_m * col_tiles * cfg.block_n * k_blocks * cfg.block_k
    compute = (padded / hw.peak(a_dtype) + (pro_flops + epi_flops) / hw.elementwise_flops) * 1e6
    workspace = 2 * split * blocks * cfg.block_m * r.cols * 4 if split > 1 else 0
    read = a_read + b_read + epi_read + workspace // 2
    memory = (read + written + workspace // 2) / (hw.bandwidth_bytes_per_s * bandwidth_share(ctas, hw)) * 1e6
    flops = 2 * r.pairs * r.cols * p.k + pro_flops + epi_flops
    return KernelEstimate(i, "grouped", read, written + workspace // 2, flops,
                          max(memory, compute) + 2 * hw.launch_us, memory, compute, waves,
                          col_tiles * blocks_bound(r, cfg.block_m), 1.0, 1.0)


GROUPED = GroupedKind()
