"""The dtype mixes of PyTorch's own prologue-fusion tests (test_max_autotune's prologue cases: upcasts of 16-bit
activations to an fp32 matmul, int8 weights cast up, downcasts into a 16-bit matmul) capture and tune to a
valid plan; where the interpreter can run the plan (no bfloat16), it matches eager."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import fusionsearch as fs

B16, F16, F32, I8 = torch.bfloat16, torch.float16, torch.float32, torch.int8


def _t(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    if dtype == I8:
        return torch.randint(-8, 8, shape, dtype=dtype)
    return (torch.randn(shape) / 4).to(dtype)


CASES: dict[str, tuple[Callable[..., torch.Tensor], list[tuple[tuple[int, ...], torch.dtype]]]] = {
    "add_upcast_fp16": (lambda x, y, z: (x + y).float() @ z, [((16, 32), F16), ((16, 32), F16), ((32, 24), F32)]),
    "add_upcast_bf16": (lambda x, y, z: (x + y).float() @ z, [((16, 32), B16), ((16, 32), B16), ((32, 24), F32)]),
    "int8_weight_to_fp16": (lambda x, w: x @ w.to(F16), [((16, 32), F16), ((32, 24), I8)]),
    "int8_weight_to_fp32": (lambda x, w: x @ w.float(), [((16, 32), F32), ((32, 24), I8)]),
    "downcast_fp32_to_fp16": (lambda x, w: x.to(F16) @ w, [((16, 32), F32), ((32, 24), F16)]),
    "scaled_upcast": (lambda x, w, s: (x.float() * s) @ w, [((16, 32), F16), ((32, 24), F32), ((32,), F32)]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_prologue_dtype_mix_captures_and_tunes_to_a_valid_plan(name: str) -> None:
    fn, specs = CASES[name]
    args = [_t(shape, dtype) for shape, dtype in specs]
    res = fs.tune(fn, *args, trials=3, backend="interpret")
    assert res.best_us > 0 and any(t.status == "validated" for t in res.trials)
    if not any(dtype == B16 for _, dtype in specs):
        out, ref = res.compile()(*args), fn(*args)
        assert out.dtype == ref.dtype and torch.allclose(out.double(), ref.double(), rtol=2e-3, atol=2e-3)
