"""A Llama-style decoder with a static KV cache, in gpt-fast's math, so benchmarks can compile the same decode step
that gpt-fast measures without downloading weights (they are random, seeded). Only the cached path exists: every
forward reads and writes the KV caches at `input_pos`, which keeps shapes static for torch.compile."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ModelArgs:
    """Sizes of the decoder; frozen so a preset can be shared and hashed."""

    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    intermediate_size: int
    vocab_size: int
    max_seq_len: int
    rope_base: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


def llama2_7b(n_layers: int = 32) -> ModelArgs:
    """Llama-2-7B's shapes; fewer layers keep a benchmark short while every layer's kernels stay the real ones."""
    return ModelArgs(dim=4096, n_layers=n_layers, n_heads=32, n_kv_heads=32, intermediate_size=11008,
                     vocab_size=32000, max_seq_len=1024)


def tiny(n_layers: int = 2) -> ModelArgs:
    """A CPU-sized model for tests; 2 kv heads for 4 heads so grouped-query attention is exercised."""
    return ModelArgs(dim=64, n_layers=n_layers, n_heads=4, n_kv_heads=2, intermediate_size=96, vocab_size=128,
                     max_seq_len=32)


def precompute_freqs_cis(seq_len: int, head_dim: int, base: float, device: torch.device | str | None = None
                         ) -> torch.Tensor:
    """(seq_len, head_dim // 2, 2) float32 table of (cos, sin) per position and rotary pair; kept in float32 because
    bf16 angles at long positions lose the rotation's precision."""
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, device=device)[: head_dim // 2].float() / head_dim))
    angles = torch.outer(torch.arange(seq_len, device=device, dtype=torch.float32), inv)
    return torch.stack([torch.cos(angles), torch.sin(angles)], dim=-1)


def apply_rotary_emb(x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
    """Rotate consecutive pairs of x (B, S, H, D) by the angles in freqs_cis (S, D // 2, 2), in float32."""
    xp = x.float().reshape(*x.shape[:-1], -1, 2)
    f = freqs_cis.view(1, xp.size(1), 1, xp.size(3), 2)
    out = torch.stack(
        [xp[..., 0] * f[..., 0] - xp[..., 1] * f[..., 1], xp[..., 1] * f[..., 0] + xp[..., 0] * f[..., 1]], dim=-1
    )
    return out.flatten(3).type_as(x)


class RMSNorm(nn.Module):
    """RMS normalisation computed in float32 (low-precision sums of squares drift) and scaled in the model dtype."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(torch.mean(xf * xf, dim=-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


class KVCache(nn.Module):
    """Static-size key/value caches written in place, so a compiled decode step sees the same shapes every call."""

    def __init__(self, max_batch_size: int, n_kv_heads: int, max_seq_len: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device | str | None = None) -> None:
        super().__init__()
        shape = (max_batch_size, n_kv_heads, max_seq_len, head_dim)
        self.register_buffer("k_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v_cache", torch.zeros(shape, dtype=dtype, device=device), persistent=False)

    def update(self, input_pos: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (B, H_kv, S, D) at positions input_pos (S,) and return the whole caches."""
        self.k_cache[:, :, input_pos] = k
        self.v_cache[:, :, input_pos] = v
        return self.k_cache, self.v_cache


class Attention(nn.Module):
    """Grouped-query attention with a fused qkv projection (one matmul instead of three), RoPE and the KV cache."""

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = args.n_heads, args.n_kv_heads, args.head_dim
        self.q_size, self.kv_size = args.n_heads * args.head_dim, args.n_kv_heads * args.head_dim
        self.wqkv = nn.Linear(args.dim, self.q_size + 2 * self.kv_size, bias=False)
        self.wo = nn.Linear(self.q_size, args.dim, bias=False)
        self.kv_cache: KVCache | None = None

    def forward(self, x: torch.Tensor, freqs_cis: torch.Tensor, mask: torch.Tensor, input_pos: torch.Tensor
                ) -> torch.Tensor:
        if self.kv_cache is None:
            raise RuntimeError("call Transformer.setup_caches before forward")
        b, s, _ = x.shape
        q, k, v = self.wqkv(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = apply_rotary_emb(q.view(b, s, self.n_heads, self.head_dim), freqs_cis)
        k = apply_rotary_emb(k.view(b, s, self.n_kv_heads, self.head_dim), freqs_cis)
        v = v.view(b, s, self.n_kv_heads, self.head_dim)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        k, v = self.kv_cache.update(input_pos, k, v)
        group = self.n_heads // self.n_kv_heads
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)
        return self.wo(y.transpose(1, 2).contiguous().view(b, s, self.q_size))


class FeedForward(nn.Module):
    """SwiGLU MLP: w2(silu(w1 x) * w3 x)."""

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.w1 = nn.Linear(args.dim, args.intermediate_size, bias=False)
        self.w3 = nn.Linear(args.dim, args.intermediate_size, bias=False)
        self.w2 = nn.Linear(args.intermediate_size, args.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    """Pre-norm block: attention then MLP, each added to the residual stream."""

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args)
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)

    def forward(self, x: torch.Tensor, freqs_cis: torch.Tensor, mask: torch.Tensor, input_pos: torch.Tensor
                ) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), freqs_cis, mask, input_pos)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    """Embedding, blocks, final norm and output projection; logits for every input position."""

    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(TransformerBlock(args) for _ in range(args.n_layers))
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        self.register_buffer("freqs_cis", precompute_freqs_cis(args.max_seq_len, args.head_dim, args.rope_base),
                             persistent=False)
        causal = torch.tril(torch.ones(args.max_seq_len, args.max_seq_len, dtype=torch.bool))
        self.register_buffer("causal_mask", causal, persistent=False)

    def reset_rope(self) -> None:
        """Recompute the RoPE table in float32 on the model's device; `.to(dtype)` would have cast it down."""
        self.freqs_cis = precompute_freqs_cis(self.args.max_seq_len, self.args.head_dim, self.args.rope_base,
                                              device=self.causal_mask.device)

    def setup_caches(self, max_batch_size: int, dtype: torch.dtype, device: torch.device | str) -> None:
        """Give every layer fresh zeroed KV caches of max_seq_len positions (dropping what was cached before)."""
        for layer in self.layers:
            layer.attention.kv_cache = KVCache(max_batch_size, self.args.n_kv_heads, self.args.max_seq_len,
                                               self.args.head_dim, dtype, device)
        self.reset_rope()

    def forward(self, idx: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        """idx (B, S) token ids at positions input_pos (S,) -> logits (B, S, vocab)."""
        freqs_cis = self.freqs_cis[input_pos]
        mask = self.causal_mask[None, None, input_pos]
        x = self.tok_embeddings(idx)
        for layer in self.layers:
            x = layer(x, freqs_cis, mask, input_pos)
        return self.output(self.norm(x))


class WeightOnlyInt8Linear(nn.Module):
    """A Linear whose weight is stored int8 with per-output-channel scales: half the weight bytes of bf16, which is
    what bounds a decode step; the weight is widened to the activation dtype at use."""

    def __init__(self, in_features: int, out_features: int, dtype: torch.dtype,
                 device: torch.device | str | None = None) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.int8, device=device))
        self.register_buffer("scales", torch.ones(out_features, dtype=dtype, device=device))

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> WeightOnlyInt8Linear:
        """Symmetric absmax quantisation per output channel: scale = absmax / 127, q = round(w / scale)."""
        if linear.bias is not None:
            raise ValueError("WeightOnlyInt8Linear has no bias")
        w = linear.weight.detach()
        scales = (w.float().abs().amax(dim=1) / 127.0).clamp(min=torch.finfo(torch.float32).tiny).to(w.dtype)
        q = torch.round(w.float() / scales.float()[:, None]).clamp(-128, 127).to(torch.int8)
        mod = cls(linear.in_features, linear.out_features, w.dtype, w.device)
        mod.weight.copy_(q)
        mod.scales.copy_(scales)
        return mod

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight.to(dtype=x.dtype)) * self.scales


def quantize_int8(model: nn.Module) -> nn.Module:
    """Replace every nn.Linear under model (the output projection included) by a WeightOnlyInt8Linear, in place."""
    for name, child in model.named_children():
        if isinstance(child, nn.Linear):
            setattr(model, name, WeightOnlyInt8Linear.from_linear(child))
        else:
            quantize_int8(child)
    return model


def build(args: ModelArgs, dtype: torch.dtype, device: torch.device | str, seed: int = 0) -> Transformer:
    """A seeded random-weight model for inference: weights N(0, dim**-0.5) so activations stay O(1) through the
    layers, norm weights ones; call setup_caches before forward."""
    torch.manual_seed(seed)
    model = Transformer(args)
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)) and module.weight.dim() == 2:
            nn.init.normal_(module.weight, std=args.dim ** -0.5)
    model = model.to(device=device, dtype=dtype)
    model.reset_rope()
    return model.eval().requires_grad_(False)
