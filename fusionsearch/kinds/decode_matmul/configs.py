"""The decode configs the search tries for a matmul of at most 16 rows: the known-good ones first, then a grid
over the inner product's form, the blocks, warps and stages, each with the split-K that gives the GPU at least
two CTAs a multiprocessor (and twice that), as a memory-bound kernel needs bytes in flight on every SM, and the
splits that fill one or two CTAs a multiprocessor in a single wave, with no partial last wave to wait on."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import replace

import torch

from fusionsearch.errors import PlanError
from fusionsearch.graph.opgraph import Node, OpGraph
from fusionsearch.kinds.decode_matmul.kernel import DECODE_MAX_M, DecodeConfig, pairs_fit
from fusionsearch.kinds.triton_source.tile_index import WORD_BYTES
from fusionsearch.plan.matmul import Problem, problem, template_operands
from fusionsearch.plan.tile import MAX_SHARED_MEMORY_BYTES, padded_block

MULTIPROCESSORS = 132  # H100/H200 SXM: the power-of-two rule needs only the order of magnitude, wave_split the count
# The fastest of benchmarks/decode_sweep_gpu.py's grid and the suite, best first (H100, L2 flushed clean,
# benchmarks/results/h100-2026-12-06-scale-after-dot): w8 at 1 and 16 rows `dot_t n128 k64 sk8` (29.5 / 31.6 us,
# 1.34 / 1.42x the floor), `dot_t n256 k32 sk16` next at one row (29.9); int4 (nibble pairs) `dot_t n64 k128
# sk4` (29.1 / 28.5 us at 1 / 16 rows); mm_bias_gelu M16 (K 4096) `dot n64 k32 sk8 w8 s4` (18.0). Then the
# earlier sweep's (h100-2026-12-05-decode-sweep, old flush): fma at one row of w8, dot n64 k128 at 4 and 16 rows,
# and the 2-D-accumulator form of the fastest standalone int4 GEMV (h100-2026-12-05d-w4-pairs/explore).
KNOWN_GOOD: tuple[DecodeConfig, ...] = (
    DecodeConfig(128, 64, 8, 4, 3, "dot_t"),
    DecodeConfig(64, 128, 4, 4, 3, "dot_t"),
    DecodeConfig(256, 32, 16, 4, 3, "dot_t"),
    DecodeConfig(64, 32, 8, 8, 4, "dot"),
    DecodeConfig(256, 16, 16, 8, 4, "fma"),
    DecodeConfig(128, 32, 16, 4, 3, "fma"),
    DecodeConfig(64, 128, 4, 4, 3, "dot"),
    DecodeConfig(64, 128, 8, 4, 3, "dot"),
    DecodeConfig(64, 128, 4, 4, 3, "fma_acc"),
)
# At one row, the plain GEMV (few whole weight rows a CTA, a long contiguous K block, no split): the fastest
# int8 one-row kernels measured (benchmarks/results/h100-2026-12-08-gemv-bound, a standalone Triton GEMV of this
# form: rows4 k1024 w4 s3 best on 3 of 5 of Llama-2-7B's shapes, rows8 k512 w4 s3 on 11008->4096, 1.05-1.12x a
# kernel that only reads the weight, against `dot n64 k128`'s 1.16-1.14x); offered after KNOWN_GOOD.
KNOWN_GOOD_GEMV: tuple[DecodeConfig, ...] = (
    DecodeConfig(4, 1024, 1, 4, 3, "gemv"),
    DecodeConfig(8, 512, 1, 4, 3, "gemv"),
    DecodeConfig(4, 512, 1, 4, 3, "gemv"),
    DecodeConfig(8, 1024, 1, 4, 3, "gemv"),
)
# Where B's K is unpacked from nibble pairs (int4), the pairs forms measured fastest lead (same folder,
# 3-sweep-w4/: at one row `fma_acc n256 k64 sk8` 23.6 us, `n256 k32 sk16` 23.7; at 16 rows `dot_t n64 k128 sk4`
# 29.1; the fma_acc forms only at up to 4 rows, where their accumulator fits). In the words form of the real
# int4 workload (stacked constant shifts) the one-row `fma_acc n256 k64 sk8 words` takes 19.6 us (H100,
# benchmarks/results/h100-2026-12-06o-w4-variants), with `dot n256 k64 sk8 words rows` (19.6-19.7) the fastest
# one-row configs measured.
KNOWN_GOOD_PAIRS: tuple[DecodeConfig, ...] = (
    DecodeConfig(128, 128, 4, 4, 3, "dot", True),
    DecodeConfig(256, 64, 8, 4, 3, "fma_acc", True),
    DecodeConfig(256, 32, 16, 4, 3, "fma_acc", True),
    DecodeConfig(64, 128, 4, 4, 3, "dot_t", True),
    DecodeConfig(128, 128, 4, 4, 3, "dot_t", True),
    DecodeConfig(128, 128, 4, 8, 4, "dot_t", True),
)
# The words form with the group scales and zeros read as whole rows (`rows`): at 16 rows of the int4 GEMV
# `dot n256 k64 sk8` 26.3 us, the fastest int4 M16 kernel measured (the same without rows 30.4, the best
# without 28.0; h100-2026-12-06k-w4-joined-staged; 21.9-22.5 us on the real int4 form, h100-2026-12-06n-stack-suite
# and -06o-w4-variants); slower on other configs (n128 k128 40.4): offered first, and beside each words dot config
# of the grid, for the search to choose. Their splits fill whole waves (`wave_split`; h100-2026-12-07b-uneven-split,
# K4096 N11008 G128, 43 column blocks): at one row `n256 k64` at two CTAs a multiprocessor (sk6, 258 CTAs) 18.7 us
# against sk8's 20.4 and the best fma_acc's 19.4; at 16 rows `n256 k128` at one (sk3, 129 CTAs) 19.7 us against
# sk8's 22.4 (k64 at one or two a multiprocessor: 21.4, 21.6). Each M leads with its own fastest.
ROWS_ONE_ROW: tuple[tuple[int, int, int], ...] = ((256, 64, 2), (256, 128, 1))  # block_n, block_k, CTAs an SM
ROWS_MANY_ROWS: tuple[tuple[int, int, int], ...] = ((256, 128, 1), (256, 64, 2))
KNOWN_GOOD_ROWS: tuple[DecodeConfig, ...] = (DecodeConfig(256, 64, 8, 4, 3, "dot", True, True, True),)
_GRID = {
    "dot": ((32, 64, 128, 256), (64, 128, 256), ((4, 3), (4, 4), (8, 3))),
    "dot_t": ((64, 128, 256), (64, 128, 256), ((4, 3), (4, 4), (8, 3))),
    "fma": ((64, 128, 256, 512), (16, 32, 64), ((4, 3), (4, 4), (8, 3))),
    "fma_acc": ((64, 128, 256), (32, 64, 128), ((4, 3), (8, 3))),
}
MAX_ACCUMULATOR = 64  # fp32 accumulator elements a thread: fma_acc's [BLOCK_M, BLOCK_K, BLOCK_N] beyond this spills


def accepts(g: OpGraph, mm: str) -> bool:
    """Whether the decode kind can run `mm`: at most DECODE_MAX_M rows (per batch)."""
    return problem(g, mm).m <= DECODE_MAX_M


def splits_for(g: OpGraph, mm: str, block_n: int, block_k: int) -> tuple[int, ...]:
    """The split-K that first gives at least 2 CTAs a multiprocessor (column blocks x splits x batch), and twice
    it, each leaving every split at least two K blocks; then the splits that fill one and two CTAs a
    multiprocessor in one wave (`wave_split`; they need not divide the K blocks)."""
    p = problem(g, mm)
    ctas, most = _unsplit_ctas(p, block_n), _most_splits(p, block_k)
    split = 1
    while ctas * split < 2 * MULTIPROCESSORS and split * 2 <= min(most, 64):
        split *= 2
    waves = (wave_split(p, block_n, block_k, per_sm) for per_sm in (1, 2))
    return tuple(dict.fromkeys((split, min(split * 2, most, 64), *(s for s in waves if s > 1))))


def wave_split(p: Problem, block_n: int, block_k: int, per_sm: int) -> int:
    """The most splits of K whose CTAs (column blocks x splits x batch) fit `per_sm` a multiprocessor at once,
    each split at least two K blocks (at least 1): one wave, no last partial wave for the GPU to wait on."""
    return max(1, min(_most_splits(p, block_k), 64, per_sm * MULTIPROCESSORS // _unsplit_ctas(p, block_n)))


def _unsplit_ctas(p: Problem, block_n: int) -> int:
    """CTAs of the grid before split-K: column blocks x batch."""
    return math.ceil(p.n / block_n) * p.batch


def _most_splits(p: Problem, block_k: int) -> int:
    """The most splits that leave each at least two K blocks (at least 1)."""
    return max(1, math.ceil(p.k / block_k) // 2)


def known_good_rows(p: Problem) -> list[DecodeConfig]:
    """The `rows` configs measured fastest, at the wave-filling split of this problem, the ones for its M
    first (ROWS_ONE_ROW up to 4 rows, ROWS_MANY_ROWS beyond), then KNOWN_GOOD_ROWS."""
    shapes = ROWS_ONE_ROW if p.m <= 4 else ROWS_MANY_ROWS
    waved = [DecodeConfig(bn, bk, wave_split(p, bn, bk, per_sm), 4, 3, "dot", True, True, True)
             for bn, bk, per_sm in shapes]
    return list(dict.fromkeys([*waved, *KNOWN_GOOD_ROWS]))


def _b_chain(g: OpGraph, mm: str) -> Iterator[Node]:
    """`mm`'s B operand and every node it comes from through layout and pointwise ops (those too)."""
    todo, seen = [template_operands(g, mm)["B"]], set()
    while todo:
        n = todo.pop()
        if n in seen:
            continue
        seen.add(n)
        node = g.node(n)
        yield node
        if node.kind in ("layout", "pointwise"):
            todo.extend(node.inputs)


