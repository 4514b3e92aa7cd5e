"""Triton's CPU interpreter miscomputes bfloat16 (relative errors ~1e10): a plan whose Triton kernels touch
bfloat16 refuses to run there, in process, through validate and as an exported module, instead of returning
numbers known to be wrong; the same plan in float16, and bfloat16 plans that run only PyTorch's ops, still run."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen.runtime import compile_plan, export_plan
from fusionsearch.errors import MeasureError

MESSAGE = "Triton's CPU interpreter miscomputes"


def _graph(dtype: torch.dtype) -> fs.OpGraph:
    return fs.workload("w8_dequant_mm", M=16, K=64, N=64, dtype=dtype)


def test_a_bf16_plan_refuses_the_interpreter_everywhere_it_could_run(tmp_path: Path) -> None:
    g = _graph(torch.bfloat16)
    plan = P.heuristic(g)
    inputs = fs.random_inputs(g, seed=0)
    with pytest.raises(MeasureError, match=MESSAGE):
        compile_plan(plan)(*inputs)
    v = fs.measure.validate(plan, g, inputs)
    assert not v.ok and MESSAGE in v.reason
    path = export_plan(plan, str(tmp_path))
    spec = importlib.util.spec_from_file_location("exported_bf16_plan", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(ValueError, match=MESSAGE):
        module.run(*inputs)


def test_the_same_plan_in_float16_and_a_bf16_library_plan_still_run() -> None:
    g16 = _graph(torch.float16)
    v = fs.measure.validate(P.heuristic(g16), g16)
    assert v.ok, v.reason
    g = fs.capture(lambda a, b: a @ b, torch.randn(8, 16, dtype=torch.bfloat16), torch.randn(16, 8,
                                                                                            dtype=torch.bfloat16))
    from fusionsearch.plan import build_plan

    library = build_plan(g, {}, library=list(g.nodes_of_kind("template")))
    a, b = fs.random_inputs(g, seed=1)
    assert torch.equal(compile_plan(library)(a, b)[0], a @ b)
