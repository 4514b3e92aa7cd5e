"""Plans: the reference plans are legal and cover the graph, the heuristic's prologue rule, the JSON round trip,
and every kind of illegal plan refused with a PlanError that names the problem. No code is generated here."""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from typing import Any

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.errors import PlanError, SpecError
from fusionsearch.graph import OpGraph
from fusionsearch.plan import ExternKernel, Plan, PointwiseKernel, TemplateKernel, TileConfig

SMALL = {
    "w8_dequant_mm": {"M": 5, "K": 40, "N": 24},
    "w8_linear": {"M": 3, "K": 40, "N": 24},
    "gather_mm": {"M": 7, "K": 40, "N": 24, "T": 50},
    "mm_bias_gelu": {"M": 5, "K": 40, "N": 24},
    "cast_mm": {"M": 5, "K": 40, "N": 24},
    "scale_mm": {"M": 5, "K": 40, "N": 24},
    "swiglu": {"M": 5, "D": 40, "H": 24},
    "w4_dequant_mm": {"M": 4, "K": 256, "N": 64, "G": 32},
    "moe_ffn": {"T": 3, "D": 64, "H": 96, "E": 4},
}
REFERENCE_PLANS = {"unfused": P.unfused, "fully_fused": P.fully_fused, "heuristic": P.heuristic}


def test_small_shapes_cover_every_builtin_workload() -> None:
    assert set(SMALL) == set(fs.list_workloads())


def _kernel_of(plan: Plan, node: str) -> list[int]:
    return [i for i, k in enumerate(plan.kernels) if node in k.nodes]


def _template(plan: Plan, mm: str) -> TemplateKernel:
    (k,) = [k for k in plan.kernels if isinstance(k, TemplateKernel) and k.matmul == mm]
    return k


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("maker", list(REFERENCE_PLANS), ids=str)
@pytest.mark.parametrize("name", list(SMALL), ids=str)
def test_reference_plans_are_legal_and_cover_every_node_once(name: str, maker: str, dtype: torch.dtype) -> None:
    g = fs.workload(name, dtype=dtype, **SMALL[name])
    plan = REFERENCE_PLANS[maker](g)
    plan.check()
    counts = Counter(n for k in plan.kernels for n in k.nodes)
    computed = {node.name for node in g if node.op != "input"}
    assert set(counts) == computed
    assert all(c == 1 for c in counts.values()), counts
    assert plan.recompute == frozenset()
    # Every graph output is written by some kernel.
    stored = set().union(*plan.stored())
    assert set(g.outputs) <= stored


def test_unfused_gives_every_fusable_node_its_own_kernel() -> None:
    g = fs.workload("swiglu", dtype=torch.float16, **SMALL["swiglu"])
    plan = P.unfused(g)
    assert len(plan.kernels) == len([n for n in g if n.op != "input"])
    assert all(not (k.prologue_a or k.prologue_b or k.epilogue) for k in plan.kernels if isinstance(k, TemplateKernel))


def test_fully_fused_w8_dequant_puts_dequant_and_scale_in_prologue_b() -> None:
    g = fs.workload("w8_dequant_mm", dtype=torch.bfloat16, **SMALL["w8_dequant_mm"])
    plan = P.fully_fused(g)
    assert len(plan.kernels) == 1
    k = _template(plan, "y")
    assert k.prologue_b == ("w_dequant", "w_scaled")
    assert k.prologue_a == () and k.epilogue == ()


def test_fully_fused_gather_puts_the_index_in_prologue_a() -> None:
    g = fs.workload("gather_mm", dtype=torch.bfloat16, **SMALL["gather_mm"])
    k = _template(P.fully_fused(g), "y")
    assert k.prologue_a == ("x_rows",)
    assert k.prologue_b == () and k.epilogue == ()


def test_fully_fused_mm_bias_gelu_puts_add_and_gelu_in_the_epilogue() -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.bfloat16, **SMALL["mm_bias_gelu"])
    plan = P.fully_fused(g)
    assert len(plan.kernels) == 1
    k = _template(plan, "y")
    assert k.epilogue == ("y_bias", "out")
    assert plan.stored() == [{"out"}]  # the intermediates never reach memory


