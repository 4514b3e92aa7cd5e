"""The judge's float64 reference where it does not fit in memory: one clear error, not a retry per plan."""

from __future__ import annotations

import importlib

import pytest
import torch

import fusionsearch as fs
from fusionsearch.datasets.workloads import WORKLOADS
from fusionsearch.errors import MeasureError
from fusionsearch.measure.judge import MeasureState

validate_module = importlib.import_module("fusionsearch.measure.validate")


def test_a_reference_that_does_not_fit_fails_once_with_its_largest_value_named(monkeypatch) -> None:
    g = fs.workload("moe_ffn", T=4, D=16, H=24, E=4, dtype=torch.float32)
    calls = []

    def out_of_memory(*args, **kwargs):
        calls.append(1)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 481.00 GiB")

    monkeypatch.setattr(validate_module, "float64_reference", out_of_memory)
    state = MeasureState(g, fs.random_inputs(g))
    for _ in range(3):
        with pytest.raises(MeasureError, match=r"does not fit .* 'gate' \[4, 1, 48\]"):
            state.refs()
    assert len(calls) == 1  # later plans are refused at once


def test_other_reference_errors_are_not_taken_for_memory(monkeypatch) -> None:
    g = fs.workload("moe_ffn", T=4, D=16, H=24, E=4, dtype=torch.float32)

    def broken(*args, **kwargs):
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(validate_module, "float64_reference", broken)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        MeasureState(g, fs.random_inputs(g)).refs()


def test_the_reference_is_computed_once_and_matches_the_graph() -> None:
    g = fs.workload("moe_ffn", T=4, D=16, H=24, E=4, dtype=torch.float32)
    inputs = fs.random_inputs(g)
    state = MeasureState(g, inputs)
    refs = state.refs()
    assert state.refs() is refs
    eager = WORKLOADS["moe_ffn"].torch_fn(*[x.double() if x.is_floating_point() else x for x in inputs])
    torch.testing.assert_close(refs[0], eager, rtol=1e-9, atol=1e-9)
