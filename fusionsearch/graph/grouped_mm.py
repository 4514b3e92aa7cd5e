"""Grouped matmuls with offsets (`torch._grouped_mm(x, w, offs=...)`, transformers' default MoE experts) traced
as the per-row expert matmul the grouped kind takes.

`_grouped_mm` multiplies the rows of group e (rows offs[e-1] to offs[e]) by w[e]. Its offsets are computed on
the device, so its groups are data; but the group of row s is a tensor too, `searchsorted(offs[:-1], s,
right=True)`, and the product is then each row against its group's matrix gathered by that index:
`bmm(x[:, None], w[group])`, the by-pair layout of kinds/grouped_matmul/routing.py, whatever computed the
offsets. Decomposed while tracing (the fake kernel of aten._grouped_mm refuses all but bfloat16, so a float32
model could not be traced at all), for aten's op and for transformers' `grouped_mm_fallback` custom op, which
transformers calls instead under torch.compile for every other dtype. Rows past offs[-1] are left
unspecified by aten (transformers' fallback zeroes them, and its expert-parallel path masks them afterwards):
here they take the last group's matrix. The gather then reads a transposed weight (`w.transpose(-2, -1)`,
how transformers passes [E, N, K] weights); gather_before_transpose moves the transpose after the gather so
that the kind sees the expert table as stored."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

__all__ = ["gather_before_transpose", "grouped_mm_decompositions", "rows_by_group"]

_aten = torch.ops.aten


def rows_by_group(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor | None = None,
                  bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None) -> Any:
    """`_grouped_mm(x [S, K], w [E, K, N], offs [E])` as each row times its group's matrix; NotImplemented (the
    op traced as it is) for the other forms: 3-D x, 2-D w, a bias, another output dtype."""
    if offs is None or x.dim() != 2 or w.dim() != 3 or bias is not None or out_dtype not in (None, x.dtype) or \
            offs.dim() != 1 or offs.shape[0] != w.shape[0] or x.dtype != w.dtype:
        return NotImplemented
    if w.shape[0] == 1:  # one group: one matmul
        return torch.mm(x, w.reshape(w.shape[1], w.shape[2]))
    rows = torch.arange(x.shape[0], dtype=offs.dtype, device=offs.device)
    # offs[:-1]: rows past offs[-2] fall in the last group, so the index is in range with no clamp (a clamp,
    # pointwise, would join the gather's fusion group and the router would never be in memory)
    group = torch.searchsorted(offs[:-1], rows, right=True)
    return torch.bmm(x.unsqueeze(1), w[group]).view(x.shape[0], w.shape[2])  # a view: no extern squeeze


def grouped_mm_decompositions() -> dict[Any, Callable[..., Any]]:
    """The decompositions the trace applies: aten's grouped matmul and, where transformers registered it, its
    fallback custom op (same arguments, same result)."""
    table: dict[Any, Callable[..., Any]] = {_aten._grouped_mm.default: rows_by_group}
    fallback = getattr(getattr(torch.ops, "transformers", None), "grouped_mm_fallback", None)
    try:
        if fallback is not None:
            table[fallback.default] = rows_by_group
    except AttributeError:  # the namespace exists, the op does not
        pass
    return table


def gather_before_transpose(gm: fx.GraphModule) -> int:
    """Rewrite each `index(transpose(w [E, R, C], 1, 2), [g])` (a row gather of a batch of matrices, each
    transposed) as `transpose(index(w, [g]), 1, 2)`, in place: the same values, the gather reading the table as
    it is stored. Returns how many were rewritten; dead code is left for the caller."""
    rewritten = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target != _aten.index.Tensor:
            continue
        src, indices = node.args[:2]
        if not (isinstance(src, fx.Node) and src.target == _aten.transpose.int and len(indices) == 1
                and isinstance(indices[0], fx.Node)):
            continue
        table, val = src.args[0], node.meta.get("val")
        if not isinstance(table, fx.Node) or not isinstance(val, torch.Tensor) or val.dim() != 3:
            continue
        shape = table.meta.get("val")
        if not isinstance(shape, torch.Tensor) or shape.dim() != 3 or {a % 3 for a in src.args[1:3]} != {1, 2}:
            continue
        with gm.graph.inserting_before(node):
            gathered = gm.graph.call_function(_aten.index.Tensor, (table, [indices[0]]))
            gathered.meta["val"] = torch.empty([val.shape[0], *shape.shape[1:]], dtype=val.dtype, device="meta")
            swapped = gm.graph.call_function(_aten.transpose.int, (gathered, 1, 2))
            swapped.meta["val"] = torch.empty(list(val.shape), dtype=val.dtype, device="meta")
        node.replace_all_uses_with(swapped)
        gm.graph.erase_node(node)
        rewritten += 1
    return rewritten
