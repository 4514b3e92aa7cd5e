"""Building a legal, ordered plan from per-node fusion decisions and per-matmul tile configs."""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence

import networkx as nx

from fusionsearch.errors import PlanError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.plan.kernels import (
    ExternKernel,
    KernelValue,
    LibraryKernel,
    PointwiseKernel,
    TemplateKernel,
    produced,
)
from fusionsearch.plan.legality import FUSABLE, template_operands
from fusionsearch.plan.plan import Plan
from fusionsearch.plan.tile import TileConfig, padded_block

Decision = tuple[str, ...]  # ("standalone",) | ("epilogue", mm) | ("prologue", mm, "A"|"B") | ("group", gid)

# Builds the kernel running one matmul from its fused nodes (prologue A, prologue B, epilogue): a matmul kind's
# choice (kinds.MatmulKind.kernel), raising PlanError where that kind cannot fuse them.
MatmulKernelMaker = Callable[[tuple[str, ...], tuple[str, ...], tuple[str, ...]], KernelValue]


def build_plan(g: OpGraph, decisions: Mapping[str, Decision], configs: Mapping[str, TileConfig] | None = None,
               recompute: Iterable[str] = (), library: Iterable[str] = (),
               matmul_kernels: Mapping[str, MatmulKernelMaker] | None = None) -> Plan:
    """Assemble a legal, ordered Plan from per-node decisions for the fusable nodes (default: standalone)
    and per-matmul tile configs; the matmuls in `library` run in PyTorch's matmul (nothing fused into them),
    those in `matmul_kernels` as the kernel its maker builds; kernels are ordered by their dependencies."""
    configs = configs or {}
    library = set(library)
    groups: dict[str, list[str]] = {}
    pro: dict[tuple[str, str], list[str]] = {}
    epi: dict[str, list[str]] = {}
    order = g.topo_order()
    for n in order:
        node = g.node(n)
        if node.kind not in FUSABLE:
            continue
        d = decisions.get(n, ("standalone",))
        if d[0] == "standalone":
            groups[f"_{n}"] = [n]
        elif d[0] == "group":
            groups.setdefault(str(d[1]), []).append(n)
        elif d[0] == "epilogue":
            epi.setdefault(d[1], []).append(n)
        elif d[0] == "prologue":
            pro.setdefault((d[1], d[2]), []).append(n)
        else:
            raise PlanError(f"unknown decision {d!r} for node {n!r}")
    kernels: list[KernelValue] = []
    for n in order:
        node = g.node(n)
        if node.kind == "template" and n in (matmul_kernels or {}):
            kernels.append((matmul_kernels or {})[n](tuple(pro.get((n, "A"), ())), tuple(pro.get((n, "B"), ())),
                                                      tuple(epi.get(n, ()))))
        elif node.kind == "template" and n in library:
            if pro.get((n, "A")) or pro.get((n, "B")) or epi.get(n):
                raise PlanError(f"matmul {n!r} runs in PyTorch's matmul (the library), so nothing can be fused into it")
            kernels.append(LibraryKernel(n))
        elif node.kind == "template":
            kernels.append(TemplateKernel(n, tuple(pro.get((n, "A"), ())), tuple(pro.get((n, "B"), ())),
                                          tuple(epi.get(n, ())), configs.get(n) or _default_config(g, n)))
        elif node.kind == "extern":
            kernels.append(ExternKernel(n))
    kernels += [PointwiseKernel(tuple(nodes)) for nodes in groups.values()]
    return Plan(g, tuple(_order_kernels(g, kernels)), frozenset(recompute)).check()


def _order_kernels(g: OpGraph, kernels: Sequence[KernelValue]) -> list[KernelValue]:
    """Topological order of kernels by the values they read; a cycle means the fusion choice is illegal."""
    dep = nx.DiGraph()
    dep.add_nodes_from(range(len(kernels)))
    producer: dict[str, int] = {}
    for i, k in enumerate(kernels):
        for n in produced(k):
            producer.setdefault(n, i)
    for i, k in enumerate(kernels):
        inside = set(k.nodes)
        for n in k.nodes:
            for src in g.node(n).inputs:
                if src not in inside and src in producer and producer[src] != i:
                    dep.add_edge(producer[src], i)
    try:
        return [kernels[i] for i in nx.lexicographical_topological_sort(dep)]
    except nx.NetworkXUnfeasible:
        raise PlanError("these fusion choices make two kernels wait on each other (a cycle); "
                        "fuse differently") from None


_DEFAULTS: weakref.WeakKeyDictionary[OpGraph, dict[str, TileConfig]] = weakref.WeakKeyDictionary()


def _default_config(g: OpGraph, mm: str) -> TileConfig:
    """default_config, kept per graph and matmul (a node's shape never changes once added): build_plan asks for
    every matmul's, every plan it builds."""
    known = _DEFAULTS.setdefault(g, {})
    if mm not in known:
        known[mm] = default_config(g, mm)
    return known[mm]


def default_config(g: OpGraph, mm: str, multiprocessors: int = 132) -> TileConfig:
    """A reasonable tile config for the problem size: large tiles for large problems; for small M a short
    tile, a long K step, and split-K until the tiles fill the GPU's multiprocessors about twice."""
    node = g.node(mm)
    m, n = node.shape[-2], node.shape[-1]
    batch = math.prod(node.shape[:-2]) if node.op == "bmm" else 1
    k = g.node(template_operands(g, mm)["A"]).shape[-1]
    if m >= 1024 and n >= 1024:
        elem = g.node(template_operands(g, mm)["A"]).nbytes // max(1, g.node(template_operands(g, mm)["A"]).numel)
        bk = min(64 if elem <= 2 else 32, padded_block(k))
        return TileConfig(block_m=128, block_n=128, block_k=bk, group_m=8, split_k=1, num_warps=8, num_stages=3)
    bm = 16 if m <= 16 else 32 if m <= 32 else 64 if m <= 64 else 128
    bn = 64 if n <= 64 else 128
    bk = 128 if m <= 64 else 64
    tiles = math.ceil(m / bm) * math.ceil(n / bn) * batch
    k_tiles = math.ceil(k / bk)
    split = 1
    while tiles * split * 2 <= 2 * multiprocessors and split * 2 <= max(1, k_tiles // 4) and split < 16:
        split *= 2
    bn, bk = min(bn, padded_block(n)), min(bk, padded_block(k))
    k_tiles = math.ceil(k / bk)
    split = min(split, max(1, k_tiles // 2))
    stages = 4
    elem = g.node(template_operands(g, mm)["A"]).nbytes // max(1, g.node(template_operands(g, mm)["A"]).numel)
    while stages > 2 and stages * (bm * bk + bk * bn) * elem > _SMEM_BUDGET:
        stages -= 1  # fp32 operands: fewer stages keep the pipeline inside shared memory
    while bk > 32 and stages * (bm * bk + bk * bn) * elem > _SMEM_BUDGET:
        bk //= 2
    return TileConfig(block_m=bm, block_n=bn, block_k=bk, group_m=8, split_k=split, num_warps=4, num_stages=stages)


_SMEM_BUDGET = 200 * 1024  # bytes of shared memory a default config may use (H100/H200 allow 227 KiB)

