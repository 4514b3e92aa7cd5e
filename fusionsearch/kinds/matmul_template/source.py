"""The matmul template's Triton source: a K loop whose tile indices are recomputed from the loop index on every
iteration, with hooks for each input's load (prologue) and the output's store (epilogue); split-K through a
workspace and a reduce kernel that then runs the epilogue."""

from __future__ import annotations

import math

import torch

from fusionsearch.errors import CodegenError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.kinds.triton_source.dtypes import Value, convert, tl_dtype
from fusionsearch.kinds.triton_source.emit import NameGen, Source
from fusionsearch.kinds.triton_source.kernel import GeneratedKernel
from fusionsearch.kinds.triton_source.tile import (
    Buffers,
    Idx,
    TileEvaluator,
    TileLoads,
    _broadcast_index,
    _reshape_index,
)
from fusionsearch.plan.kernels import TemplateKernel
from fusionsearch.plan.matmul import Problem, problem, template_operands
from fusionsearch.plan.options import FP32_DOT, FP32_DOTS
from fusionsearch.plan.tile import TileConfig


class _Tile:
    """The tile's index components for A, B and the output, masks dropped where the size divides evenly."""

    def __init__(self, p: Problem, bm: int, bn: int, even_k: bool, n: str = "n") -> None:
        """`n`: the suffix of the output columns' index and mask names (idx_n, mask_n; idx_nh, mask_nh for
        an epilogue's column half)."""
        mm = None if p.m % bm == 0 else "mask_m"
        mn = None if p.n % bn == 0 else f"mask_{n}"
        mk = None if even_k else "mask_k"
        self.m_row = Idx("idx_m[:, None]", f"{mm}[:, None]" if mm else None)
        self.n_col = Idx(f"idx_{n}[None, :]", f"{mn}[None, :]" if mn else None)
        self.k_col = Idx("idx_k[None, :]", f"{mk}[None, :]" if mk else None)
        self.k_row = Idx("idx_k[:, None]", f"{mk}[:, None]" if mk else None)
        self.b = Idx("pid_b")


def _operand_index(g: OpGraph, mm: str, side: str, t: _Tile) -> tuple[Idx, ...]:
    node = g.node(mm)
    if node.op == "bmm":
        return (t.b, t.m_row, t.k_col) if side == "A" else (t.b, t.k_row, t.n_col)
    if node.op == "linear":
        if side == "B":
            return (t.n_col, t.k_row)  # weight [N, K]
        return (*_rows(g.node(node.inputs[0]).shape[:-1], t), t.k_col)
    return (t.m_row, t.k_col) if side == "A" else (t.k_row, t.n_col)


def _rows(lead: tuple[int, ...], t: _Tile) -> tuple[Idx, ...]:
    """The leading dims of a linear's input/output as a split of the tile's row index; with a single row
    (all sizes 1) the row index stays on the last dim, so the tile keeps its BLOCK_M rows and its mask."""
    if math.prod(lead) == 1:
        return (*[Idx("0")] * (len(lead) - 1), t.m_row)
    return _reshape_index((math.prod(lead),), lead, (t.m_row,))


def _output_index(g: OpGraph, mm: str, t: _Tile) -> tuple[Idx, ...]:
    node = g.node(mm)
    if node.op == "bmm":
        return (t.b, t.m_row, t.n_col)
    if node.op == "linear":
        return (*_rows(node.shape[:-1], t), t.n_col)
    return (t.m_row, t.n_col)


