"""How fp32 matmuls multiply (codegen option `fp32_dot`): the tensor cores in three tf32 products by default
(tf32x3), Triton's IEEE dot (eager PyTorch's exact fp32 products, on the FMA units), or one tf32 product. The
interpreter computes every dot in fp32 whatever the option, so the accuracy of the tensor-core forms is for the
GPU to show; here: the option reaches the dot of fp32 matmuls only, the kernels still match float64, an unknown
option is refused, and compiled for sm_90 the tensor-core forms' K loop is shorter than the FMA one's."""

from __future__ import annotations

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen.resources import plan_resources
from fusionsearch.codegen.runtime import compile_plan
from fusionsearch.errors import PlanError
from fusionsearch.measure import validate
from fusionsearch.plan import TileConfig


@pytest.mark.parametrize("fp32_dot", ["ieee", "tf32x3", "tf32"])
def test_the_option_sets_the_dot_precision_of_fp32_matmuls_and_they_match_the_reference(fp32_dot: str) -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=37, K=64, N=72)
    plan = P.fully_fused(g).with_config(TileConfig(16, 32, 16, 2, 2, 4, 2))
    source = compile_plan(plan, fp32_dot=fp32_dot).source
    assert source.count(f'input_precision="{fp32_dot}"') == 1 and source.count("input_precision") == 1
    v = validate(plan, g, fp32_dot=fp32_dot)
    assert v.ok, v.reason


def test_the_default_is_tf32x3() -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=16, K=64, N=64)
    assert 'input_precision="tf32x3"' in compile_plan(P.fully_fused(g)).source


def test_16_bit_matmuls_ignore_it() -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.float16, M=16, K=64, N=64)
    assert "input_precision" not in compile_plan(P.fully_fused(g), fp32_dot="tf32x3").source


def test_an_unknown_precision_is_refused_naming_the_choices() -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=16, K=64, N=64)
    with pytest.raises(PlanError, match="fp32_dot must be one of ieee, tf32x3, tf32, got 'bf16x3'"):
        compile_plan(P.fully_fused(g), fp32_dot="bf16x3")


def test_on_sm_90_the_tensor_core_forms_have_a_shorter_k_loop() -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=256, K=512, N=256)
    plan = P.fully_fused(g).with_config(TileConfig(64, 64, 32, 8, 1, 4, 3))
    loop = {dot: plan_resources(plan, fp32_dot=dot)[0].loop_instructions for dot in ("ieee", "tf32x3", "tf32")}
    assert loop["tf32"] < loop["tf32x3"] < loop["ieee"], loop
