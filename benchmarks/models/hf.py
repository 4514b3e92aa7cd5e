"""Hugging Face `transformers`' own model code (not written here): LlamaForCausalLM and MixtralForCausalLM built
from configs with real dims and random weights (no download), with the StaticCache that `transformers` offers for
torch.compile, wrapped as a module whose forward is one decode (or prefill) step: forward(idx, input_pos) ->
logits, the cache written in place. Mixtral's experts run as `batched_mm` (each token's experts' weights gathered
by index: one static graph), the form `transformers` provides for compiling."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def llama2_7b_config(layers: int) -> Any:
    """Llama-2-7B's shapes (dim 4096, 32 heads, hidden 11008, vocabulary 32000), `layers` of them."""
    import transformers

    return transformers.LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                                    num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=32,
                                    max_position_embeddings=4096)


def mixtral_config(layers: int) -> Any:
    """Mixtral-8x7B's shapes (dim 4096, 8 experts of hidden 14336, top 2, 8 KV heads), `layers` of them."""
    import transformers

    cfg = transformers.MixtralConfig(vocab_size=32000, hidden_size=4096, intermediate_size=14336,
                                     num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=8,
                                     num_local_experts=8, num_experts_per_tok=2, max_position_embeddings=4096)
    cfg._experts_implementation = "batched_mm"
    return cfg


def tiny_config(family: str, layers: int) -> Any:
    """CPU-sized configs of either family (the e2e smoke run, tests)."""
    import transformers

    sizes = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": layers,
             "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}
    if family == "hfllama":
        return transformers.LlamaConfig(**sizes)
    cfg = transformers.MixtralConfig(**sizes, num_local_experts=4, num_experts_per_tok=2)
    cfg._experts_implementation = "batched_mm"
    return cfg


class CachedStep(nn.Module):
    """One step of a `transformers` causal LM against its StaticCache: forward(idx [B, S], input_pos [S]) ->
    logits [B, S, vocabulary]; the step writes its keys and values into the cache in place."""

    def __init__(self, model: nn.Module, cache: Any) -> None:
        super().__init__()
        self.model, self.cache = model, cache

    def forward(self, idx: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        # transformers' StaticLayer writes at its own counter (cumulative_length, advanced by every step), not at
        # cache_position; setting it from input_pos makes a step write where its positions say, so that a step
        # timed again and again writes one place (the counter would run past the cache) as gpt-fast's does.
        for layer in self.cache.layers:
            if layer.keys is not None:
                layer.cumulative_length.copy_(input_pos[0])
        return self.model(input_ids=idx, past_key_values=self.cache, cache_position=input_pos, use_cache=True).logits

    def _apply(self, fn: Any, recurse: bool = True) -> CachedStep:
        """Casts and moves (`.float()`, `.to(...)`) reach the cache's tensors too, which are no module's."""
        super()._apply(fn, recurse)
        for layer in self.cache.layers:
            if layer.keys is not None:
                layer.keys, layer.values = fn(layer.keys), fn(layer.values)
        return self

    def caches(self) -> list[torch.Tensor]:
        """Every layer's keys and values (allocated at the first step)."""
        return [t for layer in self.cache.layers for t in (layer.keys, layer.values) if t is not None]


def build(family: str, config: Any, batch: int, cache_len: int, dtype: torch.dtype, device: str,
          seed: int = 0) -> CachedStep:
    """A seeded random-weight `family` model ('hfllama' or 'hfmixtral') for inference with a StaticCache of
    `cache_len` positions for `batch` sequences, weights N(0, dim**-0.5) so activations stay O(1)."""
    import transformers

    cls = transformers.LlamaForCausalLM if family == "hfllama" else transformers.MixtralForCausalLM
    torch.manual_seed(seed)
    with torch.device(device):
        model = cls._from_config(config, torch_dtype=dtype)
        for p in model.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=config.hidden_size ** -0.5)
    model = model.eval().requires_grad_(False)
    cache = transformers.StaticCache(config=config, max_batch_size=batch, max_cache_len=cache_len)
    return CachedStep(model, cache).eval()
