"""A result tuned from a function or module is called like it: the module's parameters and buffers bound, the
function's constants checked, its return structure kept."""

from __future__ import annotations

import pytest
import torch

import fusionsearch as fs
from fusionsearch.errors import GraphError


def test_a_module_tuned_result_is_called_with_the_modules_own_arguments() -> None:
    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.GELU(), torch.nn.Linear(48, 16)).eval()
    x = torch.randn(8, 32)
    res = fs.tune(block, x, trials=2, backend="model")
    run = res.compile()
    with torch.no_grad():
        out, ref = run(x), block(x)
        assert isinstance(out, torch.Tensor) and torch.allclose(out, ref, rtol=1e-4, atol=1e-5)
        block[0].weight.mul_(2)  # the live parameters are bound, not copies of them
        assert torch.allclose(run(x), block(x), rtol=1e-4, atol=1e-5)


def test_a_function_with_a_default_and_a_tuple_return_keeps_its_call_and_checks_constants() -> None:
    def f(q: torch.Tensor, k: torch.Tensor, scale: float = 0.5) -> tuple[torch.Tensor, torch.Tensor]:
        s = (q @ k.t()) * scale
        return s, torch.relu(s)

    q, k = torch.randn(8, 16), torch.randn(12, 16)
    res = fs.tune(f, q, k, 0.25, trials=2, backend="model")
    run = res.compile()
    got = run(q, k, scale=0.25)
    assert isinstance(got, tuple) and len(got) == 2
    for o, r in zip(got, f(q, k, 0.25), strict=True):
        assert torch.allclose(o, r, rtol=1e-4, atol=1e-5)
    with pytest.raises(GraphError, match="argument 'scale' was 0.25 when tuned, got 0.5"):
        run(q, k, 0.5)
    with pytest.raises(GraphError, match="cannot take these arguments"):
        run(q)
