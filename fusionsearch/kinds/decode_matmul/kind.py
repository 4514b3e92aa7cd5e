"""The decode matmul kind (issue 27): a matmul of at most 16 rows read from the weight's bytes up. The template
tiles M too, so a small-M matmul re-reads nothing but pads M to its block and spreads the weight over few
CTAs; this kind takes all rows in one block, splits K across the GPU, and offers the inner product on the
tensor cores either way round or as fp32 FMAs, each also in the pairs form (K as its even and odd halves, so
an int4 weight's byte is loaded once for both nibbles). Estimate and features here (the pairs form's fewer
instructions show in the compiled features); source in source.py; configs in configs.py."""

from __future__ import annotations

import math
from collections.abc import Callable

from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.hardware import Hardware
from fusionsearch.kinds.base import KernelCode, MatmulKind, ModuleContext
from fusionsearch.kinds.counting import KernelEstimate, bandwidth_share, ctas_per_sm, leaf_bytes, pointwise_work
from fusionsearch.kinds.decode_matmul.configs import accepts, decode_candidates
from fusionsearch.kinds.decode_matmul.kernel import DecodeConfig, DecodeKernel
from fusionsearch.kinds.decode_matmul.source import generate_decode, tile_shape
from fusionsearch.kinds.matmul_template.kind import TEMPLATE
from fusionsearch.plan.resources import KernelResources
from fusionsearch.plan.tile import TileConfig


class DecodeKind(MatmulKind):
    """DecodeKernel: one choice per decode config, offered for matmuls of at most 16 rows."""

    name = "decode"
    onehot = "kind_decode"
    kernel_type = DecodeKernel
    runs_triton = True
    compiled_features = True

    def accepts(self, g: OpGraph, mm: str) -> bool:
        return accepts(g, mm)

    def choices(self, g: OpGraph, mm: str, fits: Callable[[OpGraph, str, TileConfig], bool] | None,
                limit: int) -> tuple[str, ...]:
        return tuple(c.short() for c in decode_candidates(g, mm, limit))

    def kernel(self, mm: str, label: str, prologue_a: tuple[str, ...], prologue_b: tuple[str, ...],
               epilogue: tuple[str, ...]) -> DecodeKernel:
        return DecodeKernel(mm, prologue_a, prologue_b, epilogue, DecodeConfig.from_short(label))

    def regions(self, kernel: DecodeKernel) -> dict[str, tuple[str, ...]]:
        return TEMPLATE.regions(kernel)  # type: ignore[arg-type]

    def estimate(self, g: OpGraph, kernel: DecodeKernel, i: int, stored: set[str], hw: Hardware) -> KernelEstimate:
        return decode_estimate(g, kernel, i, stored, hw)

    def features(self, g: OpGraph, kernel: DecodeKernel, stored: set[str], hw: Hardware,
                 resources: KernelResources | None) -> dict[str, float]:
        """The template's features of the same blocks (BLOCK_M the padded rows), and the product's form."""
        f = TEMPLATE.tile_features(g, kernel, tile_shape(g, kernel), hw)
        f["decode_fma"] = float(kernel.config.on_cuda_cores)
        f["decode_dot_t"] = float(kernel.config.product == "dot_t")
        f["decode_fma_acc"] = float(kernel.config.product == "fma_acc")
        for form in ("pairs", "words", "rows"):
            f[f"decode_{form}"] = float(getattr(kernel.config, form))
        return f

    def generate(self, ctx: ModuleContext, kernel: DecodeKernel, stored: set[str], name: str) -> KernelCode:
        return KernelCode(generate_decode(ctx.graph, kernel, stored, name, ctx.options))


def decode_estimate(g: OpGraph, k: DecodeKernel, i: int, stored: set[str], hw: Hardware) -> KernelEstimate:
    """Every operand byte read once (one block of rows: B once; A's few rows from L2 for each column block),
    prologues recomputed once (B) or per column block (A); the work as the product does it (a dot pads the rows
    to 16 on the tensor cores, fma computes the padded power of two in fp32); split-K adds an fp32 workspace
    round trip and the last slice's reduce and epilogue."""
    cfg, shape = k.config, tile_shape(g, k)
    p = DECODE.problem(g, k.matmul)
    ops = DECODE.operands(g, k.matmul)
    a_dtype = g.node(ops["A"]).dtype
    k_blocks = math.ceil(p.k / cfg.block_k)
    split = max(1, min(cfg.split_k, k_blocks))
    tiles = math.ceil(p.n / cfg.block_n) * p.batch
    ctas = tiles * split
    slots = hw.multiprocessors * ctas_per_sm(shape, a_dtype.itemsize, hw)  # type: ignore[arg-type]
    waves = math.ceil(ctas / slots)
    a_once = leaf_bytes(g, set(k.prologue_a), k.prologue_a) if k.prologue_a else g.node(ops["A"]).nbytes
    b_once = leaf_bytes(g, set(k.prologue_b), k.prologue_b) if k.prologue_b else g.node(ops["B"]).nbytes
    bias = [ops["bias"]] if "bias" in ops else []
    epi_read = leaf_bytes(g, {k.matmul, *k.epilogue}, k.epilogue, bias)
    written = sum(g.node(n).nbytes for n in stored)
    epi_flops = pointwise_work(g, k.epilogue) + (g.node(k.matmul).numel if bias else 0)
    pro_flops = pointwise_work(g, k.prologue_a) * (tiles // p.batch) + pointwise_work(g, k.prologue_b)
    padded = 2 * p.batch * shape.block_m * p.n * (k_blocks * cfg.block_k)
    rate = hw.elementwise_flops if cfg.on_cuda_cores else hw.peak(a_dtype)
    compute = (padded / rate + (pro_flops + epi_flops) / hw.elementwise_flops) * 1e6
    workspace = 2 * split * p.batch * p.m * p.n * 4 if split > 1 else 0  # written, then read back by the last
    read = a_once + b_once + epi_read + workspace // 2
    memory = (read + written + workspace // 2) / (hw.bandwidth_bytes_per_s * bandwidth_share(ctas, hw)) * 1e6
    return KernelEstimate(i, "decode", read, written + workspace // 2, 2 * p.batch * p.m * p.n * p.k + pro_flops
                          + epi_flops, max(memory, compute) + hw.launch_us, memory, compute, waves, tiles, 1.0, 1.0)


DECODE = DecodeKind()
