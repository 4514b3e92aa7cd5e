"""The decode matmul's Triton source: one CTA per (column block, K slice, batch), all M rows in one block, so
every weight byte is read once; the K loop pipelined through tl.range (Triton pipelines only loads that feed a
tl.dot otherwise: the fma form's loads need it); the inner product as DecodeConfig.product says; split-K
reduced by the last slice to arrive, which runs the epilogue (the template's serial tail)."""

from __future__ import annotations

import math

import torch

from fusionsearch.errors import CodegenError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.kinds.decode_matmul.kernel import DecodeKernel
from fusionsearch.kinds.triton_source.emit import NameGen, Source
from fusionsearch.kinds.triton_source.kernel import GeneratedKernel
from fusionsearch.kinds.triton_source.matmul_tile import (
    MatmulTile,
    TileShape,
    assemble_kernel,
    finish_tile,
    k_slices,
    load_operands,
    serial_split_k,
    tile_header,
    tma_tile_loads,
)
from fusionsearch.kinds.triton_source.scale_after_dot import find_scales
from fusionsearch.kinds.triton_source.tile import Buffers
from fusionsearch.plan.matmul import problem, template_operands
from fusionsearch.plan.options import FP32_DOTS, CodegenOptions

_PRODUCT = {
    "dot": "acc = tl.dot(a{s}, b{s}, acc{precision})",
    "dot_t": "acc = tl.dot(b{s}, a{s}, acc{precision})",  # B^T [BLOCK_N, BLOCK_K] @ A^T [BLOCK_K, BLOCK_M]
    "fma": "acc += tl.sum(a{s}.to(tl.float32)[:, :, None] * b{s}.to(tl.float32)[None, :, :], axis=1)",
    "fma_acc": "acc3 += a{s}.to(tl.float32)[:, :, None] * b{s}.to(tl.float32)[None, :, :]",  # summed at the end
}
_FMA_PAIRS = ("acc += tl.sum(a_e.to(tl.float32)[:, :, None] * b_e.to(tl.float32)[None, :, :] + "
              "a_o.to(tl.float32)[:, :, None] * b_o.to(tl.float32)[None, :, :], axis=1)")


def tile_shape(g: OpGraph, k: DecodeKernel) -> TileShape:
    """The blocks the decode kernel's source is generated for (BLOCK_M from the problem's rows)."""
    c = k.config
    return TileShape(c.block_m(problem(g, k.matmul).m), c.block_n, c.block_k, 1, c.split_k, c.num_warps,
                     c.num_stages)


