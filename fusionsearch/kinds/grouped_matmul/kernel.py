"""The grouped matmul's plan value: every expert's matmul of a mixture-of-experts layer in one launch, each
expert's weight read once for all the tokens routed to it (routing.py says which bmm has that shape)."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any, Literal

from fusionsearch.errors import PlanError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.registry import show
from fusionsearch.kinds.grouped_matmul.routing import expert_routing
from fusionsearch.plan.kernels import FusedMatmulKernel

_BOUNDS = {"block_m": (16, 256), "block_n": (16, 512), "block_k": (16, 512), "split_k": (1, 64), "num_warps": (1, 16),
           "num_stages": (1, 8)}


@dataclass(frozen=True)
class GroupedConfig:
    """BLOCK_M token-expert pairs of one expert per CTA (an expert with more pairs takes several blocks), BLOCK_N
    of its columns, BLOCK_K per step, the K range cut into `split_k` slices (the last to finish reduces),
    warps and pipeline stages."""

    block_m: int = 16
    block_n: int = 64
    block_k: int = 128
    split_k: int = 4
    num_warps: int = 4
    num_stages: int = 3

    def __post_init__(self) -> None:
        for f in fields(self):
            value, (least, most) = getattr(self, f.name), _BOUNDS[f.name]
            if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
                raise PlanError(f"grouped config {f.name} must be an integer in [{least}, {most}], got {show(value)}")
        for key in ("block_m", "block_n", "block_k", "num_warps"):
            v = getattr(self, key)
            if v & (v - 1):
                raise PlanError(f"grouped config {key} must be a power of two, got {show(v)}")

    def shared_memory_bytes(self, itemsize: int) -> int:
        """The pipeline's shared memory: `num_stages` buffers of one A and one B block."""
        return self.num_stages * (self.block_m * self.block_k + self.block_k * self.block_n) * itemsize

    def short(self) -> str:
        return (f"grouped m{self.block_m} n{self.block_n} k{self.block_k} sk{self.split_k} w{self.num_warps} "
                f"s{self.num_stages}")

    @staticmethod
    def from_short(label: str) -> GroupedConfig:
        """The config `short()` wrote (a search-space choice label); PlanError when it is not one."""
        found = re.fullmatch(r"grouped m(\d+) n(\d+) k(\d+) sk(\d+) w(\d+) s(\d+)", label)
        if found is None:
            raise PlanError(f"{label!r} is not a grouped config label (like 'grouped m16 n64 k128 sk4 w4 s3')")
        return GroupedConfig(*map(int, found.groups()))


@dataclass(frozen=True)
class GroupedKernel(FusedMatmulKernel):
    """One mixture-of-experts bmm as the grouped matmul: the expert-weight gather (and whatever the B chain
    computes on it, a dequant say) fused into its B loads, the token rows gathered by its A loads, an epilogue
    on each pair's output row, written in token order."""

    matmul: str
    prologue_a: tuple[str, ...] = ()
    prologue_b: tuple[str, ...] = ()
    epilogue: tuple[str, ...] = ()
    config: GroupedConfig = GroupedConfig()
    kind: Literal["grouped"] = "grouped"

    def check(self, g: OpGraph, i: int, shared_memory_bytes: int | None) -> None:
        super().check(g, i, shared_memory_bytes)
        routing = expert_routing(g, self.matmul)
        if routing is None:
            raise PlanError(f"kernel {i}: {self.matmul!r} is not a mixture-of-experts bmm (one row per batch against "
                            "expert weights gathered by a router index); run it as a template")
        missing = [n for n in routing.chain if n not in self.prologue_b]
        if missing:
            raise PlanError(f"kernel {i}: the grouped matmul reads each expert's weight itself, so prologue B must "
                            f"include the expert gather and the nodes after it; missing {show(missing)}")
        if routing.router in self.prologue_b:
            raise PlanError(f"kernel {i}: the router {routing.router!r} must be in memory for the grouped matmul "
                            "to sort the pairs by expert; compute it in its own kernel")

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> GroupedKernel:
        return cls.fused_from_dict(d, where, GroupedConfig)  # type: ignore[no-any-return]