def _header(src: Source, title: str, p: Problem, split: int, persistent: bool = False,
            warp_specialize: bool = False) -> Source:
    """The tile's indices from the program id; returns the block the tile's code goes in: `src`, or with
    `persistent` the body of a loop over tiles (program i takes tiles i, i + programs, ...; grouped order),
    with `warp_specialize` one that Triton splits into producer and consumer warps."""
    src.line(f"# {title}")
    src.line(f"M = {p.m}")
    src.line(f"N = {p.n}")
    src.line(f"K = {p.k}")
    if split > 1:
        src.line("pid_k = tl.program_id(1)")
    src.line("pid_b = tl.program_id(2)")
    src.line("num_pid_m = tl.cdiv(M, BLOCK_M)")
    src.line("num_pid_n = tl.cdiv(N, BLOCK_N)")
    if persistent and warp_specialize:
        # Triton's warp specialisation: load warps feed the MMA warps through shared memory (Hopper: without
        # flatten, which Triton supports there only for Blackwell's warp specialisation).
        src.line("for pid in tl.range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0), "
                 "warp_specialize=True):")
        src = src.child(1)
    elif persistent:
        # flatten: Triton pipelines the tile loop and the K loop as one, so a tile's epilogue overlaps the
        # next tile's first loads.
        src.line("for pid in tl.range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0), flatten=True):")
        src = src.child(1)
    else:
        src.line("pid = tl.program_id(0)")
    src.line("num_pid_in_group = GROUP_M * num_pid_n")
    src.line("group_id = pid // num_pid_in_group")
    src.line("first_pid_m = group_id * GROUP_M")
    src.line("group_size_m = min(num_pid_m - first_pid_m, GROUP_M)")
    src.line("pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)")
    src.line("pid_n = (pid % num_pid_in_group) // group_size_m")
    src.line("idx_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)")
    src.line("idx_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)")
    src.line("mask_m = idx_m < M")
    src.line("mask_n = idx_n < N")
    return src


def _epilogue(g: OpGraph, k: TemplateKernel, stored: set[str], src: Source, buffers: Buffers, t: _Tile,
              acc: str, upcast: bool) -> None:
    """store_output hook: the matmul value (with its bias) at the output tile, the fused epilogue, the stores."""
    node = g.node(k.matmul)
    out_idx = _output_index(g, k.matmul, t)
    ev = TileEvaluator(g, set(k.epilogue) | {k.matmul}, buffers, src, upcast)
    value = acc
    bias = template_operands(g, k.matmul).get("bias")
    if bias is not None:
        bv = ev.value(bias, _broadcast_index(g.node(bias).shape, node.shape, out_idx))
        alpha, beta = node.attrs.get("alpha", 1), node.attrs.get("beta", 1)
        scaled = acc if alpha == 1 else f"{acc} * {float(alpha)!r}"
        bterm = convert(bv.name, bv.dtype, torch.float32)
        bterm = bterm if beta == 1 else f"{bterm} * {float(beta)!r}"
        src.line(f"acc_bias = {scaled} + {bterm}")
        value = "acc_bias"
    name = src.names.fresh("c")
    src.line(f"{name} = {value}.to({tl_dtype(node.dtype)})")
    mm_value = Value(name, node.dtype, node.dtype)
    if upcast and node.dtype in (torch.float16, torch.bfloat16):
        up = src.names.fresh("c")
        src.line(f"{up} = {name}.to(tl.float32)")
        mm_value = Value(up, torch.float32, node.dtype)
    ev.seed(k.matmul, out_idx, mm_value)
    targets = [n for n in (k.matmul, *k.epilogue) if n in stored]
    for n in targets:
        if g.node(n).shape != node.shape:
            raise CodegenError(f"epilogue value {n!r} of shape {list(g.node(n).shape)} cannot be stored from the "
                               f"matmul's {list(node.shape)} tile")
        ev.store(n, out_idx, ev.value(n, out_idx))


def _finish_tile(g: OpGraph, k: TemplateKernel, stored: set[str], src: Source, buffers: Buffers, t: _Tile,
                 upcast: bool, p: Problem, cfg: TileConfig, even_k: bool, split_epilogue: bool) -> None:
    """The epilogue on the tile's accumulator `acc`: whole, or with `split_epilogue` (and BLOCK_N >= 32) in
    two column halves one after the other (a static loop over idx_nh / mask_nh, the half's columns), so that
    its temporaries and store addresses cover half the tile at a time: compiled for sm_90, mm_bias_gelu's
    128x256x64 tile goes from 255 registers and a 96-byte spill to 244 registers and none."""
    if not split_epilogue or cfg.block_n < 32:
        _epilogue(g, k, stored, src, buffers, t, "acc", upcast)
        return
    src.line("acc_lo, acc_hi = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))")
    src.line("for half in tl.static_range(2):")
    body = src.child(1)
    body.line("if half == 0:")
    body.line("    acc_h = acc_lo")
    body.line("else:")
    body.line("    acc_h = acc_hi")
    body.line("idx_nh = pid_n * BLOCK_N + half * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)")
    body.line("mask_nh = idx_nh < N")
    _epilogue(g, k, stored, body, buffers, _Tile(p, cfg.block_m, cfg.block_n, even_k, n="nh"), "acc_h", upcast)
    src.splice(body)