def test_fully_fused_swiglu_fuses_the_activation_around_the_first_matmuls() -> None:
    g = fs.workload("swiglu", dtype=torch.bfloat16, **SMALL["swiglu"])
    plan = P.fully_fused(g)
    assert not any(isinstance(k, PointwiseKernel) for k in plan.kernels)
    fused_somewhere = {n for k in plan.kernels if isinstance(k, TemplateKernel) for n in (*k.prologue_a, *k.epilogue)}
    assert {"gate_silu", "hidden"} <= fused_somewhere


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_heuristic_refuses_the_widening_cast_prologue_of_cast_mm(dtype: torch.dtype) -> None:
    g = fs.workload("cast_mm", dtype=dtype, **SMALL["cast_mm"])
    # Reading fp32 to feed a 16-bit operand is twice the operand's bytes: over the 1.1 factor.
    assert not P.prologue_bytes_ok(g, "y", "A", ["x_cast"])
    heur = P.heuristic(g)
    assert _kernel_of(heur, "x_cast") != _kernel_of(heur, "y")
    assert isinstance(heur.kernels[_kernel_of(heur, "x_cast")[0]], PointwiseKernel)
    assert _template(heur, "y").prologue_a == ()
    # fully_fused takes it: the refusal is the heuristic's, not a legality limit.
    assert _template(P.fully_fused(g), "y").prologue_a == ("x_cast",)


def test_heuristic_fuses_the_int8_dequant_and_the_gather() -> None:
    g = fs.workload("w8_dequant_mm", dtype=torch.bfloat16, **SMALL["w8_dequant_mm"])
    assert _template(P.heuristic(g), "y").prologue_b == ("w_dequant", "w_scaled")
    g = fs.workload("gather_mm", dtype=torch.bfloat16, M=4096, K=40, N=24, T=50)  # more rows gathered than held
    assert _template(P.heuristic(g), "y").prologue_a == ("x_rows",)


def test_heuristic_fuses_every_epilogue() -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.bfloat16, **SMALL["mm_bias_gelu"])
    assert _template(P.heuristic(g), "y").epilogue == ("y_bias", "out")


@pytest.mark.parametrize(("m", "fused"), [(5, False), (64, True)])
def test_prologue_bytes_rule_counts_the_extra_vector_read(m: int, fused: bool) -> None:
    # (x * g[K]) reads M*K + K elements for an M*K operand: 1.2x at M=5 (refused), 1.016x at M=64 (fused).
    g = fs.workload("scale_mm", dtype=torch.bfloat16, M=m, K=40, N=24)
    assert P.prologue_bytes_ok(g, "y", "A", ["x_scaled"]) is fused
    assert (_template(P.heuristic(g), "y").prologue_a == ("x_scaled",)) is fused


# ---- JSON ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("maker", list(REFERENCE_PLANS), ids=str)
@pytest.mark.parametrize("name", list(SMALL), ids=str)
def test_json_round_trip_is_exact(name: str, maker: str) -> None:
    g = fs.workload(name, dtype=torch.float16, **SMALL[name])
    plan = REFERENCE_PLANS[maker](g)
    text = plan.to_json()
    back = Plan.from_json(text, g)
    assert back == plan
    assert back.to_json() == text
    assert json.loads(text)["graph"] == g.signature_hash()


def test_json_round_trip_keeps_tile_configs_and_recompute() -> None:
    g = _shared_prologue_graph()
    cfg = TileConfig(block_m=16, block_n=32, block_k=16, group_m=4, split_k=3, num_warps=2, num_stages=2)
    plan = Plan(g, (TemplateKernel("y1", ("xs",), config=cfg), TemplateKernel("y2", ("xs",), epilogue=("o",))),
                frozenset({"xs"})).check()
    back = Plan.from_json(plan.to_json(), g)
    assert back == plan
    assert _template(back, "y1").config == cfg
    assert back.recompute == frozenset({"xs"})


