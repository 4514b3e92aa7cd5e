"""The matmul template's Triton source: a K loop whose tile indices are recomputed from the loop index on every
iteration, with hooks for each input's load (prologue) and the output's store (epilogue); split-K through a
workspace, reduced by the last split to arrive or by a second kernel that then runs the epilogue. The pieces
every matmul kind shares are in triton_source/matmul_tile.py."""

from __future__ import annotations

import math

import torch

from fusionsearch.errors import CodegenError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.kinds.triton_source.emit import NameGen, Source
from fusionsearch.kinds.triton_source.kernel import GeneratedKernel
from fusionsearch.kinds.triton_source.matmul_tile import (
    MatmulTile,
    assemble_kernel,
    finish_tile,
    k_slices,
    load_operands,
    shared_a_dots,
    tile_header,
    tma_tile_loads,
)
from fusionsearch.kinds.triton_source.matmul_tile import serial_split_k as serial_split_k_tail
from fusionsearch.kinds.triton_source.tile import Buffers
from fusionsearch.plan.kernels import TemplateKernel
from fusionsearch.plan.matmul import problem, template_operands
from fusionsearch.plan.options import FP32_DOT, FP32_DOTS


def generate_template(g: OpGraph, k: TemplateKernel, stored: set[str], name: str,
                      upcast_prologue: bool = False, upcast_epilogue: bool = True,
                      serial_split_k: bool = True, tma_loads: bool = False,
                      persistent: bool = False, split_epilogue: bool = False,
                      warp_specialize: bool = False, fp32_dot: str = FP32_DOT) -> list[GeneratedKernel]:
    """The Triton kernel(s) of one template step: the matmul, and with split-K the reduce + epilogue kernel,
    or with `serial_split_k` one kernel in which the last split to finish a tile sums the partial tiles and
    runs the epilogue (one launch instead of two; a per-tile arrival counter, reset by that last split).
    With `tma_loads`, operand tiles of contiguous 2-D tensors are read through TMA tensor descriptors. With
    `persistent` (no split-K only), at most one program per multiprocessor, each looping over tiles. With
    `split_epilogue`, the epilogue finishes the tile in two column halves (fewer live registers). With
    `warp_specialize` (persistent only), Triton's warp-specialised tile loop instead of the flattened one.
    `fp32_dot` is the dot's input precision for fp32 operands (one of FP32_DOTS: CodegenOptions checked it)."""
    cfg = k.config
    p = problem(g, k.matmul)
    if min(p.m, p.n, p.k) == 0:
        raise CodegenError(f"matmul {k.matmul!r} has an empty dimension")
    split, k_tiles, even_k = k_slices(p, cfg.block_k, cfg.split_k)
    t = MatmulTile(p, cfg.block_m, cfg.block_n, even_k)
    names = NameGen()
    buffers = Buffers(g)
    kernel_src = Source(1, names)
    mm_node = g.node(k.matmul)
    persistent = persistent and split == 1
    src = tile_header(kernel_src, f"fusionsearch template kernel: {mm_node.op}, prologue A {len(k.prologue_a)} ops, "
                              f"B {len(k.prologue_b)} ops, epilogue {len(k.epilogue)} ops, {cfg.short()}"
                              + (", persistent" if persistent else ""), p, split, persistent, warp_specialize)
    src.line("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)")
    hoist = src.child()
    loop = src.child(1)
    k_tile = f"pid_k * {k_tiles} + k_tile" if split > 1 else "k_tile"
    loop.line(f"idx_k = ({k_tile}) * BLOCK_K + tl.arange(0, BLOCK_K)")
    if not even_k:
        loop.line("mask_k = idx_k < K")
    op_dtype = g.node(template_operands(g, k.matmul)["A"]).dtype
    tiles_by_side = {side: tma_tile_loads(g, k.matmul, side, t, f"({k_tile}) * BLOCK_K") if tma_loads else None
                     for side in ("A", "B")}
    load_operands(g, k, t, loop, hoist, buffers, upcast_prologue, even_k, op_dtype,
                  {"A": "(BLOCK_M, BLOCK_K)", "B": "(BLOCK_K, BLOCK_N)"}, tiles_by_side)
    precision = f', input_precision="{FP32_DOTS[fp32_dot]}"' if op_dtype == torch.float32 else ""
    loop.line(f"acc = tl.dot(a, b, acc{precision})")
    shared = shared_a_dots(g, k, t, src, loop, hoist, buffers, upcast_prologue, op_dtype, precision)
    if shared and split > 1:
        raise CodegenError(f"matmul {k.matmul!r}: a second matmul in the K loop runs unsplit (plan legality)")
    src.splice(hoist)
    src.line(f"for k_tile in range({k_tiles}):")
    src.splice(loop)
    tiles = math.ceil(p.m / cfg.block_m) * math.ceil(p.n / cfg.block_n)
    constexprs = {"BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k, "GROUP_M": cfg.group_m}
    kernels = []
    if split == 1:
        finish_tile(g, k, stored, src, buffers, t, upcast_epilogue, p, cfg, even_k, split_epilogue, shared=shared)
        if persistent:
            kernel_src.splice(src)
        programs = f"_programs({tiles}, device)" if persistent else tiles
        kernels.append(assemble_kernel(name, kernel_src, buffers, (programs, 1, p.batch), constexprs, cfg))
        return kernels
    ws_elems = split * p.batch * p.m * p.n
    if serial_split_k:
        serial_split_k_tail(g, k, stored, src, buffers, t, upcast_epilogue, p, cfg, even_k, split_epilogue, split,
                            tiles)
        kernels.append(assemble_kernel(name, src, buffers, (tiles, split, p.batch), constexprs, cfg, ws_elems,
                                       tiles * p.batch))
        return kernels
    src.line(f"ws_off = ((pid_k * {p.batch} + pid_b) * M + idx_m[:, None]) * N + idx_n[None, :]")
    src.line("tl.store(ws_ptr + ws_off, acc, mask=mask_m[:, None] & mask_n[None, :])")
    kernels.append(assemble_kernel(name, src, buffers, (tiles, split, p.batch), constexprs, cfg, ws_elems))
    # The reduce kernel sums the partial tiles, then runs the epilogue once.
    rnames = NameGen()
    rbuf = Buffers(g)
    rsrc = Source(1, rnames)
    tile_header(rsrc, f"fusionsearch split-K reduce + epilogue ({split} splits)", p, 1)
    rsrc.line("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)")
    rsrc.line(f"for s in range({split}):")
    rsrc.line(f"    ws_off = ((s * {p.batch} + pid_b) * M + idx_m[:, None]) * N + idx_n[None, :]")
    rsrc.line("    acc += tl.load(ws_ptr + ws_off, mask=mask_m[:, None] & mask_n[None, :], other=0.0)")
    finish_tile(g, k, stored, rsrc, rbuf, t, upcast_epilogue, p, cfg, even_k, split_epilogue)
    kernels.append(assemble_kernel(name + "_reduce", rsrc, rbuf, (tiles, 1, p.batch), constexprs, cfg, ws_elems))
    return kernels


