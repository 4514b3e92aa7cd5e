"""The grouped matmul's Triton source: two launches. The routing kernel (one CTA) sorts the token-expert pairs
by expert into an int32 table: the pairs in expert order, and per expert its pair count, its first pair and
its first block of BLOCK_M pairs. The matmul kernel's grid is one axis over (blocks, K slices, column blocks),
blocks fastest: a bound on the blocks (pairs / BLOCK_M + E) is launched and a block past the last expert's
returns at once, so an expert no token chose costs no load. Each CTA reads its expert's weight block once for
all its pairs: B through the B prologue at the block's first pair (the gather then reads this expert's rows),
A's rows and the output rows at every pair's own batch and columns, so prologue, epilogue and the token-order
store are the template's code. Split-K is the template's serial tail."""

from __future__ import annotations

import math

import torch

from fusionsearch.errors import CodegenError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.kinds.grouped_matmul.kernel import GroupedKernel
from fusionsearch.kinds.grouped_matmul.routing import ExpertRouting, expert_routing
from fusionsearch.kinds.triton_source.emit import NameGen, Source
from fusionsearch.kinds.triton_source.index_check import check_index
from fusionsearch.kinds.triton_source.kernel import GeneratedKernel
from fusionsearch.kinds.triton_source.matmul_tile import (
    MatmulTile,
    TileShape,
    assemble_kernel,
    finish_tile,
    k_slices,
    load_operands,
    serial_split_k,
)
from fusionsearch.kinds.triton_source.tile import Buffers, offset
from fusionsearch.kinds.triton_source.tile_index import Idx
from fusionsearch.plan.matmul import Problem, problem, template_operands
from fusionsearch.plan.options import FP32_DOTS, CodegenOptions

INLINE_PAIRS = 64  # at most this many token-expert pairs (decode), every CTA routes them itself


def tile_shape(k: GroupedKernel) -> TileShape:
    c = k.config
    return TileShape(c.block_m, c.block_n, c.block_k, 1, c.split_k, c.num_warps, c.num_stages)


def blocks_bound(r: ExpertRouting, block_m: int) -> int:
    """Blocks of BLOCK_M pairs the grid launches: sum over experts of ceil(pairs_e / BLOCK_M) is at most this."""
    return math.ceil(r.pairs / block_m) + r.experts


def table_size(r: ExpertRouting) -> int:
    """int32 entries of the routing table: pairs in expert order, then per expert its count, its first pair,
    its first block, and the block count."""
    return r.pairs + 3 * r.experts + 1


def routing(g: OpGraph, mm: str) -> ExpertRouting:
    r = expert_routing(g, mm)
    if r is None:
        raise CodegenError(f"matmul {mm!r} is not a mixture-of-experts bmm")
    return r


def generate_grouped(g: OpGraph, k: GroupedKernel, stored: set[str], name: str, o: CodegenOptions
                     ) -> list[GeneratedKernel]:
    """The routing kernel and the grouped matmul kernel of one plan kernel. Of the codegen options it follows
    the upcasts and fp32_dot."""
    r = routing(g, k.matmul)
    if min(r.pairs, r.cols, problem(g, k.matmul).k) == 0:
        raise CodegenError(f"matmul {k.matmul!r} has an empty dimension")
    if r.pairs <= INLINE_PAIRS:
        return [_matmul_kernel(g, k, r, stored, name, o)]
    return [_route_kernel(g, r, f"{name}_route", k.config.block_m), _matmul_kernel(g, k, r, stored, name, o)]


def _expert_ids(src: Source, buffers: Buffers, r: ExpertRouting, other: int) -> None:
    """`ids`: each pair's expert (torch's negative indices counted from the end), `other` past the pairs. An
    expert outside [0, E) is reported (tile.check_index); its pair matches no expert, so nothing reads by it."""
    arg = buffers.get(r.router)
    index = (Idx(f"pair_ids // {r.top}"), Idx(f"pair_ids % {r.top}")) if len(arg.strides) == 2 else (Idx("pair_ids"),)
    where = offset(arg, index)  # idx [T, A], or [P] already flat
    src.line("pair_ids = tl.arange(0, BLOCK_P)")
    src.line(f"mask_p = pair_ids < {r.pairs}")
    src.line(f"ids = tl.load({arg.ptr} + {where}, mask=mask_p, other=0).to(tl.int32)")
    src.line(f"ids = tl.where(ids < 0, ids + {r.experts}, ids)")
    check_index(src, "ids", r.experts, "mask_p", buffers)
    src.line(f"ids = tl.where(mask_p, ids, {other})")


