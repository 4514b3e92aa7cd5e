"""A matmul tile configuration: the hashable value the search picks, the cost model reads and the template
is generated for; and the bounds every stage holds it to."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

from fusionsearch.errors import PlanError
from fusionsearch.graph.registry import show

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
class TileConfig:
    """One matmul tile configuration (a hashable value, like triton.Config)."""

    block_m: int = 64
    block_n: int = 64
    block_k: int = 32
    group_m: int = 8
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PlanError(f"tile config {f.name} must be a positive integer, got {show(value)}")
        for key in ("block_m", "block_n", "block_k", "num_warps"):
            v = getattr(self, key)
            if v & (v - 1):
                raise PlanError(f"tile config {key} must be a power of two, got {show(v)}")
        if min(self.block_m, self.block_n, self.block_k) < MIN_BLOCK:
            raise PlanError("tile config block_m, block_n and block_k must be at least 16 (tl.dot's minimum)")
        bounds = {"block_m": MAX_BLOCK, "block_n": MAX_BLOCK, "block_k": MAX_BLOCK, "num_warps": MAX_WARPS,
                  "num_stages": MAX_STAGES, "group_m": MAX_GROUP_M, "split_k": MAX_SPLIT_K}
        for key, most in bounds.items():
            if getattr(self, key) > most:
                raise PlanError(f"tile config {key} must be at most {most}, got {show(getattr(self, key))}")

    def shared_memory_bytes(self, itemsize: int) -> int:
        """Shared memory of the software pipeline (bytes): `num_stages` buffers of one A and one B tile of
        `itemsize`-byte elements (what costmodel.analytic.smem_bytes counts, and Triton allocates)."""
        return self.num_stages * (self.block_m * self.block_k + self.block_k * self.block_n) * itemsize

    def short(self) -> str:
        return (f"{self.block_m}x{self.block_n}x{self.block_k} g{self.group_m} sk{self.split_k} "
                f"w{self.num_warps} s{self.num_stages}")

    @staticmethod
    def from_short(label: str) -> TileConfig:
        """The config `short()` wrote (a search-space choice label); PlanError when it is not one."""
        found = re.fullmatch(r"(\d+)x(\d+)x(\d+) g(\d+) sk(\d+) w(\d+) s(\d+)", label)
        if found is None:
            raise PlanError(f"{label!r} is not a tile config label (like '64x64x64 g8 sk1 w4 s3')")
        return TileConfig(*map(int, found.groups()))
