"""The matmul template kind: a matmul generated as a Triton template with its tile config, prologues fused into
its operand loads and an epilogue on its output tile. Estimate and features here; source in source.py; tile
config candidates in configs.py."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

from fusionsearch.graph.opgraph import Node, OpGraph
from fusionsearch.hardware import Hardware
from fusionsearch.kinds.base import KernelCode, MatmulKind, ModuleContext, matmul_flops
from fusionsearch.kinds.counting import (
    KernelEstimate,
    bandwidth_share,
    bits,
    ctas_per_sm,
    leaf_bytes,
    loaded,
    log2,
    pointwise_work,
    smem_bytes,
)
from fusionsearch.kinds.matmul_template.configs import config_candidates, known_good
from fusionsearch.kinds.matmul_template.source import generate_template
from fusionsearch.kinds.triton_source.matmul_tile import TileShape
from fusionsearch.plan.build import default_config
from fusionsearch.plan.kernels import FusedMatmulKernel, TemplateKernel
from fusionsearch.plan.matmul import shared_a_matmuls
from fusionsearch.plan.resources import KernelResources
from fusionsearch.plan.tile import TileConfig


class TemplateKind(MatmulKind):
    """TemplateKernel: one choice per tile config the search space offers for the matmul."""

    name = "template"
    onehot = "kind_template"
    kernel_type = TemplateKernel
    runs_triton = True
    compiled_features = True  # its features include what the compiled kernel uses (plan.resources)

    def estimate(self, g: OpGraph, kernel: TemplateKernel, i: int, stored: set[str], hw: Hardware
                 ) -> KernelEstimate:
        return template_estimate(g, kernel, i, stored, hw)

    def regions(self, kernel: TemplateKernel) -> dict[str, tuple[str, ...]]:
        return {"pro_a": kernel.prologue_a, "pro_b": kernel.prologue_b, "epi": kernel.epilogue, "body": ()}

    def features(self, g: OpGraph, kernel: TemplateKernel, stored: set[str], hw: Hardware,
                 resources: KernelResources | None) -> dict[str, float]:
        return self.tile_features(g, kernel, kernel.config, hw)

    def tile_features(self, g: OpGraph, kernel: FusedMatmulKernel, cfg: TileConfig | TileShape, hw: Hardware
                      ) -> dict[str, float]:
        """The features of a fused matmul run on blocks `cfg` (the decode kind shares them on its own blocks)."""
        f = {key: float(getattr(cfg, key))
             for key in ("block_m", "block_n", "block_k", "group_m", "split_k", "num_warps", "num_stages")}
        ops = self.operands(g, kernel.matmul)
        f["a_bits"], f["b_bits"] = float(bits(g.node(ops["A"]).dtype)), float(bits(g.node(ops["B"]).dtype))
        p = self.problem(g, kernel.matmul)
        f["log2_m"], f["log2_n"], f["log2_k"], f["log2_batch"] = log2(p.m), log2(p.n), log2(p.k), log2(p.batch)
        f["log2_numel"] = log2(p.batch * p.m * p.n)
        padded = (math.ceil(p.m / cfg.block_m) * cfg.block_m * math.ceil(p.n / cfg.block_n) * cfg.block_n
                  * math.ceil(p.k / cfg.block_k) * cfg.block_k)
        f["pad_efficiency"] = p.m * p.n * p.k / padded
        f.update(_occupancy(self, g, kernel, cfg, hw))
        return f

    def generate(self, ctx: ModuleContext, kernel: TemplateKernel, stored: set[str], name: str) -> KernelCode:
        o = ctx.options
        return KernelCode(generate_template(ctx.graph, kernel, stored, name, o.upcast_prologue, o.upcast_epilogue,
                                            o.serial_split_k, o.tma_loads, o.persistent, o.split_epilogue,
                                            o.warp_specialize, o.fp32_dot))

    def default_config(self, g: OpGraph, mm: str) -> TileConfig:
        """The tile config a plan built without one gets (plan.build.default_config)."""
        return default_config(g, mm)

    def choices(self, g: OpGraph, mm: str, fits: Callable[[OpGraph, str, TileConfig], bool] | None,
                limit: int) -> tuple[str, ...]:
        return tuple(label for label, _ in self.offers(g, mm, fits, limit))

    def offers(self, g: OpGraph, mm: str, fits: Callable[[OpGraph, str, TileConfig], bool] | None,
               limit: int) -> tuple[tuple[str, object], ...]:
        return tuple((c.short(), c) for c in config_candidates(g, mm, fits, limit))

    def known_good(self, g: OpGraph, mm: str) -> tuple[str, ...]:
        return tuple(c.short() for c in known_good(g, mm))

    def kernel(self, mm: str, label: str, prologue_a: tuple[str, ...], prologue_b: tuple[str, ...],
               epilogue: tuple[str, ...]) -> TemplateKernel:
        return TemplateKernel(mm, prologue_a, prologue_b, epilogue, _config(label))


@functools.lru_cache(maxsize=4096)
def _config(label: str) -> TileConfig:
    """The tile config a choice label names (a search builds one plan per trial from the same few labels)."""
    return TileConfig.from_short(label)


def _l2_reuse(tiles_m: int, tiles_n: int, group_m: int, concurrent: int) -> tuple[float, float]:
    """How many tiles share each A row-block (first) and each B column-block (second) while they run together.

    Tiles start in group_m order: down a column of `group` rows, then across columns, then to the next group.
    A window of `concurrent` running tiles therefore covers R rows x C columns of the tile grid; an A
    row-block fetched from DRAM serves its C columns through L2, a B column-block its R rows."""
    group = min(group_m, tiles_m)
    if concurrent <= group:
        rows, cols = float(concurrent), 1.0
    elif concurrent <= group * tiles_n:
        rows, cols = float(group), concurrent / group
    else:
        rows, cols = min(float(tiles_m), concurrent / tiles_n), float(tiles_n)
    return max(1.0, cols), max(1.0, rows)


def template_estimate(g: OpGraph, k: TemplateKernel, i: int, stored: set[str], hw: Hardware) -> KernelEstimate:
    """A template re-reads A once per column of tiles and B once per row, less what running tiles share in
    L2; prologues are re-read and recomputed with their operand; split-K adds an fp32 workspace round trip."""
    cfg = k.config
    p = TEMPLATE.problem(g, k.matmul)
    ops = TEMPLATE.operands(g, k.matmul)
    a_dtype = g.node(ops["A"]).dtype
    k_blocks = math.ceil(p.k / cfg.block_k)
    split = max(1, min(cfg.split_k, k_blocks))  # as the template's source clamps it
    tiles_m, tiles_n = math.ceil(p.m / cfg.block_m), math.ceil(p.n / cfg.block_n)
    tiles = tiles_m * tiles_n
    ctas = tiles * split * p.batch
    slots = hw.multiprocessors * ctas_per_sm(cfg, a_dtype.itemsize, hw)
    waves = math.ceil(ctas / slots)

    # Operand traffic: the grid's x axis (tiles) varies fastest, so tiles running together share a K slice.
    reuse_a, reuse_b = _l2_reuse(tiles_m, tiles_n, cfg.group_m, min(slots, tiles))
    reread_a = max(1.0, tiles_n / reuse_a)
    reread_b = max(1.0, tiles_m / reuse_b)
    a_once = leaf_bytes(g, set(k.prologue_a), k.prologue_a) if k.prologue_a else g.node(ops["A"]).nbytes
    b_once = leaf_bytes(g, set(k.prologue_b), k.prologue_b) if k.prologue_b else g.node(ops["B"]).nbytes
    # matmuls of the epilogue sharing the A tile: each its own B, re-read as the kernel's, and its own dots
    shared = shared_a_matmuls(g, k.epilogue)
    b_once += sum(g.node(TEMPLATE.operands(g, mm)["B"]).nbytes for mm in shared)
    operand_bytes = round(a_once * reread_a + b_once * reread_b)

    # Epilogue: its own leaves (and the bias) read once, stored values written once.
    region = {k.matmul, *k.epilogue}
    bias = [ops["bias"]] if "bias" in ops else []
    pointwise = [n for n in k.epilogue if n not in shared]
    epi_read = leaf_bytes(g, region, pointwise, bias)
    written = sum(g.node(n).nbytes for n in stored)
    epi_flops = pointwise_work(g, pointwise) + (g.node(k.matmul).numel if bias else 0)

    # Work: every CTA recomputes the prologue on the operand slice it loads, so prologue work repeats
    # once per column (A) or row (B) of tiles whatever L2 saves; the tensor cores also do the padding.
    mm_flops = matmul_flops(p) * (1 + len(shared))
    pro_flops = pointwise_work(g, k.prologue_a) * tiles_n + pointwise_work(g, k.prologue_b) * tiles_m
    padded = (2 * p.batch * (tiles_m * cfg.block_m) * (tiles_n * cfg.block_n) * (k_blocks * cfg.block_k)
              * (1 + len(shared)))
    quantisation = waves * slots / ctas
    main_compute = (padded / hw.peak(a_dtype) + pro_flops / hw.elementwise_flops) * 1e6 * quantisation
    epi_compute = epi_flops / hw.elementwise_flops * 1e6

    bw = hw.bandwidth_bytes_per_s
    if split == 1:
        read = operand_bytes + epi_read
        memory = (read + written) / (bw * bandwidth_share(ctas, hw)) * 1e6
        compute = main_compute + epi_compute
        time = max(memory, compute) + hw.launch_us
    else:
        # Every split writes an fp32 partial tile; the last to arrive reads them back, runs the epilogue and
        # stores (codegen's serial split-K: one launch, the reduction a tail of the same kernel).
        workspace = split * p.batch * p.m * p.n * 4
        main_memory = (operand_bytes + workspace) / (bw * bandwidth_share(ctas, hw)) * 1e6
        reduce_bytes = workspace + epi_read + written
        reduce_memory = reduce_bytes / (bw * bandwidth_share(tiles * p.batch, hw)) * 1e6
        read, written = operand_bytes + workspace + epi_read, written + workspace
        memory, compute = main_memory + reduce_memory, main_compute + epi_compute
        time = max(main_memory, main_compute) + max(reduce_memory, epi_compute) + hw.launch_us
    return KernelEstimate(i, "template", read, written, mm_flops + pro_flops + epi_flops, time, memory, compute,
                          waves, tiles * p.batch, reread_a, reread_b)


def _occupancy(kind: TemplateKind, g: OpGraph, k: FusedMatmulKernel, cfg: TileConfig | TileShape, hw: Hardware
               ) -> dict[str, float]:
    """The v2 template features: how the tile config occupies the machine and what the fused regions cost."""
    p, ops = kind.problem(g, k.matmul), kind.operands(g, k.matmul)
    a, b = g.node(ops["A"]), g.node(ops["B"])
    k_blocks = math.ceil(p.k / cfg.block_k)
    split = max(1, min(cfg.split_k, k_blocks))  # as the template's source clamps it
    tiles_m, tiles_n = math.ceil(p.m / cfg.block_m), math.ceil(p.n / cfg.block_n)
    resident = ctas_per_sm(cfg, a.dtype.itemsize, hw)
    ctas, slots = tiles_m * tiles_n * split * p.batch, hw.multiprocessors * resident
    threads = 32 * cfg.num_warps
    return {
        "k_steps": float(math.ceil(k_blocks / split)),
        "smem_kib": smem_bytes(cfg, a.dtype.itemsize) / 1024,
        "ctas_per_sm": float(resident),
        "wave_efficiency": ctas / (math.ceil(ctas / slots) * slots),
        "log2_ctas": log2(ctas),
        "acc_per_thread": cfg.block_m * cfg.block_n / threads,
        "operand_per_thread": (cfg.block_m + cfg.block_n) * cfg.block_k / threads,
        "m_fill": min(1.0, p.m / cfg.block_m), "n_fill": min(1.0, p.n / cfg.block_n),
        "split_k_run": float(split),
        "pro_a_work": log2(pointwise_work(g, k.prologue_a) * tiles_n),
        "pro_b_work": log2(pointwise_work(g, k.prologue_b) * tiles_m),
        "epi_work": log2(pointwise_work(g, k.epilogue)),
        "pro_a_per_thread": len(k.prologue_a) * cfg.block_m * cfg.block_k / threads,
        "pro_b_per_thread": len(k.prologue_b) * cfg.block_k * cfg.block_n / threads,
        "pro_a_source_bits": _narrowest_load(g, k.prologue_a), "pro_b_source_bits": _narrowest_load(g, k.prologue_b),
        "a_k_contiguous": _unit_stride(a, -1), "b_k_contiguous": _unit_stride(b, -2),
        "b_n_contiguous": _unit_stride(b, -1),
    }


def _narrowest_load(g: OpGraph, nodes: Sequence[str]) -> float:
    """Bits of the narrowest value a fused region loads (0 without a region): an int8 weight shows as 8."""
    found = loaded(g, nodes)
    return float(min(bits(g.node(n).dtype) for n in found)) if found else 0.0


def _unit_stride(node: Node, dim: int) -> float:
    return 1.0 if len(node.strides) >= 2 and node.strides[dim] == 1 else 0.0


TEMPLATE = TemplateKind()
