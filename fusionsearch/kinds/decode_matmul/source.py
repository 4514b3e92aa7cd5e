"""The decode matmul's Triton source: one CTA per (column block, K slice, batch), all M rows in one block, so
every weight byte is read once; the K loop pipelined through tl.range (Triton pipelines only loads that feed a
tl.dot otherwise: the fma form's loads need it); the inner product as DecodeConfig.product says; split-K
(slices of whole K blocks, uneven where the split does not divide them) reduced by the last slice to arrive,
which runs the epilogue (the template's serial tail)."""

from __future__ import annotations

import math

import torch

from fusionsearch.errors import CodegenError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.kinds.decode_matmul.kernel import DecodeConfig, DecodeKernel
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
from fusionsearch.kinds.triton_source.tile_index import WORD_BYTES
from fusionsearch.plan.matmul import Problem, problem, template_operands
from fusionsearch.plan.options import FP32_DOTS, CodegenOptions

# The K step's product into accumulator {acc}, of A's tile {s} and B's tile {s}{w} (w: a words tile's byte).
_PRODUCT = {
    "dot": "{acc} = tl.dot(a{s}, b{s}{w}, {acc}{precision})",
    "dot_t": "{acc} = tl.dot(b{s}{w}, a{s}, {acc}{precision})",  # B^T [BLOCK_N, BLOCK_K] @ A^T [BLOCK_K, BLOCK_M]
    "fma": "{acc} += tl.sum(a{s}.to(tl.float32)[:, :, None] * b{s}{w}.to(tl.float32)[None, :, :], axis=1)",
    "fma_acc": "{acc}_3d += a{s}.to(tl.float32)[:, :, None] * b{s}{w}.to(tl.float32)[None, :, :]",  # summed after
    # B^T [BLOCK_N, BLOCK_K] as the weight lies, A^T [BLOCK_K, BLOCK_M]: [BLOCK_M, BLOCK_N, BLOCK_K], summed after
    "gemv": "{acc}_3d += tl.trans(a{s}).to(tl.float32)[:, None, :] * b{s}{w}.to(tl.float32)[None, :, :]",
}
_SUMMED_AFTER = {"fma_acc": 1, "gemv": 2}  # the product forms with a K-wide accumulator: the axis of K in it
_FMA_PAIRS = ("{acc} += tl.sum(a_e.to(tl.float32)[:, :, None] * b_e{w}.to(tl.float32)[None, :, :] + "
              "a_o.to(tl.float32)[:, :, None] * b_o{w}.to(tl.float32)[None, :, :], axis=1)")


def tile_shape(g: OpGraph, k: DecodeKernel) -> TileShape:
    """The blocks the decode kernel's source is generated for (BLOCK_M from the problem's rows)."""
    c = k.config
    return TileShape(c.block_m(problem(g, k.matmul).m), c.block_n, c.block_k, 1, c.split_k, c.num_warps,
                     c.num_stages)


def word_sources(g: OpGraph, k: DecodeKernel) -> frozenset[str]:
    """The uint8 tensors B's prologue reads whose last dim is the matmul's columns and whose layout lets them be
    read as int32 words (contiguous last dim, other strides whole words): those the words form loads a word
    at a time. Whether the input's pointer is 4-byte aligned is checked when the plan runs."""
    n, computed = problem(g, k.matmul).n, set(k.prologue_b)
    leaves = {i for c in k.prologue_b for i in g.node(c).inputs if i not in computed}
    return frozenset(x for x in leaves if g.node(x).dtype == torch.uint8 and g.node(x).shape[-1] == n
                     and g.node(x).strides[-1] == 1 and all(s % WORD_BYTES == 0 for s in g.node(x).strides[:-1]))


def _accumulators(src: Source, c: DecodeConfig, transposed: bool) -> list[str]:
    """The fp32 accumulators' names, zeroed: `acc` [BLOCK_M, BLOCK_N] (transposed for dot_t), or in words one
    a byte position (accw0 .. accw3, a quarter of the columns each); fma_acc's 3-D one beside each."""
    accs = [f"accw{j}" for j in range(WORD_BYTES)] if c.words else ["acc"]
    cols = "BLOCK_N // 4" if c.words else "BLOCK_N"
    for acc in accs:
        src.line(f"{acc} = tl.zeros(({cols}, BLOCK_M), dtype=tl.float32)" if transposed
                 else f"{acc} = tl.zeros((BLOCK_M, {cols}), dtype=tl.float32)")
        if c.product == "fma_acc":
            src.line(f"{acc}_3d = tl.zeros((BLOCK_M, {'BLOCK_K // 2' if c.pairs else 'BLOCK_K'}, {cols}), "
                     "dtype=tl.float32)")
        elif c.product == "gemv":
            src.line(f"{acc}_3d = tl.zeros((BLOCK_M, {cols}, BLOCK_K), dtype=tl.float32)")
    return accs


