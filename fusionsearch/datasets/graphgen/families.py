"""The random graph families and a graph's outputs. Dense graphs (mm, addmm, linear) come in five topologies:
one matmul, a chain, parallel heads of one input, a gated MLP (SwiGLU/GeGLU) and a LoRA update; batched graphs are
attention-like bmm chains. `build_graph` draws the number of matmuls and the family, then the outputs."""

from __future__ import annotations

import math
from collections.abc import Callable

from fusionsearch.datasets.graphgen.builder import GraphBuilder
from fusionsearch.datasets.graphgen.matmuls import activation, epilogue, matmul
from fusionsearch.datasets.graphgen.shapes import REAL_BMM_K, REAL_BMM_M, REAL_BMM_N, REAL_KN, REAL_M
from fusionsearch.datasets.graphgen.values import FLOATS, RANK, Collapse, Val
from fusionsearch.graph.opgraph import OpGraph


def build_graph(b: GraphBuilder, max_mm: int) -> OpGraph:
    """b's graph of 1..max_mm matmuls (at most 3), dense or batched, with its outputs set."""
    n = b.rng.choices((1, 2, 3), weights=(45, 35, 20))[0] if max_mm >= 3 else b.rng.randint(1, max_mm)
    outs = bmm_graph(b, n) if b.rng.random() < 0.2 else dense_graph(b, n)
    names = [finish(b, v) for v in outs]
    if b.rng.random() < 0.3:  # an intermediate value must be materialised too
        extra = [v for name, v in b.vals.items() if can_output(b, v) and name not in names]
        if extra:
            names.append(b.rng.choice(extra).name)
    b.g.set_outputs(list(dict.fromkeys(names)))
    return b.g


def can_output(b: GraphBuilder, v: Val) -> bool:
    node = b.g.node(v.name)
    return node.op != "input" and node.dtype in FLOATS and RANK[node.dtype] <= v.prec


def finish(b: GraphBuilder, v: Val) -> str:
    """An output no more precise than its history (see values.RANK)."""
    if not can_output(b, v):
        v = b.cast(v, next(d for d, r in RANK.items() if r == v.prec))
    return v.name


# ---- dense graphs --------------------------------------------------------------------------------------
def dense_graph(b: GraphBuilder, n: int) -> list[Val]:
    """n matmuls of kinds mm/addmm/linear on one activation x [*lead, K0], in a topology fit for n."""
    kinds = [b.rng.choice(("mm", "addmm", "linear")) for _ in range(n)]
    m = b.dim(REAL_M)
    lead: tuple[int, ...] = (m,)
    if all(k == "linear" for k in kinds) and b.rng.random() < 0.3:  # x [b, s, K] as in a transformer
        bs = b.rng.choice((2, 4)) if not b.small else b.rng.randint(1, 3)
        lead = (bs, max(1, m // bs)) if not b.small else (bs, m)
    k0 = b.dim(REAL_KN)
    x = activation(b, lead, k0)
    topo = "single" if n == 1 else b.rng.choice(
        ("chain", "gated", "heads") if n == 2 else ("chain", "gated", "lora", "heads"))
    dims = [b.dim(REAL_KN) for _ in range(n)]
    return TOPOLOGIES[topo](b, kinds, x, k0, dims)


def _single(b: GraphBuilder, kinds: list[str], x: Val, k0: int, dims: list[int]) -> list[Val]:
    return [epilogue(b, matmul(b, kinds[0], x, k0, dims[0]), final=True)]


def _chain(b: GraphBuilder, kinds: list[str], x: Val, k0: int, dims: list[int]) -> list[Val]:
    """x @ W1 -> epilogue -> @ W2 -> ... (an MLP's layers)."""
    h, k = x, k0
    for i in range(len(kinds)):
        h = epilogue(b, matmul(b, kinds[i], h, k, dims[i]), final=i == len(kinds) - 1)
        k = dims[i]
    return [h]


def _heads(b: GraphBuilder, kinds: list[str], x: Val, k0: int, dims: list[int]) -> list[Val]:
    """q, k, v projections of one input: every head an output."""
    return [epilogue(b, matmul(b, kinds[i], x, k0, dims[i]), final=True) for i in range(len(kinds))]


def _gated(b: GraphBuilder, kinds: list[str], x: Val, k0: int, dims: list[int]) -> list[Val]:
    """act(x @ w1) * (x @ w3) (SwiGLU, GeGLU), then the down projection when there are three matmuls."""
    gate = b.activate(matmul(b, kinds[0], x, k0, dims[0]))
    up = matmul(b, kinds[1], x, k0, dims[0])
    h = b.binary("mul", gate, up)
    if len(kinds) == 2:
        return [epilogue(b, h, final=True)]
    return [epilogue(b, matmul(b, kinds[2], h, dims[0], dims[2]), final=True)]


def _lora(b: GraphBuilder, kinds: list[str], x: Val, k0: int, dims: list[int]) -> list[Val]:
    """x @ W + s * ((x @ A) @ B), the rank a small width."""
    y = matmul(b, kinds[0], x, k0, dims[0])
    r = b.dim((256, 512)) if not b.small else b.rng.randint(1, 16)
    t = matmul(b, kinds[1], x, k0, r)
    d = matmul(b, kinds[2], b.scale(t, b.rng.choice((0.5, 0.25, 1.0))), r, dims[0])
    return [epilogue(b, b.binary("add", y, d), final=True)]


TOPOLOGIES: dict[str, Callable[[GraphBuilder, list[str], Val, int, list[int]], list[Val]]] = {
    "single": _single, "chain": _chain, "heads": _heads, "gated": _gated, "lora": _lora,
}


# ---- batched graphs ------------------------------------------------------------------------------------
def bmm_graph(b: GraphBuilder, n: int) -> list[Val]:
    """Batched products: attention-like chains [B, M, K] @ [B, K, S] -> scale, bound -> @ [B, S, N]."""
    batch = b.rng.randint(2, 32) if not b.small else b.rng.randint(1, 4)
    m, k = b.dim(REAL_BMM_M), b.dim(REAL_BMM_K)
    h = activation(b, (batch, m), k, gather_ok=False)
    for i in range(n):
        width = b.dim(REAL_BMM_N)
        h = matmul(b, "bmm", h, k, width)
        if i < n - 1 and b.rng.random() < 0.7:  # scores: scaled, then squashed like a softmax would
            h = b.scale(h, 2.0 ** -round(math.log2(max(k, 1)) / 2))
            try:
                h = b.unary(h, b.rng.choice(("sigmoid", "tanh", "sigmoid")))
            except Collapse:
                h = b.unary(h, "tanh")
        h = epilogue(b, h, final=i == n - 1)
        k = width
    return [h]
