"""The reference value of a mixture-of-experts bmm without its gathered expert weights: op by op, the gather
table[idx] of Mixtral's layer at 512 tokens is [512, 2, 14336, 4096], 481 GB in float64, so no plan of it
could be validated. Per touched expert instead: the chain's unary ops on that expert's weight (elementwise,
so the same on the table as on its gathered rows), then its pairs' rows against it, laid out as the bmm's
output (routing.py's two layouts)."""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

from fusionsearch.graph.opgraph import Node, OpGraph
from fusionsearch.graph.reference import Replacement, apply_op, feeds_only
from fusionsearch.kinds.grouped_matmul.routing import ExpertRouting, expert_routing
from fusionsearch.plan.matmul import template_operands


def expert_bmm_replacements(g: OpGraph) -> dict[str, Replacement]:
    """For each expert bmm whose gather chain feeds it alone: its value per expert, the chain never built."""
    out = {}
    for mm in g.nodes_of_kind("template"):
        r = expert_routing(g, mm)
        if r is None:
            continue
        if not all(feeds_only(g, n, {*r.chain, mm}) for n in r.chain):
            continue  # a chain value used elsewhere is built anyway; nothing to save
        table = g.node(r.gather).inputs[0]
        unary = tuple(g.node(n) for n in reversed(r.chain) if g.node(n).kind == "pointwise")
        reads = (template_operands(g, mm)["A"], table, r.router)
        out[mm] = Replacement(reads, r.chain, functools.partial(_per_expert, r, unary))
    return out


def _per_expert(r: ExpertRouting, unary: tuple[Node, ...], values: Sequence[torch.Tensor], float64: bool
                ) -> torch.Tensor:
    """bmm(A, transpose(view(chain(table[idx])))) from A [B, 1, C], the table [E, R, C] and idx [T, A]."""
    a, table, idx = values
    experts = idx.long().flatten()
    experts = torch.where(experts < 0, experts + r.experts, experts)
    if bool(((experts < 0) | (experts >= r.experts)).any()):
        raise IndexError(f"router index out of range for {r.experts} experts (as eager's gather raises)")
    rows = a[:, 0, :]
    if r.pairs_per_batch > 1:  # by token: pair t*A + a multiplies token t's row
        rows = rows.repeat_interleave(r.pairs_per_batch, dim=0)
    out = rows.new_zeros((r.pairs, r.cols))  # a matmul's result has its operands' dtype
    for e in experts.unique().tolist():
        w = table[e]
        for node in unary:
            w = apply_op(node, [w], float64)
        pairs = (experts == e).nonzero().flatten()
        out[pairs] = rows[pairs] @ w.t()
    return out.reshape(a.shape[0], 1, -1)  # by pair [T*A, 1, R]; by token [T, 1, A*R] (pairs t*A + a in order)
