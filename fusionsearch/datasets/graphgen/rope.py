"""A decoder layer's entry as real code writes it: RMSNorm, the q/k/v projections, RoPE on q and k. The norm is
the projection's prologue case (a per-row scale from a reduction, a cast, the gain) and the rotation its
epilogue case (pairs of output columns mixed, in float32, cast back). Two forms:

- "gpt-fast": gpt-fast's Llama (`RMSNorm`, one fused wqkv linear, `apply_rotary_emb` on interleaved pairs
  against a float32 (cos, sin) table [S, hd/2, 2]);
- "transformers": `transformers`' LlamaRMSNorm and LlamaAttention (separate q/k/v linears, heads transposed,
  `rotate_half` on the two halves against cos, sin [1, S, hd] in the model dtype).

The ops are the ones fs.capture records for each (the norm's mean an extern aten.mean.dim, a linear as a
transposed weight and an mm on the flattened rows), with two spellings of the same math where capture keeps an
extern that only moves data: the wqkv split is three slices (capture: split_with_sizes), a pair's element a
slice and a view (capture: select), and torch.cat of the halves a stack on a new dim and a view. Those keep the
rotation fusable as an epilogue, which is the case the cost model has to learn."""

from __future__ import annotations

import math
import random

import torch

from fusionsearch.datasets.graphgen.moe import extern
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.registry import dtype_name

ROPE_FORMS = ("gpt-fast", "transformers")
EPS = 1e-5
F32 = torch.float32


def rms_norm(g: OpGraph, x: str, weight: str, dt: torch.dtype, form: str) -> str:
    """x * rsqrt(mean(x^2, -1) + eps) in float32, cast back, times the gain (gpt-fast: normed.type_as(x) *
    weight; transformers: weight * normed.to(dtype), the square a pow)."""
    xf = g.add("cast", [x], name="x_f32", dtype="float32") if dt != F32 else x
    square = g.add("mul", [xf, xf], name="x_sq") if form == "gpt-fast" else g.add("pow", [xf], name="x_sq", scalar=2)
    mean = extern(g, "aten.mean.dim", square, [[-1], True], "x_ms")
    inv = g.add("rsqrt", [g.add("add", [mean], name="x_ms_eps", scalar=EPS)], name="x_inv_rms")
    normed = g.add("mul", [xf, inv], name="x_normed")
    if dt != F32:
        normed = g.add("cast", [normed], name="x_normed_cast", dtype=dtype_name(dt))
    pair = [normed, weight] if form == "gpt-fast" else [weight, normed]
    return g.add("mul", pair, name="x_norm")


def linear(g: OpGraph, rows: str, w: str, lead: tuple[int, ...], name: str) -> str:
    """F.linear(x [*lead, K], w [N, K]) as capture records it: x viewed as rows, times w transposed, viewed back."""
    k, n = g.node(rows).shape[-1], g.node(w).shape[0]
    flat = g.add("view", [rows], name=f"{name}_in", shape=[math.prod(lead), k])
    y = g.add("mm", [flat, g.add("transpose", [w], name=f"{w}_t", dim0=0, dim1=1)], name=name)
    return g.add("view", [y], name=f"{name}_out", shape=[*lead, n])


def _last(g: OpGraph, x: str, start: int, end: int, name: str) -> str:
    return g.add("slice", [x], name=name, dim=len(g.node(x).shape) - 1, start=start, end=end, step=1)


