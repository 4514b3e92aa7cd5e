"""A small copy of a graph for checking plans in Triton's CPU interpreter: every size above a cap is mapped
to a distinct small odd size (equal sizes stay equal), so the same plan decisions apply and masks are hit."""

from __future__ import annotations

from typing import Any

from fusionsearch.errors import FusionSearchError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.spec import graph_from_dict


def size_map(g: OpGraph, cap: int) -> dict[int, int]:
    sizes = sorted({s for n in g for s in n.shape if s > cap})
    return {s: cap - 11 + 8 * i for i, s in enumerate(sizes)}  # e.g. cap 48: 37, 45, 53, ...


def shrink(g: OpGraph, cap: int = 48, bf16_as: str | None = "float16") -> OpGraph | None:
    """The graph with large sizes mapped down, or None when its attrs tie sizes together in a way that
    does not survive the mapping (a view that merges dims, say). bfloat16 becomes `bf16_as` (float16 by
    default; None keeps it): the interpreter miscomputes bf16, and the plan's structure is the same."""
    mapping = size_map(g, cap)
    spec = g.to_dict()

    def m(v: Any) -> Any:
        return mapping.get(v, v) if isinstance(v, int) and not isinstance(v, bool) else v

    for entry in spec["inputs"]:
        shape = [m(s) for s in entry["shape"]]
        order = sorted(range(len(shape)), key=lambda d: entry["strides"][d], reverse=True)
        strides = [0] * len(shape)
        acc = 1
        for d in reversed(order):
            strides[d] = acc if entry["strides"][d] != 0 else 0
            acc *= max(shape[d], 1) if entry["strides"][d] != 0 else 1
        entry["shape"], entry["strides"] = shape, strides
        if bf16_as and entry["dtype"] == "bfloat16":
            entry["dtype"] = bf16_as
    for entry in spec["nodes"]:
        attrs = entry.get("attrs", {})
        if isinstance(attrs.get("shape"), list):
            attrs["shape"] = [m(s) for s in attrs["shape"]]
        if bf16_as and attrs.get("dtype") == "bfloat16":
            attrs["dtype"] = bf16_as
    try:
        return graph_from_dict(spec, "shrunk graph")
    except FusionSearchError:
        return None
