"""benchmarks/e2e.py's `max_autotune_no_woq` mode: max-autotune with Inductor's int8 weight-only-matmul rewrite
declined (issue 52: that rewrite makes every compiled mode slower than eager at batch 16). The switch wraps the
rewrite's match check; here the wrapped check is asked about a match of gpt-fast's int8 linear."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks import e2e  # noqa: E402


def _match(weight_dtype: torch.dtype) -> SimpleNamespace:
    def node(dtype: torch.dtype, shape: tuple[int, ...]) -> SimpleNamespace:
        return SimpleNamespace(meta={"val": torch.empty(shape, dtype=dtype)})

    return SimpleNamespace(kwargs={"x": node(torch.bfloat16, (16, 64)), "weight": node(weight_dtype, (32, 64)),
                                   "scales": node(torch.bfloat16, (32,))})


def test_the_no_woq_mode_declines_inductors_int8_rewrite_only_while_it_runs() -> None:
    from torch._inductor.fx_passes import quantization

    e2e.WoqRewrite.install()
    e2e.WoqRewrite.install()  # twice: one wrapper, not two
    check = quantization._is_valid_woq_optimization_pattern()
    try:
        e2e.WoqRewrite.off = False
        assert check(_match(torch.int8)) is True  # the rewrite as Inductor has it
        assert check(_match(torch.bfloat16)) is False  # Inductor's own condition still holds
        e2e.WoqRewrite.off = True
        assert check(_match(torch.int8)) is False
        with e2e.WoqRewrite.uncached():
            assert torch._inductor.config.fx_graph_cache is False  # no cached graph of the rewriting mode reused
    finally:
        e2e.WoqRewrite.off = False
    assert "max_autotune_no_woq" in e2e.MODES and e2e.TORCH_MODES["max_autotune_no_woq"] == "max-autotune"
