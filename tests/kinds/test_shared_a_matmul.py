"""A second matmul in a template's epilogue: it reads the kernel's A tile with its own B in the same K loop, and
the rest of the epilogue sees both accumulators (swiglu's gate and up in one kernel: both weights read by one
launch, SiLU·up computed on the tile). Checked in the interpreter against float64; its legality and its price."""

from __future__ import annotations

import pytest
import torch

import fusionsearch as fs
from fusionsearch.codegen.runtime import compile_plan
from fusionsearch.costmodel.analytic import estimate
from fusionsearch.errors import PlanError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.tolerance import output_tolerances, rel_error
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
from fusionsearch.plan import Plan, TileConfig
from fusionsearch.plan.kernels import PointwiseKernel, TemplateKernel

CFG = TileConfig(16, 32, 32, 8, 1, 4, 2)


def joined(g: OpGraph, main: str = "gate", other: str = "up", cfg: TileConfig = CFG, **options: bool) -> Plan:
    plan = Plan(g, (TemplateKernel(main, epilogue=(other, "gate_silu", "hidden"), config=cfg),
                    TemplateKernel("y", config=cfg)))
    return plan.with_options(**options).check()


def assert_matches_float64(plan: Plan, seed: int = 0) -> None:
    g = plan.graph
    inputs = fs.random_inputs(g, seed=seed)
    outs = compile_plan(plan)(*inputs)
    refs = fs.reference(g, inputs, float64=True)
    for out, ref, tol in zip(outs, refs, output_tolerances(g), strict=True):
        assert rel_error(out.double(), ref) < tol


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("main,other", [("gate", "up"), ("up", "gate")])
@pytest.mark.parametrize("shape", [dict(M=5, D=72, H=100), dict(M=16, D=64, H=64)])
def test_gate_and_up_in_one_kernel_match_float64(dtype: torch.dtype, main: str, other: str,
                                                 shape: dict[str, int]) -> None:
    g = fs.workload("swiglu", dtype=dtype, **shape)
    plan = joined(g, main, other)
    assert len(plan.kernels) == 2 and plan.stored()[0] == {"hidden"}  # neither gate nor up goes to memory
    assert_matches_float64(plan)


@pytest.mark.parametrize("options", [{"persistent": True}, {"split_epilogue": True}, {"upcast_epilogue": False}])
def test_the_shared_k_loop_under_the_generators_options(options: dict[str, bool]) -> None:
    assert_matches_float64(joined(fs.workload("swiglu", dtype=torch.float32, M=20, D=96, H=80), **options))


def test_a_shared_matmul_whose_value_is_also_stored_writes_its_own_tile() -> None:
    g = fs.workload("swiglu", dtype=torch.float32, M=5, D=72, H=100)
    plan = Plan(g, (TemplateKernel("gate", epilogue=("up",), config=CFG), PointwiseKernel(("gate_silu", "hidden")),
                    TemplateKernel("y", config=CFG))).check()
    assert plan.stored()[0] == {"gate", "up"}
    assert_matches_float64(plan, seed=3)


def test_what_cannot_share_the_k_loop_is_refused_with_the_reason() -> None:
    g = fs.workload("swiglu", dtype=torch.float32, M=5, D=72, H=100)
    with pytest.raises(PlanError, match=r"'y' in the epilogue must be a mm on the same A operand \('x'\) with the"):
        Plan(g, (TemplateKernel("gate", epilogue=("up", "gate_silu", "hidden", "y"), config=CFG),)).check()
    with pytest.raises(PlanError, match="use split_k 1, not 2"):
        joined(g, cfg=TileConfig(16, 32, 32, 8, 2, 4, 2))
    decode = Plan(g, (DecodeKernel("gate", epilogue=("up", "gate_silu", "hidden"), config=DecodeConfig()),
                      TemplateKernel("y", config=CFG)))
    with pytest.raises(PlanError, match="only the template kind runs a second matmul"):
        decode.check()


def test_the_estimate_reads_both_weights_in_one_kernel_and_counts_both_dots() -> None:
    g = fs.workload("swiglu", dtype=torch.float16, M=16, D=4096, H=11008)
    one = estimate(joined(g)).per_kernel[0]
    apart = Plan(g, (TemplateKernel("up", config=CFG), TemplateKernel("gate", epilogue=("gate_silu", "hidden"),
                                                                      config=CFG), TemplateKernel("y", config=CFG)))
    up, gate = estimate(apart.check()).per_kernel[:2]
    weights = g.node("w1").nbytes + g.node("w3").nbytes
    assert weights <= one.bytes_read < weights * 1.01
    assert one.flops == up.flops + gate.flops  # both dots, and the epilogue's SiLU·up
    # up's tensor is neither written nor read back, and x is read once: less than the two kernels apart
    assert one.bytes_read + one.bytes_written == up.bytes_read + up.bytes_written + gate.bytes_read \
        + gate.bytes_written - 2 * g.node("up").nbytes - g.node("x").nbytes


def test_the_plan_file_replays_the_shared_kernel() -> None:
    g = fs.workload("swiglu", dtype=torch.float32, M=5, D=72, H=100)
    plan = joined(g)
    again = Plan.from_json(plan.to_json(), g)
    assert again == plan and again.kernels[0].epilogue == ("up", "gate_silu", "hidden")


def test_the_shared_memory_check_counts_both_b_pipelines() -> None:
    g = fs.workload("swiglu", dtype=torch.bfloat16, M=16, D=4096, H=11008)
    h100 = 227 * 1024  # the most an H100 block may hold
    joined(g, cfg=TileConfig(16, 128, 128, 8, 1, 4, 3)).check(h100)  # 3 x (4 + 2 x 32) KiB = 204 KiB
    with pytest.raises(PlanError, match="needs 278528 bytes of shared memory"):  # 4 x 68 KiB
        joined(g, cfg=TileConfig(16, 128, 128, 8, 1, 4, 4)).check(h100)
