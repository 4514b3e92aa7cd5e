"""The analytic cost model: bytes moved, flops and a roofline time (µs) for every kernel of a plan.

A matmul template re-reads its A operand once per column of tiles and B once per row of tiles, less what
concurrently running tiles share through L2; a fused prologue is re-read (and recomputed) with its operand,
which is why fusing a prologue that reads more bytes than the operand it replaces does not pay. Split-K adds
an fp32 workspace round trip and a second launch. Compute time is quantised to whole waves of CTAs."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from fusionsearch.codegen.pointwise import XBLOCK as POINTWISE_BLOCK
from fusionsearch.codegen.templates import problem
from fusionsearch.costmodel.hardware import H200, Hardware
from fusionsearch.errors import CostModelError
from fusionsearch.graph.opgraph import Node, OpGraph
from fusionsearch.graph.registry import get_op
from fusionsearch.plan import (
    ExternKernel,
    Kernel,
    LibraryKernel,
    Plan,
    PointwiseKernel,
    TemplateKernel,
    TileConfig,
    prologue_bytes_ok,
    template_operands,
)

__all__ = ["Estimate", "KernelEstimate", "check_hardware", "ctas_per_sm", "estimate", "fits", "least_bytes",
           "matmul_flops", "pointwise_work", "prologue_reads_ok", "smem_bytes"]

TRANSCENDENTAL_FLOPS = 8  # an op that calls libdevice (exp, erf, tanh, ...) costs several fp32 instructions
POINTWISE_WARPS = 4
MAX_THREADS_PER_SM = 2048
MAX_CTAS_PER_SM = 32

# A library matmul (cuBLAS) on the H200, inputs already in memory (../shared/anchors, cublas_bare_h200.json):
# the large problems run at the measured matmul peak (4096^3 in 184.6 us, the 8192^3 peak's 194.6 us floor);
# the small-M ones take about 10 us more than their bytes at copy bandwidth (M16 K4096 N4096 18.9 us for
# 7.9; M64 8.1 -> 17.8; M16 K8192 N8192 31.4 -> 43.2). Its time is max(flop / peak, bytes / BW + this).
LIBRARY_FIXED_US = 10.0

# The prologue-fusion rule lives with the plan's reference heuristics; re-exported so callers find it here.
prologue_reads_ok = prologue_bytes_ok


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
    per = tuple(_kernel(g, k, i, stored[i], hw) for i, k in enumerate(plan.kernels))
    return Estimate(sum(e.bytes_read for e in per), sum(e.bytes_written for e in per), sum(e.flops for e in per),
                    sum(e.time_us for e in per), per)


def check_hardware(hw: Hardware) -> None:
    """A CostModelError unless every figure the model divides by is a positive finite number (a profile read from
    a file may hold a 0)."""
    figures = {"multiprocessors": hw.multiprocessors, "bandwidth_bytes_per_s": hw.bandwidth_bytes_per_s,
               "shared_memory_bytes": hw.shared_memory_bytes,
               **{f"peak_flops[{k!r}]": v for k, v in hw.peak_flops.items()}}
    for name, value in figures.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
            raise CostModelError(f"hardware profile {hw.name!r}: {name} must be a positive number, got {value!r}")


def _kernel(g: OpGraph, k: Kernel, i: int, stored: set[str], hw: Hardware) -> KernelEstimate:
    if isinstance(k, TemplateKernel):
        return _template(g, k, i, stored, hw)
    if isinstance(k, PointwiseKernel):
        return _pointwise(g, k, i, stored, hw)
    if isinstance(k, LibraryKernel):
        return _library(g, k, i, hw)
    return _extern(g, k, i, hw)


# ---- shared counting rules -----------------------------------------------------------------------

def _op_flops(node: Node) -> int:
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
        total += _op_flops(node) * node.numel
    return total


def _leaf_bytes(g: OpGraph, region: set[str], nodes: Iterable[str], extra: Iterable[str] = ()) -> int:
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


def _bandwidth_share(ctas: int, hw: Hardware) -> float:
    """Fraction of DRAM bandwidth a launch of `ctas` CTAs can draw: all of it once every multiprocessor
    has one, proportionally less below that."""
    return min(1.0, max(ctas, 1) / hw.multiprocessors)


def least_bytes(g: OpGraph) -> int:
    """The fewest bytes any implementation of the graph moves: each input read once (a table read only through
    row gathers, the rows gathered) and each output written once: the memory side of the roofline floor."""
    computed = [n for n in g.topo_order() if g.node(n).op != "input"]
    return _leaf_bytes(g, set(computed), computed) + sum(g.node(o).nbytes for o in dict.fromkeys(g.outputs))


def matmul_flops(g: OpGraph) -> int:
    """The graph's matmul work (flop): 2*B*M*N*K summed over its matmuls (the pointwise work is noise beside it)."""
    return sum(2 * p.batch * p.m * p.n * p.k for p in (problem(g, mm) for mm in g.nodes_of_kind("template")))


