"""The pieces of a matmul tile's Triton source that every matmul kind shares: the tile's index components, the
operands' and the output's indices, the program-id header, the epilogue on the output tile (whole or in two
column halves), the serial split-K tail, and assembling one @triton.jit function."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from fusionsearch.errors import CodegenError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.ops_pointwise import lit
from fusionsearch.kinds.triton_source.dtypes import Value, convert, tl_dtype
from fusionsearch.kinds.triton_source.emit import Source
from fusionsearch.kinds.triton_source.kernel import GeneratedKernel
from fusionsearch.kinds.triton_source.scale_after_dot import ScaleAfterDot
from fusionsearch.kinds.triton_source.tile import Buffers, TileEvaluator, TileLoads
from fusionsearch.kinds.triton_source.tile_index import WORD_BYTES, Affine, Idx, _broadcast_index, _reshape_index
from fusionsearch.plan.kernels import FusedMatmulKernel
from fusionsearch.plan.matmul import Problem, shared_a_matmuls, template_operands


@dataclass(frozen=True)
class TileShape:
    """The blocks and launch figures a matmul kind's source is generated for (its own config, with BLOCK_M
    fixed where the kind fixes it): what the shared pieces below read of a config."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int = 1
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3


def k_slices(p: Problem, block_k: int, split_k: int) -> tuple[int, int, bool]:
    """How the K loop is cut: the splits actually run (at most one a K block), K blocks per split, and whether
    every split's K blocks lie wholly inside K (no mask on K needed)."""
    blocks = math.ceil(p.k / block_k)
    split = max(1, min(split_k, blocks))
    per_split = math.ceil(blocks / split)
    return split, per_split, p.k % block_k == 0 and blocks == per_split * split


