"""A prologue's last multiply by a factor constant along K, moved from the K loop to the accumulator:
sum_k A[m, k] * (X[k, n] * S[n]) = (sum_k A[m, k] * X[k, n]) * S[n]. w8's per-column scale then costs one
multiply per output element instead of one per weight element (the handwritten w8 GEMV on the H100, bk64 bn128
sk8: 29.6 -> 28.5 us, benchmarks/results/h100-2026-12-05e-clean-flush/4-w8-gap). The dot reads X, exact where X
is a small integer (int8 cast to bf16), and the product is scaled in fp32 before it is rounded: closer to the
float64 value than eager's rounding of X * S to bf16 before the dot."""

from __future__ import annotations

from dataclasses import dataclass

from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.plan.kernels import FusedMatmulKernel
from fusionsearch.plan.matmul import template_operands

# Matmuls whose operands are A [.., M, K] and B [.., K, N] and whose output is [.., M, N]: a factor constant
# along K broadcasts onto the output as it did onto its operand (a linear's weight is [N, K]: not these).
_OPS = ("mm", "bmm", "addmm")


@dataclass(frozen=True)
class ScaleAfterDot:
    """Side `side`'s operand is `operand` * `scale` (or / `scale`), `scale` constant along K: the dot reads
    `operand`, and the accumulator is multiplied (divided) by `scale` at the output tile. `computed`: the
    prologue nodes the scale is computed from (evaluated again at the output tile; prologue values are never
    stored)."""

    side: str
    operand: str
    scale: str
    divide: bool
    computed: frozenset[str]


def _constant_along_k(g: OpGraph, n: str, root: str, k_axis: int) -> bool:
    """Whether `n`, broadcast to `root`'s shape, has size 1 on root's K axis (or no such dim at all)."""
    shape, full = g.node(n).shape, g.node(root).shape
    lead = len(full) - len(shape)
    return k_axis < lead or shape[k_axis - lead] == 1


def _ancestors_in(g: OpGraph, n: str, nodes: set[str]) -> frozenset[str]:
    seen: set[str] = set()
    todo = [n]
    while todo:
        x = todo.pop()
        if x in seen or x not in nodes:
            continue
        seen.add(x)
        todo.extend(g.node(x).inputs)
    return frozenset(seen)


def find_scales(g: OpGraph, k: FusedMatmulKernel) -> dict[str, ScaleAfterDot]:
    """Each side whose operand is a fused multiply (or division) of a value that varies along K by one that
    does not: what the kernel can move after its K loop."""
    if g.node(k.matmul).op not in _OPS:
        return {}
    ops, found = template_operands(g, k.matmul), {}
    for side, nodes, k_axis in (("A", k.prologue_a, -1), ("B", k.prologue_b, -2)):
        root = ops[side]
        node = g.node(root)
        if root not in nodes or node.op not in ("mul", "div") or len(node.inputs) != 2 or "scalar" in node.attrs:
            continue
        axis = len(node.shape) + k_axis
        varies = [not _constant_along_k(g, x, root, axis) for x in node.inputs]
        # the factor: the one input constant along K (for a division, only the divisor)
        for i in ((1,) if node.op == "div" else (1, 0)):
            if not varies[i] and varies[1 - i]:
                scale = node.inputs[i]
                found[side] = ScaleAfterDot(side, node.inputs[1 - i], scale, node.op == "div",
                                            _ancestors_in(g, scale, set(nodes)))
                break
    return found