def generate_decode(g: OpGraph, k: DecodeKernel, stored: set[str], name: str, o: CodegenOptions
                    ) -> list[GeneratedKernel]:
    """The Triton kernel of one decode matmul (split-K serial: one launch). Of the codegen options it follows
    the upcasts, split_epilogue, fp32_dot, tma_loads (the weight's tiles) and scale_after_dot; persistent or
    warp-specialised loops are the template's."""
    p = problem(g, k.matmul)
    if min(p.m, p.n, p.k) == 0:
        raise CodegenError(f"matmul {k.matmul!r} has an empty dimension")
    cfg, product = tile_shape(g, k), k.config.product
    split, k_tiles, even_k = k_slices(p, cfg.block_k, cfg.split_k)
    transposed = product == "dot_t"
    t = MatmulTile(p, cfg.block_m, cfg.block_n, even_k)
    t_load = MatmulTile(p, cfg.block_m, cfg.block_n, even_k, transposed=transposed)
    buffers, kernel_src = Buffers(g), Source(1, NameGen())
    src = tile_header(kernel_src, f"fusionsearch decode kernel: {g.node(k.matmul).op}, prologue A "
                                  f"{len(k.prologue_a)} ops, B {len(k.prologue_b)} ops, epilogue {len(k.epilogue)} "
                                  f"ops, {k.config.short()}", p, split)
    src.line("acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)" if transposed
             else "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)")
    if product == "fma_acc":
        src.line(f"acc3 = tl.zeros((BLOCK_M, {'BLOCK_K // 2' if k.config.pairs else 'BLOCK_K'}, BLOCK_N), "
                 "dtype=tl.float32)")
    hoist, loop = src.child(), src.child(1)
    k_tile = f"pid_k * {k_tiles} + k_tile" if split > 1 else "k_tile"
    pairs = k.config.pairs
    if pairs:
        if not even_k:
            raise CodegenError(f"matmul {k.matmul!r}: the decode pairs form needs K ({p.k}) a whole number of "
                               f"K blocks that the splits share evenly")
        hoist.line("kp = tl.arange(0, BLOCK_K // 2)")
        loop.line(f"kb = {k_tile}")
        loop.line("idx_k = kb * BLOCK_K + tl.arange(0, BLOCK_K)")
    else:
        loop.line(f"idx_k = ({k_tile}) * BLOCK_K + tl.arange(0, BLOCK_K)")
    if not even_k:
        loop.line("mask_k = idx_k < K")
    op_dtype = g.node(template_operands(g, k.matmul)["A"]).dtype
    bk = "BLOCK_K // 2" if pairs else "BLOCK_K"
    shapes = ({"A": "(BLOCK_K, BLOCK_M)", "B": f"(BLOCK_N, {bk})"} if transposed
              else {"A": "(BLOCK_M, BLOCK_K)", "B": f"({bk}, BLOCK_N)"})
    # The pairs form: B evaluated at its even and its odd K (one byte load for a nibble pair); A, a few rows,
    # read whole along K (contiguous: vector loads the pipeline can prefetch) and split in registers.
    parities = {"B": tuple((MatmulTile(p, cfg.block_m, cfg.block_n, even_k, transposed=transposed, parity=par,
                                       block_k=cfg.block_k), suffix)
                           for par, suffix in ((0, "_e"), (1, "_o")))} if pairs else None
    # TMA: the weight's tiles through a tensor descriptor (a box of at most 256 a side; not the pairs form,
    # whose K tiles are not the weight's)
    tma = o.tma_loads and not pairs and cfg.block_n <= 256 and cfg.block_k <= 256
    tiles = {"B": tma_tile_loads(g, k.matmul, "B", t_load, f"({k_tile}) * BLOCK_K", transposed)} if tma else None
    scales = tuple(find_scales(g, k).values()) if o.scale_after_dot else ()
    load_operands(g, k, t_load, loop, hoist, buffers, o.upcast_prologue, even_k, op_dtype, shapes, tiles,
                  parities=parities, vector_loads=True, scales=scales)
    if pairs:
        loop.line("a_e, a_o = tl.split(tl.permute(tl.reshape(a, (BLOCK_K // 2, 2, BLOCK_M)), (0, 2, 1)))"
                  if transposed else "a_e, a_o = tl.split(tl.reshape(a, (BLOCK_M, BLOCK_K // 2, 2)))")
    precision = f', input_precision="{FP32_DOTS[o.fp32_dot]}"' if op_dtype == torch.float32 else ""
    if pairs and product == "fma":
        loop.line(_FMA_PAIRS)
    else:
        for suffix in ("_e", "_o") if pairs else ("",):
            loop.line(_PRODUCT[product].format(precision=precision, s=suffix))
    src.splice(hoist)
    src.line(f"for k_tile in tl.range({k_tiles}, num_stages={cfg.num_stages}):")
    src.splice(loop)
    if transposed:
        src.line("acc = tl.trans(acc)")
    if product == "fma_acc":
        src.line("acc = tl.sum(acc3, axis=1)")
    tiles = math.ceil(p.n / cfg.block_n)
    constexprs = {"BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k, "GROUP_M": 1}
    if split == 1:
        finish_tile(g, k, stored, src, buffers, t, o.upcast_epilogue, p, cfg, even_k, o.split_epilogue, scales)
        return [assemble_kernel(name, kernel_src, buffers, (tiles, 1, p.batch), constexprs, cfg)]
    serial_split_k(g, k, stored, src, buffers, t, o.upcast_epilogue, p, cfg, even_k, o.split_epilogue, split, tiles,
                   scales)
    return [assemble_kernel(name, kernel_src, buffers, (tiles, split, p.batch), constexprs, cfg,
                            split * p.batch * p.m * p.n, tiles * p.batch)]
