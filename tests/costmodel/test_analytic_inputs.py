"""The analytic model never divides by zero: graphs of size-1 dims price to finite times, size-0 matmuls never reach
it (refused at graph build), and a hardware profile holding a 0 is a CostModelError, not a ZeroDivisionError."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.costmodel import H200, estimate, fits
from fusionsearch.errors import CostModelError, GraphError
from fusionsearch.graph import OpGraph

ONES = {"w8_dequant_mm": {"M": 1, "K": 1, "N": 1}, "gather_mm": {"M": 1, "K": 1, "N": 1, "T": 1},
        "mm_bias_gelu": {"M": 1, "K": 1, "N": 1}, "cast_mm": {"M": 1, "K": 1, "N": 1},
        "scale_mm": {"M": 1, "K": 1, "N": 1}, "swiglu": {"M": 1, "D": 1, "H": 1}}


@pytest.mark.parametrize("name", sorted(ONES))
def test_the_smallest_graphs_price_to_finite_positive_times(name: str) -> None:
    g = fs.workload(name, dtype=torch.float16, **ONES[name])
    for plan in (P.unfused(g), P.fully_fused(g), P.heuristic(g)):
        est = estimate(plan)
        assert 0 < est.time_us < math.inf
        assert all(0 < k.time_us < math.inf for k in est.per_kernel)


def test_a_size_0_matmul_is_refused_before_the_model_sees_it() -> None:
    g = OpGraph()
    x, w = g.input("x", (0, 8), "float16"), g.input("w", (8, 4), "float16")
    with pytest.raises(GraphError, match="size-0 dim"):
        g.add("mm", [x, w], name="y")
    with pytest.raises(GraphError, match="size-0 dim"):
        g.add("linear", [g.input("x3", (2, 0, 8), "float16"), g.input("w3", (4, 8), "float16")])


@pytest.mark.parametrize(("field", "value"), [
    ("multiprocessors", 0), ("bandwidth_bytes_per_s", 0.0), ("shared_memory_bytes", 0),
    ("peak_flops", {"float32": 0.0, "float16": 1e12}), ("peak_flops", {"float32": 1e12, "float16": float("nan")}),
    ("multiprocessors", -4), ("bandwidth_bytes_per_s", float("inf")),
])
def test_a_hardware_profile_with_a_zero_is_a_cost_model_error(field: str, value: object) -> None:
    hw = dataclasses.replace(H200, **{field: value})
    g = fs.workload("mm_bias_gelu", dtype=torch.float16, M=16, K=64, N=64)
    plan = P.heuristic(g)
    with pytest.raises(CostModelError, match=rf"hardware profile 'NVIDIA H200': {field}\S* must be a positive number"):
        estimate(plan, hw)
    with pytest.raises(CostModelError, match="must be a positive number"):
        fits(g, "y", P.TileConfig(), hw)