def test_json_for_a_rebuilt_graph_with_other_names_is_refused_only_by_name() -> None:
    # The signature ignores names, so the plan is accepted; but the names it lists must exist.
    g = fs.workload("mm_bias_gelu", dtype=torch.float16, **SMALL["mm_bias_gelu"])
    text = P.fully_fused(g).to_json()
    h = OpGraph()
    x, w = h.input("x2", (5, 40), torch.float16), h.input("w2", (40, 24), torch.float16)
    b = h.input("b2", (24,), torch.float16)
    h.set_outputs([h.add("gelu", [h.add("add", [h.add("mm", [x, w], name="yy"), b])], approximate="none")])
    assert h.signature_hash() == g.signature_hash()
    with pytest.raises(PlanError, match="not in the graph"):
        Plan.from_json(text, h)


def test_json_for_a_different_graph_is_refused() -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.float16, **SMALL["mm_bias_gelu"])
    other = fs.workload("mm_bias_gelu", dtype=torch.float16, M=6, K=40, N=24)
    with pytest.raises(PlanError, match="different graph"):
        Plan.from_json(P.fully_fused(g).to_json(), other)
    other_dtype = fs.workload("mm_bias_gelu", dtype=torch.float32, **SMALL["mm_bias_gelu"])
    with pytest.raises(PlanError, match="different graph"):
        Plan.from_json(P.fully_fused(g).to_json(), other_dtype)


def test_tampered_json_is_checked() -> None:
    g = fs.workload("w8_dequant_mm", dtype=torch.float16, **SMALL["w8_dequant_mm"])
    data = json.loads(P.unfused(g).to_json())
    data["kernels"] = data["kernels"][1:]  # drop the dequant kernel
    with pytest.raises(PlanError, match="'w_dequant' is not computed"):
        Plan.from_json(json.dumps(data), g)
    data = json.loads(P.unfused(g).to_json())
    data["kernels"][-1]["config"]["block_m"] = 24
    with pytest.raises(PlanError, match="block_m must be a power of two"):
        Plan.from_json(json.dumps(data), g)


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "not valid JSON"),
    ("[]", "'kernels' list"),
    ('{"version": 99, "kernels": []}', "version 99"),
    ('{"kernels": [{"kind": "fused"}]}', "'kind' must be"),
    ('{"kernels": [{"kind": "pointwise", "nodes": "w_dequant"}]}', "'nodes' must be a list"),
    ('{"kernels": [{"kind": "template", "matmul": "y", "config": {"block_q": 16}}]}', "'config' must be"),
])
def test_malformed_json_raises_spec_error(text: str, message: str) -> None:
    g = fs.workload("w8_dequant_mm", dtype=torch.float16, **SMALL["w8_dequant_mm"])
    with pytest.raises(SpecError, match=re.escape(message)):
        Plan.from_json(text, g)


# ---- illegal plans -------------------------------------------------------------------------------

def _shared_prologue_graph() -> OpGraph:
    """xs = x * s feeds two matmuls; o = y1 + y2."""
    g = OpGraph()
    x, s = g.input("x", (8, 32), torch.float32), g.input("s", (32,), torch.float32)
    w1, w2 = g.input("w1", (32, 16), torch.float32), g.input("w2", (32, 16), torch.float32)
    xs = g.add("mul", [x, s], name="xs")
    y1, y2 = g.add("mm", [xs, w1], name="y1"), g.add("mm", [xs, w2], name="y2")
    g.set_outputs([g.add("add", [y1, y2], name="o")])
    return g


def test_missing_node_is_refused() -> None:
    g = fs.workload("w8_dequant_mm", dtype=torch.float16, **SMALL["w8_dequant_mm"])
    with pytest.raises(PlanError, match=r"node 'w_dequant' is not computed by any kernel"):
        Plan(g, (TemplateKernel("y", prologue_b=("w_scaled",)),)).check()


def test_node_in_two_kernels_needs_recompute() -> None:
    g = fs.workload("w8_dequant_mm", dtype=torch.float16, **SMALL["w8_dequant_mm"])
    kernels = (PointwiseKernel(("w_dequant",)), TemplateKernel("y", prologue_b=("w_dequant", "w_scaled")))
    with pytest.raises(PlanError, match=r"'w_dequant' is computed by 2 kernels; list it under 'recompute'"):
        Plan(g, kernels).check()
    Plan(g, kernels, frozenset({"w_dequant"})).check()


