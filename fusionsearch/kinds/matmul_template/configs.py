"""The tile configs the search tries for a matmul template: the default, the known-good ones of past sweeps,
and an even spread over a grid sized by the problem, filtered by what fits the GPU."""

from __future__ import annotations

import itertools
import math

from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.plan.build import default_config
from fusionsearch.plan.matmul import template_operands
from fusionsearch.plan.tile import TileConfig, padded_block

# Configs that won past sweeps and searches (bf16): always candidates, and the first two seeded. Small M: the
# first from the search's runs on the H200; the second the fastest of the template configs around
# max-autotune's own pick for mm_bias_gelu M16 (16x32x128, 2 warps, no split; H100, 7 interleaved rounds:
# 16.3 us against 16.8 for the suite's pick `16x64x128 sk2 w4 s4`, results/h100-2026-12-06j-mbg-configs);
# then two more from the search's runs; the rest the best of benchmarks/tile_sweep_gpu.py on the H200
# (results/h200-2026-12-03-tile-sweep: mm_bias_gelu M16, gather_mm M64), kept in every space whatever the
# grid's spread below keeps (three are outside that grid: two at 6 stages, one at 8 warps).
KNOWN_GOOD_SMALL_M = (TileConfig(16, 64, 256, 8, 2, 4, 3), TileConfig(16, 32, 128, 8, 1, 2, 6),
                      TileConfig(16, 128, 128, 8, 4, 4, 4),
                      # Inductor's max-autotune picks for swiglu M16 on the H100 (results/h100-2026-12-07d):
                      # 16x128x128 without a split streamed its 90 MB at 2.93 TB/s
                      TileConfig(16, 128, 128, 8, 1, 4, 4), TileConfig(16, 32, 128, 8, 1, 2, 5),
                      TileConfig(16, 64, 128, 8, 4, 4, 4), TileConfig(16, 64, 128, 8, 4, 4, 3),
                      TileConfig(64, 64, 128, 8, 1, 4, 6), TileConfig(64, 64, 128, 8, 2, 8, 4))
KNOWN_GOOD_LARGE_M = (TileConfig(128, 256, 64, 8, 1, 8, 3), TileConfig(128, 128, 64, 8, 1, 4, 4),
                      TileConfig(64, 128, 64, 8, 1, 4, 4))


def config_candidates(g: OpGraph, mm: str, fits: object = None, limit: int = 48) -> tuple[TileConfig, ...]:
    """Tile configs worth trying for this matmul: a grid filtered by `fits(g, mm, cfg)` (shared memory, block
    not larger than the padded problem), the default config first."""
    node = g.node(mm)
    m, n = node.shape[-2], node.shape[-1]
    k = g.node(template_operands(g, mm)["A"]).shape[-1]
    small = m <= 64
    bms = [16, 32, 64] if small else [64, 128, 256]
    bns = [32, 64, 128, 256]
    bks = [64, 128, 256] if small else [32, 64, 128]
    splits = [1, 2, 4, 8, 16] if small else [1]
    warps_stages = [(4, 3), (4, 4), (8, 3)] if not small else [(4, 3), (4, 4), (2, 4)]
    default = default_config(g, mm)
    known = [c for c in known_good(g, mm) if fits is None or fits(g, mm, c)]  # type: ignore[operator]
    out = [default, *known]

    for bm, bn, bk, sk, (w, s) in itertools.product(bms, bns, bks, splits, warps_stages):
        if (bm > padded_block(m) or bn > padded_block(n) or bk > padded_block(k)
                or sk > max(1, math.ceil(k / bk) // 2)):
            continue
        cfg = TileConfig(bm, bn, bk, 8, sk, w, s)
        if cfg in out or (fits is not None and not fits(g, mm, cfg)):  # type: ignore[operator]
            continue
        out.append(cfg)
    out = list(dict.fromkeys(out))
    fixed = min(limit, len(dict.fromkeys([default, *known])))
    if len(out) > limit:
        # Keep the default and the known-good configs, and an even spread over the rest of the grid.
        rest = out[fixed:]
        step = len(rest) / (limit - fixed) if limit > fixed else 0
        out = out[:fixed] + [rest[int(i * step)] for i in range(limit - fixed)]
    return tuple(out)


def known_good(g: OpGraph, mm: str) -> tuple[TileConfig, ...]:
    """The known-good configs for this matmul's size class (small M: decode-like, else large)."""
    m = g.node(mm).shape[-2]
    return KNOWN_GOOD_SMALL_M if m <= 64 else KNOWN_GOOD_LARGE_M