def rope_interleaved(g: OpGraph, x: str, freqs: str, dt: torch.dtype, what: str) -> str:
    """gpt-fast's apply_rotary_emb: x [B, S, H, hd] as float32 pairs (x0, x1), rotated by the table's (cos, sin)."""
    b, s, h, hd = g.node(x).shape
    xp = g.add("view", [g.add("cast", [x], name=f"{what}_f32", dtype="float32") if dt != F32 else x],
               name=f"{what}_pairs", shape=[b, s, h, hd // 2, 2])
    f = g.add("view", [freqs], name=f"{what}_freqs", shape=[1, s, 1, hd // 2, 2])

    def part(t: str, i: int, shape: list[int], name: str) -> str:
        return g.add("view", [_last(g, t, i, i + 1, f"{name}_s")], name=name, shape=shape)

    x0, x1 = (part(xp, i, [b, s, h, hd // 2], f"{what}_x{i}") for i in (0, 1))
    cos, sin = (part(f, i, [1, s, 1, hd // 2], f"{what}_{n}") for i, n in ((0, "cos"), (1, "sin")))
    r0 = g.add("sub", [g.add("mul", [x0, cos], name=f"{what}_a"), g.add("mul", [x1, sin], name=f"{what}_b")],
               name=f"{what}_r0")
    r1 = g.add("add", [g.add("mul", [x1, cos], name=f"{what}_c"), g.add("mul", [x0, sin], name=f"{what}_d")],
               name=f"{what}_r1")
    out = g.add("view", [g.add("stack", [r0, r1], name=f"{what}_rot_pairs", dim=4)], name=f"{what}_rot_f32",
                shape=[b, s, h, hd])
    return g.add("cast", [out], name=f"{what}_rot", dtype=dtype_name(dt)) if dt != F32 else out


def rope_half(g: OpGraph, x: str, cos: str, sin: str, what: str) -> str:
    """transformers' apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, rotate_half = cat(-x2, x1)."""
    b, h, s, hd = g.node(x).shape
    c = g.add("unsqueeze", [cos], name=f"{what}_cos", dim=1)
    sn = g.add("unsqueeze", [sin], name=f"{what}_sin", dim=1)
    x1, x2 = _last(g, x, 0, hd // 2, f"{what}_x1"), _last(g, x, hd // 2, hd, f"{what}_x2")
    halves = g.add("stack", [g.add("neg", [x2], name=f"{what}_neg_x2"), x1], name=f"{what}_halves", dim=3)
    rotated = g.add("view", [halves], name=f"{what}_rotated", shape=[b, h, s, hd])
    return g.add("add", [g.add("mul", [x, c], name=f"{what}_xcos"), g.add("mul", [rotated, sn], name=f"{what}_rsin")],
                 name=f"{what}_rot")


def norm_qkv_rope(form: str, dt: torch.dtype, B: int, S: int, D: int, H: int, KV: int, HD: int) -> OpGraph:
    """RMSNorm(x [B, S, D]) -> q (H heads), k, v (KV heads) of width HD -> RoPE on q and k; outputs q, k, v."""
    g = OpGraph()
    x = g.input("x", (B, S, D), dt)
    normed = rms_norm(g, x, g.input("norm_weight", (D,), dt), dt, form)
    if form == "gpt-fast":
        freqs = g.input("freqs_cis", (S, HD // 2, 2), F32)
        qkv = linear(g, normed, g.input("wqkv", ((H + 2 * KV) * HD, D), dt), (B, S), "qkv")
        q = _last(g, qkv, 0, H * HD, "q")
        k, v = _last(g, qkv, H * HD, (H + KV) * HD, "k"), _last(g, qkv, (H + KV) * HD, (H + 2 * KV) * HD, "v")
        heads = [g.add("view", [t], name=f"{n}_heads", shape=[B, S, nh, HD]) for t, n, nh in
                 ((q, "q", H), (k, "k", KV), (v, "v", KV))]
        outs = [rope_interleaved(g, heads[0], freqs, dt, "q"), rope_interleaved(g, heads[1], freqs, dt, "k"), heads[2]]
    else:
        cos, sin = g.input("cos", (1, S, HD), dt), g.input("sin", (1, S, HD), dt)
        heads = []
        for n, nh in (("q", H), ("k", KV), ("v", KV)):
            y = linear(g, normed, g.input(f"{n}_proj", (nh * HD, D), dt), (B, S), f"{n}_proj_y")
            heads.append(g.add("transpose", [g.add("view", [y], name=f"{n}_heads", shape=[B, S, nh, HD])],
                               name=f"{n}_t", dim0=1, dim1=2))
        outs = [rope_half(g, heads[0], cos, sin, "q"), rope_half(g, heads[1], cos, sin, "k"), heads[2]]
    g.set_outputs(outs)
    return g.validate()


def rope_sizes(rng: random.Random, small: bool) -> dict[str, int]:
    """Llama-like widths (D = H * HD, grouped-query KV heads) at decode and prefill token counts, or small awkward
    ones (HD even: RoPE rotates pairs)."""
    if small:
        hd, h = 2 * rng.randint(1, 8), rng.randint(1, 4)
        kv = rng.choice([d for d in range(1, h + 1) if h % d == 0])
        return {"B": rng.randint(1, 2), "S": rng.randint(1, 6), "D": rng.randint(4, 48), "H": h, "KV": kv, "HD": hd}
    hd, d = rng.choice((64, 128)), rng.choice((2048, 4096, 5120))
    h = d // hd
    tokens = rng.choice((1, 2, 4, 8, 16, 64, 128, 256, 512, 1024, 2048))
    b = rng.choice([v for v in (1, 2, 4) if tokens % v == 0])
    return {"B": b, "S": tokens // b, "D": d, "H": h, "KV": rng.choice((h, h // 4, h // 8)), "HD": hd}
