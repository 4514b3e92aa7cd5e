"""The grouped configs the search tries for a mixture-of-experts bmm: BLOCK_M near the pairs an expert gets
(at decode one block of 16; at prefill a tensor-core block), and for each block shape the split-K that gives
the GPU at least two CTAs a multiprocessor over the experts the tokens can touch. The block shapes measured
fastest on Mixtral's bmms come first, so that a short search tries them."""

from __future__ import annotations

import itertools
import math

from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.kinds.grouped_matmul.kernel import GroupedConfig
from fusionsearch.kinds.grouped_matmul.routing import ExpertRouting
from fusionsearch.plan.matmul import problem, template_operands
from fusionsearch.plan.tile import MAX_SHARED_MEMORY_BYTES, padded_block

MULTIPROCESSORS = 132  # H100/H200; the split-K rule only needs the order of magnitude
_BLOCK_M = (16, 32, 64, 128)
_BLOCK_N = (32, 64, 128, 256)
_BLOCK_K = (32, 64, 128)
_WARPS_STAGES = ((4, 3), (4, 4), (8, 3))
# (block_m, block_n, block_k, warps, stages) fastest per bmm of moe_ffn (D4096 H14336 E8, bfloat16) on an H100
# (benchmarks/results/h100-2026-12-05b-decode-grouped): decode gate/up, decode down; prefill (T512, the
# blocks-fastest grid, benchmarks/results/h100-2026-12-06i-moe-order): the fastest first.
KNOWN_GOOD: tuple[tuple[int, int, int, int, int], ...] = (
    (16, 64, 256, 4, 4), (16, 128, 256, 4, 3), (16, 256, 64, 4, 4), (16, 256, 128, 8, 3),
    (128, 256, 64, 8, 4), (128, 128, 64, 4, 3), (128, 256, 64, 8, 3))


def splits_for(r: ExpertRouting, k: int, block_m: int, block_n: int, block_k: int) -> tuple[int, ...]:
    """The split-K that first gives at least 2 CTAs a multiprocessor (column blocks x expected blocks of the
    touched experts x splits), and twice it, each leaving every split at least two K blocks. A prefill block
    (64 pairs or more) is offered unsplit first: its CTAs are long and an expert's blocks share its weight tile
    in L2, so the split's partials mostly cost more than its wave balance gives (Mixtral T512 on an H100: the
    down bmm on m128 n256 k64 w8 s4 388.7 us unsplit against 509.4 split in four, unsplit faster on three of
    the four configs timed both ways, not on m128 n128 k64 w4 s3, 416.0 against 402.5 split in two; the gate
    bmm 359.8 unsplit against 435.3 and 547.3 split in two and four)."""
    touched = r.expected_experts()
    blocks = max(touched, r.pairs / block_m)
    ctas = math.ceil(r.cols / block_n) * blocks
    most = max(1, math.ceil(k / block_k) // 2)
    split = 1
    while ctas * split < 2 * MULTIPROCESSORS and split * 2 <= min(most, 64):
        split *= 2
    return tuple(dict.fromkeys(((1,) if block_m >= 64 else ()) + (split, min(split * 2, most, 64))))


def grouped_candidates(g: OpGraph, mm: str, r: ExpertRouting, limit: int = 48) -> tuple[GroupedConfig, ...]:
    """Up to `limit` grouped configs for `mm`: BLOCK_M from 16 up to the pairs an expert gets on average
    (rounded up to a power of two), an even spread over the rest of the grid when it is larger."""
    k = problem(g, mm).k
    operands = template_operands(g, mm)
    itemsize = max(g.node(operands[role]).dtype.itemsize for role in ("A", "B"))
    per_expert = padded_block(max(1, math.ceil(r.pairs / max(r.expected_experts(), 1.0))))

    def offered(bm: int, bn: int, bk: int) -> bool:
        """Blocks not larger than the problem (the smallest always offered)."""
        return bm <= max(16, per_expert) and bn <= max(32, padded_block(r.cols)) and bk <= max(32, padded_block(k))

    def with_splits(bm: int, bn: int, bk: int, w: int, s: int) -> list[GroupedConfig]:
        configs = [GroupedConfig(bm, bn, bk, sk, w, s) for sk in splits_for(r, k, bm, bn, bk)]
        return [c for c in configs if c.shared_memory_bytes(itemsize) <= MAX_SHARED_MEMORY_BYTES]

    known = [c for shape in KNOWN_GOOD if offered(*shape[:3]) for c in with_splits(*shape)]
    if per_expert >= 64:  # prefill: its own measured shapes before the decode ones (a stable sort)
        known.sort(key=lambda c: c.block_m < 64)
    grid: list[GroupedConfig] = []
    for bm, bn, bk, (w, s) in itertools.product(_BLOCK_M, _BLOCK_N, _BLOCK_K, _WARPS_STAGES):
        if not offered(bm, bn, bk) or (bn == 32 and r.cols > 64) or (bk == 32 and k > 64):
            continue  # 32-wide blocks only for small problems
        grid += with_splits(bm, bn, bk, w, s)
    grid = [c for c in dict.fromkeys(grid) if c not in known]
    room = max(limit - len(known), 0)
    if len(grid) > room:
        step = len(grid) / max(room, 1)
        grid = [grid[int(i * step)] for i in range(room)]
    return tuple(dict.fromkeys(known + grid))[:limit]
