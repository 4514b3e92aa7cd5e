"""Routed mixture-of-experts blocks as real code writes them: a router (softmax, top-k, renormalised weights)
computed in the graph, and the chosen experts' weights gathered by index, in the two forms the grouped kind
accepts (kinds/grouped_matmul/routing.py):

- "gathered": gpt-fast's mixtral-moe `MOEFeedForward`: per token, its row against both chosen experts' weights
  at once (einsum 'ti,taoi->tao'), SiLU * up, the down projection per pair, and the weighted sum as a bmm over
  the pairs (einsum 'tai,ta->ti');
- "grouped": `transformers`' MixtralSparseMoeBlock with batched_mm experts: the tokens repeated per pair, the
  router's indices flattened, each pair's gate_up product split into gate and up, and the pairs summed.

The op structure is what fs.capture records for each (its permute chains, views and extern ops included;
tests/datasets/test_routed_families.py compares them), except one deliberate change: the router's logits are
computed in float32 for 16-bit graphs (x cast, the router weight kept in float32, as DeepSeek's and vLLM's
routers do). A 16-bit router's top-k differs from the float64 reference's wherever two experts' logits are
within its rounding, and one token routed elsewhere fails validation (its whole row differs), so no plan of such
a graph would validate."""

from __future__ import annotations

import random

import torch

from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.registry import dtype_name

MOE_FORMS = ("gathered", "grouped")
F32 = torch.float32


def extern(g: OpGraph, target: str, src: str, args: list[object], name: str, index: int | None = None) -> str:
    """An aten op run by PyTorch, its attrs as capture writes them (output_index only for multi-output ops)."""
    attrs: dict[str, object] = {"target": target, "args": [{"input": 0}, *args], "kwargs": {}}
    if index is not None:
        attrs["output_index"] = index
    return g.add("extern", [src], name=name, **attrs)


def router(g: OpGraph, rows: str, gate: str, dt: torch.dtype, top: int) -> tuple[str, str]:
    """softmax(rows @ gate.T) -> top-k -> weights / their sum: (routing weights [T, A] float32, indices [T, A])."""
    if dt != F32:
        rows = g.add("cast", [rows], name="x_router", dtype="float32")
    logits = g.add("mm", [rows, g.add("transpose", [gate], name="gate_t", dim0=0, dim1=1)], name="router_logits")
    probs = extern(g, "aten._softmax.default", logits, [-1, False], "router_probs")
    top_w = extern(g, "aten.topk.default", probs, [top], "topk_weights", 0)
    top_i = extern(g, "aten.topk.default", probs, [top], "topk_experts", 1)
    total = extern(g, "aten.sum.dim_IntList", top_w, [[-1], True], "topk_sum")
    return g.add("div", [top_w, total], name="routing_weights"), top_i


def gathered_moe(dt: torch.dtype, T: int, D: int, H: int, E: int, A: int) -> OpGraph:
    """gpt-fast's MOEFeedForward(x [T, D]) with top-A of E experts, each a SwiGLU of width H."""
    g = OpGraph()
    x = g.input("x", (T, D), dt)
    gate = g.input("gate_weight", (E, D), F32 if dt != F32 else dt)
    w1, w2, w3 = g.input("w1", (E, H, D), dt), g.input("w2", (E, D, H), dt), g.input("w3", (E, H, D), dt)
    xv = g.add("view", [x], name="x_rows", shape=[T, D])
    weights, idx = router(g, xv, gate, dt, A)
    if dt != F32:
        weights = g.add("cast", [weights], name="routing_weights_cast", dtype=dtype_name(dt))
    picked = {w: g.add("index", [w, idx], name=f"{w}_picked") for w in (w1, w3, w2)}
    acts = []
    for w, what in ((w1, "gate"), (w3, "up")):  # einsum('ti,taoi->tao', x, w[idx])
        r = g.add("unsqueeze", [g.add("unsqueeze", [xv], name=f"x_{what}_u0", dim=2)], name=f"x_{what}_u1", dim=3)
        r = g.add("permute", [g.add("permute", [r], name=f"x_{what}_p0", dims=[0, 2, 3, 1])], name=f"x_{what}_p1",
                  dims=[0, 3, 1, 2])
        rows = g.add("view", [r], name=f"x_{what}", shape=[T, 1, D])
        wp = g.add("permute", [g.add("permute", [picked[w]], name=f"{w}_p0", dims=[0, 1, 2, 3])], name=f"{w}_p1",
                   dims=[0, 3, 1, 2])
        y = g.add("bmm", [rows, g.add("view", [wp], name=f"{w}_t", shape=[T, D, A * H])], name=what)
        y = g.add("permute", [g.add("view", [y], name=f"{what}_v0", shape=[T, 1, A, H])], name=f"{what}_p",
                  dims=[0, 2, 3, 1])
        acts.append(g.add("view", [y], name=f"{what}_pairs", shape=[T, A, H]))
    h = g.add("mul", [g.add("silu", [acts[0]], name="gate_silu"), acts[1]], name="hidden")
    # einsum('tao,taio->tai', h, w2[idx])
    hp = g.add("permute", [g.add("unsqueeze", [h], name="hidden_u", dim=3)], name="hidden_p0", dims=[0, 1, 3, 2])
    rows = g.add("view", [g.add("permute", [hp], name="hidden_p1", dims=[0, 1, 3, 2])], name="hidden_rows",
                 shape=[T * A, 1, H])
    wp = g.add("permute", [g.add("permute", [picked[w2]], name="w2_p0", dims=[0, 1, 2, 3])], name="w2_p1",
               dims=[0, 1, 3, 2])
    e = g.add("bmm", [rows, g.add("view", [wp], name="w2_t", shape=[T * A, H, D])], name="down")
    e = g.add("permute", [g.add("view", [e], name="down_v0", shape=[T, A, 1, D])], name="down_p0", dims=[0, 1, 3, 2])
    e = g.add("permute", [g.add("view", [e], name="expert_out", shape=[T, A, D])], name="expert_out_t", dims=[0, 2, 1])
    # einsum('tai,ta->ti', expert_out, weights): a bmm of each token's A weights against its A expert rows
    wt = g.add("permute", [g.add("unsqueeze", [weights], name="rw_u", dim=2)], name="rw_p0", dims=[0, 2, 1])
    wt = g.add("view", [g.add("permute", [wt], name="rw_p1", dims=[0, 2, 1])], name="rw_col", shape=[T, A, 1])
    et = g.add("view", [g.add("permute", [e], name="expert_out_p", dims=[0, 1, 2])], name="expert_out_v",
               shape=[T, D, A])
    y = g.add("bmm", [g.add("transpose", [wt], name="rw_row", dim0=1, dim1=2),
                      g.add("transpose", [et], name="expert_rows", dim0=1, dim1=2)], name="combine")
    y = g.add("view", [g.add("transpose", [y], name="combine_t", dim0=1, dim1=2)], name="combine_v0", shape=[T, D, 1])
    y = g.add("view", [g.add("permute", [y], name="combine_p", dims=[0, 1, 2])], name="combine_v1", shape=[T, D])
    g.set_outputs([g.add("view", [y], name="y", shape=[T, D])])
    return g


