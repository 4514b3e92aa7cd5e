"""The decode matmul's plan value: a matmul of at most 16 rows (M) run by one block of rows, so that every weight
byte is read exactly once, with its own config (no BLOCK_M: the rows are the problem's; the inner product as a
tensor-core dot, the dot with the weight on the left, or fp32 FMAs)."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any, Literal

from fusionsearch.errors import PlanError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.registry import show
from fusionsearch.plan.kernels import FusedMatmulKernel
from fusionsearch.plan.matmul import Problem, problem

DECODE_MAX_M = 16  # rows a decode matmul takes: one block of them, padded to 16 for a tensor-core dot
PRODUCTS = ("dot", "dot_t", "fma", "fma_acc", "gemv")
"""dot: tl.dot(A [BLOCK_M, BLOCK_K], B [BLOCK_K, BLOCK_N]) with BLOCK_M = M padded to 16 (mma.sync);
dot_t: tl.dot(B^T [BLOCK_N, BLOCK_K], A^T [BLOCK_K, BLOCK_M]): the weight is the dot's left operand, which
Hopper's wgmma reads from registers where a prologue computed it, and BLOCK_N rows fill its 64-row minimum;
fma: the products in fp32 on the CUDA cores, summed over the K block, BLOCK_M = M padded to a power of two
(no padding to 16: one row costs one row);
fma_acc: the same products summed into a [BLOCK_M, BLOCK_K, BLOCK_N] fp32 accumulator, reduced over K once
after the loop instead of across threads every K step (standalone GEMVs on the H100,
benchmarks/results/h100-2026-12-05d-w4-pairs/explore: w8 38.2 us so against 40.3 summing each K block; the
fastest int4 one, 28.4 us, in this form); offered where that accumulator fits 64 registers a thread;
gemv: the weight's tile read as it lies in a [N, K] weight, BLOCK_N whole rows of a long contiguous K block
(B^T [BLOCK_N, BLOCK_K]), its products summed into a [BLOCK_M, BLOCK_N, BLOCK_K] fp32 accumulator reduced over K
once after the loop: a plain GEMV, few rows a CTA and no split, the fastest int8 one-row kernel measured
(benchmarks/results/h100-2026-12-08-gemv-bound: 1.05-1.12x a kernel that only reads the weight, 1.04-1.09x
faster than `dot n64 k128`); not in pairs.
Any of them in `pairs`: the K block read as its even and its odd K (two products of BLOCK_K / 2), so that a
prologue that unpacks two values from one byte (int4 nibbles: [K/2, 2, N] viewed as [K, N]) loads the byte once
and keeps its shift and a group scale's index out of the per-element work.
The pairs form in `words`: those bytes read as int32 words, four columns a word, B's tile evaluated at each of
the four byte positions and each product kept in an accumulator of its own (a quarter of the columns), joined
after the K loop; the unpack then runs on whole words (TileEvaluator._words_nibble): the int4 GEMV's K loop
from 8.16 to 4.85 SASS instructions a weight element (benchmarks/results/cpu-2026-12-06g-words-sass;
timed in h100-2026-12-06g-w4-words).
The words form in `rows`: the other values read along the columns (a group's scales and zeros) loaded as whole
contiguous rows and split into the four byte positions in registers (TileEvaluator._row_part), not as four
loads of every fourth element, which the K loop waits on in line: the int4 GEMV at 16 rows `dot n256 k64 sk8`
26.3 against 30.4 us, and the fastest int4 M16 kernel measured (0.94x the best without); slower on `n128 k128`
(40.4 against 28.0; benchmarks/results/h100-2026-12-06k-w4-joined-staged)."""
_MAX_BLOCK_N, _MAX_BLOCK_K, _MAX_SPLIT, _MAX_WARPS, _MAX_STAGES = 1024, 1024, 64, 16, 8
_GEMV_MAX_M = 4  # rows the CUDA-core forms are offered for: gemv's pipeline is sized for them


@dataclass(frozen=True)
class DecodeConfig:
    """The decode matmul's launch: BLOCK_N columns and BLOCK_K rows of the weight per step, the K range cut
    into `split_k` slices (one CTA each per column block; the last to finish reduces), warps, pipeline stages
    (Triton's loop pipelining: loads that many steps ahead), and the inner product's form."""

    block_n: int = 64
    block_k: int = 256
    split_k: int = 8
    num_warps: int = 4
    num_stages: int = 3
    product: str = "dot"
    pairs: bool = False
    words: bool = False
    rows: bool = False

    def __post_init__(self) -> None:
        if self.product not in PRODUCTS:
            raise PlanError(f"decode config product must be one of {', '.join(PRODUCTS)}, got {show(self.product)}")
        for flag in ("pairs", "words", "rows"):
            if not isinstance(getattr(self, flag), bool):
                raise PlanError(f"decode config {flag} must be true or false, got {show(getattr(self, flag))}")
        if self.words and not self.pairs:
            raise PlanError("decode config words is a form of pairs: set pairs too")
        if self.rows and not self.words:
            raise PlanError("decode config rows is a form of words: set words (and pairs) too")
        if self.pairs and self.product == "gemv":
            raise PlanError("decode config product 'gemv' reads the weight as it lies: it has no pairs form")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name not in ("product", "pairs", "words", "rows") and (
                    isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise PlanError(f"decode config {f.name} must be a positive integer, got {show(value)}")
        for key in ("block_n", "block_k", "num_warps"):
            v = getattr(self, key)
            if v & (v - 1):
                raise PlanError(f"decode config {key} must be a power of two, got {show(v)}")
        least_k = self.least_block_k(self.product, self.pairs)
        # a words tile's quarter: a dot's 16; a GEMV's few whole rows
        least_n = 2 if self.product == "gemv" else 64 if self.words and not self.on_cuda_cores else 16
        if self.block_n < least_n or self.block_k < least_k:
            raise PlanError(f"decode config block_n must be at least {least_n} and block_k at least {least_k} "
                            f"for product {self.product!r}{' in pairs' if self.pairs else ''}"
                            f"{' words' if self.words else ''}")
        bounds = {"block_n": _MAX_BLOCK_N, "block_k": _MAX_BLOCK_K, "split_k": _MAX_SPLIT, "num_warps": _MAX_WARPS,
                  "num_stages": _MAX_STAGES}
        for key, most in bounds.items():
            if getattr(self, key) > most:
                raise PlanError(f"decode config {key} must be at most {most}, got {show(getattr(self, key))}")

    def block_m(self, m: int) -> int:
        """BLOCK_M for a problem of `m` rows (at most DECODE_MAX_M): a power of two, at least 16 for a dot."""
        rows = 1 << (max(m, 1) - 1).bit_length()
        return rows if self.on_cuda_cores else max(16, rows)

    @property
    def on_cuda_cores(self) -> bool:
        """The products in fp32 FMAs (fma, fma_acc, gemv), not a tensor-core dot."""
        return self.product in ("fma", "fma_acc", "gemv")

    @staticmethod
    def least_block_k(product: str, pairs: bool) -> int:
        """The smallest BLOCK_K `product` takes: 16 for a dot (tl.dot's smallest K), 8 for FMAs; twice that in
        pairs, whose products take half the block each."""
        return (8 if product in ("fma", "fma_acc", "gemv") else 16) * (2 if pairs else 1)

    def accumulator_per_thread(self, m: int) -> int:
        """fp32 accumulator elements a thread holds for `m` rows: fma_acc's and gemv's [BLOCK_M, BLOCK_K (halved
        in pairs), BLOCK_N], the others' [BLOCK_M, BLOCK_N]."""
        k = (self.block_k // 2 if self.pairs else self.block_k) if self.product in ("fma_acc", "gemv") else 1
        return self.block_m(m) * k * self.block_n // (32 * self.num_warps)

    def shared_memory_bytes(self, itemsize: int) -> int:
        """The pipeline's shared memory at the most rows (16; gemv's 4): `num_stages` buffers of one A and one B
        block."""
        rows = _GEMV_MAX_M if self.product == "gemv" else DECODE_MAX_M
        return self.num_stages * (rows * self.block_k + self.block_k * self.block_n) * itemsize

    def short(self) -> str:
        return (f"decode {self.product} n{self.block_n} k{self.block_k} sk{self.split_k} w{self.num_warps} "
                f"s{self.num_stages}{' pairs' if self.pairs else ''}{' words' if self.words else ''}"
                f"{' rows' if self.rows else ''}")

    @staticmethod
    def from_short(label: str) -> DecodeConfig:
        """The config `short()` wrote (a search-space choice label); PlanError when it is not one."""
        found = re.fullmatch(r"decode (\w+) n(\d+) k(\d+) sk(\d+) w(\d+) s(\d+)( pairs)?( words)?( rows)?", label)
        if found is None:
            raise PlanError(f"{label!r} is not a decode config label (like 'decode dot n64 k256 sk8 w4 s3')")
        product, *numbers, pairs, words, rows = found.groups()
        bn, bk, sk, w, s = map(int, numbers)
        return DecodeConfig(bn, bk, sk, w, s, product, pairs is not None, words is not None, rows is not None)


def pairs_fit(p: Problem, block_k: int) -> bool:
    """Whether K is a whole number of K blocks (the pairs form reads no mask on K: its index is affine in the
    block number); splits that do not divide the blocks share them unevenly, each a whole number of blocks."""
    return p.k % block_k == 0


@dataclass(frozen=True)
class DecodeKernel(FusedMatmulKernel):
    """One matmul of at most DECODE_MAX_M rows (per batch) as the decode kind: prologues in its operand loads,
    an epilogue on its output, its DecodeConfig."""

    matmul: str
    prologue_a: tuple[str, ...] = ()
    prologue_b: tuple[str, ...] = ()
    epilogue: tuple[str, ...] = ()
    config: DecodeConfig = DecodeConfig()
    kind: Literal["decode"] = "decode"

    def check(self, g: OpGraph, i: int, shared_memory_bytes: int | None) -> None:
        super().check(g, i, shared_memory_bytes)
        p = problem(g, self.matmul)
        if p.m > DECODE_MAX_M:
            raise PlanError(f"kernel {i}: the decode matmul takes at most {DECODE_MAX_M} rows; {self.matmul!r} has "
                            f"{p.m}: run it as a template")
        if self.config.pairs and not pairs_fit(p, self.config.block_k):
            raise PlanError(f"kernel {i}: the decode config's pairs need K ({p.k}) a whole number of K blocks "
                            f"({self.config.block_k})")
        if self.config.product == "gemv" and p.m > _GEMV_MAX_M:
            raise PlanError(f"kernel {i}: the decode config's gemv form takes at most {_GEMV_MAX_M} rows; "
                            f"{self.matmul!r} has {p.m}")
        if self.config.words and p.n % 4:
            raise PlanError(f"kernel {i}: the decode config's words need N ({p.n}) a multiple of 4")

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> DecodeKernel:
        return cls.fused_from_dict(d, where, DecodeConfig)  # type: ignore[no-any-return]