def test_shared_prologue_recomputed_in_both_matmuls_is_legal_only_with_recompute() -> None:
    g = _shared_prologue_graph()
    kernels = (TemplateKernel("y1", ("xs",)), TemplateKernel("y2", ("xs",), epilogue=("o",)))
    with pytest.raises(PlanError, match="recompute"):
        Plan(g, kernels).check()
    Plan(g, kernels, frozenset({"xs"})).check()


def test_reading_a_value_before_it_is_written_is_refused() -> None:
    g = fs.workload("w8_dequant_mm", dtype=torch.float16, **SMALL["w8_dequant_mm"])
    wrong_order = (TemplateKernel("y"), PointwiseKernel(("w_dequant",)), PointwiseKernel(("w_scaled",)))
    with pytest.raises(PlanError, match=r"kernel 0 reads 'w_scaled' \(input of 'y'\) before any kernel writes it"):
        Plan(g, wrong_order).check()
    Plan(g, (wrong_order[1], wrong_order[2], wrong_order[0])).check()


def test_prologue_values_are_not_written_for_later_kernels() -> None:
    # w_dequant lives only in registers of the template: a later kernel cannot read it.
    g = OpGraph()
    w = g.input("w", (32, 16), torch.int8)
    x = g.input("x", (8, 32), torch.float32)
    wd = g.add("cast", [w], name="wd", dtype="float32")
    y = g.add("mm", [x, wd], name="y")
    g.set_outputs([y, g.add("neg", [wd], name="wn")])
    with pytest.raises(PlanError, match=r"reads 'wd'"):
        Plan(g, (TemplateKernel("y", prologue_b=("wd",)), PointwiseKernel(("wn",)))).check()


def test_prologue_node_that_does_not_feed_its_operand_is_refused() -> None:
    g = OpGraph()
    x, s = g.input("x", (8, 32), torch.float32), g.input("s", (32,), torch.float32)
    w = g.input("w", (32, 16), torch.float32)
    xs = g.add("mul", [x, s], name="xs")
    wn = g.add("neg", [w], name="wn")
    g.set_outputs([g.add("mm", [xs, wn], name="y")])
    with pytest.raises(PlanError, match=r"'wn' does not feed operand A \('xs'\)"):
        Plan(g, (TemplateKernel("y", prologue_a=("wn", "xs")),)).check()
    with pytest.raises(PlanError, match=r"prologue B must include the operand 'wn' itself"):
        Plan(g, (PointwiseKernel(("wn",)), TemplateKernel("y", prologue_a=("xs",), prologue_b=("xs",))),
             frozenset({"xs"})).check()
    Plan(g, (TemplateKernel("y", prologue_a=("xs",), prologue_b=("wn",)),)).check()


def test_epilogue_node_of_another_shape_is_refused() -> None:
    g = OpGraph()
    x, w = g.input("x", (8, 32), torch.float32), g.input("w", (32, 16), torch.float32)
    t = g.input("t", (2, 8, 16), torch.float32)
    y = g.add("mm", [x, w], name="y")
    g.set_outputs([g.add("add", [y, t], name="wide")])  # broadcasts to [2, 8, 16]
    with pytest.raises(PlanError, match=r"'wide' has shape \[2, 8, 16\], the matmul's tile covers \[8, 16\]"):
        Plan(g, (TemplateKernel("y", epilogue=("wide",)),)).check()
    with pytest.raises(PlanError, match="shape"):
        P.build_plan(g, {"wide": ("epilogue", "y")})
    # fully_fused leaves it standalone instead.
    assert isinstance(P.fully_fused(g).kernels[-1], PointwiseKernel)


def test_epilogue_node_unrelated_to_the_matmul_is_refused() -> None:
    g = _shared_prologue_graph()
    with pytest.raises(PlanError, match="neither follows the matmul nor computes its bias"):
        Plan(g, (TemplateKernel("y1", epilogue=("xs",)), TemplateKernel("y2"), PointwiseKernel(("o",)))).check()


def test_fusion_choices_that_make_a_cycle_are_refused() -> None:
    # gelu in y's epilogue needs y_bias, which a later kernel computes from y.
    g = fs.workload("mm_bias_gelu", dtype=torch.float16, **SMALL["mm_bias_gelu"])
    with pytest.raises(PlanError, match="cycle"):
        P.build_plan(g, {"out": ("epilogue", "y")})


