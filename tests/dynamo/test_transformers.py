"""Models this project did not write (issue 52): Hugging Face `transformers`' LlamaForCausalLM and
MixtralForCausalLM, built from tiny configs with random weights (no download), with the StaticCache that
`transformers` offers for torch.compile, compile with fullgraph=True through the backend and match eager over
four decode steps: every step's logits and, after them, every layer's keys and values in the cache. On the CPU,
Triton's interpreter runs the tuned kernels."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers  # the [test] and [bench] extras install it

import fusionsearch as fs

BATCH, PROMPT, STEPS, CACHE_LEN = 2, 5, 4, 32


def _config(family: str) -> Any:
    sizes = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}
    if family == "llama":
        return transformers.LlamaConfig(**sizes)
    cfg = transformers.MixtralConfig(**sizes, num_local_experts=4, num_experts_per_tok=2)
    if family == "mixtral":
        cfg._experts_implementation = "batched_mm"  # the experts' weights gathered by index, one static graph
    return cfg  # mixtral-default: transformers' default experts, grouped_mm (sorted pairs, offsets)


def _decode(model: Any, cfg: Any, step: Callable[..., torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """An eager prefill of PROMPT tokens into a fresh StaticCache, then STEPS greedy decode steps through `step`;
    the steps' logits and the cache's keys and values after them."""
    cache = transformers.StaticCache(config=cfg, max_batch_size=BATCH, max_cache_len=CACHE_LEN)
    ids = torch.randint(0, cfg.vocab_size, (BATCH, PROMPT), generator=torch.Generator().manual_seed(0))
    logits = []
    with torch.no_grad():
        out = model(input_ids=ids, past_key_values=cache, cache_position=torch.arange(PROMPT), use_cache=True)
        token = out.logits[:, -1:].argmax(-1)
        for i in range(STEPS):
            logits.append(step(token, torch.tensor([PROMPT + i]), cache).clone())
            token = logits[-1][:, -1:].argmax(-1)
    return logits, [t.clone() for layer in cache.layers for t in (layer.keys, layer.values)]


@pytest.mark.parametrize("family", ["llama", "mixtral", "mixtral-default"])
def test_a_transformers_decoder_with_a_static_cache_compiles_fullgraph_and_matches_eager(tmp_path: Path,
                                                                                        family: str) -> None:
    cfg = _config(family)
    torch.manual_seed(0)
    model = getattr(transformers, "LlamaForCausalLM" if family == "llama" else "MixtralForCausalLM")(cfg).eval()
    if family == "mixtral-default":  # what users get; under torch.compile in float32 it calls transformers'
        assert model.config._experts_implementation == "grouped_mm"  # grouped_mm_fallback custom op

    def step(token: torch.Tensor, position: torch.Tensor, cache: Any) -> torch.Tensor:
        return model(input_ids=token, past_key_values=cache, cache_position=position, use_cache=True).logits

    want_logits, want_cache = _decode(model, cfg, step)
    be = fs.backend(trials=2, fallback="eager", cache=str(tmp_path), search_backend="model")
    got_logits, got_cache = _decode(model, cfg, torch.compile(step, backend=be, fullgraph=True, dynamic=False))
    assert be.stats.declined == [] and be.stats.regions >= 2 * 4  # four projections a layer at least
    for got, want in zip(got_logits, want_logits, strict=True):
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-5)
    for got, want in zip(got_cache, want_cache, strict=True):
        assert torch.allclose(got, want, rtol=1e-4, atol=1e-5)
        assert got[:, :, PROMPT:PROMPT + STEPS].abs().sum() > 0  # the decode steps wrote their positions