def grouped_moe(dt: torch.dtype, T: int, D: int, H: int, E: int, A: int) -> OpGraph:
    """transformers' MixtralSparseMoeBlock(x [1, T, D]) with batched_mm experts (gate_up [E, 2H, D], down
    [E, D, H]): the T*A token-expert pairs one row each, the routing weights applied in float32."""
    g, P = OpGraph(), T * A
    x = g.input("hidden_states", (1, T, D), dt)
    gate = g.input("gate_weight", (E, D), F32 if dt != F32 else dt)
    gate_up, down = g.input("gate_up_proj", (E, 2 * H, D), dt), g.input("down_proj", (E, D, H), dt)
    xv = g.add("view", [x], name="x_rows", shape=[T, D])
    weights, idx = router(g, g.add("view", [xv], name="x_router_rows", shape=[T, D]), gate, dt, A)
    pairs = g.add("view", [g.add("expand", [g.add("unsqueeze", [xv], name="x_u", dim=1)], name="x_pairs_e",
                                 shape=[T, A, D])], name="x_pairs", shape=[P, D])
    flat = g.add("view", [idx], name="pair_experts", shape=[P])

    def expert_product(rows: str, table: str, what: str) -> str:
        r = g.add("transpose", [g.add("unsqueeze", [rows], name=f"{what}_in_u", dim=2)], name=f"{what}_in", dim0=1,
                  dim1=2)
        w = g.add("transpose", [g.add("index", [table, flat], name=f"{table}_picked")], name=f"{table}_t", dim0=1,
                  dim1=2)
        y = g.add("transpose", [g.add("bmm", [r, w], name=what)], name=f"{what}_t", dim0=1, dim1=2)
        return extern(g, "aten.squeeze.dim", y, [-1], f"{what}_rows")

    both = expert_product(pairs, gate_up, "gate_up")
    act = extern(g, "aten.split.Tensor", both, [H, -1], "gate", 0)
    up = extern(g, "aten.split.Tensor", both, [H, -1], "up", 1)
    h = g.add("mul", [g.add("silu", [act], name="gate_silu"), up], name="hidden")
    out = expert_product(h, down, "down")
    w = g.add("unsqueeze", [g.add("view", [weights], name="pair_weights", shape=[P])], name="pair_weight_col", dim=1)
    weighted = g.add("view", [g.add("mul", [out, w], name="weighted")], name="weighted_pairs", shape=[T, A, D])
    y = extern(g, "aten.sum.dim_IntList", weighted, [[1]], "combined")
    if g.node(y).dtype != dt:
        y = g.add("cast", [y], name="combined_cast", dtype=dtype_name(dt))
    g.set_outputs([g.add("view", [y], name="y", shape=[1, T, D])])
    return g


def moe_sizes(rng: random.Random, small: bool) -> dict[str, int]:
    """T tokens (decode 1-16, prefill 64-512), Mixtral/Qwen-MoE-like widths D, H scaled down as the experts
    family's, E experts and top-A; small: every dim awkward and under 64 for the interpreter."""
    if small:
        e = rng.randint(2, 6)
        return {"T": rng.randint(1, 20), "D": rng.randint(8, 64), "H": rng.randint(8, 64), "E": e,
                "A": rng.randint(1, min(e, 3))}
    e = rng.choice((4, 8, 16))
    return {"T": rng.choice((1, 2, 4, 8, 16, 64, 128, 256, 512)), "D": rng.choice((1024, 2048, 4096)),
            "H": rng.choice((1408, 2816, 5632)), "E": e, "A": rng.choice((1, 2, 2, 4))}


def routed_moe(form: str, dt: torch.dtype, sizes: dict[str, int]) -> OpGraph:
    """The block in `form` (MOE_FORMS) at `sizes` (moe_sizes)."""
    return (gathered_moe if form == "gathered" else grouped_moe)(dt, **sizes).validate()
