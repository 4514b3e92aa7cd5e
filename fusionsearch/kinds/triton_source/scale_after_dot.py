"""A prologue's last multiply by a factor constant along K, moved from the K loop to the accumulator:
sum_k A[m, k] * (X[k, n] * S[n]) = (sum_k A[m, k] * X[k, n]) * S[n]. w8's per-column scale then costs one
multiply per output element instead of one per weight element (the handwritten w8 GEMV on the H100, bk64 bn128
sk8: 29.6 -> 28.5 us, benchmarks/results/h100-2026-12-05e-clean-flush/4-w8-gap). The dot reads X, exact where X
is a small integer (int8 cast to bf16), and the product is scaled in fp32 before it is rounded: closer to the
float64 value than eager's rounding of X * S to bf16 before the dot."""

from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx

from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.plan.kernels import FusedMatmulKernel
from fusionsearch.plan.matmul import template_operands

# Matmuls whose operands are A [.., M, K] and B [.., K, N] and whose output is [.., M, N]: a factor constant
# along K broadcasts onto the output as it did onto its operand (a linear's weight is [N, K]: not these).
_OPS = ("mm", "bmm", "addmm")


@dataclass(frozen=True)
class Factor:
    """One factor moved after the dot: the value of node `scale` (constant along K), or the number `scalar`;
    the accumulator is divided by it where `divide`."""

    scale: str | None
    scalar: float | None
    divide: bool


@dataclass(frozen=True)
class ScaleAfterDot:
    """Side `side`'s operand is `operand` times (or divided by) `factors`, each constant along K: the dot reads
    `operand`, and the accumulator is multiplied by the factors at the output tile. `computed`: the prologue
    nodes the factors are computed from (evaluated again at the output tile; prologue values are never
    stored)."""

    side: str
    operand: str
    factors: tuple[Factor, ...]
    computed: frozenset[str]


def _constant_along_k(g: OpGraph, n: str, root: str, k_axis: int) -> bool:
    """Whether `n`, broadcast to `root`'s shape, has size 1 on root's K axis (or no such dim at all)."""
    shape, full = g.node(n).shape, g.node(root).shape
    lead = len(full) - len(shape)
    return k_axis < lead or shape[k_axis - lead] == 1


def _peel(g: OpGraph, v: str, k_axis: int) -> tuple[str, Factor] | None:
    """`v` as (what varies along K, the factor constant along K) where `v` is a multiply or division by one."""
    node = g.node(v)
    if node.op not in ("mul", "div"):
        return None
    if "scalar" in node.attrs:
        c = node.attrs["scalar"]
        if node.op == "div" and node.attrs.get("scalar_first") or not math.isfinite(c) or c == 0:
            return None  # c / x; x * inf, whose NaNs the dot would place elsewhere
        return node.inputs[0], Factor(None, float(c), node.op == "div")
    if len(node.inputs) != 2:
        return None
    varies = [not _constant_along_k(g, x, v, k_axis) for x in node.inputs]
    for i in ((1,) if node.op == "div" else (1, 0)):  # for a division, only the divisor
        if not varies[i] and varies[1 - i]:
            return node.inputs[1 - i], Factor(node.inputs[i], None, node.op == "div")
    return None


def find_scales(g: OpGraph, k: FusedMatmulKernel) -> dict[str, ScaleAfterDot]:
    """Each side whose operand is a chain of fused multiplies (or divisions) by factors constant along K ending
    at a value that varies along K: what the kernel can move after its K loop. A value inside the chain must
    have no other use (it is no longer computed)."""
    if g.node(k.matmul).op not in _OPS:
        return {}
    ops, found = template_operands(g, k.matmul), {}
    for side, nodes, k_axis in (("A", k.prologue_a, -1), ("B", k.prologue_b, -2)):
        operand, factors, inside = ops[side], [], set(nodes)
        while operand in inside and (not factors or len(g.consumers(operand)) == 1):
            peeled = _peel(g, operand, len(g.node(operand).shape) + k_axis)
            if peeled is None:
                break
            operand, factor = peeled
            factors.append(factor)
        if factors:
            computed = frozenset().union(*((nx.ancestors(g.nx, f.scale) | {f.scale}) & inside
                                           for f in factors if f.scale))
            found[side] = ScaleAfterDot(side, operand, tuple(factors), computed)
    return found
