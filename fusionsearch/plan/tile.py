"""A matmul tile configuration: the hashable value the search picks, the cost model reads and the template
is generated for; and the bounds every stage holds it to."""

from __future__ import annotations

from dataclasses import dataclass

from fusionsearch.errors import PlanError
from fusionsearch.plan.config import KernelConfig

# Tile config bounds: the blocks the search and the code generator use (tl.dot needs at least 16), the warps of
# one CTA (16 warps: 512 threads), pipeline stages that fit shared memory at the smallest blocks, and split-K
# beyond which codegen clamps to one K block a split anyway.
MIN_BLOCK, MAX_BLOCK = 16, 256
MAX_WARPS, MAX_STAGES, MAX_GROUP_M, MAX_SPLIT_K = 16, 8, 64, 64
# Shared memory per CTA (bytes) of the largest GPU plans are made for (H100/H200: 227 KiB opt-in); a caller with a
# device in hand (costmodel.Hardware.shared_memory_bytes) passes its own figure.
MAX_SHARED_MEMORY_BYTES = 232448


def padded_block(v: int) -> int:
    """A size rounded up to a power of two, at least MIN_BLOCK (tl.dot's minimum): the largest block worth trying
    for it."""
    return max(MIN_BLOCK, 1 << (max(v, 1) - 1).bit_length())


@dataclass(frozen=True)
class TileConfig(KernelConfig):
    """One matmul tile configuration (a hashable value, like triton.Config)."""

    block_m: int = 64
    block_n: int = 64
    block_k: int = 32
    group_m: int = 8
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3

    WHAT = "tile config"
    BOUNDS = {"block_m": (MIN_BLOCK, MAX_BLOCK), "block_n": (MIN_BLOCK, MAX_BLOCK), "block_k": (MIN_BLOCK, MAX_BLOCK),
              "group_m": (1, MAX_GROUP_M), "split_k": (1, MAX_SPLIT_K), "num_warps": (1, MAX_WARPS),
              "num_stages": (1, MAX_STAGES)}
    POWERS_OF_TWO = ("block_m", "block_n", "block_k", "num_warps")
    LABEL = "{block_m}x{block_n}x{block_k} g{group_m} sk{split_k} w{num_warps} s{num_stages}"

    def check_least(self) -> None:
        if min(self.block_m, self.block_n, self.block_k) < MIN_BLOCK:
            raise PlanError("tile config block_m, block_n and block_k must be at least 16 (tl.dot's minimum)")

    def pipeline_rows(self) -> int:
        return self.block_m
