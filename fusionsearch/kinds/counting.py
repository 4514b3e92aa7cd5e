"""Counting rules every kind's estimate and features share: the per-kernel estimate value, bytes a fused region
reads, elementwise work, bandwidth share, the tile pipeline's shared memory and residency, bits and log2."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from fusionsearch.graph.opgraph import Node, OpGraph
from fusionsearch.graph.registry import get_op
from fusionsearch.hardware import H200, Hardware
from fusionsearch.plan.tile import TileConfig

TRANSCENDENTAL_FLOPS = 8  # an op that calls libdevice (exp, erf, tanh, ...) costs several fp32 instructions
MAX_THREADS_PER_SM = 2048
MAX_CTAS_PER_SM = 32


@dataclass(frozen=True)
class KernelEstimate:
    """One plan kernel: bytes read and written (bytes), work (flop), its time and the two roofline terms
    (µs, launch included only in `time_us`), CTA waves, output tiles (CTAs of a pointwise kernel; 0 for an
    extern), and how many times the template reads its A and B operands from DRAM (1.0 = once)."""

    index: int
    kind: str
    bytes_read: int
    bytes_written: int
    flops: int
    time_us: float
    memory_us: float
    compute_us: float
    waves: int
    tiles: int
    reread_a: float = 1.0
    reread_b: float = 1.0


def op_flops(node: Node) -> int:
    """Flop per element of a fused node: 1 for plain arithmetic, more for libdevice calls, 0 for layout
    and indexing (they only move addresses)."""
    if node.kind != "pointwise":
        return 0
    return TRANSCENDENTAL_FLOPS if get_op(node.op).needs_fp32 else 1


def pointwise_work(g: OpGraph, nodes: Iterable[str]) -> int:
    """Elementwise flop of computing `nodes` once over their own shapes."""
    total = 0
    for n in nodes:
        node = g.node(n)
        total += op_flops(node) * node.numel
    return total


def leaf_bytes(g: OpGraph, region: set[str], nodes: Iterable[str], extra: Iterable[str] = ()) -> int:
    """Bytes a fused region reads: each value it loads but does not compute, once; a gather's table only
    for the rows gathered (rows x row bytes, never more than the table). `extra` are leaves read whole."""
    whole = {src for src in extra if src not in region}
    rows: dict[str, int] = {}
    for n in nodes:
        node = g.node(n)
        gather = node.kind == "indexing"
        for slot, src in enumerate(node.inputs):
            if src in region:
                continue
            if gather and slot == 0:  # the table; the indices (slot 1) are read whole
                rows[src] = rows.get(src, 0) + node.numel * g.node(src).dtype.itemsize
            else:
                whole.add(src)
    total = sum(g.node(src).nbytes for src in whole)
    return total + sum(min(g.node(src).nbytes, b) for src, b in rows.items() if src not in whole)


def bandwidth_share(ctas: int, hw: Hardware) -> float:
    """Fraction of DRAM bandwidth a launch of `ctas` CTAs can draw: all of it once every multiprocessor
    has one, proportionally less below that."""
    return min(1.0, max(ctas, 1) / hw.multiprocessors)


def smem_bytes(cfg: TileConfig, itemsize: int) -> int:
    """Shared memory of the software pipeline (bytes): `num_stages` buffers of one A and one B tile."""
    return cfg.num_stages * (cfg.block_m * cfg.block_k + cfg.block_k * cfg.block_n) * itemsize


def ctas_per_sm(cfg: TileConfig, itemsize: int, hw: Hardware = H200) -> int:
    """CTAs of this config resident on one multiprocessor, limited by shared memory and threads (at least 1)."""
    by_smem = hw.shared_memory_bytes // max(1, smem_bytes(cfg, itemsize))
    by_threads = MAX_THREADS_PER_SM // (32 * cfg.num_warps)
    return max(1, min(by_smem, by_threads, MAX_CTAS_PER_SM))


def bits(dtype: torch.dtype) -> int:
    return dtype.itemsize * 8 if dtype != torch.bool else 8


def log2(x: float) -> float:
    return math.log2(max(1.0, float(x)))


def loaded(g: OpGraph, nodes: Sequence[str]) -> set[str]:
    """Values a kernel reads from memory: inputs of its nodes that it does not compute."""
    inside = set(nodes)
    return {src for n in nodes for src in g.node(n).inputs if src not in inside}