def test_kernels_holding_the_wrong_kind_of_node_are_refused() -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.float16, **SMALL["mm_bias_gelu"])
    with pytest.raises(PlanError, match=r"'y' \(mm\) cannot go in a pointwise kernel"):
        Plan(g, (PointwiseKernel(("y",)), PointwiseKernel(("y_bias", "out")))).check()
    with pytest.raises(PlanError, match="not a matmul"):
        Plan(g, (TemplateKernel("y_bias"), TemplateKernel("y"), PointwiseKernel(("out",)))).check()
    with pytest.raises(PlanError, match="not an extern op"):
        Plan(g, (TemplateKernel("y"), ExternKernel("y_bias"), PointwiseKernel(("out",)))).check()
    with pytest.raises(PlanError, match="graph input 'x' cannot be computed"):
        Plan(g, (PointwiseKernel(("x",)), TemplateKernel("y", epilogue=("y_bias", "out")))).check()
    with pytest.raises(PlanError, match="'nope', which is not in the graph"):
        Plan(g, (TemplateKernel("y", epilogue=("y_bias", "out", "nope")),)).check()
    with pytest.raises(PlanError, match="unknown decision"):
        P.build_plan(g, {"out": ("fuse",)})


def test_pointwise_kernel_with_results_of_different_shapes_is_refused() -> None:
    g = OpGraph()
    a, b = g.input("a", (8, 16), torch.float32), g.input("b", (16,), torch.float32)
    g.set_outputs([g.add("neg", [a], name="na"), g.add("neg", [b], name="nb")])
    with pytest.raises(PlanError, match="different shapes"):
        Plan(g, (PointwiseKernel(("na", "nb")),)).check()
    with pytest.raises(PlanError, match="different shapes"):
        P.build_plan(g, {"na": ("group", 0), "nb": ("group", 0)})


def test_groups_build_one_pointwise_kernel() -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.float16, **SMALL["mm_bias_gelu"])
    plan = P.build_plan(g, {"y_bias": ("group", "g"), "out": ("group", "g")})
    assert plan.kernels[1] == PointwiseKernel(("y_bias", "out"))
    assert plan.stored() == [{"y"}, {"out"}]


# ---- tile configs --------------------------------------------------------------------------------

