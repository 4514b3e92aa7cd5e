"""Batched matmuls rewritten before the traced graph is mapped, into the forms the matmul kinds take: one
against a broadcast matrix folded into one mm, and one that multiplies each matrix by a single column turned
into a row times the transposed matrix.

`F.linear(x, w)` on a 3-D `x` folds into one mm only where x's leading dims are contiguous in the sense
aten's matmul checks (`should_fold`). gpt-fast's attention output, `y.transpose(1, 2).contiguous().view(b, s,
d)` at one token a step, has a size-1 dim whose stride breaks that check, so the output projection traces as
`bmm(x, w.t().expand(b, d, d))`: b matmuls of one row each, every one reading the whole weight, where one mm
of b rows reads it once (and reaches the decode kind). The fold computes the same values: each batch's rows
times the same matrix."""

from __future__ import annotations

import torch
import torch.fx as fx

__all__ = ["fold_broadcast_bmm", "rows_first_bmm"]

_aten = torch.ops.aten
_VIEWS = (_aten.view.default, _aten._unsafe_view.default, _aten.reshape.default)


def _broadcast_matrix(node: object) -> fx.Node | None:
    """The [k, n] (or [1, k, n]) value that `node`, a [b, k, n] bmm operand, broadcasts over the batch through
    views and one expand; None when it is anything else."""
    while isinstance(node, fx.Node) and node.op == "call_function" and node.target in _VIEWS:
        src = node.args[0]
        if not isinstance(src, fx.Node) or _shape(src) != _shape(node):
            break
        node = src
    if not (isinstance(node, fx.Node) and node.op == "call_function" and node.target == _aten.expand.default):
        return None
    src = node.args[0]
    shape = _shape(src) if isinstance(src, fx.Node) else None
    if shape is None or len(shape) not in (2, 3) or (len(shape) == 3 and shape[0] != 1):
        return None
    return src  # type: ignore[return-value]  # a node: only nodes have a shape


def _shape(node: fx.Node) -> tuple[int, ...] | None:
    val = node.meta.get("val")
    return tuple(int(s) for s in val.shape) if isinstance(val, torch.Tensor) else None


def _call(graph: fx.Graph, target: object, args: tuple[object, ...], shape: list[int], dtype: torch.dtype
          ) -> fx.Node:
    node = graph.call_function(target, args)  # type: ignore[arg-type]
    node.meta["val"] = torch.empty(shape, dtype=dtype, device="meta")
    return node


def fold_broadcast_bmm(gm: fx.GraphModule) -> int:
    """Rewrite each `bmm(a [b, m, k], expand(w) [b, k, n])` whose `w` is one [k, n] matrix as
    `view(mm(view(a, [b*m, k]), w), [b, m, n])`, in place; returns how many were folded. Dead code is left
    for the caller to eliminate."""
    folded = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target != _aten.bmm.default:
            continue
        a, b = node.args[:2]
        w = _broadcast_matrix(b)
        out = node.meta.get("val")
        if w is None or not isinstance(a, fx.Node) or _shape(a) is None or not isinstance(out, torch.Tensor):
            continue
        batch, m, k = _shape(a)  # type: ignore[misc]
        n = int(out.shape[2])
        with gm.graph.inserting_before(node):
            rows = _call(gm.graph, _aten.view.default, (a, [batch * m, k]), [batch * m, k], out.dtype)
            if len(_shape(w) or ()) == 3:
                w = _call(gm.graph, _aten.view.default, (w, [k, n]), [k, n], out.dtype)
            mm = _call(gm.graph, _aten.mm.default, (rows, w), [batch * m, n], out.dtype)
            back = _call(gm.graph, _aten.view.default, (mm, [batch, m, n]), [batch, m, n], out.dtype)
        node.replace_all_uses_with(back)
        gm.graph.erase_node(node)
        folded += 1
    return folded


def rows_first_bmm(gm: fx.GraphModule) -> int:
    """Rewrite each `bmm(w [b, m, k], x [b, k, 1])` with m > 1 (a matrix times one column: `transformers`'
    batched MoE experts, their gathered weights first) as `transpose(bmm(transpose(x), transpose(w)), 1, 2)`:
    the same values, as one row against the transposed matrix, the form of the decode and grouped kinds
    (M = 1, the weight the B operand). Returns how many were rewritten."""
    rewritten = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target != _aten.bmm.default:
            continue
        w, x = node.args[:2]
        out = node.meta.get("val")
        if not (isinstance(w, fx.Node) and isinstance(x, fx.Node) and isinstance(out, torch.Tensor)):
            continue
        (batch, m, k), n = _shape(w) or (0, 0, 0), int(out.shape[2])
        if n != 1 or m == 1:
            continue
        with gm.graph.inserting_before(node):
            row = _call(gm.graph, _aten.transpose.int, (x, 1, 2), [batch, 1, k], out.dtype)
            wt = _call(gm.graph, _aten.transpose.int, (w, 1, 2), [batch, k, m], out.dtype)
            mm = _call(gm.graph, _aten.bmm.default, (row, wt), [batch, 1, m], out.dtype)
            back = _call(gm.graph, _aten.transpose.int, (mm, 1, 2), [batch, m, 1], out.dtype)
        node.replace_all_uses_with(back)
        gm.graph.erase_node(node)
        rewritten += 1
    return rewritten
