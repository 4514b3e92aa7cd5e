"""A Mixtral-style mixture-of-experts feed-forward block in gpt-fast's mixtral-moe math: every token gathers its
top-k experts' weights and runs them as batched einsums, so the block is one static-shape graph with no
data-dependent control flow (what torch.compile with fullgraph needs). Random seeded weights, no download."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class MoEArgs:
    """Sizes of the MoE block."""

    dim: int
    hidden: int
    n_experts: int = 8
    top_k: int = 2


def mixtral(dim: int = 4096, hidden: int = 14336) -> MoEArgs:
    """Mixtral-8x7B's expert shapes (8 experts, 2 per token)."""
    return MoEArgs(dim=dim, hidden=hidden)


def tiny() -> MoEArgs:
    """A CPU-sized block for tests."""
    return MoEArgs(dim=32, hidden=48, n_experts=4, top_k=2)


class ConditionalFeedForward(nn.Module):
    """All experts' SwiGLU weights stacked on a leading expert axis, so a token's experts are gathered by index."""

    def __init__(self, args: MoEArgs) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(args.n_experts, args.hidden, args.dim))
        self.w2 = nn.Parameter(torch.empty(args.n_experts, args.dim, args.hidden))
        self.w3 = nn.Parameter(torch.empty(args.n_experts, args.hidden, args.dim))

    def forward(self, x: torch.Tensor, expert_indices: torch.Tensor) -> torch.Tensor:
        """x (T, dim), expert_indices (T, A) -> each chosen expert's output (T, A, dim)."""
        w1 = self.w1[expert_indices]  # (T, A, hidden, dim)
        w3 = self.w3[expert_indices]  # (T, A, hidden, dim)
        w2 = self.w2[expert_indices]  # (T, A, dim, hidden)
        x1 = F.silu(torch.einsum("ti,taoi->tao", x, w1))
        x3 = torch.einsum("ti,taoi->tao", x, w3)
        return torch.einsum("tao,taio->tai", x1 * x3, w2)


class MoEFeedForward(nn.Module):
    """Softmax router, top-k experts per token with renormalised weights, weighted sum of the experts' outputs."""

    def __init__(self, args: MoEArgs) -> None:
        super().__init__()
        self.args = args
        self.gate = nn.Linear(args.dim, args.n_experts, bias=False)
        self.cond_ffn = ConditionalFeedForward(args)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, S, dim) or (T, dim) -> the same shape."""
        shape = x.shape
        x = x.reshape(-1, self.args.dim)
        scores = self.gate(x)  # (T, E)
        expert_weights = F.softmax(scores, dim=-1)
        expert_weights, expert_indices = torch.topk(expert_weights, self.args.top_k, dim=-1)  # (T, A)
        expert_weights = expert_weights / expert_weights.sum(dim=-1, keepdim=True)
        expert_outs = self.cond_ffn(x, expert_indices)
        return torch.einsum("tai,ta->ti", expert_outs, expert_weights).reshape(shape)


def build(args: MoEArgs, dtype: torch.dtype, device: torch.device | str, seed: int = 0) -> MoEFeedForward:
    """A seeded random-weight block for inference, weights N(0, dim**-0.5) so outputs stay O(1)."""
    torch.manual_seed(seed)
    model = MoEFeedForward(args)
    for p in model.parameters():
        nn.init.normal_(p, std=args.dim ** -0.5)
    return model.to(device=device, dtype=dtype).eval().requires_grad_(False)
