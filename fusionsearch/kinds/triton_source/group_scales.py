"""A weight dequantised by groups along K, B = (V - c) * S + Z with V a cast integer and S, Z constant inside
each K tile (a group of G rows, G a multiple of BLOCK_K), multiplied with the scale and zero after the dot:

    sum_k A[m, k] B[k, n] = S[n] * dot(A, V + MAGIC)[m, n] + X[m] * (Z[n] - (MAGIC + c) * S[n]),  X = sum_k A[m, k]

over each K tile. The dot reads the integer as the float MAGIC + q, exact from its bits (TileEvaluator.biased),
so a weight element costs its unpack alone: no offset, multiply or add. On the H100 the int4 GEMV at 16 rows
(K 4096, N 11008, G 128), handwritten in this form: 24.1 us against the generated words kernel's 26.8
(benchmarks/results/h100-2026-12-06l-w4-magic). Exact in real arithmetic; the dot's fp32 sum holds MAGIC X, so
its rounding is about (MAGIC + c) / |q - c| times a plain dot's: far below a bf16 or fp16 result's. A must be
the values the dot multiplies (bf16 or fp16: a tf32 dot would round A where X does not)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch

from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.kinds.triton_source.emit import NameGen, Source
from fusionsearch.kinds.triton_source.tile import Buffers, TileEvaluator
from fusionsearch.kinds.triton_source.tile_index import Idx, _broadcast_index
from fusionsearch.plan.matmul import template_operands

_K_TOKENS = re.compile(r"\b(kp|idx_k|mask_k)\b")  # a tile's index names that vary along K inside the tile


@dataclass(frozen=True)
class GroupScale:
    """B = (`operand` - `offset`) * `scale` (+ `zero`): the dot reads `operand` (an integer cast to a float);
    `skipped`, the offset, multiply and add, are not computed in the K loop."""

    operand: str
    offset: int
    scale: str
    zero: str | None
    skipped: frozenset[str]
    factor: float = 1.0  # scalar multiplies of (V - c) * S, folded into the scale


def find_group_scale(g: OpGraph, mm: str, fused: set[str] | None = None) -> GroupScale | None:
    """B's operand as a GroupScale where its prologue has that form, every node of it inside `fused` (B's
    prologue; None: any) and the offset, multiply and add used only there; else None. Whether S and Z are
    constant inside a K tile is the tile's question (`constant_in_k_tile`)."""

    def inside(n: str, single: bool = True) -> bool:
        return (fused is None or n in fused) and (not single or len(g.consumers(n)) == 1)

    cur, zero, skipped = template_operands(g, mm)["B"], None, set()
    node = g.node(cur)
    if node.op == "add" and len(node.inputs) == 2 and node.attrs.get("alpha", 1) == 1 and inside(cur, False):
        muls = [i for i, x in enumerate(node.inputs) if g.node(x).op == "mul" and inside(x)]
        if not muls:
            return None
        skipped.add(cur)
        cur, zero = node.inputs[muls[0]], node.inputs[1 - muls[0]]
    factor, node = 1.0, g.node(cur)
    while node.op == "mul" and len(node.inputs) == 1 and _finite_scalar(node.attrs.get("scalar")) \
            and inside(cur, bool(skipped)):
        factor *= float(node.attrs["scalar"])
        skipped.add(cur)
        cur = node.inputs[0]
        node = g.node(cur)
    if node.op != "mul" or len(node.inputs) != 2 or not inside(cur, bool(skipped)):
        return None
    skipped.add(cur)
    for v, s in (node.inputs, node.inputs[::-1]):
        offset, base = _peel_offset(g, v, inside)
        cast = g.node(base)
        if cast.op == "cast" and inside(base, False) and not g.node(cast.inputs[0]).dtype.is_floating_point \
                and g.node(cast.inputs[0]).dtype != torch.bool and cast.dtype.is_floating_point:
            return GroupScale(base, offset, s, zero, frozenset(skipped | ({v} if v != base else set())), factor)
    return None


def _finite_scalar(c: object) -> bool:
    return not isinstance(c, bool) and isinstance(c, (int, float)) and math.isfinite(c) and c != 0


def _peel_offset(g: OpGraph, v: str, inside: object) -> tuple[int, str]:
    """(c, V) where `v` is V - c or V + (-c) with c an integer scalar (fused, used only here); else (0, v)."""
    node = g.node(v)
    c = node.attrs.get("scalar")
    if (node.op in ("sub", "add") and len(node.inputs) == 1 and not node.attrs.get("scalar_first")
            and not isinstance(c, bool) and isinstance(c, (int, float)) and float(c).is_integer()
            and node.attrs.get("alpha", 1) == 1 and inside(v)):  # type: ignore[operator]
        return (int(c) if node.op == "sub" else -int(c)), node.inputs[0]
    return 0, v


def factor_index(g: OpGraph, mm: str, gs: GroupScale, factor: str, b_index: tuple[Idx, ...]) -> tuple[Idx, ...]:
    """The index of `factor` (the scale or the zero) where B is read at `b_index`: broadcast down from B's shape
    through the add and the multiply."""
    b = template_operands(g, mm)["B"]
    if factor == gs.zero:
        return _broadcast_index(g.node(factor).shape, g.node(b).shape, b_index)
    mul = next(x for x in gs.skipped if g.node(x).op == "mul" and factor in g.node(x).inputs)
    # B, its scalar multiplies and the multiply by S are elementwise: shapes only broadcast along the way
    at_mul = _broadcast_index(g.node(mul).shape, g.node(b).shape, b_index)
    return _broadcast_index(g.node(factor).shape, g.node(mul).shape, at_mul)


def constant_in_k_tile(g: OpGraph, mm: str, gs: GroupScale, fused: set[str], b_index: tuple[Idx, ...]) -> bool:
    """Whether the scale and zero, read where B is read at `b_index` (a K tile's), are the same along the
    tile's K: their index, followed through the layout and pointwise ops of `fused` to the tensors they read,
    names none of the tile's K variables. Generates nothing."""
    ev = TileEvaluator(g, fused, Buffers(g), Source(0, NameGen()), True)

    def constant(n: str, index: tuple[Idx, ...]) -> bool:
        node = g.node(n)
        if n not in fused:
            return not any(_K_TOKENS.search(f"{c.expr} {c.mask or ''}") for c in index)
        if node.kind == "layout":
            return constant(node.inputs[0], ev._layout_index(n, index))
        if node.kind == "pointwise":
            return all(constant(x, _broadcast_index(g.node(x).shape, node.shape, index)) for x in node.inputs)
        return False  # a gather: its rows are values

    return all(constant(f, factor_index(g, mm, gs, f, b_index)) for f in (gs.scale, gs.zero) if f is not None)
