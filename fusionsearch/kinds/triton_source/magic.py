"""Small non-negative integers as floats by their bits: OR'd under a float's exponent, q is MAGIC + q exactly,
with no int-to-float instruction (a quarter-rate one on sm_90: one per int4 weight element). TileEvaluator uses
these for a cast of such an integer and folds MAGIC into the offsets and zeros that follow it."""

from __future__ import annotations

import torch

from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.kinds.triton_source.dtypes import tl_dtype

FOLD_MAGIC = 1024  # the largest MAGIC whose offset `_fold_scale` moves into the zero (fp16's)


# Floats whose bits OR'd onto a small non-negative integer q give MAGIC + q exactly: (bits, MAGIC, the integer
# dtype the bits are built in, the largest q).
MAGIC: dict[torch.dtype, tuple[int, int, torch.dtype, int]] = {
    torch.bfloat16: (0x4300, 128, torch.int16, 127),
    torch.float16: (0x6400, 1024, torch.int16, 1023),
    torch.float32: (0x4B000000, 1 << 23, torch.int32, (1 << 23) - 1),
}
_INTEGER_BOUNDS = {torch.uint8: 255, torch.bool: 1}


def nonnegative_bound(g: OpGraph, n: str) -> int | None:
    """The largest value of integer node `n` where it is known never negative (x & m with m >= 0, any uint8);
    else None. Layout ops (a view of the nibbles) move values without changing them."""
    node = g.node(n)
    while node.kind == "layout":
        if node.op == "stack":  # each element is one input's
            bounds = [nonnegative_bound(g, x) for x in node.inputs]
            return None if None in bounds else max(b for b in bounds if b is not None)
        node = g.node(node.inputs[0])
    scalar = node.attrs.get("scalar")
    if node.op == "bitwise_and" and len(node.inputs) == 1 and not isinstance(scalar, bool) and isinstance(
            scalar, int) and 0 <= scalar:
        return min(scalar, _INTEGER_BOUNDS.get(node.dtype, scalar))
    return _INTEGER_BOUNDS.get(node.dtype)


def small_int_bits(expr: str, src: torch.dtype, dst: torch.dtype, bound: int | None) -> str | None:
    """An integer q in [0, bound] as the `dst` float MAGIC + q, made by OR'ing its bits onto MAGIC's: less
    MAGIC, it is q converted without an int-to-float instruction (a quarter-rate one on sm_90: one per int4
    weight element). Exact, as the conversion is, for q within the mantissa's reach; None where q's range
    is not known to be."""
    if bound is None or dst not in MAGIC or src.is_floating_point or src == torch.bool:
        return None
    bits, _, int_dtype, largest = MAGIC[dst]
    if bound > largest:
        return None
    it, ft = tl_dtype(int_dtype), tl_dtype(dst)
    return f"({expr}.to({it}) | tl.full((), {bits}, {it})).to({ft}, bitcast=True)"

