"""A plan's module checks every input before launching anything: its kernels index with the plan's sizes and
dtypes, so another shape, dtype or device would read memory that is not the input's. The compiled plan and the
exported module refuse such inputs naming the input and what it must be; inputs of any layout whose strides
the kernels are given at run time are read correctly."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen.runtime import compile_plan, export_plan
from fusionsearch.errors import MeasureError
from fusionsearch.measure import TOLERANCE, rel_error

G = fs.workload("w8_dequant_mm", M=16, K=64, N=64, dtype=torch.float32)  # inputs x [16, 64], w [64, 64] int8, s [64]


def exported(tmp_path: Path, **options: Any) -> ModuleType:
    path = export_plan(P.heuristic(G), str(tmp_path / "out"), **options)
    spec = importlib.util.spec_from_file_location(f"exported_{abs(hash(str(tmp_path)))}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_matches_reference(outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> None:
    want = fs.reference(G, inputs, float64=True)
    assert all(rel_error(a, b) <= TOLERANCE[a.dtype] for a, b in zip(outputs, want, strict=True))


BAD = [  # (which input, the wrong tensor, what the message says after "input i")
    (1, lambda: torch.zeros(64, 63, dtype=torch.int8), "expected shape [64, 64] torch.int8, got [64, 63] torch.int8"),
    (1, lambda: torch.zeros(64, 64), "expected shape [64, 64] torch.int8, got [64, 64] torch.float32"),
    (2, lambda: torch.zeros(64, 1), "expected shape [64] torch.float32, got [64, 1] torch.float32"),
    (0, lambda: torch.zeros(16, 64, dtype=torch.float64), "expected shape [16, 64] torch.float32, got [16, 64] "
                                                          "torch.float64"),
    (2, lambda: torch.zeros(64, device="meta"), "expected a tensor on cpu, the device of input 0, got meta"),
    (1, lambda: [[0] * 64] * 64, "expected a tensor of shape [64, 64] torch.int8, got list"),
]
IDS = ["shape", "dtype", "rank", "float64", "device", "not-a-tensor"]
NAMES = ["x", "w", "s"]


@pytest.mark.parametrize("index,bad,expected", BAD, ids=IDS)
def test_the_compiled_plan_refuses_an_input_naming_it_and_what_it_must_be(index: int, bad: Any,
                                                                          expected: str) -> None:
    run = compile_plan(P.heuristic(G))
    inputs = fs.random_inputs(G, seed=0)
    wrong = list(inputs)
    wrong[index] = bad()
    with pytest.raises(MeasureError) as e:
        run(*wrong)
    assert str(e.value) == f"input {index} ({NAMES[index]}): {expected}"
    with pytest.raises(MeasureError, match=r"^this plan takes 3 input tensors, got 2$"):
        run(*inputs[:2])
    assert_matches_reference(run(*inputs), inputs)


def test_the_exported_module_refuses_wrong_inputs_by_position_in_run_and_steps(tmp_path: Path) -> None:
    module = exported(tmp_path)
    inputs = fs.random_inputs(G, seed=0)
    for index, bad, expected in BAD:
        wrong = list(inputs)
        wrong[index] = bad()
        for call in (module.run, module.steps):
            with pytest.raises(ValueError) as e:
                call(*wrong)
            assert str(e.value) == f"input {index}: {expected}"
    with pytest.raises(ValueError, match=r"^this plan takes 3 input tensors, got 4$"):
        module.run(*inputs, inputs[0])
    assert_matches_reference(module.run(*inputs), inputs)


def test_inputs_of_any_layout_are_read_through_their_strides(tmp_path: Path) -> None:
    """The kernels take every input's strides at run time: a transposed view or a slice of a wider tensor is
    accepted and read correctly (by the compiled plan and the exported module)."""
    x, w, s = fs.random_inputs(G, seed=1)
    inputs = [x.t().contiguous().t(), w.t().contiguous().t(), torch.stack([s, s], 1)[:, 1]]
    assert not any(t.is_contiguous() for t in inputs)
    assert_matches_reference(compile_plan(P.heuristic(G))(*inputs), inputs)
    assert_matches_reference(exported(tmp_path).run(*inputs), inputs)


def test_an_input_read_through_a_tma_descriptor_must_be_contiguous(tmp_path: Path) -> None:
    """A TMA descriptor bakes the input's strides into the kernel (row-major): another layout is refused."""
    x, w, s = fs.random_inputs(G, seed=2)
    module = exported(tmp_path, tma_loads=True)
    with pytest.raises(ValueError, match="input 1 through a TMA descriptor: it must be contiguous"):
        module.run(x, w.t().contiguous().t(), s)
    with pytest.raises(ValueError, match="input 0 through a TMA descriptor: it must be contiguous"):
        compile_plan(P.heuristic(G), tma_loads=True)(x.t().contiguous().t(), w, s)
    assert_matches_reference(module.run(x, w, s), [x, w, s])