# ---- matmul templates ----------------------------------------------------------------------------

def smem_bytes(cfg: TileConfig, itemsize: int) -> int:
    """Shared memory of the software pipeline (bytes): `num_stages` buffers of one A and one B tile."""
    return cfg.num_stages * (cfg.block_m * cfg.block_k + cfg.block_k * cfg.block_n) * itemsize


def ctas_per_sm(cfg: TileConfig, itemsize: int, hw: Hardware = H200) -> int:
    """CTAs of this config resident on one multiprocessor, limited by shared memory and threads (at least 1)."""
    by_smem = hw.shared_memory_bytes // max(1, smem_bytes(cfg, itemsize))
    by_threads = MAX_THREADS_PER_SM // (32 * cfg.num_warps)
    return max(1, min(by_smem, by_threads, MAX_CTAS_PER_SM))


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


def _l2_reuse(tiles_m: int, tiles_n: int, group_m: int, concurrent: int) -> tuple[float, float]:
    """How many tiles share each A row-block (first) and each B column-block (second) while they run together.

    Tiles start in group_m order: down a column of `group` rows, then across columns, then to the next group.
    A window of `concurrent` running tiles therefore covers R rows x C columns of the tile grid; an A
    row-block fetched from DRAM serves its C columns through L2, a B column-block its R rows."""
    group = min(group_m, tiles_m)
    if concurrent <= group:
        rows, cols = float(concurrent), 1.0
    elif concurrent <= group * tiles_n:
        rows, cols = float(group), concurrent / group
    else:
        rows, cols = min(float(tiles_m), concurrent / tiles_n), float(tiles_n)
    return max(1.0, cols), max(1.0, rows)


def _template(g: OpGraph, k: TemplateKernel, i: int, stored: set[str], hw: Hardware) -> KernelEstimate:
    cfg = k.config
    p = problem(g, k.matmul)
    ops = template_operands(g, k.matmul)
    a_dtype = g.node(ops["A"]).dtype
    k_blocks = math.ceil(p.k / cfg.block_k)
    split = max(1, min(cfg.split_k, k_blocks))  # as codegen.templates clamps it
    tiles_m, tiles_n = math.ceil(p.m / cfg.block_m), math.ceil(p.n / cfg.block_n)
    tiles = tiles_m * tiles_n
    ctas = tiles * split * p.batch
    slots = hw.multiprocessors * ctas_per_sm(cfg, a_dtype.itemsize, hw)
    waves = math.ceil(ctas / slots)

    # Operand traffic: the grid's x axis (tiles) varies fastest, so tiles running together share a K slice.
    reuse_a, reuse_b = _l2_reuse(tiles_m, tiles_n, cfg.group_m, min(slots, tiles))
    reread_a = max(1.0, tiles_n / reuse_a)
    reread_b = max(1.0, tiles_m / reuse_b)
    a_once = _leaf_bytes(g, set(k.prologue_a), k.prologue_a) if k.prologue_a else g.node(ops["A"]).nbytes
    b_once = _leaf_bytes(g, set(k.prologue_b), k.prologue_b) if k.prologue_b else g.node(ops["B"]).nbytes
    operand_bytes = round(a_once * reread_a + b_once * reread_b)

    # Epilogue: its own leaves (and the bias) read once, stored values written once.
    region = {k.matmul, *k.epilogue}
    bias = [ops["bias"]] if "bias" in ops else []
    epi_read = _leaf_bytes(g, region, k.epilogue, bias)
    written = sum(g.node(n).nbytes for n in stored)
    epi_flops = pointwise_work(g, k.epilogue) + (g.node(k.matmul).numel if bias else 0)

    # Work: every CTA recomputes the prologue on the operand slice it loads, so prologue work repeats
    # once per column (A) or row (B) of tiles whatever L2 saves; the tensor cores also do the padding.
    mm_flops = 2 * p.batch * p.m * p.n * p.k
    pro_flops = pointwise_work(g, k.prologue_a) * tiles_n + pointwise_work(g, k.prologue_b) * tiles_m
    padded = 2 * p.batch * (tiles_m * cfg.block_m) * (tiles_n * cfg.block_n) * (k_blocks * cfg.block_k)
    quantisation = waves * slots / ctas
    main_compute = (padded / hw.peak(a_dtype) + pro_flops / hw.elementwise_flops) * 1e6 * quantisation
    epi_compute = epi_flops / hw.elementwise_flops * 1e6

    bw = hw.bandwidth_bytes_per_s
    if split == 1:
        read = operand_bytes + epi_read
        memory = (read + written) / (bw * _bandwidth_share(ctas, hw)) * 1e6
        compute = main_compute + epi_compute
        time = max(memory, compute) + hw.launch_us
    else:
        # Every split writes an fp32 partial tile; the last to arrive reads them back, runs the epilogue and
        # stores (codegen's serial split-K: one launch, the reduction a tail of the same kernel).
        workspace = split * p.batch * p.m * p.n * 4
        main_memory = (operand_bytes + workspace) / (bw * _bandwidth_share(ctas, hw)) * 1e6
        reduce_bytes = workspace + epi_read + written
        reduce_memory = reduce_bytes / (bw * _bandwidth_share(tiles * p.batch, hw)) * 1e6
        read, written = operand_bytes + workspace + epi_read, written + workspace
        memory, compute = main_memory + reduce_memory, main_compute + epi_compute
        time = max(main_memory, main_compute) + max(reduce_memory, epi_compute) + hw.launch_us
    return KernelEstimate(i, "template", read, written, mm_flops + pro_flops + epi_flops, time, memory, compute,
                          waves, tiles * p.batch, reread_a, reread_b)


