"""benchmarks/e2e.py's report: the fastest valid PyTorch mode is what fusionsearch is compared with, a wrong
output never counts as fastest, and case names parse into model, weights, batch and tokens."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import e2e  # noqa: E402


def _row(**times: float | tuple[float, bool]) -> dict:
    variants = {}
    for mode, t in times.items():
        us, valid = t if isinstance(t, tuple) else (t, True)
        variants[mode] = {"median_us": us, "valid": valid, "tokens_per_s": 16 / (us * 1e-6)}
    return {"case": "llama-int8 decode b16", "variants": variants}


def test_fusionsearch_is_compared_with_the_fastest_valid_pytorch_mode() -> None:
    row = _row(eager=900.0, torch_compile=600.0, max_autotune=(300.0, False), reduce_overhead=450.0,
               fusionsearch=300.0)
    assert e2e.best_pytorch(row) == ("reduce_overhead", 450.0)  # max-autotune's output was wrong
    assert e2e.speedup(row) == pytest.approx(1.5)
    row["variants"]["fusionsearch"]["valid"] = False
    assert e2e.speedup(row) is None
    table = e2e.markdown({"rows": [row]})
    assert "300.0 (wrong)" in table and "reduce_overhead" in table


def test_case_names_parse_and_bad_ones_are_refused() -> None:
    assert e2e.Case.parse("llama-int8 decode b4") == e2e.Case("llama-int8 decode b4", "llama", True, 4, 1)
    assert e2e.Case.parse("llama-bf16 prefill 512") == e2e.Case("llama-bf16 prefill 512", "llama", False, 1, 512)
    with pytest.raises(ValueError, match="write 'llama-int8 decode b16'"):
        e2e.Case.parse("gpt-bf16 decode b4")