def _inline_routing(src: Source, buffers: Buffers, r: ExpertRouting) -> Source:
    """The block's expert, pairs and first pair computed by every CTA from the router itself (a few dozen
    pairs: [experts x pairs] and [BLOCK_M x pairs] comparisons), instead of a routing kernel's table: one launch
    less and no dependency between launches at decode. Returns the block under `if expert < E`."""
    E = r.experts
    _expert_ids(src, buffers, r, -1)
    src.line("offs_e = tl.arange(0, BLOCK_E)")
    src.line("counts = tl.sum((ids[None, :] == offs_e[:, None]).to(tl.int32), axis=1)")
    src.line("blocks_e = (counts + BLOCK_M - 1) // BLOCK_M")
    src.line("ends = tl.cumsum(blocks_e, axis=0)")
    src.line("expert = tl.sum((ends <= pid_b).to(tl.int32), axis=0)  # experts whose blocks end before this one")
    src.line(f"if expert < {E}:")
    body = src.child(1)
    body.line("count = tl.sum(tl.where(offs_e == expert, counts, 0), axis=0)")
    body.line("block = pid_b - tl.sum(tl.where(offs_e == expert, ends - blocks_e, 0), axis=0)")
    body.line("hit = (ids == expert).to(tl.int32)")
    body.line("rank = tl.cumsum(hit, axis=0) - 1")
    body.line("row = block * BLOCK_M + tl.arange(0, BLOCK_M)")
    body.line("mask_m = row < count")
    body.line("chosen = (hit[None, :] != 0) & (rank[None, :] == row[:, None])")
    body.line("pair = tl.sum(tl.where(chosen, pair_ids[None, :], 0), axis=1)")
    body.line("lead = tl.sum(tl.where((hit != 0) & (rank == block * BLOCK_M), pair_ids, 0), axis=0)")
    return body


def _table_routing(src: Source, r: ExpertRouting, blocks: int) -> Source:
    """The block's expert, pairs and first pair read from the routing kernel's table; returns the block under
    `if expert < E`."""
    P, E = r.pairs, r.experts
    src.line("offs_e = tl.arange(0, BLOCK_E)")
    src.line(f"ends = tl.load(rt_ptr + {P + 2 * E + 1} + offs_e, mask=offs_e < {E}, other={blocks})")
    src.line("expert = tl.sum((ends <= pid_b).to(tl.int32), axis=0)  # experts whose blocks end before this one")
    src.line(f"if expert < {E}:")
    body = src.child(1)
    body.line(f"count = tl.load(rt_ptr + {P} + expert)")
    body.line(f"first = tl.load(rt_ptr + {P + E} + expert)")
    body.line(f"block = pid_b - tl.load(rt_ptr + {P + 2 * E} + expert)")
    body.line("row = block * BLOCK_M + tl.arange(0, BLOCK_M)")
    body.line("mask_m = row < count")
    body.line("pair = tl.load(rt_ptr + first + row, mask=mask_m, other=0)")
    body.line("lead = tl.load(rt_ptr + first + block * BLOCK_M)  # the block's first pair: its B is the expert's")
    return body


def _route_kernel(g: OpGraph, r: ExpertRouting, name: str, block_m: int) -> GeneratedKernel:
    buffers, src = Buffers(g), Source(1, NameGen())
    P, E = r.pairs, r.experts
    src.line(f"# fusionsearch grouped routing: {P} token-expert pairs of {E} experts, blocks of BLOCK_M pairs")
    _expert_ids(src, buffers, r, E)
    src.line("pairs_before = tl.full((), 0, tl.int32)")
    src.line("blocks_before = tl.full((), 0, tl.int32)")
    src.line(f"for e in range({E}):")
    src.line("    hit = (ids == e).to(tl.int32)")
    src.line("    count = tl.sum(hit, axis=0)")
    src.line("    rank = tl.cumsum(hit, axis=0) - 1")
    src.line("    tl.store(rt_ptr + pairs_before + rank, pair_ids, mask=hit != 0)")
    src.line(f"    tl.store(rt_ptr + {P} + e, count)")
    src.line(f"    tl.store(rt_ptr + {P + E} + e, pairs_before)")
    src.line(f"    tl.store(rt_ptr + {P + 2 * E} + e, blocks_before)")
    src.line("    pairs_before += count")
    src.line("    blocks_before += (count + BLOCK_M - 1) // BLOCK_M")
    src.line(f"tl.store(rt_ptr + {P + 3 * E}, blocks_before)")
    constexprs = {"BLOCK_P": 1 << max(P - 1, 0).bit_length(), "BLOCK_M": block_m}
    return assemble_kernel(name, src, buffers, (1, 1, 1), constexprs, None, routing=table_size(r))