@pytest.mark.parametrize(("kwargs", "message"), [
    ({"block_m": 48}, "block_m must be a power of two, got 48"),
    ({"block_n": 96}, "block_n must be a power of two"),
    ({"block_k": 24}, "block_k must be a power of two"),
    ({"num_warps": 3}, "num_warps must be a power of two"),
    ({"block_m": 8}, "at least 16"),
    ({"block_k": 8}, "at least 16"),
    ({"block_n": 1}, "at least 16"),
    ({"split_k": 0}, "split_k must be a positive integer"),
    ({"group_m": -1}, "group_m must be a positive integer"),
    ({"num_stages": 2.0}, "num_stages must be a positive integer"),
    ({"block_m": True}, "block_m must be a positive integer"),
    # Issue 24: beyond what any GPU or the code generator takes.
    ({"block_m": 2**20}, "block_m must be at most 256, got 1048576"),
    ({"block_k": 2**70}, "block_k must be at most 256, got 1180591620717411303424"),
    ({"block_n": 512}, "block_n must be at most 256"),
    ({"num_warps": 1024}, "num_warps must be at most 16, got 1024"),
    ({"num_warps": 32}, "num_warps must be at most 16"),
    ({"num_stages": 10**6}, "num_stages must be at most 8, got 1000000"),
    ({"num_stages": 9}, "num_stages must be at most 8"),
    ({"split_k": 10**9}, "split_k must be at most 64, got 1000000000"),
    ({"group_m": 65}, "group_m must be at most 64"),
    ({"num_stages": 10**5000}, "num_stages must be at most 8, got <an integer of 16610 bits>"),
    ({"group_m": [[[[[[1]]]]]]}, "group_m must be a positive integer, got [[[[[...]]]]]"),
])
def test_tile_config_refuses_bad_values(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(PlanError, match=re.escape(message)):
        TileConfig(**kwargs)  # type: ignore[arg-type]


def test_tile_config_bounds_admit_every_config_the_search_and_benchmarks_use() -> None:
    from fusionsearch.kinds.matmul_template.configs import KNOWN_GOOD_LARGE_M, KNOWN_GOOD_SMALL_M

    for cfg in (*KNOWN_GOOD_SMALL_M, *KNOWN_GOOD_LARGE_M):
        assert cfg.shared_memory_bytes(2) <= P.MAX_SHARED_MEMORY_BYTES
    TileConfig(block_m=256, block_n=256, block_k=256, group_m=64, split_k=64, num_warps=16, num_stages=8)
    TileConfig(block_m=16, block_n=16, block_k=16, group_m=1, split_k=1, num_warps=1, num_stages=1)


def test_shared_memory_is_counted_as_the_analytic_model_counts_it() -> None:
    from fusionsearch.costmodel.analytic import smem_bytes

    for cfg in (TileConfig(), TileConfig(128, 256, 64, 8, 1, 8, 3), TileConfig(16, 64, 256, 8, 2, 4, 5)):
        for itemsize in (1, 2, 4):
            assert cfg.shared_memory_bytes(itemsize) == smem_bytes(cfg, itemsize)


def test_a_config_beyond_the_gpus_shared_memory_is_refused_naming_it() -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=64, K=256, N=64)
    big = TileConfig(block_m=128, block_n=128, block_k=128, num_stages=4)  # 4 * 32768 * 4 bytes = 512 KiB
    data = json.loads(P.fully_fused(g).to_json())
    data["kernels"][0]["config"] = dataclasses.asdict(big)
    message = (r"kernel 0 \('y'\): tile config 128x128x128 g8 sk1 w4 s4 needs 524288 bytes of shared memory for "
               r"float32 operands, more than the 232448 the GPU has")
    with pytest.raises(PlanError, match=message):
        Plan.from_json(json.dumps(data), g)
    with pytest.raises(PlanError, match=message):
        P.fully_fused(g).with_config(big).check(232448)
    fits_h200 = TileConfig(block_m=64, block_n=64, block_k=64, num_stages=6)  # 196608 bytes in fp32
    data["kernels"][0]["config"] = dataclasses.asdict(fits_h200)
    assert Plan.from_json(json.dumps(data), g).kernels[0].config == fits_h200
    with pytest.raises(PlanError, match="more than the 101376 the GPU has"):  # a smaller GPU's own figure
        Plan.from_json(json.dumps(data), g, shared_memory_bytes=101376)


def test_unknown_names_in_recompute_are_refused() -> None:
    g = fs.workload("w8_dequant_mm", dtype=torch.float16, **SMALL["w8_dequant_mm"])
    data = json.loads(P.unfused(g).to_json())
    for bad in (["ghost"], ["w"], ["w_dequant", "nope"]):  # not a node; a graph input; one good, one not
        data["recompute"] = bad
        with pytest.raises(PlanError, match=r"under 'recompute', which is not a node of the graph it computes"):
            Plan.from_json(json.dumps(data), g)
    with pytest.raises(PlanError, match="'ghost' under 'recompute'"):
        Plan(g, P.unfused(g).kernels, frozenset({"ghost"})).check()


