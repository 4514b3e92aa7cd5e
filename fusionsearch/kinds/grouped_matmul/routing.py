"""How a batched matmul routes tokens to experts: the mixture-of-experts shape the grouped kind runs.

A bmm computes, per token (or per token-expert pair), one row against expert weights gathered by the router's
indices: B = transpose(view(table[idx])) with table [E, R, C] (E experts, R output columns, C = K) and
idx [T, A] (T tokens, each sent to A experts). Two layouts of the pairs occur (gpt-fast's mixtral):

- by token: view [T, A*R, C], so batch t holds its A pairs side by side in N (column a*R + r);
- by pair: view [T*A, R, C], so batch p = t*A + a is one pair; or, with the router already flat (idx [P],
  one expert a pair: `transformers`' batched_mm experts), table[idx] [P, R, C] with no view.

Either way pair p = t*A + a writes R contiguous outputs of one expert. Recognised here from the graph alone,
so the kind accepts exactly the matmuls whose every B column block belongs to one expert."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fusionsearch.graph.opgraph import Node, OpGraph
from fusionsearch.plan.matmul import template_operands

_GATHERS = ("index", "index_select", "embedding")
_ROUTER_DTYPES = (torch.int32, torch.int64)


@dataclass(frozen=True)
class ExpertRouting:
    """The expert structure of one bmm: its gather node, the router tensor (idx), E experts, A choices per
    token, T tokens, R columns an expert writes per pair, and how many pairs one batch of the bmm holds (A by
    token, 1 by pair). `chain`: the nodes from the B operand down to the gather, which the kind must fuse."""

    gather: str
    router: str
    experts: int
    top: int
    tokens: int
    cols: int
    pairs_per_batch: int
    chain: tuple[str, ...]

    @property
    def pairs(self) -> int:
        """Token-expert pairs: T*A."""
        return self.tokens * self.top

    def expected_experts(self) -> float:
        """Experts touched by T tokens choosing A of E uniformly (what an estimate can know before the router
        runs): E * (1 - (1 - A/E)^T)."""
        return self.experts * (1 - (1 - self.top / self.experts) ** self.tokens)


def expert_routing(g: OpGraph, mm: str) -> ExpertRouting | None:
    """The routing of bmm `mm`, or None when it is not a per-token expert matmul: one row (M = 1) per batch,
    B a view and a last-two-dims transpose of a gather table[idx] (unary pointwise ops, a cast of int8
    weights say, may sit anywhere on that chain), in one of the two layouts above."""
    node = g.node(mm)
    if node.op != "bmm":
        return None
    ops = template_operands(g, mm)
    a, b = g.node(ops["A"]), g.node(ops["B"])
    if a.shape[1] != 1:
        return None
    chain, layouts, n = [], [], ops["B"]
    while g.node(n).op not in _GATHERS:
        cur = g.node(n)
        if len(cur.inputs) != 1 or cur.kind not in ("layout", "pointwise"):
            return None
        chain.append(n)
        if cur.kind == "layout":
            layouts.append(cur)
        n = cur.inputs[0]
    chain.append(n)
    table, router = (g.node(x) for x in g.node(n).inputs)
    if len(table.shape) != 3 or len(router.shape) not in (1, 2) or router.dtype not in _ROUTER_DTYPES:
        return None
    (experts, cols, k), (tokens, top) = table.shape, (*router.shape, 1)[:2]
    if len(router.shape) == 1:  # one expert per row, the pairs flattened (transformers' batched_mm experts)
        per_batch = 1 if _swapped(layouts) else None
    else:
        per_batch = _viewed_then_swapped(layouts, tokens, top, cols, k) or _permuted_then_viewed(
            layouts, tokens, top, cols, k)
    if per_batch is None or k != b.shape[1] or a.shape[0] != b.shape[0]:
        return None
    return ExpertRouting(n, router.name, experts, top, tokens, cols, per_batch, tuple(chain))


def _swapped(layouts: list[Node]) -> bool:
    """The gathered [P, R, C] (one expert per pair) with its last two dims swapped, and nothing else."""
    if [x.op for x in layouts] != ["transpose"]:
        return False
    d0, d1 = layouts[0].attrs.get("dim0", 0) % 3, layouts[0].attrs.get("dim1", 1) % 3
    return {d0, d1} == {1, 2}


def _viewed_then_swapped(layouts: list[Node], tokens: int, top: int, cols: int, k: int) -> int | None:
    """Pairs per batch where the gathered [T, A, R, C] is viewed as [T, A*R, C] (by token: A) or [T*A, R, C] (by
    pair: 1), then its last two dims swapped (the bmms as written by hand); None for another layout."""
    if [x.op for x in reversed(layouts)] not in (["view", "transpose"], ["reshape", "transpose"]):
        return None
    view, swap = layouts[1], layouts[0]
    rank = len(swap.shape)
    if {swap.attrs.get("dim0", 0) % rank, swap.attrs.get("dim1", 1) % rank} != {1, 2}:
        return None
    return {(tokens, top * cols, k): top, (tokens * top, cols, k): 1}.get(tuple(view.shape))


def _permuted_then_viewed(layouts: list[Node], tokens: int, top: int, cols: int, k: int) -> int | None:
    """The same two layouts as einsum traces them (gpt-fast's 'ti,taoi->tao' and 'tao,taio->tai'): the gathered
    [T, A, R, C] permuted (any chain of permutes and transposes) to [T, C, A, R] and viewed as [T, C, A*R] (by
    token: A pairs a batch), or to [T, A, C, R] and viewed as [T*A, C, R] (by pair: 1), dims of size 1 anywhere
    (einsum moves them at one token); None otherwise."""
    order = [0, 1, 2, 3]
    steps = list(reversed(layouts))
    for node in steps[:-1]:
        if node.op == "permute" and len(node.attrs["dims"]) == 4:
            order = [order[d] for d in node.attrs["dims"]]
        elif node.op == "transpose" and len(node.shape) == 4:
            d0, d1 = node.attrs.get("dim0", 0) % 4, node.attrs.get("dim1", 1) % 4
            order[d0], order[d1] = order[d1], order[d0]
        else:
            return None
    if not steps or steps[-1].op not in ("view", "reshape"):
        return None
    unit = {d for d, size in enumerate((tokens, top, cols, k)) if size == 1}  # where they lie changes no index

    def moved(canonical: list[int]) -> bool:
        return [d for d in order if d not in unit] == [d for d in canonical if d not in unit]

    shape = tuple(steps[-1].shape)
    if moved([0, 3, 1, 2]) and shape == (tokens, k, top * cols):
        return top
    if moved([0, 1, 3, 2]) and shape == (tokens * top, k, cols):
        return 1
    return None