def _tile_loads(g: OpGraph, mm: str, side: str, t: _Tile, k_start: str) -> TileLoads | None:
    """How side A or B of a 2-D matmul reads its operand tiles through a tensor descriptor (None: bmm)."""
    op = g.node(mm).op
    if op == "bmm":
        return None
    index = _operand_index(g, mm, side, t)
    if len(index) != 2:  # a linear over a 3-D input: its rows are split over several dims
        return None
    if side == "A":
        return TileLoads(index, ("BLOCK_M", "BLOCK_K"), ("pid_m * BLOCK_M", k_start))
    if op == "linear":
        return TileLoads(index, ("BLOCK_N", "BLOCK_K"), ("pid_n * BLOCK_N", k_start), transposed=True)
    return TileLoads(index, ("BLOCK_K", "BLOCK_N"), (k_start, "pid_n * BLOCK_N"))


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
    split = max(1, min(cfg.split_k, math.ceil(p.k / cfg.block_k)))
    k_tiles = math.ceil(math.ceil(p.k / cfg.block_k) / split)
    even_k = p.k % cfg.block_k == 0 and math.ceil(p.k / cfg.block_k) == k_tiles * split
    t = _Tile(p, cfg.block_m, cfg.block_n, even_k)
    names = NameGen()
    buffers = Buffers(g)
    kernel_src = Source(1, names)
    mm_node = g.node(k.matmul)
    persistent = persistent and split == 1
    src = _header(kernel_src, f"fusionsearch template kernel: {mm_node.op}, prologue A {len(k.prologue_a)} ops, "
                              f"B {len(k.prologue_b)} ops, epilogue {len(k.epilogue)} ops, {cfg.short()}"
                              + (", persistent" if persistent else ""), p, split, persistent, warp_specialize)
    src.line("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)")
    hoist = src.child()
    loop = src.child(1)
    k_tile = f"pid_k * {k_tiles} + k_tile" if split > 1 else "k_tile"
    loop.line(f"idx_k = ({k_tile}) * BLOCK_K + tl.arange(0, BLOCK_K)")
    if not even_k:
        loop.line("mask_k = idx_k < K")
    ops = template_operands(g, k.matmul)
    op_dtype = g.node(ops["A"]).dtype
    operand_vars = {}
    for side, nodes in (("A", k.prologue_a), ("B", k.prologue_b)):
        tiles = _tile_loads(g, k.matmul, side, t, f"({k_tile}) * BLOCK_K") if tma_loads else None
        ev = TileEvaluator(g, set(nodes), buffers, loop, upcast_prologue, hoist=hoist, loop_tokens=("idx_k", "mask_k"),
                           tiles=tiles)
        idx = _operand_index(g, k.matmul, side, t)
        v = ev.value(ops[side], idx)
        var = side.lower()
        operand = convert(v.name, v.dtype, op_dtype)
        if nodes:
            # A prologue through expand/unsqueeze may give a row or column that does not span the tile yet.
            operand = f"tl.broadcast_to({operand}, {'(BLOCK_M, BLOCK_K)' if side == 'A' else '(BLOCK_K, BLOCK_N)'})"
        loop.line(f"{var} = {operand}")
        if nodes and not even_k:
            # Padded K must contribute zero even where the prologue maps 0 to something else (exp, +1, ...).
            kmask = t.k_col.mask if side == "A" else t.k_row.mask
            loop.line(f"{var} = tl.where({kmask}, {var}, 0.0)")
        operand_vars[side] = var
    precision = f', input_precision="{FP32_DOTS[fp32_dot]}"' if op_dtype == torch.float32 else ""
    loop.line(f"acc = tl.dot(a, b, acc{precision})")
    src.splice(hoist)
    src.line(f"for k_tile in range({k_tiles}):")
    src.splice(loop)
    tiles = math.ceil(p.m / cfg.block_m) * math.ceil(p.n / cfg.block_n)
    constexprs = {"BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k, "GROUP_M": cfg.group_m}
    kernels = []
    if split == 1:
        _finish_tile(g, k, stored, src, buffers, t, upcast_epilogue, p, cfg, even_k, split_epilogue)
        if persistent:
            kernel_src.splice(src)
        programs = f"_programs({tiles}, device)" if persistent else tiles
        kernels.append(_finish(name, kernel_src, buffers, (programs, 1, p.batch), constexprs, cfg))
        return kernels
    ws_elems = split * p.batch * p.m * p.n
    src.line(f"ws_off = ((pid_k * {p.batch} + pid_b) * M + idx_m[:, None]) * N + idx_n[None, :]")
    src.line("tl.store(ws_ptr + ws_off, acc, mask=mask_m[:, None] & mask_n[None, :])")
    if serial_split_k:
        # Every thread's partial tile is stored before one release-acquire arrival at GPU scope; the split
        # that arrives last reads all partials past L1 (.cg), in split order (the same sum every run).
        src.line("tl.debug_barrier()")
        src.line(f"sem_off = pid_b * {tiles} + pid")
        src.line("arrived = tl.atomic_add(sem_ptr + sem_off, 1, sem='acq_rel', scope='gpu')")
        src.line(f"if arrived == {split - 1}:")
        last = src.child(1)
        last.line("tl.debug_barrier()")
        last.line("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)")
        last.line(f"for s in range({split}):")
        last.line(f"    ws_off = ((s * {p.batch} + pid_b) * M + idx_m[:, None]) * N + idx_n[None, :]")
        last.line("    acc += tl.load(ws_ptr + ws_off, mask=mask_m[:, None] & mask_n[None, :], other=0.0, "
                  "cache_modifier='.cg')")
        _finish_tile(g, k, stored, last, buffers, t, upcast_epilogue, p, cfg, even_k, split_epilogue)
        last.line("tl.atomic_xchg(sem_ptr + sem_off, 0, sem='relaxed', scope='gpu')")
        src.splice(last)
        kernels.append(_finish(name, src, buffers, (tiles, split, p.batch), constexprs, cfg, ws_elems,
                               tiles * p.batch))
        return kernels
    kernels.append(_finish(name, src, buffers, (tiles, split, p.batch), constexprs, cfg, ws_elems))
    # The reduce kernel sums the partial tiles, then runs the epilogue once.
    rnames = NameGen()
    rbuf = Buffers(g)
    rsrc = Source(1, rnames)
    _header(rsrc, f"fusionsearch split-K reduce + epilogue ({split} splits)", p, 1)
    rsrc.line("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)")
    rsrc.line(f"for s in range({split}):")
    rsrc.line(f"    ws_off = ((s * {p.batch} + pid_b) * M + idx_m[:, None]) * N + idx_n[None, :]")
    rsrc.line("    acc += tl.load(ws_ptr + ws_off, mask=mask_m[:, None] & mask_n[None, :], other=0.0)")
    _finish_tile(g, k, stored, rsrc, rbuf, t, upcast_epilogue, p, cfg, even_k, split_epilogue)
    kernels.append(_finish(name + "_reduce", rsrc, rbuf, (tiles, 1, p.batch), constexprs, cfg, ws_elems))
    return kernels


def _finish(name: str, body: Source, buffers: Buffers, grid: tuple[int, int, int], constexprs: dict[str, int],
            cfg: object, workspace: int = 0, semaphores: int = 0) -> GeneratedKernel:
    params = (buffers.params() + (["ws_ptr"] if workspace else []) + (["sem_ptr"] if semaphores else [])
              + [f"{c}: tl.constexpr" for c in constexprs])
    head = Source(0)
    head.line("@triton.jit")
    head.line(f"def {name}({', '.join(params)}):")
    head.splice(body)
    return GeneratedKernel(name, head.text(), buffers.args, grid, constexprs,
                           getattr(cfg, "num_warps", 4), getattr(cfg, "num_stages", 3), workspace, semaphores)