@pytest.mark.parametrize(("text", "error", "message"), [
    ('{"version": true, "kernels": []}', SpecError, "plan: version True is not supported"),
    ('{"version": 1.0, "kernels": []}', SpecError, "plan: version 1.0 is not supported"),
    ('{"kernels": [], "extra": 1}', SpecError, "plan: unknown field(s) ['extra']"),
    ('{"kernels": [{"kind": "extern", "node": "w_dequant", "nodes": []}]}', SpecError,
     "plan kernel 0: unknown field(s) ['nodes'] for a extern kernel"),
    ('{"kernels": [' * 30 + "]}" * 30, SpecError, "nested more than 32 levels deep"),
    ("[" * 100_000 + "]" * 100_000, SpecError, "plan: JSON nested too deeply"),
    ('{"kernels": [{"kind": "template", "matmul": "y", "config": {"block_m": ' + "9" * 5000 + "}}]}", SpecError,
     "plan: not valid JSON (Exceeds the limit (4300 digits)"),
    ('{"kernels": [{"kind": "template", "matmul": "y", "config": {"split_k": 1e400}}]}', PlanError,
     "split_k must be a positive integer, got inf"),
    ('{"kernels": [{"kind": "template", "matmul": "y", "config": {"split_k": 18446744073709551616}}]}', SpecError,
     "plan: at kernels[0].config.split_k: the integer 18446744073709551616 is outside int64"),
    ('{"kernels": [{"kind": "pointwise", "nodes": ["\\ud800"]}]}', SpecError,
     "plan: at kernels[0].nodes[0]: the string '\\ud800' is not valid Unicode"),
    (b'{"kernels": [{"kind": "pointwise", "nodes": ["\xff"]}]}', SpecError,
     "plan: not UTF-8 text (byte 0xff at offset 46)"),
    (None, SpecError, "plan: expected JSON text, got NoneType"),
])
def test_plan_json_that_once_ended_in_a_traceback_or_was_accepted(text: Any, error: type[Exception],
                                                                   message: str) -> None:
    g = fs.workload("w8_dequant_mm", dtype=torch.float16, **SMALL["w8_dequant_mm"])
    with pytest.raises(error) as err:
        Plan.from_json(text, g)
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_fused_chain_the_code_generator_would_recurse_over_is_refused_and_the_heuristics_stop_short_of_it() -> None:
    from fusionsearch.codegen.module import generate_module

    g = OpGraph()
    x, w = g.input("x", (4, 8), torch.float32), g.input("w", (8, 8), torch.float32)
    prev = g.add("mm", [x, w], name="y")
    chain = []
    for i in range(300):
        prev = g.add("relu" if i % 2 else "neg", [prev], name=f"n{i}")
        chain.append(prev)
    g.set_outputs([prev])
    with pytest.raises(PlanError, match=rf"kernel 0 fuses a chain of more than {P.MAX_FUSED_DEPTH} dependent nodes"):
        Plan(g, (TemplateKernel("y", epilogue=tuple(chain)),)).check()
    with pytest.raises(PlanError, match="kernel 1 fuses a chain"):
        Plan(g, (TemplateKernel("y"), PointwiseKernel(tuple(chain)))).check()
    for plan in (P.fully_fused(g), P.heuristic(g)):
        assert len(plan.kernels[0].nodes) == P.MAX_FUSED_DEPTH  # the matmul and 127 epilogue nodes
        assert len(plan.kernels) == 1 + len(chain) - (P.MAX_FUSED_DEPTH - 1)
    assert generate_module(P.fully_fused(g)).source


def test_tile_config_is_a_hashable_value() -> None:
    a = TileConfig(block_m=16, block_n=32, block_k=64, group_m=1, split_k=3)
    b = TileConfig(block_m=16, block_n=32, block_k=64, group_m=1, split_k=3)
    assert a == b and hash(a) == hash(b) and len({a, b, TileConfig()}) == 2
    assert TileConfig(group_m=3, split_k=3, num_stages=5).split_k == 3  # only block sizes and warps are powers of two
    assert a.short() == "16x32x64 g1 sk3 w4 s3"


def test_a_plans_stored_values_are_found_once_so_pricing_is_linear_in_its_kernels(monkeypatch: Any) -> None:
    """Issue 53 item 17: the cost model's features asked Plan.stored() once per kernel, and each call walked every
    kernel, so featurizing a plan of n kernels cost n^2 (a 300-op chain's search: 62 of its 83 s)."""
    from fusionsearch.costmodel import H200
    from fusionsearch.costmodel.features import plan_features

    g = OpGraph()
    prev = g.add("mm", [g.input("x", (4, 8), "float32"), g.input("w", (8, 8), "float32")], name="y")
    for i in range(400):
        prev = g.add("relu" if i % 2 else "neg", [prev], name=f"n{i}")
    g.set_outputs([prev])
    plan = P.unfused(g)
    calls = Counter[str]()
    consumers = OpGraph.consumers
    monkeypatch.setattr(OpGraph, "consumers", lambda self, n: calls.update(["consumers"]) or consumers(self, n))
    assert len(plan_features(plan, H200)) == 401
    assert calls["consumers"] <= 2 * len(g)  # n^2 = 160,000 before
    assert plan.stored() == [{"y"}, *({f"n{i}"} for i in range(400))]
    plan.stored()[0].add("x")  # a copy: the plan's own sets stay as they are
    assert plan.stored_by(0) == {"y"}
