"""The decode kind's gemv form (issue 52 item 4): the weight's tile read as whole rows of a long contiguous K
block, products summed into a K-wide accumulator once after the loop. Against float64 in Triton's interpreter on
the suite's decode rows and gpt-fast's int8 linear (uneven sizes, split and unsplit K, fused prologues and
epilogues); its bounds; and the configs the search offers at one row."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.errors import PlanError
from fusionsearch.graph.tolerance import output_tolerances, rel_error
from fusionsearch.kinds.decode_matmul import DecodeConfig
from fusionsearch.kinds.decode_matmul.configs import decode_candidates
from fusionsearch.plan import FusedMatmulKernel
from tests.kinds.test_decode_matmul import decode_plan

CASES = [("w8_dequant_mm", {"M": 1, "K": 128, "N": 64}),
         ("w8_dequant_mm", {"M": 3, "K": 100, "N": 72}),  # nothing divides the blocks
         ("w4_dequant_mm", {"M": 3, "K": 96, "N": 40, "G": 16}),
         ("mm_bias_gelu", {"M": 2, "K": 72, "N": 50}),
         ("moe_ffn", {"T": 2, "D": 48, "H": 40, "E": 3})]
GEMV = [DecodeConfig(4, 64, 1, 4, 2, "gemv"), DecodeConfig(8, 32, 3, 4, 3, "gemv"),
        DecodeConfig(2, 16, 1, 2, 2, "gemv")]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("cfg", GEMV, ids=lambda c: c.short().replace(" ", "-"))
@pytest.mark.parametrize(("name", "shape"), CASES, ids=[f"{n}-{'-'.join(map(str, s.values()))}" for n, s in CASES])
def test_gemv_plans_match_float64(name: str, shape: dict[str, int], cfg: DecodeConfig, dtype: torch.dtype) -> None:
    g = fs.workload(name, dtype=dtype, **shape)
    plan = decode_plan(P.fully_fused(g), cfg)
    inputs = fs.random_inputs(g, seed=5)
    refs = fs.reference(g, inputs, float64=True)
    out = fs.compile_plan(plan)(*inputs)
    outs = list(out) if isinstance(out, list | tuple) else [out]
    for o, ref, tol in zip(outs, refs, output_tolerances(g), strict=True):
        assert o.dtype == dtype and rel_error(o, ref) <= tol, rel_error(o, ref)


def int8_linear(x: torch.Tensor, w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """gpt-fast's WeightOnlyInt8Linear.forward: the weight [N, K] as stored, the scale after the matmul."""
    return F.linear(x, w.to(x.dtype)) * s


@pytest.mark.parametrize("rows", [1, 4])
@pytest.mark.parametrize("cfg", GEMV, ids=lambda c: c.short().replace(" ", "-"))
def test_gpt_fast_int8_linear_as_gemv_matches_float64(rows: int, cfg: DecodeConfig) -> None:
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 200, generator=gen)
    w = torch.randint(-127, 128, (90, 200), dtype=torch.int8, generator=gen)
    s = torch.rand(90, generator=gen) / 64
    g = fs.capture(int8_linear, x, w, s)
    plan = decode_plan(P.fully_fused(g), cfg)
    (k,) = [k for k in plan.kernels if isinstance(k, FusedMatmulKernel)]
    assert k.kind == "decode" and k.prologue_b and k.epilogue  # the cast in the loads, the scale after
    out = fs.compile_plan(plan)(x, w, s)
    out = out[0] if isinstance(out, list | tuple) else out
    want = F.linear(x.double(), w.double()) * s.double()
    assert rel_error(out, want) <= 1e-5, rel_error(out, want)


def test_gemv_bounds() -> None:
    assert DecodeConfig.from_short(GEMV[0].short()) == GEMV[0] and GEMV[0].on_cuda_cores
    assert DecodeConfig(4, 1024, 1, 4, 3, "gemv").accumulator_per_thread(1) == 32
    with pytest.raises(PlanError, match="no pairs form"):
        DecodeConfig(4, 64, 1, 4, 2, "gemv", True)
    with pytest.raises(PlanError, match="block_n must be at least 2"):
        DecodeConfig(1, 64, 1, 4, 2, "gemv")
    g = fs.workload("w8_dequant_mm", dtype=torch.float32, M=5, K=64, N=32)
    with pytest.raises(PlanError, match="gemv form takes at most 4 rows"):
        decode_plan(P.fully_fused(g), GEMV[0])


def test_one_row_is_offered_the_measured_gemv_configs_unsplit() -> None:
    x, w, s = torch.randn(1, 4096), torch.zeros(12288, 4096, dtype=torch.int8), torch.ones(12288)
    g = fs.capture(int8_linear, x, w, s)
    mm = next(k.matmul for k in P.fully_fused(g).kernels if isinstance(k, FusedMatmulKernel))
    offered = decode_candidates(g, mm)
    gemv = [c for c in offered if c.product == "gemv"]
    assert DecodeConfig(4, 1024, 1, 4, 3, "gemv") in gemv and DecodeConfig(8, 512, 1, 4, 3, "gemv") in gemv
    g16 = fs.capture(int8_linear, torch.randn(16, 4096), w, s)
    mm16 = next(k.matmul for k in P.fully_fused(g16).kernels if isinstance(k, FusedMatmulKernel))
    assert not [c for c in decode_candidates(g16, mm16) if c.product == "gemv"]


def test_an_int4_row_is_offered_no_pairs_form_of_the_gemv() -> None:
    g = fs.workload("w4_dequant_mm", dtype=torch.float16, M=1, K=1024, N=256, G=128)
    mm = next(k.matmul for k in P.fully_fused(g).kernels if isinstance(k, FusedMatmulKernel))
    offered = decode_candidates(g, mm)
    assert any(c.product == "gemv" and not c.pairs for c in offered)
    assert not any(c.product == "gemv" and c.pairs for c in offered)
