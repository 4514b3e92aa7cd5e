"""Persistent templates (codegen option `persistent`): at most one program per multiprocessor, each looping
over tiles in grouped order. In the interpreter a device has 3 "multiprocessors", so every case below has
more tiles than programs and each program computes several. Outputs are poisoned with NaN before the checked
call (measure.validate), so a tile that no program computes fails the check against the float64 reference;
whether persistence pays is measured on the GPU."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any

import pytest
import torch
from test_fast_launch import compile_direct

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen.runtime import compile_plan
from fusionsearch.measure import validate
from fusionsearch.plan import Plan, TemplateKernel, problem


def with_config(plan: Plan, **fields: int) -> Plan:
    return Plan(plan.graph, [dataclasses.replace(k, config=dataclasses.replace(k.config, **fields))
                             if isinstance(k, TemplateKernel) else k for k in plan.kernels], plan.recompute)


CASES = [  # shapes of 4 to 12 tiles of 16 x 16, some of them uneven
    ("w8_dequant_mm", {"M": 40, "K": 96, "N": 48}),   # int8 dequant prologue on B
    ("mm_bias_gelu", {"M": 37, "K": 64, "N": 40}),    # bias + gelu epilogue, masked edge tiles
    ("gather_mm", {"M": 33, "K": 64, "N": 32}),       # gathered rows of A
    ("swiglu", {"M": 20, "D": 32, "H": 48}),          # three matmuls, one with an epilogue
    ("scale_mm", {"M": 48, "K": 48, "N": 36}),
]


@pytest.mark.parametrize("tma", [False, True], ids=["pointer-loads", "tma-loads"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("name,shape", CASES, ids=[c[0] for c in CASES])
def test_persistent_templates_match_the_reference(name: str, shape: dict[str, int], dtype: torch.dtype,
                                                  tma: bool) -> None:
    g = fs.workload(name, dtype=dtype, **shape)
    plan = with_config(P.fully_fused(g), block_m=16, block_n=16, block_k=16, group_m=2)
    templates = [k for k in plan.kernels if isinstance(k, TemplateKernel)]
    assert all(math.ceil(problem(g, k.matmul).m / 16) * math.ceil(problem(g, k.matmul).n / 16) > 3
               for k in templates), "the test needs more tiles than the interpreter's 3 programs"
    source = compile_plan(plan, persistent=True, tma_loads=tma).source
    assert source.count("for pid in tl.range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)") \
        == len(templates)
    v = validate(plan, g, persistent=True, tma_loads=tma)
    assert v.ok, v.reason


def test_a_batched_matmul_loops_over_tiles_in_every_batch() -> None:
    g = fs.OpGraph()
    a = g.input("a", (3, 40, 24), torch.float32)
    b = g.input("b", (3, 24, 36), torch.float32)
    g.set_outputs([g.add("relu", [g.add("bmm", [a, b])])])
    plan = with_config(P.fully_fused(g), block_m=16, block_n=16, block_k=16)
    assert "_programs(9, device), 1, 3" in compile_plan(plan, persistent=True).source
    v = validate(plan, g, persistent=True)
    assert v.ok, v.reason


def test_split_k_templates_stay_one_program_per_tile() -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=20, K=128, N=40)
    plan = with_config(P.fully_fused(g), block_m=16, block_n=16, block_k=32, split_k=2)
    source = compile_plan(plan, persistent=True).source
    assert "tl.range(tl.program_id(0)" not in source and not re.search(r"_programs\(\d+, device\)", source)
    v = validate(plan, g, persistent=True)
    assert v.ok, v.reason


def test_direct_launches_of_a_persistent_template_compute_what_the_first_call_did() -> None:
    """The program count is an expression of the module (one per multiprocessor): the direct launch must pass
    the same grid as the first call through `kernel[grid]`."""
    log: list[str] = []
    g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=37, K=64, N=40)
    plan = with_config(P.fully_fused(g), block_m=16, block_n=16, block_k=16)
    compiled = compile_direct(plan, log, persistent=True)
    inputs = fs.random_inputs(g, seed=1)
    first = compiled(*inputs)
    assert log == ["triton"]
    log.clear()
    again: Any = compiled(*inputs, poison=True)
    assert log == ["direct"]
    assert torch.equal(again[0], first[0])
    assert not torch.isnan(first[0]).any()


@pytest.mark.parametrize("tma", [False, True], ids=["pointer-loads", "tma-loads"])
@pytest.mark.parametrize("name,shape", CASES[:3], ids=[c[0] for c in CASES[:3]])
def test_warp_specialised_persistent_templates_match_the_reference(name: str, shape: dict[str, int],
                                                                   tma: bool) -> None:
    """`warp_specialize`: the tile loop is Triton's warp-specialised one (not flattened); what it computes is
    the same (on the GPU Triton splits it into load and MMA warps; whether that pays is measured there)."""
    g = fs.workload(name, dtype=torch.float16, **shape)
    plan = with_config(P.fully_fused(g), block_m=16, block_n=16, block_k=16, group_m=2)
    source = compile_plan(plan, persistent=True, tma_loads=tma, warp_specialize=True).source
    assert source.count("tl.num_programs(0), warp_specialize=True):") == 1 and "flatten=True" not in source
    v = validate(plan, g, persistent=True, tma_loads=tma, warp_specialize=True)
    assert v.ok, v.reason


def test_warp_specialize_without_persistent_is_refused_in_one_line() -> None:
    from fusionsearch.errors import PlanError

    g = fs.workload("mm_bias_gelu", dtype=torch.float16, M=37, K=64, N=40)
    with pytest.raises(PlanError, match="needs persistent=True"):
        compile_plan(P.fully_fused(g), warp_specialize=True)


def test_a_plan_file_with_warp_specialize_without_persistent_is_refused_when_read() -> None:
    """Item 13 of issue 53: such a plan file passed `explain` (which only reads it) and failed in `run`; the one
    check now lives in CodegenOptions, so reading the file refuses it."""
    from fusionsearch.errors import FusionSearchError

    g = fs.workload("mm_bias_gelu", dtype=torch.float16, M=37, K=64, N=40)
    data = json.loads(P.fully_fused(g).to_json())
    data["options"] = {**data.get("options", {}), "warp_specialize": True, "persistent": False}
    with pytest.raises(FusionSearchError, match="warp_specialize .* needs persistent=True") as err:
        P.Plan.from_json(json.dumps(data), g)
    assert "\n" not in str(err.value)
    data["options"]["persistent"] = True
    assert P.Plan.from_json(json.dumps(data), g).options.warp_specialize