def _matmul_kernel(g: OpGraph, k: GroupedKernel, r: ExpertRouting, stored: set[str], name: str,
                   o: CodegenOptions) -> GeneratedKernel:
    cfg = tile_shape(k)
    P, E, per = r.pairs, r.experts, r.pairs_per_batch
    blocks = blocks_bound(r, cfg.block_m)
    # The tile's own problem: `blocks` batches of BLOCK_M pair rows against R columns of one expert.
    p = Problem(blocks, cfg.block_m, r.cols, problem(g, k.matmul).k)
    split, k_tiles, even_k = k_slices(p, cfg.block_k, cfg.split_k)
    buffers, kernel_src = Buffers(g), Source(1, NameGen())
    # A block takes only pairs routed to an expert in [0, E) (by _expert_ids, here or in the routing kernel,
    # which checks every id): the B gather's ids, read at those pairs, need no second check.
    buffers.checked.add(r.router)
    src = kernel_src
    src.line(f"# fusionsearch grouped kernel: {g.node(k.matmul).op} of {E} experts, prologue A "
             f"{len(k.prologue_a)} ops, B {len(k.prologue_b)} ops, epilogue {len(k.epilogue)} ops, {k.config.short()}")
    src.line(f"M = {cfg.block_m}")
    src.line(f"N = {r.cols}")
    src.line(f"K = {p.k}")
    # One grid axis, the blocks varying fastest, then the K slices, then the column blocks: the CTAs that read
    # one expert's weight tile (its blocks) run side by side, so its second block finds the tile in L2, and a
    # tile's splits finish close together, their partials still in L2 for the last one.
    src.line("lin = tl.program_id(0)")
    src.line(f"pid_b = lin % {blocks}")
    if split > 1:
        src.line(f"pid_k = (lin // {blocks}) % {split}")
    src.line(f"pid = lin // {blocks * split}")
    inline = r.pairs <= INLINE_PAIRS
    body = _inline_routing(src, buffers, r) if inline else _table_routing(src, r, blocks)
    for who in ("pair", "lead"):  # the pair's batch and (laid out by token) its first column
        body.line(f"{who}_b = {who} // {per}" if per > 1 else f"{who}_b = {who}")
        if per > 1:
            body.line(f"{who}_c = ({who} % {per}) * N")
    body.line("idx_m = tl.arange(0, BLOCK_M)")
    body.line("idx_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)")
    body.line("mask_n = idx_n < N")
    body.line("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)")
    t = MatmulTile(p, cfg.block_m, cfg.block_n, even_k)
    rows, cols = Idx("pair_b[:, None]", "mask_m[:, None]"), t.n_col
    t.b, t.m_row = rows, Idx("0")
    t_b = MatmulTile(p, cfg.block_m, cfg.block_n, even_k)
    t_b.b = Idx("lead_b")
    if per > 1:
        t.n_col = Idx(f"(pair_c[:, None] + {cols.expr})", cols.mask)
        t_b.n_col = Idx(f"(lead_c + {cols.expr})", cols.mask)
    hoist, loop = body.child(), body.child(1)
    k_tile = f"pid_k * {k_tiles} + k_tile" if split > 1 else "k_tile"
    loop.line(f"idx_k = ({k_tile}) * BLOCK_K + tl.arange(0, BLOCK_K)")
    if not even_k:
        loop.line("mask_k = idx_k < K")
    op_dtype = g.node(template_operands(g, k.matmul)["A"]).dtype
    load_operands(g, k, t, loop, hoist, buffers, o.upcast_prologue, even_k, op_dtype,
                  {"A": "(BLOCK_M, BLOCK_K)", "B": "(BLOCK_K, BLOCK_N)"}, t_b=t_b)
    precision = f', input_precision="{FP32_DOTS[o.fp32_dot]}"' if op_dtype == torch.float32 else ""
    loop.line(f"acc = tl.dot(a, b, acc{precision})")
    body.splice(hoist)
    body.line(f"for k_tile in tl.range({k_tiles}, num_stages={cfg.num_stages}):")
    body.splice(loop)
    tiles = math.ceil(r.cols / cfg.block_n)
    constexprs = {"BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k,
                  "BLOCK_E": 1 << max(E - 1, 0).bit_length()}
    if inline:
        constexprs["BLOCK_P"] = 1 << max(P - 1, 0).bit_length()
    size = 0 if inline else table_size(r)
    if split == 1:
        finish_tile(g, k, stored, body, buffers, t, o.upcast_epilogue, p, cfg, even_k, False)
        src.splice(body)
        return assemble_kernel(name, kernel_src, buffers, (tiles * blocks, 1, 1), constexprs, cfg, routing=size)
    serial_split_k(g, k, stored, body, buffers, t, o.upcast_epilogue, p, cfg, even_k, False, split, tiles)
    src.splice(body)
    return assemble_kernel(name, kernel_src, buffers, (tiles * split * blocks, 1, 1), constexprs, cfg,
                           split * blocks * cfg.block_m * r.cols, tiles * blocks, routing=size)
