"""The grouped matmul kind (issue 27): recognising a mixture-of-experts bmm in both pair layouts; the routed
launch against float64 in Triton's interpreter, in fp32 and fp16, on uneven sizes, with split-K, with several
blocks an expert, with experts no token chose and negative router indices; each prologue and epilogue the
issue lists (the token rows as A, the expert-weight gather and an int8 dequant as B, SiLU*up, the gathered
per-channel scale and the routing weight on the output rows); legality, JSON, and the search's offer."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.errors import GraphError, PlanError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.tolerance import output_tolerances, rel_error
from fusionsearch.kinds.grouped_matmul import GroupedConfig, GroupedKernel, expert_routing
from fusionsearch.plan import FusedMatmulKernel, Plan
from fusionsearch.plan.kernels import PointwiseKernel
from fusionsearch.search.space import enumerate_space

CONFIGS = [GroupedConfig(16, 16, 16, 1, 4, 2), GroupedConfig(32, 32, 16, 3, 4, 3)]


def grouped_plan(plan: Plan, cfg: GroupedConfig) -> Plan:
    """`plan` with every fused expert bmm run grouped on `cfg`, its fused nodes as they were."""
    kernels = tuple(GroupedKernel(k.matmul, k.prologue_a, k.prologue_b, k.epilogue, cfg)
                    if isinstance(k, FusedMatmulKernel) else k for k in plan.kernels)
    return dataclasses.replace(plan, kernels=kernels).check()


def assert_matches_float64(plan: Plan, g: OpGraph, inputs: list[torch.Tensor]) -> None:
    refs = fs.reference(g, inputs, float64=True)
    out = fs.compile_plan(plan)(*inputs)
    outs = list(out) if isinstance(out, list | tuple) else [out]
    for o, name, ref, tol in zip(outs, g.outputs, refs, output_tolerances(g), strict=True):
        assert o.dtype == g.node(name).dtype
        assert rel_error(o, ref) <= tol, rel_error(o, ref)


def test_the_expert_bmms_of_mixtrals_ffn_are_recognised_in_both_layouts() -> None:
    g = fs.workload("moe_ffn", T=3, D=24, H=40, E=4, dtype=torch.float32)
    gate, down = expert_routing(g, "gate"), expert_routing(g, "down")
    assert gate is not None and (gate.experts, gate.top, gate.tokens, gate.cols, gate.pairs_per_batch) == \
        (4, 2, 3, 40, 2)
    assert down is not None and (down.cols, down.pairs_per_batch) == (24, 1)
    assert set(gate.chain) == {"w1_picked", "w1_flat", "w1_t"} and gate.router == "idx"
    plain = fs.capture(lambda a, b: torch.bmm(a, b), torch.randn(3, 1, 8), torch.randn(3, 8, 5))
    assert expert_routing(plain, plain.nodes_of_kind("template")[0]) is None
    two_rows = fs.capture(lambda a, b: a @ b, torch.randn(2, 8), torch.randn(8, 5))
    assert expert_routing(two_rows, two_rows.nodes_of_kind("template")[0]) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.short().replace(" ", "-"))
@pytest.mark.parametrize("tokens", [1, 5, 37])  # 37 tokens: 74 pairs, several blocks an expert
def test_moe_ffn_grouped_matches_float64(tokens: int, cfg: GroupedConfig, dtype: torch.dtype) -> None:
    g = fs.workload("moe_ffn", T=tokens, D=24, H=40, E=4, dtype=dtype)  # 24, 40: no block divides them
    plan = grouped_plan(P.heuristic(g), cfg)
    grouped = [k for k in plan.kernels if k.kind == "grouped"]
    assert len(grouped) == 3 and all(k.prologue_b for k in grouped)
    assert any(k.epilogue for k in grouped)  # SiLU(gate) * up on the gate's output rows
    assert any(k.prologue_a for k in grouped)  # the token rows
    inputs = fs.random_inputs(g, seed=tokens)
    assert_matches_float64(plan, g, inputs)
    assert fs.measure.validate(plan, g, inputs).ok


def test_experts_no_token_chose_and_negative_router_indices() -> None:
    g = fs.workload("moe_ffn", T=20, D=32, H=48, E=6, dtype=torch.float32)
    plan = grouped_plan(P.heuristic(g), CONFIGS[0])
    inputs = fs.random_inputs(g, seed=0)
    idx = torch.tensor([[0, -6], [5, -1]] * 10)  # experts 0 and 5 only, half of the picks counted from the end
    inputs[1] = idx
    assert_matches_float64(plan, g, inputs)


def _int8_experts(T: int, D: int, H: int, E: int) -> OpGraph:
    """gpt-fast's int8 mixtral experts: the int8 weight gathered by index and cast in the matmul's loads, the
    per-channel scales gathered the same way and applied to the output rows, then the routing weight."""
    g = OpGraph()
    x, idx, rw = g.input("x", (T, D), torch.float32), g.input("idx", (T, 2), torch.int64), \
        g.input("rw", (T, 2), torch.float32)
    w, s = g.input("w", (E, H, D), torch.int8), g.input("s", (E, H), torch.float32)
    picked = g.add("index", [w, idx], name="w_picked")
    wf = g.add("cast", [picked], name="w_float", dtype="float32")
    wt = g.add("transpose", [g.add("view", [wf], name="w_flat", shape=[T, 2 * H, D])], name="w_t", dim0=1, dim1=2)
    out = g.add("bmm", [g.add("view", [x], name="x_rows", shape=[T, 1, D]), wt], name="h")
    scales = g.add("view", [g.add("index", [s, idx], name="s_picked")], name="s_rows", shape=[T, 1, 2 * H])
    routed = g.add("view", [g.add("unsqueeze", [rw], name="rw_col", dim=2)], name="rw_rows", shape=[T, 1, 2])
    weight = g.add("view", [g.add("expand", [g.add("view", [routed], name="rw3", shape=[T, 2, 1])], name="rw_x",
                                  shape=[T, 2, H])], name="rw_wide", shape=[T, 1, 2 * H])
    y = g.add("mul", [g.add("mul", [out, scales], name="scaled"), weight], name="y")
    g.set_outputs([y])
    return g


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.short().replace(" ", "-"))
def test_int8_dequant_prologue_and_gathered_scale_and_routing_weight_epilogue(cfg: GroupedConfig) -> None:
    g = _int8_experts(T=6, D=40, H=24, E=5)
    assert expert_routing(g, "h") is not None
    kernel = GroupedKernel("h", ("x_rows",), ("w_picked", "w_float", "w_flat", "w_t"), ("scaled", "y"), cfg)
    sides = (PointwiseKernel(("s_picked", "s_rows")),
             PointwiseKernel(("rw_col", "rw_rows", "rw3", "rw_x", "rw_wide")))
    plan = Plan(g, (*sides, kernel)).check()
    inputs = fs.random_inputs(g, seed=1)
    assert_matches_float64(plan, g, inputs)


@pytest.mark.parametrize("graph", ["moe_ffn", "int8"])
def test_the_reference_runs_expert_bmms_per_expert_never_building_the_gathered_weights(graph: str,
                                                                                       monkeypatch) -> None:
    from fusionsearch.graph import registry
    from fusionsearch.kinds import reference_replacements

    if graph == "moe_ffn":  # both layouts: gate/up by token, down by pair
        g, bmms = fs.workload("moe_ffn", T=7, D=24, H=40, E=4, dtype=torch.float32), {"gate", "up", "down"}
    else:  # the int8 table cast in the chain
        g, bmms = _int8_experts(T=6, D=40, H=24, E=5), {"h"}
    router = g.inputs.index("idx")
    inputs = fs.random_inputs(g, seed=3)
    experts = g.node("w" if graph == "int8" else "w1").shape[0]
    inputs[router] = torch.where(inputs[router] % 2 == 0, inputs[router] - experts, inputs[router])  # some negative
    exact = fs.reference(g, inputs, float64=True)
    replaced = reference_replacements(g)
    assert set(replaced) == bmms
    built = []
    op = registry.REGISTRY["index"]

    def spy(args, attrs):
        out = op.torch_ref(args, attrs)
        built.append(tuple(out.shape))
        return out
    monkeypatch.setitem(registry.REGISTRY, "index", dataclasses.replace(op, torch_ref=spy))
    got = fs.reference(g, inputs, float64=True, replaced=replaced)
    assert all(len(shape) < 4 for shape in built), built  # no [T, A, R, C] gathered weight
    for out, ref in zip(got, exact, strict=True):
        assert out.dtype == torch.float64
        torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    inputs[router][0, 0] = experts  # out of range: refused as eager's gather refuses it
    with pytest.raises(IndexError):
        fs.reference(g, inputs, float64=True, replaced=replaced)


def test_a_replacement_that_skips_a_value_used_elsewhere_is_refused() -> None:
    from fusionsearch.graph.reference import Replacement
    from fusionsearch.kinds import reference_replacements

    g = fs.workload("moe_ffn", T=3, D=24, H=40, E=4, dtype=torch.float32)
    down = reference_replacements(g)["down"]
    wrong = Replacement(down.reads, (*down.skips, "x_gate"), down.compute)
    with pytest.raises(GraphError, match="skips 'x_gate'"):
        fs.reference(g, fs.random_inputs(g), float64=True, replaced={"down": wrong})


def test_legality_and_json() -> None:
    g = fs.workload("moe_ffn", T=2, D=24, H=40, E=4, dtype=torch.float32)
    plan = grouped_plan(P.heuristic(g), CONFIGS[1])
    assert Plan.from_json(plan.to_json(), g) == plan
    gate = next(k for k in plan.kernels if getattr(k, "matmul", None) == "gate")
    with pytest.raises(PlanError, match="expert gather"):
        dataclasses.replace(gate, prologue_b=()).check(g, 0, None)
    mm = fs.workload("mm_bias_gelu", M=4, K=32, N=16)
    with pytest.raises(PlanError, match="not a mixture-of-experts"):
        GroupedKernel(mm.nodes_of_kind("template")[0]).check(mm, 0, None)
    with pytest.raises(PlanError, match="power of two"):
        GroupedConfig(block_m=24)
    with pytest.raises(PlanError, match="not a grouped config label"):
        GroupedConfig.from_short("grouped m16")
    assert GroupedConfig.from_short(CONFIGS[1].short()) == CONFIGS[1]


def test_the_search_offers_grouped_configs_only_for_expert_bmms() -> None:
    moe = enumerate_space(fs.workload("moe_ffn", T=16, D=64, H=96, E=8), max_configs=4)
    for i in range(3):
        assert any(name == "grouped" for _, name in moe._others(i))
    mm = enumerate_space(fs.workload("mm_bias_gelu", M=4, K=32, N=16), max_configs=4)
    assert not any(name == "grouped" for i in range(len(mm.matmuls)) for _, name in mm._others(i))


def test_the_estimate_reads_each_touched_expert_once_a_block() -> None:
    from fusionsearch.hardware import H200
    from fusionsearch.kinds import get

    expert = 64 * 256 * 2  # one expert's [H, D] weight in bf16 (bytes)
    for tokens, block_m, blocks in ((1, 16, 8 * (1 - 0.75)), (16, 16, 8 * (1 - 0.75 ** 16)), (64, 16, 8.0),
                                    (64, 32, 8.0), (64, 8 * 16, 8 * (1 - 0.75 ** 64))):
        g = fs.workload("moe_ffn", T=tokens, D=256, H=64, E=8)
        blocks = max(blocks, 2 * tokens / block_m)
        k = GroupedKernel("gate", ("x_gate",), ("w1_picked", "w1_flat", "w1_t"), (),
                          GroupedConfig(min(block_m, 128), 64, 64, 1, 4, 3))
        est = get("grouped").estimate(g, k, 0, {"gate"}, H200)
        weights = est.bytes_read - g.node("x").nbytes - g.node("idx").nbytes
        assert weights == pytest.approx(expert * blocks, rel=1e-3), (tokens, block_m)


@pytest.mark.parametrize("tokens", [1, 512])
def test_the_measured_block_shapes_lead_the_offer_and_every_pipeline_fits_for_its_dtype(tokens: int) -> None:
    from fusionsearch.kinds.grouped_matmul.configs import KNOWN_GOOD, grouped_candidates
    from fusionsearch.plan.tile import MAX_SHARED_MEMORY_BYTES

    def pipeline_bytes(shape: tuple[int, ...], itemsize: int) -> int:
        bm, bn, bk, _, stages = shape
        return stages * (bm * bk + bk * bn) * itemsize

    for dtype, itemsize in ((torch.bfloat16, 2), (torch.float32, 4)):
        g = fs.workload("moe_ffn", T=tokens, D=4096, H=14336, E=8, dtype=dtype)
        offer = grouped_candidates(g, "gate", expert_routing(g, "gate"), limit=20)
        assert len(offer) == 20 and len(set(offer)) == 20
        shapes = {(c.block_m, c.block_n, c.block_k, c.num_warps, c.num_stages) for c in offer}
        fitting = {s for s in KNOWN_GOOD if (s[0] == 16 or tokens > 16)  # 2 pairs an expert at T1: BLOCK_M 16
                   and pipeline_bytes(s, itemsize) <= MAX_SHARED_MEMORY_BYTES}
        assert fitting <= shapes, (fitting, shapes)
        assert all(c.shared_memory_bytes(itemsize) <= MAX_SHARED_MEMORY_BYTES for c in offer)
        # the 128x256x64 3-stage pipeline (measured fastest at prefill) fits in bfloat16 only
        assert ((128, 256, 64, 8, 3) in shapes) == (tokens == 512 and dtype == torch.bfloat16)


def test_prefill_blocks_are_offered_unsplit_first_and_decode_blocks_split() -> None:
    from fusionsearch.kinds.grouped_matmul.configs import grouped_candidates, splits_for

    prefill = fs.workload("moe_ffn", T=512, D=4096, H=14336, E=8)
    r = expert_routing(prefill, "down")
    assert splits_for(r, 14336, 128, 256, 64) == (1, 4, 8)  # 16 column blocks x 8 experts: the rule asks 4
    assert splits_for(r, 14336, 128, 256, 64)[0] == 1 and splits_for(r, 14336, 64, 256, 64)[0] == 1
    decode = fs.workload("moe_ffn", T=1, D=4096, H=14336, E=8)
    r = expert_routing(decode, "down")
    assert 1 not in splits_for(r, 14336, 16, 64, 256)  # 2 experts x 64 column blocks: split to fill the GPU
    offer = grouped_candidates(prefill, "down", expert_routing(prefill, "down"), limit=48)
    assert offer[0] == GroupedConfig(128, 256, 64, 1, 8, 4)  # the fastest measured at T512 leads


def test_choosing_the_grouped_kind_fuses_its_expert_gather_so_no_draw_is_illegal() -> None:
    """The grouped kernel reads each expert's weight itself: a trial that picks it with the gather left
    standalone was illegal (6 of 32 trials of the T16 search on an H100); now the gather comes with the kind."""
    import itertools

    g = fs.workload("moe_ffn", T=3, D=24, H=40, E=4)
    space = enumerate_space(g)
    grouped_drawn = 0
    for params in itertools.islice(space.every_params(), 0, None, 211):
        plan = space.plan(params)  # PlanError before: about 30% of these combinations
        for i, mm in enumerate(space.matmuls):
            k = next(k for k in plan.kernels if isinstance(k, FusedMatmulKernel) and k.matmul == mm)
            if str(params[f"mm{i}.config"]).startswith("grouped"):
                grouped_drawn += 1
                assert isinstance(k, GroupedKernel)
                assert set(expert_routing(g, mm).chain) <= set(k.prologue_b)
            else:  # other kinds keep the drawn fusion of that group as it was
                chain_group = next(grp for grp in space.groups if expert_routing(g, mm).chain[0] in grp.nodes)
                fused = params[f"{chain_group.key}.fusion"] == f"prologue:mm{i}:B"
                assert bool(k.prologue_b) == fused
    assert grouped_drawn > 100


@pytest.mark.parametrize("tokens", [1, 6])  # at one token einsum moves the size-1 dims elsewhere
def test_gpt_fasts_einsum_moe_block_reaches_the_grouped_kind_and_matches_eager(tokens: int) -> None:
    """gpt-fast's mixtral block as written (softmax and top-2 routing, experts' weights gathered by index, the
    einsums traced as permutes and views of the gathered weights): its three expert bmms are recognised, the
    search offers the grouped kind for them, and the plan that runs them grouped matches eager."""
    import sys
    from pathlib import Path

    from fusionsearch.search.space import kind_seed_plans

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks.models import moe

    block = moe.build(moe.tiny(), torch.float32, "cpu")
    x = torch.randn(tokens, moe.tiny().dim, generator=torch.Generator().manual_seed(tokens))
    g = fs.capture(block, x)
    routed = {mm: r for mm in g.nodes_of_kind("template") if (r := expert_routing(g, mm)) is not None}
    assert sorted((r.cols, r.pairs_per_batch) for r in routed.values()) == [(32, 1), (48, 2), (48, 2)]
    assert all((r.experts, r.top, r.tokens) == (4, 2, tokens) for r in routed.values())
    space = enumerate_space(g)
    (seed,) = [s for s in kind_seed_plans(space) if any(str(v).startswith("grouped") for v in s.values())]
    plan = space.plan(seed)
    assert sorted(k.matmul for k in plan.kernels if k.kind == "grouped") == sorted(routed)
    with torch.no_grad():
        want = block(x)
    got = fs.compile_plan(plan)(x, *fs.graph.capture.module_state(block))
    got = got[0] if isinstance(got, list | tuple) else got
    assert rel_error(got, want) <= 1e-5


@pytest.mark.parametrize("rows", [1, 4, 16])
def test_gpt_fasts_int8_linear_reaches_the_decode_kind_with_its_scale_as_epilogue(rows: int) -> None:
    """`F.linear(x, w.to(x.dtype)) * scales` (gpt-fast's WeightOnlyInt8Linear) at Llama-2-7B's 4096->11008: the
    search offers the decode kind, whose plan takes the int8 cast into its weight loads and the scale as its
    epilogue; the same plan at a small shape matches eager in the interpreter."""
    import torch.nn.functional as F

    from fusionsearch.search.space import kind_seed_plans

    def linear(x: torch.Tensor, w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return F.linear(x, w.to(x.dtype)) * s

    for k_dim, n_dim in ((4096, 11008), (96, 80)):
        gen = torch.Generator().manual_seed(rows)
        x = torch.randn(rows, k_dim, generator=gen)
        w = torch.randint(-127, 128, (n_dim, k_dim), generator=gen, dtype=torch.int8)
        s = torch.rand(n_dim, generator=gen) / 512
        g = fs.capture(linear, x, w, s)
        space = enumerate_space(g)
        (seed,) = [p for p in kind_seed_plans(space) if str(p["mm0.config"]).startswith("decode")]
        plan = space.plan(seed)
        (k,) = plan.kernels
        assert k.kind == "decode" and [g.node(n).op for n in k.epilogue] == ["mul"]
        assert "cast" in [g.node(n).op for n in k.prologue_b]
    got = fs.compile_plan(plan)(x, w, s)
    got = got[0] if isinstance(got, list | tuple) else got
    assert rel_error(got, linear(x.double(), w, s.double())) <= 1e-6


def _mixtral_moe_block(implementation: str | None, tokens: int) -> tuple[torch.nn.Module, torch.Tensor]:
    """transformers' MixtralSparseMoeBlock of a tiny config (D 32, I 48, 4 experts, top 2) with the experts
    implementation given (None: transformers' default), and an input of `tokens` tokens."""
    import transformers

    cfg = transformers.MixtralConfig(vocab_size=128, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                     num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                     num_experts_per_tok=2)
    if implementation is not None:
        cfg._experts_implementation = implementation
    torch.manual_seed(tokens)
    block = transformers.MixtralForCausalLM(cfg).eval().model.layers[0].mlp
    return block, torch.randn(1, tokens, 32, generator=torch.Generator().manual_seed(tokens))


def _grouped_regions_match_float64(g: OpGraph, seed: int) -> list[str]:
    """Each region of `g` holding expert bmms, as the backend searches it: the grouped kind's seed plan runs
    every one of them grouped and matches the float64 reference; the expert bmms met, in order."""
    from fusionsearch.dynamo.regions import partition
    from fusionsearch.search.space import kind_seed_plans

    done: list[str] = []
    for region in partition(g):
        mms = [mm for mm in region.graph.nodes_of_kind("template") if expert_routing(region.graph, mm)]
        if not mms:
            continue
        space = enumerate_space(region.graph)
        (plan_seed,) = [s for s in kind_seed_plans(space) if any(str(v).startswith("grouped") for v in s.values())]
        plan = space.plan(plan_seed)
        assert [k.matmul for k in plan.kernels if k.kind == "grouped"] == mms
        assert_matches_float64(plan, region.graph, fs.random_inputs(region.graph, seed=seed))
        done.extend(mms)
    return done


@pytest.mark.parametrize("tokens", [1, 3, 40])  # 80 pairs: past INLINE_PAIRS, a routing kernel first
def test_transformers_batched_mixtral_experts_reach_the_grouped_kind_and_match_eager(tokens: int) -> None:
    """transformers' MixtralSparseMoeBlock with batched_mm experts (the pairs flattened, each pair's expert weight
    gathered by a 1-D index, the weight first times the token's column): capture turns each expert product into
    a row times the transposed weight, the grouped kind takes both, and the plan that runs them grouped matches
    the float64 reference, region by region as the backend searches them."""
    block, x = _mixtral_moe_block("batched_mm", tokens)
    g = fs.capture(block, x)
    routed = {mm: r for mm in g.nodes_of_kind("template") if (r := expert_routing(g, mm)) is not None}
    assert sorted((r.cols, r.tokens, r.top, r.pairs_per_batch) for r in routed.values()) == [
        (32, 2 * tokens, 1, 1), (96, 2 * tokens, 1, 1)]
    assert len(_grouped_regions_match_float64(g, tokens)) == 2


@pytest.mark.parametrize("tokens", [1, 16])
def test_transformers_default_mixtral_experts_reach_the_grouped_kind_and_match_eager(tokens: int) -> None:
    """transformers' default experts (`grouped_mm`: the pairs sorted by expert, histc and cumsum make the offsets,
    `torch._grouped_mm(x, w.transpose(-2, -1), offs=...)`), float32, whose trace aten's bf16-only fake kernel
    refused: each grouped matmul is captured as each row times its group's expert weight (graph/grouped_mm.py),
    the grouped kind takes both, and the whole block's plan, both expert matmuls grouped, matches eager and the
    float64 reference; so does each region as the backend searches it."""
    from fusionsearch.graph.capture import module_state
    from fusionsearch.search.space import kind_seed_plans

    block, x = _mixtral_moe_block(None, tokens)
    assert block.experts.config._experts_implementation == "grouped_mm"  # what users get
    g = fs.capture(block, x)
    assert not [n for n in g.nodes_of_kind("extern") if "grouped_mm" in g.node(n).attrs["target"]]
    routed = {mm: r for mm in g.nodes_of_kind("template") if (r := expert_routing(g, mm)) is not None}
    assert sorted((r.cols, r.tokens, r.top, r.pairs_per_batch, r.experts) for r in routed.values()) == [
        (32, 2 * tokens, 1, 1, 4), (96, 2 * tokens, 1, 1, 4)]
    space = enumerate_space(g)
    (seed,) = [s for s in kind_seed_plans(space) if any(str(v).startswith("grouped") for v in s.values())]
    plan = space.plan(seed)
    assert sorted(k.matmul for k in plan.kernels if k.kind == "grouped") == sorted(routed)
    inputs = [x, *module_state(block)]
    with torch.no_grad():
        want = block(x)
    got = fs.compile_plan(plan)(*inputs)
    got = got[0] if isinstance(got, list | tuple) else got
    assert rel_error(got, want) <= 1e-5
    assert_matches_float64(plan, g, inputs)
    assert len(_grouped_regions_match_float64(g, tokens)) == 2


def test_transformers_eager_loop_experts_are_refused_in_one_line() -> None:
    """transformers' eager experts loop in Python over the experts the router hit (`nonzero`, then `torch.where`
    and `index_add_` per expert): a data-dependent program, refused at capture with the reason, not traced."""
    block, x = _mixtral_moe_block("eager", 3)
    with pytest.raises(GraphError, match=r"decides in Python on a tensor's values") as e:
        fs.capture(block, x)
    assert "\n" not in str(e.value)
