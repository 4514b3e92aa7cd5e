"""Golden snapshots of the generated Triton for a few fixed plans (int8 dequant prologue, row-gather prologue,
bias + GELU epilogue, split-K): an unintended change of the code generator fails here with a readable diff.
After an intended change, rewrite them with FUSIONSEARCH_UPDATE_GOLDEN=1 and review the diff in git."""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen.module import generate_module
from fusionsearch.plan import Plan, TemplateKernel, TileConfig

GOLDEN = Path(__file__).parent / "golden"


def _w8_prologue() -> Plan:
    plan = P.heuristic(fs.workload("w8_dequant_mm", M=16, K=128, N=64, dtype=torch.float16))
    assert any(isinstance(k, TemplateKernel) and k.prologue_b for k in plan.kernels)
    return plan


def _gather_prologue() -> Plan:
    plan = P.fully_fused(fs.workload("gather_mm", M=16, K=64, N=64, dtype=torch.float16))
    assert any(isinstance(k, TemplateKernel) and k.prologue_a for k in plan.kernels)
    return plan


def _bias_gelu_epilogue() -> Plan:
    plan = P.fully_fused(fs.workload("mm_bias_gelu", M=32, K=64, N=64, dtype=torch.float16))
    assert any(isinstance(k, TemplateKernel) and k.epilogue for k in plan.kernels)
    return plan


def _split_k() -> Plan:
    plan = _w8_prologue().with_config(TileConfig(16, 64, 32, 8, 2, 4, 3))
    assert plan.check() is plan
    return plan


PLANS: dict[str, Callable[[], Plan]] = {"w8_dequant_prologue": _w8_prologue, "gather_prologue": _gather_prologue,
                                        "bias_gelu_epilogue": _bias_gelu_epilogue, "split_k": _split_k}


@pytest.mark.parametrize("name", list(PLANS))
def test_generated_source_matches_its_golden_snapshot(name: str) -> None:
    source = generate_module(PLANS[name]()).source
    path = GOLDEN / f"{name}.py.txt"
    if os.environ.get("FUSIONSEARCH_UPDATE_GOLDEN") == "1":
        path.write_text(source)
    golden = path.read_text()
    if source != golden:
        diff = "".join(difflib.unified_diff(golden.splitlines(True), source.splitlines(True), str(path), "generated"))
        pytest.fail(f"the generated source of {name} changed (FUSIONSEARCH_UPDATE_GOLDEN=1 rewrites it):\n{diff}")


@pytest.mark.parametrize("name", list(PLANS))
def test_each_golden_plan_computes_what_eager_does(name: str) -> None:
    plan = PLANS[name]()
    v = fs.measure.validate(plan, plan.graph)
    assert v.ok, v.reason