def _reduce(src: Source, accs: list[str], product: str, transposed: bool) -> None:
    """After the K loop: each accumulator as [BLOCK_M, columns] (fma_acc's summed over K, dot_t's transposed),
    and in words the byte positions' joined into `acc`, column 4 * w + j from accw{j}."""
    for acc in accs:
        if transposed:
            src.line(f"{acc} = tl.trans({acc})")
        if product in _SUMMED_AFTER:
            src.line(f"{acc} = tl.sum({acc}_3d, axis={_SUMMED_AFTER[product]})")
    if len(accs) > 1:
        src.line("acc = tl.reshape(tl.join(tl.join(accw0, accw2), tl.join(accw1, accw3)), (BLOCK_M, BLOCK_N))")


class _KStep:
    """The K step's products into the accumulators: after all operand tiles (`whole`), or in words each B
    tile's right after it (`on_tile`: one of the eight tiles live at a time, not all eight)."""

    def __init__(self, loop: Source, c: DecodeConfig, precision: str) -> None:
        self.loop, self.c, self.precision = loop, c, precision
        self.split_a = ("a_e, a_o = tl.split(tl.permute(tl.reshape(a, (BLOCK_K // 2, 2, BLOCK_M)), (0, 2, 1)))"
                        if c.product == "dot_t" else "a_e, a_o = tl.split(tl.reshape(a, (BLOCK_M, BLOCK_K // 2, 2)))")

    def on_tile(self, side: str, var: str) -> None:
        if side == "A":
            self.loop.line(self.split_a)
        elif self.c.product == "fma":
            if var.startswith("b_o"):  # the pair's sum, once both parities are in
                self.loop.line(_FMA_PAIRS.format(acc=f"accw{var[-1]}", w=var[-1]))
        else:
            self.loop.line(_PRODUCT[self.c.product].format(precision=self.precision, s=var[1:3], acc=f"accw{var[-1]}",
                                                           w=var[-1]))

    def whole(self) -> None:
        if self.c.pairs:
            self.loop.line(self.split_a)
        if self.c.pairs and self.c.product == "fma":
            self.loop.line(_FMA_PAIRS.format(acc="acc", w=""))
            return
        for suffix in ("_e", "_o") if self.c.pairs else ("",):
            self.loop.line(_PRODUCT[self.c.product].format(precision=self.precision, s=suffix, acc="acc", w=""))


def _k_loop(p: Problem, block_k: int, split_k: int, stages: int) -> tuple[int, bool, str, str]:
    """How the K loop is cut: the splits run, whether every K block lies wholly inside K (no mask on K), the
    block index's expression and the loop's header. Splits that do not divide the K blocks share them unevenly,
    each a whole number of blocks (split s takes [s * blocks // split, (s + 1) * blocks // split)), so that any
    split can fill the GPU's grid."""
    split, k_tiles, even_k = k_slices(p, block_k, split_k)
    blocks = math.ceil(p.k / block_k)
    if split > 1 and p.k % block_k == 0 and blocks % split:
        return split, True, "kb", (f"for kb in tl.range((pid_k * {blocks}) // {split}, "
                                   f"((pid_k + 1) * {blocks}) // {split}, num_stages={stages}):")
    k_tile = f"pid_k * {k_tiles} + k_tile" if split > 1 else "k_tile"
    return split, even_k, k_tile, f"for k_tile in tl.range({k_tiles}, num_stages={stages}):"