def unpacks_pairs(g: OpGraph, mm: str) -> bool:
    """Whether `mm`'s B operand comes (through layout and pointwise ops) from a reshape that makes its K of
    pairs, [.., K/2, 2, ..] -> [.., K, ..]: int4 nibbles unpacked from bytes, what the pairs form reads once."""
    k = problem(g, mm).k
    for node in _b_chain(g, mm):
        if node.kind == "layout" and node.op in ("view", "reshape") and k in node.shape:
            src = g.node(node.inputs[0]).shape
            if any(a == k // 2 and b == 2 for a, b in zip(src, src[1:], strict=False)):
                return True
    return False


def reads_words(g: OpGraph, mm: str) -> bool:
    """Whether `mm`'s B operand comes (through layout and pointwise ops) from a uint8 tensor whose last dim is
    the matmul's columns, laid out to be read as int32 words (N a multiple of 4): what the words form reads."""
    n = problem(g, mm).n
    return n % WORD_BYTES == 0 and any(
        node.dtype == torch.uint8 and node.shape[-1] == n and node.strides[-1] == 1
        and all(s % WORD_BYTES == 0 for s in node.strides[:-1]) for node in _b_chain(g, mm))


def _worded(configs: list[DecodeConfig]) -> list[DecodeConfig]:
    """The words form of each pairs config that can take it (a dot's words tiles at least 16 columns)."""
    out = []
    for c in configs:
        try:
            out.append(replace(c, words=True))
        except PlanError:
            continue
    return out


def _rowed(configs: list[DecodeConfig]) -> list[DecodeConfig]:
    """Each words config, and beside each words dot config its `rows` form (measured faster only there)."""
    return [x for c in configs for x in ((c, replace(c, rows=True)) if c.product == "dot" else (c,))]


def _paired(configs: list[DecodeConfig], p: Problem) -> list[DecodeConfig]:
    """The pairs form of each config that can take it (K a whole number of K blocks, half a K block enough for
    its product; gemv has none)."""
    return [replace(c, pairs=True) for c in configs if c.product != "gemv"
            and pairs_fit(p, c.block_k) and c.block_k >= DecodeConfig.least_block_k(c.product, True)]


def decode_candidates(g: OpGraph, mm: str, limit: int = 48) -> tuple[DecodeConfig, ...]:
    """Up to `limit` decode configs for `mm`: the known-good ones, then an even spread over the grid (blocks not
    larger than the padded problem, a pipeline that fits shared memory), fma and fma_acc only for up to 4 rows
    (fma_acc where its accumulator fits MAX_ACCUMULATOR registers a thread). Where B's
    K is unpacked from pairs (int4 nibbles), the pairs form of each config that can take it leads."""
    p = problem(g, mm)
    itemsize = 4  # the widest operand: keeps every pipeline inside shared memory whatever the dtypes

    grid: list[DecodeConfig] = []
    for product, (bns, bks, warps_stages) in _GRID.items():
        if product in ("fma", "fma_acc") and p.m > 4:
            continue
        for bn, bk, (w, s) in itertools.product(bns, bks, warps_stages):
            if bn > padded_block(p.n) or bk > padded_block(p.k):
                continue
            for sk in splits_for(g, mm, bn, bk):
                cfg = DecodeConfig(bn, bk, sk, w, s, product)
                if cfg.shared_memory_bytes(itemsize) <= MAX_SHARED_MEMORY_BYTES and \
                        cfg.accumulator_per_thread(p.m) <= MAX_ACCUMULATOR:
                    grid.append(cfg)
    def offered(known: tuple[DecodeConfig, ...]) -> list[DecodeConfig]:
        return [c for c in known if (not c.on_cuda_cores or p.m <= 4)
                and c.accumulator_per_thread(p.m) <= MAX_ACCUMULATOR]

    fixed = offered(KNOWN_GOOD)
    if p.m == 1:
        fixed += [c for c in offered(KNOWN_GOOD_GEMV) if c.block_k <= padded_block(p.k)]
    if unpacks_pairs(g, mm):
        known = _paired(offered(KNOWN_GOOD_PAIRS), p)
        words = _worded(known) if reads_words(g, mm) else []
        # The words form leads (h100-2026-12-06g-w4-words, the int4 GEMV K4096 N11008 G128: at one row
        # `fma_acc n256 k64 sk8` 19.2 us against the pairs form's best 24.1; at 16 rows `dot n128 k128 sk4` 27.8
        # against 29.2); at 4 rows the pairs form's `dot_t n64 k128 sk4` stays best (29.1; words 30.2), next.
        fmas, dots = [c for c in words if c.on_cuda_cores], [c for c in words if not c.on_cuda_cores]
        rows = [c for c in known_good_rows(p) if words and pairs_fit(p, c.block_k)]
        fixed = list(dict.fromkeys([*rows, *fmas, *dots[:1], *known, *dots[1:], *_paired(fixed, p), *fixed]))
        grid = [x for c in grid for x in (*(_rowed(_worded(_paired([c], p))) if words else []), *_paired([c], p), c)]
    rest = [c for c in dict.fromkeys(grid) if c not in fixed]
    room = max(0, limit - len(fixed))
    if len(rest) > room:
        step = len(rest) / room if room else 0
        rest = [rest[int(i * step)] for i in range(room)]
    return tuple([*fixed, *rest][:limit])
