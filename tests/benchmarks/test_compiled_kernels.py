"""benchmarks/compiled_kernels_gpu.py's --variant: the searched plan with named matmuls re-made on the kind and
config a label says, which must still compute the graph (checked here in the interpreter against float64)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import fusionsearch as fs  # noqa: E402
from benchmarks.compiled_kernels_gpu import table, with_configs  # noqa: E402
from fusionsearch.codegen.runtime import compile_plan  # noqa: E402
from fusionsearch.graph.tolerance import rel_error  # noqa: E402
from fusionsearch.plan.reference_plans import fully_fused  # noqa: E402

G = fs.workload("swiglu", dtype=torch.float32, M=3, D=64, H=96)
VARIANT = "up=16x32x32 g8 sk1 w4 s2;y=decode dot_t n32 k32 sk2 w4 s3"


def test_a_variant_remakes_only_the_named_matmuls_on_their_kinds_and_configs() -> None:
    base = fully_fused(G)
    plan = with_configs(base, VARIANT)
    by_mm = {k.matmul: k for k in plan.kernels}
    assert (by_mm["up"].kind, by_mm["up"].config.short()) == ("template", "16x32x32 g8 sk1 w4 s2")
    assert (by_mm["y"].kind, by_mm["y"].config.short()) == ("decode", "decode dot_t n32 k32 sk2 w4 s3")
    gate = next(k for k in base.kernels if k.matmul == "gate")
    assert by_mm["gate"] == gate  # not named: kept as it was, epilogue and config
    assert with_configs(base, "") == base


def test_a_remade_plan_computes_the_graph() -> None:
    inputs = fs.random_inputs(G, seed=1)
    out = compile_plan(with_configs(fully_fused(G), VARIANT))(*inputs)[0]
    ref = fs.reference(G, inputs, float64=True)[0]
    assert rel_error(out.double(), ref) < 1e-5


def test_a_variant_naming_no_fused_matmul_is_refused() -> None:
    with pytest.raises(ValueError, match=r"\['nope'\]"):
        with_configs(fully_fused(G), "nope=16x32x32 g8 sk1 w4 s2")


def test_the_table_sums_each_callables_kernels_beside_its_whole_time() -> None:
    row = {"index": 8, "case": "swiglu", "plan": "p",
           "max_autotune": [{"kernel": "a", "launches_per_call": 1.0, "us_per_call": 30.5},
                            {"kernel": "b", "launches_per_call": 1.0, "us_per_call": 31.0}],
           "variants": {"fusionsearch": {"kernels": [{"kernel": "c", "launches_per_call": 1.0, "us_per_call": 9.0}]},
                        "v": {"error": "output off eager by 1.00e-01"}},
           "whole_us": {"max_autotune": 66.25}}
    lines = table(row)
    assert "| max_autotune | sum; whole call |  | 61.5; 66.2 |" in lines
    assert "| fusionsearch | sum; whole call |  | 9.0; - |" in lines
    assert lines[-1] == "v: output off eager by 1.00e-01"


def test_a_joined_variant_folds_one_matmuls_kernel_into_anothers_and_still_computes_the_graph() -> None:
    plan = with_configs(fully_fused(G), "gate+up=16x32x32 g8 sk1 w4 s2")
    assert [(k.matmul, k.epilogue) for k in plan.kernels] == [("gate", ("up", "gate_silu", "hidden")), ("y", ())]
    inputs = fs.random_inputs(G, seed=2)
    ref = fs.reference(G, inputs, float64=True)[0]
    assert rel_error(compile_plan(plan)(*inputs)[0].double(), ref) < 1e-5
    with pytest.raises(ValueError, match="both must be fused matmul kernels"):
        with_configs(fully_fused(G), "gate+nope=16x32x32 g8 sk1 w4 s2")