class MatmulTile:
    """The tile's index components for A, B and the output, masks dropped where the size divides evenly."""

    def __init__(self, p: Problem, bm: int, bn: int, even_k: bool, n: str = "n", transposed: bool = False,
                 parity: int | None = None, block_k: int = 0, word: int | None = None) -> None:
        """`n`: the suffix of the output columns' index and mask names (idx_n, mask_n; idx_nh, mask_nh for
        an epilogue's column half). `transposed`: the operands are read as A^T [BLOCK_K, BLOCK_M] and
        B^T [BLOCK_N, BLOCK_K] (a dot with the weight on the left: decode_matmul's `dot_t`). `parity` (0 or 1,
        with `block_k` and K a whole number of blocks): the tile holds only the even or odd K of the block,
        k = kb * BLOCK_K + 2 * kp + parity for kp in [0, BLOCK_K / 2), an Affine index (decode_matmul's
        nibble pairs). `word` (0 to 3): the tile holds only the columns n = 4 * w + word of the block, for w in
        [0, BLOCK_N / 4) (idx_w, mask_w): the byte `word` of each 4-byte word of a uint8 operand read as int32
        words (decode_matmul's words form)."""
        mm = None if p.m % bm == 0 else "mask_m"
        mn = None if p.n % bn == 0 else f"mask_{n}"
        mk = None if even_k else "mask_k"
        rows, cols = ("[None, :]", "[:, None]") if transposed else ("[:, None]", "[None, :]")
        self.m_row = Idx(f"idx_m{rows}", f"{mm}{rows}" if mm else None)
        if word is None:
            self.n_col = Idx(f"idx_{n}{cols}", f"{mn}{cols}" if mn else None)
        else:
            if p.n % 4 or bn % 4:
                raise CodegenError("internal: a words tile needs N and BLOCK_N multiples of 4")
            self.n_col = Idx.of(Affine(((f"idx_w{cols}", WORD_BYTES, bn // WORD_BYTES),), word),
                                f"mask_w{cols}" if mn else None)
        if parity is None:
            self.k_col = Idx(f"idx_k{cols}", f"{mk}{cols}" if mk else None)
            self.k_row = Idx(f"idx_k{rows}", f"{mk}{rows}" if mk else None)
        else:
            if not even_k or block_k % 2 or p.k % block_k:
                raise CodegenError("internal: a K parity tile needs K a whole number of even K blocks")
            blocks = p.k // block_k
            self.k_col, self.k_row = (Idx.of(Affine((("kb", block_k, blocks), (f"kp{d}", 2, block_k // 2)), parity))
                                      for d in (cols, rows))
        self.b = Idx("pid_b")


def operand_index(g: OpGraph, mm: str, side: str, t: MatmulTile) -> tuple[Idx, ...]:
    node = g.node(mm)
    if node.op == "bmm":
        return (t.b, t.m_row, t.k_col) if side == "A" else (t.b, t.k_row, t.n_col)
    if node.op == "linear":
        if side == "B":
            return (t.n_col, t.k_row)  # weight [N, K]
        return (*_rows(g.node(node.inputs[0]).shape[:-1], t), t.k_col)
    return (t.m_row, t.k_col) if side == "A" else (t.k_row, t.n_col)


def _rows(lead: tuple[int, ...], t: MatmulTile) -> tuple[Idx, ...]:
    """The leading dims of a linear's input/output as a split of the tile's row index; with a single row
    (all sizes 1) the row index stays on the last dim, so the tile keeps its BLOCK_M rows and its mask."""
    if math.prod(lead) == 1:
        return (*[Idx("0")] * (len(lead) - 1), t.m_row)
    return _reshape_index((math.prod(lead),), lead, (t.m_row,))


def output_index(g: OpGraph, mm: str, t: MatmulTile) -> tuple[Idx, ...]:
    node = g.node(mm)
    if node.op == "bmm":
        return (t.b, t.m_row, t.n_col)
    if node.op == "linear":
        return (*_rows(node.shape[:-1], t), t.n_col)
    return (t.m_row, t.n_col)


def tile_header(src: Source, title: str, p: Problem, split: int, persistent: bool = False,
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


def _epilogue(g: OpGraph, k: FusedMatmulKernel, stored: set[str], src: Source, buffers: Buffers, t: MatmulTile,
              acc: str, upcast: bool, scales: tuple[ScaleAfterDot, ...] = (),
              shared: dict[str, str] | None = None) -> None:
    """store_output hook: the matmul value (its operands' factors moved after the dot applied, with its bias) at
    the output tile, the fused epilogue, the stores. `shared`: the accumulator of each matmul of the epilogue
    that ran in the same K loop (matmul_tile.shared_a_dots), by node."""
    node = g.node(k.matmul)
    out_idx = output_index(g, k.matmul, t)
    ev = TileEvaluator(g, set(k.epilogue) | {k.matmul} | {n for s in scales for n in s.computed}, buffers, src,
                       upcast)
    value = acc
    for f in (f for s in scales for f in s.factors):
        if f.scale is None:
            factor = lit(f.scalar)  # type: ignore[arg-type]
        else:
            sv = ev.value(f.scale, _broadcast_index(g.node(f.scale).shape, node.shape, out_idx))
            factor = convert(sv.name, sv.dtype, torch.float32)
        scaled = src.names.fresh("acc_scaled")
        src.line(f"{scaled} = {value} {'/' if f.divide else '*'} {factor}")
        value = acc = scaled
    bias = template_operands(g, k.matmul).get("bias")
    if bias is not None:
        bv = ev.value(bias, _broadcast_index(g.node(bias).shape, node.shape, out_idx))
        alpha, beta = node.attrs.get("alpha", 1), node.attrs.get("beta", 1)
        scaled = acc if alpha == 1 else f"{acc} * {float(alpha)!r}"
        bterm = convert(bv.name, bv.dtype, torch.float32)
        bterm = bterm if beta == 1 else f"{bterm} * {float(beta)!r}"
        src.line(f"acc_bias = {scaled} + {bterm}")
        value = "acc_bias"
    ev.seed(k.matmul, out_idx, _tile_value(src, value, node.dtype, upcast))
    for mm, mm_acc in (shared or {}).items():
        ev.seed(mm, out_idx, _tile_value(src, mm_acc, g.node(mm).dtype, upcast))
    targets = [n for n in (k.matmul, *k.epilogue) if n in stored]
    for n in targets:
        if g.node(n).shape != node.shape:
            raise CodegenError(f"epilogue value {n!r} of shape {list(g.node(n).shape)} cannot be stored from the "
                               f"matmul's {list(node.shape)} tile")
        ev.store(n, out_idx, ev.value(n, out_idx))


def _tile_value(src: Source, acc: str, dtype: torch.dtype, upcast: bool) -> Value:
    """An fp32 accumulator rounded to its matmul's dtype, as the epilogue reads it (back in fp32 with `upcast`)."""
    name = src.names.fresh("c")
    src.line(f"{name} = {acc}.to({tl_dtype(dtype)})")
    if upcast and dtype in (torch.float16, torch.bfloat16):
        up = src.names.fresh("c")
        src.line(f"{up} = {name}.to(tl.float32)")
        return Value(up, torch.float32, dtype)
    return Value(name, dtype, dtype)


def finish_tile(g: OpGraph, k: FusedMatmulKernel, stored: set[str], src: Source, buffers: Buffers, t: MatmulTile,
                 upcast: bool, p: Problem, cfg: TileShape, even_k: bool, split_epilogue: bool,
                 scales: tuple[ScaleAfterDot, ...] = (), shared: dict[str, str] | None = None) -> None:
    """The epilogue on the tile's accumulator `acc` (first multiplied by `scales`, the operand factors the K
    loop left out): whole, or with `split_epilogue` (and BLOCK_N >= 32) in two column halves one after the
    other (a static loop over idx_nh / mask_nh, the half's columns), so that its temporaries and store addresses
    cover half the tile at a time: compiled for sm_90, mm_bias_gelu's 128x256x64 tile goes from 255 registers
    and a 96-byte spill to 244 registers and none."""
    if not split_epilogue or cfg.block_n < 32 or shared:
        _epilogue(g, k, stored, src, buffers, t, "acc", upcast, scales, shared)
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
    _epilogue(g, k, stored, body, buffers, MatmulTile(p, cfg.block_m, cfg.block_n, even_k, n="nh"), "acc_h", upcast,
              scales)
    src.splice(body)


def tma_tile_loads(g: OpGraph, mm: str, side: str, t: MatmulTile, k_start: str, tile_transposed: bool = False
                   ) -> TileLoads | None:
    """How side A or B of a 2-D matmul reads its operand tiles through a tensor descriptor (None: bmm, or a
    linear over a 3-D input). `tile_transposed`: the tile is read as A^T / B^T (decode_matmul's `dot_t`), so
    a tensor laid out as the plain tile is loaded, then transposed, and one laid out as its transpose is not."""
    op = g.node(mm).op
    if op == "bmm":
        return None
    index = operand_index(g, mm, side, t)
    if len(index) != 2:  # a linear over a 3-D input: its rows are split over several dims
        return None
    if side == "A":
        return TileLoads(index, ("BLOCK_M", "BLOCK_K"), ("pid_m * BLOCK_M", k_start), transposed=tile_transposed)
    if op == "linear":  # the weight [N, K]: B's transpose
        return TileLoads(index, ("BLOCK_N", "BLOCK_K"), ("pid_n * BLOCK_N", k_start), transposed=not tile_transposed)
    return TileLoads(index, ("BLOCK_K", "BLOCK_N"), (k_start, "pid_n * BLOCK_N"), transposed=tile_transposed)


def load_operands(g: OpGraph, k: FusedMatmulKernel, t: MatmulTile, loop: Source, hoist: Source, buffers: Buffers,
                  upcast: bool, even_k: bool, op_dtype: torch.dtype, shapes: dict[str, str],
                  tiles: dict[str, TileLoads | None] | None = None, t_b: MatmulTile | None = None,
                  parities: dict[str, tuple[tuple[MatmulTile, str], ...]] | None = None,
                  vector_loads: bool = False, scales: tuple[ScaleAfterDot, ...] = (),
                  words: frozenset[str] = frozenset(), on_tile: Callable[[str, str], None] | None = None,
                  word_rows: bool = False) -> None:
    """Inside the K loop: the A and B operand tiles as variables `a` and `b` of `op_dtype`, each through its
    prologue (values that do not change with K hoisted before the loop), broadcast to `shapes[side]` (a
    prologue through expand/unsqueeze may give a row or column that does not span the tile yet) and, where K
    is not a whole number of blocks, zero past K (the prologue may map 0 to something else: exp, +1, ...).
    `t_b`: B's index components where they are not A's (the grouped matmul: one expert's weight for a block of
    pairs from different batches). `parities`: for a side, instead of `t`, tiles of the even and odd K with the
    suffix of their variables (`b_e`, `b_o`), evaluated by one evaluator, so a byte both read is loaded once.
    `vector_loads`: the evaluators load one-axis values 1-D (TileEvaluator). `scales`: a side whose factor
    constant along K the epilogue applies reads the factor's other operand instead. `words`: uint8 nodes B's
    prologue reads as int32 words (its parity tiles are words tiles); that prologue computes in fp32;
    `word_rows`: its other loads along the words' columns read as whole rows (TileEvaluator).
    `on_tile(side, variable)`: called after each tile's variable is set (a caller's product of it there keeps
    fewer tiles live at once)."""
    ops = {**template_operands(g, k.matmul), **{s.side: s.operand for s in scales}}
    for side, nodes in (("A", k.prologue_a), ("B", k.prologue_b)):
        by_words = words if side == "B" else frozenset()
        ev = TileEvaluator(g, set(nodes), buffers, loop, upcast or bool(by_words), hoist=hoist,
                           loop_tokens=("idx_k", "mask_k", "kb"), tiles=(tiles or {}).get(side),
                           vector_loads=vector_loads, words=by_words, word_rows=word_rows and bool(by_words))
        for tile, suffix in (parities or {}).get(side) or ((t_b if side == "B" and t_b else t, ""),):
            v = ev.value(ops[side], operand_index(g, k.matmul, side, tile))
            var = side.lower() + suffix
            operand = convert(v.name, v.dtype, op_dtype)
            if nodes:
                operand = f"tl.broadcast_to({operand}, {shapes[side]})"
            loop.line(f"{var} = {operand}")
            if nodes and not even_k:
                kmask = t.k_col.mask if side == "A" else t.k_row.mask
                loop.line(f"{var} = tl.where({kmask}, {var}, 0.0)")
            if on_tile is not None:
                on_tile(side, var)


def shared_a_dots(g: OpGraph, k: FusedMatmulKernel, t: MatmulTile, src: Source, loop: Source, hoist: Source,
                  buffers: Buffers, upcast: bool, op_dtype: torch.dtype, precision: str) -> dict[str, str]:
    """Each matmul of the epilogue that shares the kernel's A tile (plan.matmul.shared_a_matmuls): its own
    accumulator, zeroed before the K loop, and inside it its B tile loaded from memory and its dot on the `a`
    the loop already holds. Returns each one's accumulator by node, for the epilogue."""
    accs = {}
    for j, mm in enumerate(shared_a_matmuls(g, k.epilogue)):
        acc, b = f"acc_mm{j}", f"b_mm{j}"
        src.line(f"{acc} = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)")
        ev = TileEvaluator(g, set(), buffers, loop, upcast, hoist=hoist, loop_tokens=("idx_k", "mask_k", "kb"))
        v = ev.value(template_operands(g, mm)["B"], operand_index(g, mm, "B", t))
        loop.line(f"{b} = {convert(v.name, v.dtype, op_dtype)}")
        loop.line(f"{acc} = tl.dot(a, {b}, {acc}{precision})")
        accs[mm] = acc
    return accs


def serial_split_k(g: OpGraph, k: FusedMatmulKernel, stored: set[str], src: Source, buffers: Buffers,
                   t: MatmulTile, upcast: bool, p: Problem, cfg: TileShape, even_k: bool, split_epilogue: bool,
                   split: int, tiles: int, scales: tuple[ScaleAfterDot, ...] = ()) -> None:
    """After the K loop of split `pid_k`: its partial tile `acc` to the fp32 workspace, then the split that
    arrives last at the tile sums every split's partial and runs the epilogue (one launch; a per-tile arrival
    counter, reset by that last split). Every thread's partial tile is stored before one release-acquire
    arrival at GPU scope; the last split reads all partials past L1 (.cg), in split order (the same sum every
    run)."""
    src.line(f"ws_off = ((pid_k * {p.batch} + pid_b) * M + idx_m[:, None]) * N + idx_n[None, :]")
    src.line("tl.store(ws_ptr + ws_off, acc, mask=mask_m[:, None] & mask_n[None, :])")
    src.line("tl.debug_barrier()")
    src.line(f"sem_off = pid_b * {tiles} + pid")
    src.line("arrived = tl.atomic_add(sem_ptr + sem_off, 1, sem='acq_rel', scope='gpu')")
    src.line(f"if arrived == {split - 1}:")
    last = src.child(1)
    last.line("tl.debug_barrier()")
    last.line("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)")
    # Unrolled in chunks of splits whose partial tiles fit a thread's 128 registers together: a chunk's loads
    # are in flight at once, not one L2 round trip after another as in a runtime loop (w8 M16's tail, sm_90
    # SASS; 32.7 -> 30.8 us on an H100). The sum stays in split order.
    chunk = reduction_chunk(cfg.block_m * cfg.block_n // (32 * cfg.num_warps), split)
    if chunk == split:
        last.line(f"for s in tl.static_range({split}):")
        body = last.child(1)
    else:
        last.line(f"for s0 in range(0, {split}, {chunk}):")
        last.line(f"    for j in tl.static_range({chunk}):")
        body = last.child(2)
        body.line("s = s0 + j")
    body.line(f"ws_off = ((s * {p.batch} + pid_b) * M + idx_m[:, None]) * N + idx_n[None, :]")
    body.line("acc += tl.load(ws_ptr + ws_off, mask=mask_m[:, None] & mask_n[None, :], other=0.0, "
              "cache_modifier='.cg')")
    last.splice(body)
    finish_tile(g, k, stored, last, buffers, t, upcast, p, cfg, even_k, split_epilogue, scales)
    last.line("tl.atomic_xchg(sem_ptr + sem_off, 0, sem='relaxed', scope='gpu')")
    src.splice(last)


def reduction_chunk(registers_per_partial: int, split: int) -> int:
    """How many splits' partial tiles the last split loads together: the most that divide `split` and fit
    128 registers a thread (1: one at a time)."""
    return max(c for c in range(1, split + 1) if split % c == 0 and (c == 1 or registers_per_partial * c <= 128))


def assemble_kernel(name: str, body: Source, buffers: Buffers, grid: tuple[int | str, int, int],
                    constexprs: dict[str, int], cfg: object, workspace: int = 0, semaphores: int = 0,
                    routing: int = 0) -> GeneratedKernel:
    """The @triton.jit function around `body`: its tensor parameters, the workspace, arrival counters and
    routing table where it uses them, and its constexprs."""
    params = (buffers.params() + (["ws_ptr"] if workspace else []) + (["sem_ptr"] if semaphores else [])
              + (["rt_ptr"] if routing else []) + [f"{c}: tl.constexpr" for c in constexprs])
    head = Source(0)
    head.line("@triton.jit")
    head.line(f"def {name}({', '.join(params)}):")
    head.splice(body)
    return GeneratedKernel(name, head.text(), buffers.args, grid, constexprs,
                           getattr(cfg, "num_warps", 4), getattr(cfg, "num_stages", 3), workspace, semaphores,
                           routing, buffers.flagged)
