"""The epilogue in two column halves (codegen option `split_epilogue`): the output tile is finished half by
half, with the half's own column indices and masks. Outputs are poisoned with NaN before the checked call
(measure.validate), so a half that is not stored, or stored at the other half's columns, fails against the
float64 reference. Whether it pays (it removes the register spill of whole-tile GELU and SiLU epilogues,
compiled for sm_90) is measured on the GPU."""

from __future__ import annotations

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen.runtime import compile_plan
from fusionsearch.measure import validate
from fusionsearch.plan import TemplateKernel, TileConfig

CASES = [
    ("mm_bias_gelu", {"M": 37, "K": 64, "N": 72}),    # bias + gelu; N not a multiple of the tile: masked halves
    ("swiglu", {"M": 20, "D": 32, "H": 96}),          # the gate's epilogue multiplies by another matmul's output
    ("w8_dequant_mm", {"M": 24, "K": 64, "N": 64}),   # no epilogue: the matmul's value stored half by half
]


@pytest.mark.parametrize("split_k", [1, 2], ids=["one-split", "split-k"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("name,shape", CASES, ids=[c[0] for c in CASES])
def test_split_epilogues_match_the_reference(name: str, shape: dict[str, int], dtype: torch.dtype,
                                             split_k: int) -> None:
    g = fs.workload(name, dtype=dtype, **shape)
    plan = P.fully_fused(g).with_config(TileConfig(16, 32, 16, 2, split_k, 4, 2))
    templates = [k for k in plan.kernels if isinstance(k, TemplateKernel)]
    source = compile_plan(plan, split_epilogue=True).source
    assert source.count("for half in tl.static_range(2):") == len(templates)
    v = validate(plan, g, split_epilogue=True)
    assert v.ok, v.reason


@pytest.mark.parametrize("options", [{"serial_split_k": False}, {"persistent": True}, {"tma_loads": True}],
                         ids=["two-kernel-split-k", "persistent", "tma-loads"])
def test_split_epilogues_with_the_other_codegen_options(options: dict[str, bool]) -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=40, K=64, N=96)
    split_k = 2 if "serial_split_k" in options else 1
    plan = P.fully_fused(g).with_config(TileConfig(16, 32, 16, 2, split_k, 4, 2))
    v = validate(plan, g, split_epilogue=True, **options)
    assert v.ok, v.reason


def test_a_batched_matmul_splits_its_epilogue() -> None:
    g = fs.OpGraph()
    a = g.input("a", (3, 24, 16), torch.float32)
    b = g.input("b", (3, 16, 40), torch.float32)
    g.set_outputs([g.add("relu", [g.add("bmm", [a, b])])])
    plan = P.fully_fused(g).with_config(TileConfig(16, 32, 16, 2, 1, 4, 2))
    assert "tl.static_range(2)" in compile_plan(plan, split_epilogue=True).source
    v = validate(plan, g, split_epilogue=True)
    assert v.ok, v.reason


def test_narrow_tiles_keep_the_whole_tile_epilogue() -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=16, K=32, N=32)
    plan = P.fully_fused(g).with_config(TileConfig(16, 16, 16, 2, 1, 4, 2))
    source = compile_plan(plan, split_epilogue=True).source
    assert "tl.static_range(2)" not in source and source == compile_plan(plan).source
