"""Validation holds each output to the tolerance of the lowest precision its value passed through: PyTorch's
prologue-fusion pattern `(x + y).float() @ z` (16-bit x, y; an fp32 weight) rounds x + y to 16 bits as eager
does, which the float64 reference never does; an all-fp32 computation keeps fp32's tolerance."""

from __future__ import annotations

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.measure.validate import TOLERANCE, output_tolerances


def _upcast(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    return (x + y).float() @ z


def test_an_fp32_output_computed_through_float16_gets_float16s_tolerance() -> None:
    x, y, z = torch.randn(16, 32, dtype=torch.float16), torch.randn(16, 32, dtype=torch.float16), torch.randn(32, 24)
    g = fs.capture(_upcast, x, y, z)
    assert output_tolerances(g) == [TOLERANCE[torch.float16]]
    for plan in (P.unfused(g), P.fully_fused(g)):  # both round x + y to float16, as eager does
        v = fs.measure.validate(plan, g)
        assert v.ok and 1e-5 < v.rel_err < 1e-3, (plan.describe(), v)


def test_an_all_fp32_computation_keeps_fp32s_tolerance() -> None:
    def f(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + y) @ z

    g = fs.capture(f, torch.randn(16, 32), torch.randn(16, 32), torch.randn(32, 24))
    assert output_tolerances(g) == [TOLERANCE[torch.float32]]


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_a_wrong_kernel_still_fails(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    x, y, z = torch.randn(16, 32, dtype=dtype), torch.randn(16, 32, dtype=dtype), torch.randn(32, 24)
    g = fs.capture(_upcast, x, y, z)
    plan = P.unfused(g)
    inputs = fs.random_inputs(g, seed=0)
    good = fs.measure.validate(plan, g, inputs)
    refs = fs.reference(g, inputs, float64=True)
    wrong = [r * (1 + 3 * output_tolerances(g)[0]) for r in refs]  # a reference the kernel is 3 tolerances from
    bad = fs.measure.validate(plan, g, inputs, refs=wrong)
    assert good.ok and not bad.ok and "rel error" in bad.reason
