"""The int4 group-dequant matmul and the Mixtral MoE FFN workloads: built as named, their eager form equal to the
reference, the three reference plans right in Triton's interpreter (fp32, fp16; even and uneven sizes) against
float64, and the fusions the workloads exist for: the unpack + dequant in the matmul's B prologue, the expert
gathers in the bmms' B prologues."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import fusionsearch as fs
from fusionsearch import GraphError
from fusionsearch import plan as P
from fusionsearch.datasets.workloads import REFERENCE_CASES, WORKLOADS
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.tolerance import output_tolerances, rel_error
from fusionsearch.plan.kernels import TemplateKernel

SHAPES = [("w4_dequant_mm", {"M": 4, "K": 256, "N": 64, "G": 32}),
          ("w4_dequant_mm", {"M": 5, "K": 96, "N": 40, "G": 16}),  # nothing divides the tiles
          ("moe_ffn", {"T": 3, "D": 64, "H": 96, "E": 4}),
          ("moe_ffn", {"T": 1, "D": 40, "H": 24, "E": 3})]
PLANS = {"unfused": P.unfused, "fully_fused": P.fully_fused, "heuristic": P.heuristic}


def test_listed_with_the_shapes_the_issue_names_and_not_among_the_reference_cases() -> None:
    assert {"w4_dequant_mm", "moe_ffn"} <= set(fs.list_workloads())
    assert WORKLOADS["w4_dequant_mm"].defaults == {"M": 16, "K": 4096, "N": 11008, "G": 128}
    assert WORKLOADS["moe_ffn"].defaults == {"T": 16, "D": 4096, "H": 14336, "E": 8}
    assert not {c["workload"] for c in REFERENCE_CASES} & {"w4_dequant_mm", "moe_ffn"}
    g = fs.workload("w4_dequant_mm")
    assert [(g.node(n).shape, g.node(n).dtype) for n in g.inputs] == [
        ((16, 4096), torch.bfloat16), ((2048, 11008), torch.uint8), ((32, 11008), torch.bfloat16),
        ((32, 11008), torch.bfloat16)]
    g = fs.workload("moe_ffn", T=512)
    assert [g.node(n).shape for n in g.inputs] == [(512, 4096), (512, 2), (512, 2), (8, 14336, 4096),
                                                   (8, 14336, 4096), (8, 4096, 14336)]
    assert g.node(g.outputs[0]).shape == (512, 4096)


@pytest.mark.parametrize("G", [3, 48])
def test_a_group_that_is_odd_or_does_not_divide_k_is_refused(G: int) -> None:
    with pytest.raises(GraphError, match="must be even and divide K"):
        fs.workload("w4_dequant_mm", K=128, G=G)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize(("name", "shape"), SHAPES, ids=[f"{n}-{'-'.join(map(str, s.values()))}" for n, s in SHAPES])
def test_reference_plans_match_float64_in_the_interpreter(name: str, shape: dict[str, int],
                                                          dtype: torch.dtype) -> None:
    g = fs.workload(name, dtype=dtype, **shape)
    inputs = fs.random_inputs(g, seed=4)
    assert torch.equal(WORKLOADS[name].torch_fn(*inputs), fs.reference(g, inputs)[0])
    (ref64,) = fs.reference(g, inputs, float64=True)
    (tol,) = output_tolerances(g)
    for plan_name, make in PLANS.items():
        plan = make(g)
        v = fs.measure.validate(plan, g, inputs)
        assert v.ok, (plan_name, v.reason)
        out = fs.compile_plan(plan)(*inputs)
        out = out[0] if isinstance(out, list | tuple) else out
        assert out.dtype == dtype and rel_error(out, ref64) <= tol, (plan_name, rel_error(out, ref64))


def _w4_dequant_by_hand(w: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor) -> torch.Tensor:
    """gpt-fast's dequant, (q - 8) * scale + zero per group of K, with the nibbles taken by integer division."""
    b = w.to(torch.int64)
    q = torch.stack([b // 16, b % 16], dim=1).reshape(2 * w.shape[0], w.shape[1])  # k = 2 * row + (0: high, 1: low)
    group = q.shape[0] // scales.shape[0]
    return (q.double() - 8) * scales.double().repeat_interleave(group, 0) + zeros.double().repeat_interleave(group, 0)


def test_w4_fully_fused_is_one_kernel_that_unpacks_and_dequantises_in_its_b_prologue() -> None:
    g = fs.workload("w4_dequant_mm", dtype=torch.float32, M=4, K=256, N=64, G=32)
    plan = P.fully_fused(g)
    (k,) = plan.kernels
    assert isinstance(k, TemplateKernel) and k.matmul == "y" and not k.prologue_a and not k.epilogue
    assert set(k.prologue_b) == {n.name for n in g if n.op not in ("input", "mm")}
    assert {"bitwise_right_shift", "bitwise_and", "stack", "cast", "sub", "mul", "add"} <= \
        {g.node(n).op for n in k.prologue_b}
    # Over every byte value (byte k//2: even k in its high nibble): the kernel computes x @ dequant(w).
    x, _, scales, zeros = fs.random_inputs(g, seed=5)
    w = torch.arange(128 * 64, dtype=torch.int64).remainder(256).to(torch.uint8).reshape(128, 64)
    inputs = [x, w, scales, zeros]
    expected = x.double() @ _w4_dequant_by_hand(w, scales, zeros)
    out = fs.compile_plan(plan)(*inputs)
    out = out[0] if isinstance(out, list | tuple) else out
    assert rel_error(out, expected) <= 1e-5
    assert rel_error(fs.reference(g, inputs, float64=True)[0], expected) <= 1e-12


def test_moe_fully_fused_gathers_every_experts_weights_in_the_bmms_b_prologues() -> None:
    g = fs.workload("moe_ffn", dtype=torch.float32, T=3, D=64, H=96, E=4)
    kernels = {k.matmul: k for k in P.fully_fused(g).kernels if isinstance(k, TemplateKernel)}
    assert set(kernels) == {"gate", "up", "down"}
    for mm, table in (("gate", "w1"), ("up", "w3"), ("down", "w2")):
        b = kernels[mm].prologue_b
        assert [g.node(n).op for n in b] == ["index", "view", "transpose"] and g.node(b[0]).inputs[0] == table
        assert len(kernels[mm].prologue_a) == 1  # the token rows' view
    assert set(kernels["gate"].epilogue) | set(kernels["up"].epilogue) == {"gate_silu", "hidden"}


def _gpt_fast_moe(x: torch.Tensor, idx: torch.Tensor, rw: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor,
                  w2: torch.Tensor) -> torch.Tensor:
    """gpt-fast mixtral's ConditionalFeedForward.forward and MOEFeedForward's weighting, verbatim einsums."""
    x1 = F.silu(torch.einsum("ti,taoi -> tao", x, w1[idx]))
    x3 = torch.einsum("ti, taoi -> tao", x, w3[idx])
    expert_outs = torch.einsum("tao, taio -> tai", (x1 * x3), w2[idx])
    return torch.einsum("tai,ta -> ti", expert_outs, rw)


def test_gpt_fasts_einsum_form_captures_to_registry_ops_and_computes_the_same() -> None:
    g = fs.workload("moe_ffn", dtype=torch.float32, T=3, D=64, H=96, E=4)
    inputs = fs.random_inputs(g, seed=6)
    captured = fs.capture(_gpt_fast_moe, *inputs)
    assert not captured.nodes_of_kind("extern")
    assert [captured.node(n).op for n in captured.nodes_of_kind("indexing")] == ["index"] * 3
    expected = fs.reference(g, inputs, float64=True)[0]
    assert rel_error(fs.reference(captured, inputs, float64=True)[0], expected) <= 1e-12
    assert rel_error(_gpt_fast_moe(*inputs), expected) <= 1e-5


def _gpt_fast_int8_linear(x: torch.Tensor, w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """gpt-fast's WeightOnlyInt8Linear.forward, verbatim."""
    return F.linear(x, w.to(dtype=x.dtype)) * s


@pytest.mark.parametrize("rows", [1, 16])
def test_w8_linear_is_what_capture_records_of_gpt_fasts_int8_linear_and_reaches_the_decode_kind(rows: int) -> None:
    """The w8_linear workload (the scale after the matmul) has capture's ops in capture's order, computes what
    gpt-fast's form computes, and its fully fused plan at decode rows is one decode kernel with the cast and
    transpose in its weight loads and the scale as its epilogue, matching float64 in the interpreter."""
    g = fs.workload("w8_linear", dtype=torch.float32, M=rows, K=96, N=40)
    inputs = fs.random_inputs(g, seed=rows)
    captured = fs.capture(_gpt_fast_int8_linear, *inputs)
    assert [captured.node(n).op for n in captured.topo_order() if n not in captured.inputs] == \
        [g.node(n).op for n in g.topo_order() if n not in g.inputs] == ["cast", "transpose", "mm", "mul"]
    expected = fs.reference(g, inputs, float64=True)[0]
    assert rel_error(fs.reference(captured, inputs, float64=True)[0], expected) <= 1e-12
    assert rel_error(WORKLOADS["w8_linear"].torch_fn(*inputs), expected) <= 1e-5
    from fusionsearch.search.space import enumerate_space, kind_seed_plans

    space = enumerate_space(g)
    (seed,) = [p for p in kind_seed_plans(space) if str(p["mm0.config"]).startswith("decode")]
    plan = space.plan(seed)
    (k,) = plan.kernels
    assert (k.kind, k.prologue_b, k.epilogue) == ("decode", ("w_cast", "w_t"), ("y",))
    got = fs.compile_plan(plan)(*inputs)
    assert rel_error(got[0] if isinstance(got, list | tuple) else got, expected) <= 1e-5


def test_an_index_table_of_one_expert_is_still_valid() -> None:
    g: OpGraph = fs.workload("moe_ffn", dtype=torch.float32, T=2, D=16, H=8, E=1)
    _, idx, *_ = fs.random_inputs(g)
    assert idx.dtype == torch.int64 and idx.eq(0).all()
    assert fs.measure.validate(P.fully_fused(g), g).ok