# ---- pointwise and extern kernels ----------------------------------------------------------------

def _pointwise(g: OpGraph, k: PointwiseKernel, i: int, stored: set[str], hw: Hardware) -> KernelEstimate:
    read = _leaf_bytes(g, set(k.nodes), k.nodes)
    written = sum(g.node(n).nbytes for n in stored)
    flops = pointwise_work(g, k.nodes)
    numel = max((g.node(n).numel for n in stored), default=max(g.node(n).numel for n in k.nodes))
    blocks = max(1, math.ceil(numel / POINTWISE_BLOCK))
    memory = (read + written) / (hw.bandwidth_bytes_per_s * _bandwidth_share(blocks, hw)) * 1e6
    compute = flops / hw.elementwise_flops * 1e6
    slots = hw.multiprocessors * (MAX_THREADS_PER_SM // (32 * POINTWISE_WARPS))
    return KernelEstimate(i, "pointwise", read, written, flops, max(memory, compute) + hw.launch_us, memory, compute,
                          math.ceil(blocks / slots), blocks)


def _library(g: OpGraph, k: LibraryKernel, i: int, hw: Hardware) -> KernelEstimate:
    """PyTorch's matmul: its operands (and bias) read once, its output written once, at the measured library
    figures (LIBRARY_FIXED_US); no tile config, so no waves or re-reads."""
    p = problem(g, k.matmul)
    ops = template_operands(g, k.matmul)
    read = sum(g.node(src).nbytes for src in set(ops.values()))
    written = g.node(k.matmul).nbytes
    flops = 2 * p.batch * p.m * p.n * p.k + (g.node(k.matmul).numel if "bias" in ops else 0)
    memory = (read + written) / hw.bandwidth_bytes_per_s * 1e6
    compute = flops / hw.peak(g.node(ops["A"]).dtype) * 1e6
    return KernelEstimate(i, "library", read, written, flops, max(memory + LIBRARY_FIXED_US, compute) + hw.launch_us,
                          memory, compute, 0, 0)


def _extern(g: OpGraph, k: ExternKernel, i: int, hw: Hardware) -> KernelEstimate:
    """PyTorch runs it: its inputs read once, its output written once; its arithmetic is not modelled."""
    node = g.node(k.node)
    read = sum(g.node(src).nbytes for src in set(node.inputs))
    written = node.nbytes
    memory = (read + written) / hw.bandwidth_bytes_per_s * 1e6
    return KernelEstimate(i, "extern", read, written, 0, memory + hw.launch_us, memory, 0.0, 0, 0)
