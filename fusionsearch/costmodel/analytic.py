"""The analytic cost model: bytes moved, flops and a roofline time (µs) for every kernel of a plan.

A matmul template re-reads its A operand once per column of tiles and B once per row of tiles, less what
concurrently running tiles share through L2; a fused prologue is re-read (and recomputed) with its operand,
which is why fusing a prologue that reads more bytes than the operand it replaces does not pay. Split-K adds
an fp32 workspace round trip and a second launch. Compute time is quantised to whole waves of CTAs."""

from __future__ import annotations

import math
from dataclasses import dataclass

from fusionsearch.costmodel.hardware import H200, Hardware
from fusionsearch.errors import CostModelError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.kinds import kind_of
from fusionsearch.kinds.counting import (
    KernelEstimate,
    ctas_per_sm,
    leaf_bytes,
    pointwise_work,
    smem_bytes,
)
from fusionsearch.kinds.library import LIBRARY_FIXED_US
from fusionsearch.plan import Plan, TileConfig, prologue_bytes_ok
from fusionsearch.plan.matmul import problem, template_operands

__all__ = ["LIBRARY_FIXED_US", "Estimate", "KernelEstimate", "check_hardware", "ctas_per_sm", "estimate", "fits",
           "least_bytes", "matmul_flops", "pointwise_work", "prologue_reads_ok", "smem_bytes"]

# The prologue-fusion rule lives with the plan's reference heuristics; re-exported so callers find it here.
prologue_reads_ok = prologue_bytes_ok


@dataclass(frozen=True)
class Estimate:
    """A plan's totals (bytes, flop) and predicted time (µs, the sum of its kernels), with one entry per
    kernel in plan order."""

    bytes_read: int
    bytes_written: int
    flops: int
    time_us: float
    per_kernel: tuple[KernelEstimate, ...]


def estimate(plan: Plan, hw: Hardware = H200) -> Estimate:
    """Price every kernel of `plan` on `hw`; the plan's time is the sum of its kernels' (µs).

    >>> import fusionsearch as fs
    >>> from fusionsearch import plan as P
    >>> g = fs.workload("w8_dequant_mm", M=16, K=8192, N=8192)
    >>> estimate(P.fully_fused(g)).time_us < estimate(P.unfused(g)).time_us
    True
    """
    check_hardware(hw)
    g = plan.graph
    stored = plan.stored()
    per = tuple(kind_of(k).estimate(g, k, i, stored[i], hw) for i, k in enumerate(plan.kernels))
    return Estimate(sum(e.bytes_read for e in per), sum(e.bytes_written for e in per), sum(e.flops for e in per),
                    sum(e.time_us for e in per), per)


def check_hardware(hw: Hardware) -> None:
    """A CostModelError unless every figure the model divides by is a positive finite number (a profile read from
    a file may hold a 0) and the launch cost a finite one."""
    figures = {"multiprocessors": hw.multiprocessors, "bandwidth_bytes_per_s": hw.bandwidth_bytes_per_s,
               "shared_memory_bytes": hw.shared_memory_bytes, "l2_bytes": hw.l2_bytes,
               **{f"peak_flops[{k!r}]": v for k, v in hw.peak_flops.items()}}
    for name, value in figures.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
            raise CostModelError(f"hardware profile {hw.name!r}: {name} must be a positive number, got {value!r}")
    launch = hw.launch_us  # added to every kernel's time: a NaN here makes every plan NaN
    if isinstance(launch, bool) or not isinstance(launch, int | float) or not 0 <= launch < math.inf:
        raise CostModelError(f"hardware profile {hw.name!r}: launch_us must be a finite number >= 0, got {launch!r}")
    for name in ("shared_memory_per_sm_bytes", "sm_clock_mhz", "memory_clock_mhz"):  # 0: unknown (a NaN feature)
        value = getattr(hw, name)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
            raise CostModelError(f"hardware profile {hw.name!r}: {name} must be a finite number >= 0 (0: unknown), "
                                 f"got {value!r}")


# ---- shared counting rules -----------------------------------------------------------------------

def least_bytes(g: OpGraph) -> int:
    """The fewest bytes any implementation of the graph moves: each input read once (a table read only through
    row gathers, the rows gathered) and each output written once: the memory side of the roofline floor."""
    computed = [n for n in g.topo_order() if g.node(n).op != "input"]
    return leaf_bytes(g, set(computed), computed) + sum(g.node(o).nbytes for o in dict.fromkeys(g.outputs))


def matmul_flops(g: OpGraph) -> int:
    """The graph's matmul work (flop): 2*B*M*N*K summed over its matmuls (the pointwise work is noise beside it)."""
    return sum(2 * p.batch * p.m * p.n * p.k for p in (problem(g, mm) for mm in g.nodes_of_kind("template")))


# ---- matmul templates ----------------------------------------------------------------------------

def _next_pow2(x: int) -> int:
    return 1 << max(0, x - 1).bit_length()


def fits(g: OpGraph, mm: str, cfg: TileConfig, hw: Hardware = H200) -> bool:
    """True when `cfg` can run matmul `mm` on `hw`: its pipeline fits shared memory, no block exceeds the
    problem padded to a power of two (min 16), and every split-K slice has at least one K block."""
    check_hardware(hw)
    p = problem(g, mm)
    itemsize = g.node(template_operands(g, mm)["A"]).dtype.itemsize
    if smem_bytes(cfg, itemsize) > hw.shared_memory_bytes:
        return False
    for block, size in ((cfg.block_m, p.m), (cfg.block_n, p.n), (cfg.block_k, p.k)):
        if block > max(16, _next_pow2(size)):
            return False
    return cfg.split_k <= math.ceil(p.k / cfg.block_k)