def generate_decode(g: OpGraph, k: DecodeKernel, stored: set[str], name: str, o: CodegenOptions
                    ) -> list[GeneratedKernel]:
    """The Triton kernel of one decode matmul (split-K serial: one launch). Of the codegen options it follows
    the upcasts, split_epilogue, fp32_dot, tma_loads (the weight's tiles) and scale_after_dot; persistent or
    warp-specialised loops are the template's."""
    p = problem(g, k.matmul)
    if min(p.m, p.n, p.k) == 0:
        raise CodegenError(f"matmul {k.matmul!r} has an empty dimension")
    cfg, product = tile_shape(g, k), k.config.product
    split, even_k, k_tile, k_loop = _k_loop(p, cfg.block_k, cfg.split_k, cfg.num_stages)
    transposed = product == "dot_t"  # the accumulator [BLOCK_N, BLOCK_M]
    loads_transposed = product in ("dot_t", "gemv")  # the tiles A^T [BLOCK_K, BLOCK_M] and B^T [BLOCK_N, BLOCK_K]
    t = MatmulTile(p, cfg.block_m, cfg.block_n, even_k)
    t_load = MatmulTile(p, cfg.block_m, cfg.block_n, even_k, transposed=loads_transposed)
    buffers, kernel_src = Buffers(g), Source(1, NameGen())
    src = tile_header(kernel_src, f"fusionsearch decode kernel: {g.node(k.matmul).op}, prologue A "
                                  f"{len(k.prologue_a)} ops, B {len(k.prologue_b)} ops, epilogue {len(k.epilogue)} "
                                  f"ops, {k.config.short()}", p, split)
    words = k.config.words
    accs = _accumulators(src, k.config, transposed)
    cols = "BLOCK_N // 4" if words else "BLOCK_N"
    hoist, loop = src.child(), src.child(1)
    if words:
        hoist.line("idx_w = pid_n * (BLOCK_N // 4) + tl.arange(0, BLOCK_N // 4)")
        if p.n % cfg.block_n:
            hoist.line("mask_w = idx_w < N // 4")
    pairs = k.config.pairs
    if pairs:
        if not even_k:
            raise CodegenError(f"matmul {k.matmul!r}: the decode pairs form needs K ({p.k}) a whole number of "
                               f"K blocks ({cfg.block_k})")
        hoist.line("kp = tl.arange(0, BLOCK_K // 2)")
        if k_tile != "kb":
            loop.line(f"kb = {k_tile}")
        loop.line("idx_k = kb * BLOCK_K + tl.arange(0, BLOCK_K)")
    else:
        loop.line(f"idx_k = ({k_tile}) * BLOCK_K + tl.arange(0, BLOCK_K)")
    if not even_k:
        loop.line("mask_k = idx_k < K")
    op_dtype = g.node(template_operands(g, k.matmul)["A"]).dtype
    if words and k.config.on_cuda_cores:
        op_dtype = torch.float32  # the words prologue computes in fp32, as the FMAs do: no round trip via bf16
    bk = "BLOCK_K // 2" if pairs else "BLOCK_K"
    shapes = ({"A": "(BLOCK_K, BLOCK_M)", "B": f"({cols}, {bk})"} if loads_transposed
              else {"A": "(BLOCK_M, BLOCK_K)", "B": f"({bk}, {cols})"})
    # The pairs form: B evaluated at its even and its odd K (one byte load for a nibble pair); A, a few rows,
    # read whole along K (contiguous: vector loads the pipeline can prefetch) and split in registers. In words,
    # each parity at each byte position of a word (b_e0 .. b_o3).
    positions = range(WORD_BYTES) if words else (None,)
    parities = {"B": tuple((MatmulTile(p, cfg.block_m, cfg.block_n, even_k, transposed=transposed, parity=par,
                                       block_k=cfg.block_k, word=j), f"{suffix}{'' if j is None else j}")
                           for j in positions for par, suffix in ((0, "_e"), (1, "_o")))} if pairs else None
    # TMA: the weight's tiles through a tensor descriptor (a box of at most 256 a side; not the pairs form,
    # whose K tiles are not the weight's)
    tma = o.tma_loads and not pairs and cfg.block_n <= 256 and cfg.block_k <= 256
    tiles = {"B": tma_tile_loads(g, k.matmul, "B", t_load, f"({k_tile}) * BLOCK_K", loads_transposed)} if tma \
        else None
    scales = tuple(find_scales(g, k).values()) if o.scale_after_dot else ()
    precision = f', input_precision="{FP32_DOTS[o.fp32_dot]}"' if op_dtype == torch.float32 else ""
    step = _KStep(loop, k.config, precision)
    load_operands(g, k, t_load, loop, hoist, buffers, o.upcast_prologue, even_k, op_dtype, shapes, tiles,
                  parities=parities, vector_loads=True, scales=scales,
                  words=word_sources(g, k) if words else frozenset(), on_tile=step.on_tile if words else None,
                  word_rows=k.config.rows)
    if not words:
        step.whole()
    src.splice(hoist)
    src.line(k_loop)
    src.splice(loop)
    _reduce(src, accs, product, transposed)
    tiles = math.ceil(p.n / cfg.block_n)
    constexprs = {"BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k, "GROUP_M": 1}
    if split == 1:
        finish_tile(g, k, stored, src, buffers, t, o.upcast_epilogue, p, cfg, even_k, o.split_epilogue, scales)
        return [assemble_kernel(name, kernel_src, buffers, (tiles, 1, p.batch), constexprs, cfg)]
    serial_split_k(g, k, stored, src, buffers, t, o.upcast_epilogue, p, cfg, even_k, o.split_epilogue, split, tiles,
                   scales)
    return [assemble_kernel(name, kernel_src, buffers, (tiles, split, p.batch), constexprs, cfg,
                            split * p.batch * p.m * p.n, tiles * p.batch)]
