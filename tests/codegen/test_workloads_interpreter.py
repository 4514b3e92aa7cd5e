"""Every built-in workload, generated and run in Triton's interpreter, matches the float64 reference.

Shapes are small and awkward (no dimension a multiple of the blocks) so that every mask is exercised; tile
configs cover split-K 2 and 3 (with K tiles that do not divide evenly among the splits), GROUP_M 1 and 4 over
several row tiles, BLOCK_K 16/32/64 and blocks larger than the whole problem. Mixed plans fuse some nodes and
leave others standalone or grouped, so that values cross kernel boundaries in every direction."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen.runtime import compile_plan
from fusionsearch.measure import validate
from fusionsearch.plan import Decision, Plan, TemplateKernel, TileConfig

DTYPES = [torch.float32, torch.float16]

# Two awkward shapes per workload: the first for float32, the second for float16.
SHAPES: dict[str, list[dict[str, int]]] = {
    "w8_dequant_mm": [{"M": 33, "K": 100, "N": 70}, {"M": 5, "K": 40, "N": 24}],
    "w8_linear": [{"M": 1, "K": 100, "N": 70}, {"M": 13, "K": 40, "N": 24}],
    "gather_mm": [{"M": 17, "K": 72, "N": 40, "T": 50}, {"M": 29, "K": 40, "N": 61, "T": 50}],
    "mm_bias_gelu": [{"M": 21, "K": 40, "N": 70}, {"M": 33, "K": 88, "N": 24}],
    "cast_mm": [{"M": 5, "K": 100, "N": 24}, {"M": 19, "K": 56, "N": 45}],
    "scale_mm": [{"M": 29, "K": 56, "N": 45}, {"M": 7, "K": 100, "N": 33}],
    "swiglu": [{"M": 9, "D": 40, "H": 56}, {"M": 23, "D": 72, "H": 40}],
    "w4_dequant_mm": [{"M": 5, "K": 36, "N": 45, "G": 6}, {"M": 19, "K": 100, "N": 33, "G": 10}],
    "moe_ffn": [{"T": 3, "D": 72, "H": 40, "E": 4}, {"T": 5, "D": 40, "H": 56, "E": 3}],
}

CONFIGS = [
    TileConfig(block_m=16, block_n=16, block_k=16, group_m=1, split_k=2),
    TileConfig(block_m=16, block_n=32, block_k=32, group_m=4, split_k=3),
    TileConfig(block_m=32, block_n=16, block_k=64, group_m=4, split_k=1),
    TileConfig(block_m=16, block_n=16, block_k=16, group_m=4, split_k=3),
    TileConfig(block_m=64, block_n=128, block_k=64, group_m=1, split_k=2),  # larger than most problems
    TileConfig(block_m=128, block_n=128, block_k=128, group_m=8, split_k=1),  # one tile covers everything
]

# Mixed decision sets per workload (nodes not named stay standalone).
MIXED: dict[str, list[dict[str, Decision]]] = {
    "w8_dequant_mm": [
        {"w_scaled": ("prologue", "y", "B")},  # dequant written by its own kernel, scale fused
        {"w_dequant": ("group", "deq"), "w_scaled": ("group", "deq")},
    ],
    "w8_linear": [
        {"w_t": ("prologue", "mm", "B"), "y": ("epilogue", "mm")},  # the cast by its own kernel
        {"w_cast": ("prologue", "mm", "B"), "w_t": ("prologue", "mm", "B")},  # the scale by its own kernel
    ],
    "gather_mm": [{"x_rows": ("group", "rows")}],
    "mm_bias_gelu": [
        {"y_bias": ("epilogue", "y")},  # gelu in a pointwise kernel reading the fused add's result
        {"y_bias": ("group", "g"), "out": ("group", "g")},
    ],
    "cast_mm": [{"x_cast": ("group", "c")}],
    "scale_mm": [{"x_scaled": ("group", "s")}],
    "swiglu": [
        {"gate_silu": ("epilogue", "gate"), "hidden": ("epilogue", "up")},
        {"gate_silu": ("epilogue", "gate"), "hidden": ("prologue", "y", "A")},
        {"gate_silu": ("prologue", "y", "A"), "hidden": ("prologue", "y", "A")},
        {"hidden": ("epilogue", "up")},
        {"gate_silu": ("group", "act"), "hidden": ("group", "act")},
    ],
    "w4_dequant_mm": [
        {"w_scaled": ("prologue", "y", "B"), "zeros_rows": ("prologue", "y", "B"),
         "zeros_groups": ("prologue", "y", "B"), "zeros_k": ("prologue", "y", "B"),
         "w_dequant": ("prologue", "y", "B")},  # the unpack written by its own kernels, the dequant fused
        {"w_shifted": ("group", "unpack"), "w_nibbles": ("group", "unpack")},
    ],
    "moe_ffn": [
        {"gate_silu": ("epilogue", "gate"), "hidden": ("epilogue", "gate")},
        {"weighted": ("group", "mix"), "expert0": ("group", "mix"), "expert1": ("group", "mix"),
         "combined": ("group", "mix")},
    ],
}

def _graph(name: str, dtype: torch.dtype) -> fs.OpGraph:
    # (cast_mm in float32 has no cast node: a plain matmul; its cast prologue is tested in float16.)
    return fs.workload(name, dtype=dtype, **SHAPES[name][DTYPES.index(dtype)])


def _with_configs(g: fs.OpGraph, decisions: Mapping[str, Decision], configs: list[TileConfig]) -> Plan:
    mms = g.nodes_of_kind("template")
    return P.build_plan(g, decisions, {mm: configs[i % len(configs)] for i, mm in enumerate(mms)})


def _assert_valid(plan: Plan, label: str) -> None:
    v = validate(plan)
    assert v.ok, f"{label}: {v.reason} (rel err {v.rel_err:.3g})\n{plan.describe()}"


def test_every_builtin_workload_is_tested() -> None:
    assert set(SHAPES) == set(fs.list_workloads()) == set(MIXED)


def test_shapes_are_awkward() -> None:
    for shapes in SHAPES.values():
        for shape in shapes:
            assert all(v % 16 for k, v in shape.items() if k != "T"), shape


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(SHAPES))
def test_reference_plans_validate(name: str, dtype: torch.dtype) -> None:
    g = _graph(name, dtype)
    for maker in (P.unfused, P.fully_fused, P.heuristic):
        _assert_valid(maker(g), f"{name} {dtype} {maker.__name__}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", list(SHAPES))
def test_mixed_plans_validate(name: str, dtype: torch.dtype) -> None:
    g = _graph(name, dtype)
    for i, decisions in enumerate(MIXED[name]):
        # Each mixed plan also gets a different tile config per matmul, drawn round-robin from CONFIGS.
        start = (list(SHAPES).index(name) + DTYPES.index(dtype) + i) % len(CONFIGS)
        configs = CONFIGS[start:] + CONFIGS[:start]
        _assert_valid(_with_configs(g, decisions, configs), f"{name} {dtype} {decisions} {configs[0].short()}")


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.short().replace(" ", "_"))
@pytest.mark.parametrize("name", list(SHAPES))
def test_fully_fused_plans_validate_under_every_tile_config(name: str, config: TileConfig) -> None:
    dtype = DTYPES[CONFIGS.index(config) % 2]
    g = _graph(name, dtype)
    plan = _with_configs(g, P.fused_decisions(g), [config])
    assert all(k.config == config for k in plan.kernels if isinstance(k, TemplateKernel))
    _assert_valid(plan, f"{name} {dtype} {config.short()}")


def test_unfused_under_split_k_and_grouping_validates() -> None:
    # The unfused w8 plan reads the dequantised weight from memory through split-K 3 and GROUP_M 4.
    g = fs.workload("w8_dequant_mm", dtype=torch.float32, M=47, K=100, N=70)
    plan = _with_configs(g, {}, [TileConfig(block_m=16, block_n=16, block_k=16, group_m=4, split_k=3)])
    _assert_valid(plan, "w8 unfused sk3 g4")


def test_gather_with_negative_indices_matches_torch() -> None:
    # torch counts negative indices from the end; the fused gather must too.
    g = fs.workload("gather_mm", dtype=torch.float32, M=13, K=40, N=24, T=50)
    inputs = fs.random_inputs(g, seed=3)
    inputs[1] = inputs[1] - 50
    assert (inputs[1] < 0).all()
    for plan in (P.unfused(g), P.fully_fused(g)):
        _assert_valid_on(plan, inputs)


def _assert_valid_on(plan: Plan, inputs: list[torch.Tensor]) -> None:
    v = validate(plan, inputs=inputs)
    assert v.ok, v.reason


def test_validation_rejects_a_wrong_plan_output() -> None:
    # A negative control for this file: the same harness fails when the kernels compute something else.
    g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=5, K=40, N=24)
    inputs = fs.random_inputs(g, seed=0)
    shifted = [inputs[0], inputs[1], inputs[2] + 0.01]
    compiled = compile_plan(P.fully_fused(g))
    out = compiled(*shifted)[0]
    ref = fs.reference(g, inputs, float64=True)[0]
    assert fs.measure.rel_error(out, ref) > fs.measure.TOLERANCE[torch.float32]
