"""The grouped configs the search tries for a mixture-of-experts bmm: BLOCK_M near the pairs an expert gets
(at decode one block of 16; at prefill a tensor-core block), and for each block shape the split-K that gives
the GPU at least two CTAs a multiprocessor over the experts the tokens can touch."""

from __future__ import annotations

import itertools
import math

from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.kinds.grouped_matmul.kernel import GroupedConfig
from fusionsearch.kinds.grouped_matmul.routing import ExpertRouting
from fusionsearch.plan.matmul import problem
from fusionsearch.plan.tile import MAX_SHARED_MEMORY_BYTES, padded_block

MULTIPROCESSORS = 132  # H100/H200; the split-K rule only needs the order of magnitude
_BLOCK_M = (16, 32, 64, 128)
_BLOCK_N = (32, 64, 128, 256)
_BLOCK_K = (32, 64, 128)
_WARPS_STAGES = ((4, 3), (4, 4), (8, 3))


def splits_for(r: ExpertRouting, k: int, block_m: int, block_n: int, block_k: int) -> tuple[int, ...]:
    """The split-K that first gives at least 2 CTAs a multiprocessor (column blocks x expected blocks of the
    touched experts x splits), and twice it, each leaving every split at least two K blocks."""
    touched = r.expected_experts()
    blocks = max(touched, r.pairs / block_m)
    ctas = math.ceil(r.cols / block_n) * blocks
    most = max(1, math.ceil(k / block_k) // 2)
    split = 1
    while ctas * split < 2 * MULTIPROCESSORS and split * 2 <= min(most, 64):
        split *= 2
    return tuple(dict.fromkeys((split, min(split * 2, most, 64))))


def grouped_candidates(g: OpGraph, mm: str, r: ExpertRouting, limit: int = 48) -> tuple[GroupedConfig, ...]:
    """Up to `limit` grouped configs for `mm`: BLOCK_M from 16 up to the pairs an expert gets on average
    (rounded up to a power of two), an even spread over the rest of the grid when it is larger."""
    k = problem(g, mm).k
    per_expert = padded_block(max(1, math.ceil(r.pairs / max(r.expected_experts(), 1.0))))
    grid: list[GroupedConfig] = []
    for bm, bn, bk, (w, s) in itertools.product(_BLOCK_M, _BLOCK_N, _BLOCK_K, _WARPS_STAGES):
        # blocks not larger than the problem (the smallest always offered); 32-wide ones only for small problems
        if bm > max(16, per_expert) or bn > max(32, padded_block(r.cols)) or bk > max(32, padded_block(k)):
            continue
        if (bn == 32 and r.cols > 64) or (bk == 32 and k > 64):
            continue
        for sk in splits_for(r, k, bm, bn, bk):
            cfg = GroupedConfig(bm, bn, bk, sk, w, s)
            if cfg.shared_memory_bytes(4) <= MAX_SHARED_MEMORY_BYTES:
                grid.append(cfg)
    grid = list(dict.fromkeys(grid))
    if len(grid) > limit:
        step = len(grid) / limit
        grid = [grid[int(i * step)] for i in range(limit)]
    return tuple(grid)
