"""Attention score chains as eager attention writes them (transformers' eager_attention_forward, gpt-fast's
and nanoGPT's explicit form): q @ k^T * scale (+ an additive mask) -> softmax in float32 -> cast -> @ v, batched
over batch and heads. The ops are what fs.capture records for that code (the heads flattened into the bmm's
batch by expand and view, the softmax an extern aten._softmax): the score matmul's epilogue (scale, mask, cast)
and the value matmul's prologue (the cast back) are the fusion cases."""

from __future__ import annotations

import math
import random

import torch

from fusionsearch.datasets.graphgen.moe import extern
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.registry import dtype_name

SCORES_LIMIT = 1 << 27  # elements of the [B, H, S, L] scores, which an unfused plan writes and reads in float32


def attention(dt: torch.dtype, B: int, H: int, S: int, L: int, HD: int, mask: bool) -> OpGraph:
    """softmax(q [B, H, S, HD] @ k[B, H, L, HD]^T / sqrt(HD) (+ mask [S, L])) @ v [B, H, L, HD]."""
    g = OpGraph()
    q, k, v = (g.input(n, (B, H, n_rows, HD), dt) for n, n_rows in (("q", S), ("k", L), ("v", L)))
    m = g.input("mask", (S, L), dt) if mask else None
    kt = g.add("transpose", [k], name="k_t", dim0=2, dim1=3)
    qb = g.add("view", [g.add("expand", [q], name="q_e", shape=[B, H, S, HD])], name="q_b", shape=[B * H, S, HD])
    kb = g.add("view", [g.add("expand", [kt], name="k_e", shape=[B, H, HD, L])], name="k_b", shape=[B * H, HD, L])
    scores = g.add("view", [g.add("bmm", [qb, kb], name="qk")], name="qk_heads", shape=[B, H, S, L])
    s = g.add("mul", [scores], name="scores", scalar=1 / math.sqrt(HD))
    if m is not None:
        s = g.add("add", [s, m], name="scores_masked")
    if dt != torch.float32:
        s = g.add("cast", [s], name="scores_f32", dtype="float32")
    p = extern(g, "aten._softmax.default", s, [-1, False], "probs_f32")
    if dt != torch.float32:
        p = g.add("cast", [p], name="probs", dtype=dtype_name(dt))
    pb = g.add("view", [g.add("expand", [p], name="probs_e", shape=[B, H, S, L])], name="probs_b", shape=[B * H, S, L])
    vb = g.add("view", [g.add("expand", [v], name="v_e", shape=[B, H, L, HD])], name="v_b", shape=[B * H, L, HD])
    out = g.add("bmm", [pb, vb], name="pv")
    g.set_outputs([g.add("view", [out], name="out", shape=[B, H, S, HD])])
    return g.validate()


def attention_sizes(rng: random.Random, small: bool) -> dict[str, int]:
    """Decode (1-16 queries against a 256-4096 long cache) and prefill (S = L, 128-2048) with Llama-like heads,
    the scores under SCORES_LIMIT; or small awkward sizes. A mask in half the graphs."""
    mask = rng.random() < 0.5
    if small:
        return {"B": rng.randint(1, 2), "H": rng.randint(1, 3), "S": rng.randint(1, 8), "L": rng.randint(1, 12),
                "HD": rng.randint(2, 16), "mask": mask}
    while True:
        b, h, hd = rng.choice((1, 2, 4, 8)), rng.choice((8, 16, 32)), rng.choice((64, 128))
        if rng.random() < 0.5:
            s, cache = rng.choice((1, 2, 4, 8, 16)), rng.choice((256, 512, 1024, 2048, 4096))
        else:
            s = cache = rng.choice((128, 256, 512, 1024, 2048))
        if b * h * s * cache <= SCORES_LIMIT:
            return {"B": b, "H": h, "S": s, "L": cache, "HD": hd, "mask": mask}
