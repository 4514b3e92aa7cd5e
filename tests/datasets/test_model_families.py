"""The random graph families in the forms model code has (issue 54 item 2): routed MoE blocks (gpt-fast's gathered
einsums, transformers' token-pair batched_mm), RMSNorm -> q/k/v projections -> RoPE, attention score chains.
Each is what fs.capture records for the real code (or computes what that code computes, where the generator spells
a data-moving extern in layout ops), searchable at real sizes, and its unfused and fully fused plans match the
float64 reference in Triton's interpreter."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.costmodel.hardware import Hardware
from fusionsearch.datasets.graphgen.attention import SCORES_LIMIT, attention
from fusionsearch.datasets.graphgen.moe import gathered_moe, grouped_moe
from fusionsearch.datasets.graphgen.rope import norm_qkv_rope
from fusionsearch.datasets.random_graphs import (
    FAMILIES,
    GATHERED_BYTES_LIMIT,
    INPUT_BYTES_LIMIT,
    families_of,
    random_graph,
)
from fusionsearch.errors import GraphError
from fusionsearch.graph.reference import random_inputs, reference
from fusionsearch.graph.tolerance import rel_error
from fusionsearch.kinds.grouped_matmul import expert_routing
from fusionsearch.measure import validate
from fusionsearch.search.collect import sample_plans
from fusionsearch.search.space import enumerate_space

NEW = ("moe", "norm_rope", "attention")


# ---- the forms are the ones model code has -------------------------------------------------------------

def test_the_gathered_moe_is_what_capture_records_for_gpt_fasts_moe_block() -> None:
    from benchmarks.models import moe

    block = moe.build(moe.MoEArgs(dim=32, hidden=48, n_experts=4, top_k=2), torch.float32, "cpu")
    captured = fs.capture(block, torch.randn(5, 32))
    assert gathered_moe(torch.float32, T=5, D=32, H=48, E=4, A=2).same_structure(captured)
    assert not gathered_moe(torch.float32, T=5, D=32, H=48, E=4, A=1).same_structure(captured)


def test_the_grouped_moe_is_what_capture_records_for_transformers_batched_mm_mixtral() -> None:
    import transformers

    cfg = transformers.MixtralConfig(vocab_size=128, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                     num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                     num_experts_per_tok=2)
    cfg._experts_implementation = "batched_mm"
    torch.manual_seed(0)
    block = transformers.MixtralForCausalLM(cfg).eval().model.layers[0].mlp
    captured = fs.capture(block, torch.randn(1, 3, 32))
    assert grouped_moe(torch.float32, T=3, D=32, H=48, E=4, A=2).same_structure(captured)


def test_the_attention_chain_is_what_capture_records_for_eager_attention() -> None:
    def eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        s = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.shape[-1])) + mask
        return torch.softmax(s.float(), dim=-1).to(q.dtype) @ v

    q, k, v = (torch.randn(2, 4, n, 8, dtype=torch.float16) for n in (5, 7, 7))
    captured = fs.capture(eager, q, k, v, torch.zeros(5, 7, dtype=torch.float16))
    assert attention(torch.float16, B=2, H=4, S=5, L=7, HD=8, mask=True).same_structure(captured)
    g = attention(torch.float16, B=2, H=4, S=5, L=7, HD=8, mask=False)
    out, exact = reference(g, inputs := random_inputs(g, seed=1))[0], reference(g, inputs, float64=True)[0]
    q, k, v = (t.double() for t in inputs)
    assert rel_error(exact, torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), -1) @ v) < 1e-12
    assert rel_error(out, exact) < 1e-2


def test_the_norm_rope_forms_compute_what_gpt_fast_and_transformers_compute() -> None:
    """The generator spells split, select and cat in layout ops; the math is the model code's, in float32."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    from benchmarks.models.llama import RMSNorm, apply_rotary_emb

    g = norm_qkv_rope("gpt-fast", torch.float32, B=2, S=3, D=16, H=4, KV=2, HD=6)
    x, gain, freqs, wqkv = random_inputs(g, seed=0)
    norm = RMSNorm(16)
    norm.weight.data = gain
    q, k, v = F.linear(norm(x), wqkv).split([24, 12, 12], dim=-1)
    want = [apply_rotary_emb(q.view(2, 3, 4, 6), freqs), apply_rotary_emb(k.view(2, 3, 2, 6), freqs),
            v.view(2, 3, 2, 6)]
    for got, ref in zip(reference(g, [x, gain, freqs, wqkv]), want, strict=True):
        assert rel_error(got, ref) < 1e-5

    g = norm_qkv_rope("transformers", torch.float32, B=2, S=3, D=16, H=4, KV=2, HD=6)
    x, gain, cos, sin, wq, wk, wv = random_inputs(g, seed=0)
    normed = gain * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5))
    heads = [F.linear(normed, w).view(2, 3, n, 6).transpose(1, 2) for w, n in ((wq, 4), (wk, 2), (wv, 2))]
    want = [*apply_rotary_pos_emb(heads[0], heads[1], cos, sin), heads[2]]
    for got, ref in zip(reference(g, [x, gain, cos, sin, wq, wk, wv]), want, strict=True):
        assert rel_error(got, ref) < 1e-5


# ---- real sizes: valid, within the budgets, searchable -------------------------------------------------

@pytest.mark.parametrize("family", NEW)
def test_real_graphs_of_the_new_families_fit_the_budgets_and_are_searchable(family: str) -> None:
    hw = Hardware.detect()
    forms, dtypes = Counter(), Counter()
    for seed in range(12):
        g = random_graph(seed, family=family)
        assert g.signature_hash() == random_graph(seed, family=family).signature_hash()
        assert sum(g.node(n).nbytes for n in g.inputs) <= INPUT_BYTES_LIMIT
        dtypes[g.node(g.inputs[0]).dtype] += 1
        if family == "moe":
            forms["grouped" if "gate_up_proj" in g.inputs else "gathered"] += 1
            routed = [mm for mm in g.nodes_of_kind("template") if expert_routing(g, mm) is not None]
            assert len(routed) == (2 if "gate_up_proj" in g.inputs else 3)
            for mm in routed:
                picked = g.node(expert_routing(g, mm).gather)  # type: ignore[union-attr]
                assert picked.nbytes <= GATHERED_BYTES_LIMIT
        elif family == "norm_rope":
            forms["transformers" if "cos" in g.inputs else "gpt-fast"] += 1
        else:
            b, h, s, _ = g.node("q").shape
            assert b * h * s * g.node("k").shape[2] <= SCORES_LIMIT
            forms["mask" if "mask" in g.inputs else "none"] += 1
        if seed < 3:
            enumerate_space(g)
            plans = sample_plans(g, 6, random.Random(seed), hw)
            assert len(plans) == 6 and all(any(k.kind == "extern" for k in p.kernels) for p in plans)
    assert len(forms) == 2, forms
    if family == "moe":  # real widths overflow float16 (the experts family's rule)
        assert torch.float16 not in dtypes and len(dtypes) == 2
    else:
        assert len(dtypes) == 3


def test_an_moe_graphs_sampled_plans_run_its_expert_matmuls_on_the_grouped_kind() -> None:
    for seed in range(4):
        g = random_graph(seed, family="moe")
        plans = sample_plans(g, 8, random.Random(0), Hardware.detect())
        if any(k.kind == "grouped" for p in plans for k in p.kernels):
            return
    raise AssertionError("no sampled plan ran an expert matmul on the grouped kind")


# ---- small sizes: the reference plans match float64 in the interpreter ---------------------------------

SEEDS = {"moe": (0, 1, 2, 5), "norm_rope": (0, 1, 2, 4), "attention": (0, 1, 2, 3)}  # moe: both forms twice


@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning")
@pytest.mark.parametrize("family, seed", [(f, s) for f in NEW for s in SEEDS[f]])
def test_unfused_and_fully_fused_plans_match_float64_in_the_interpreter(family: str, seed: int) -> None:
    g = random_graph(seed, family=family, shape_scale="small", dtypes=("float32", "float16"))
    for make in (P.unfused, P.fully_fused):
        v = validate(make(g))
        assert v.ok, f"{family} seed {seed}, {make.__name__}: {v.reason}\n{g.describe()}"


def test_small_moe_graphs_draw_both_forms_and_16_bit_routers_in_float32() -> None:
    forms = Counter()
    for seed in range(8):
        g = random_graph(seed, family="moe", shape_scale="small", dtypes=("float16",))
        forms["grouped" if "gate_up_proj" in g.inputs else "gathered"] += 1
        assert g.node("gate_weight").dtype == torch.float32 and g.node("router_logits").dtype == torch.float32
        assert g.node(g.outputs[0]).dtype == torch.float16
    assert set(forms) == {"grouped", "gathered"}, forms


# ---- choosing families ---------------------------------------------------------------------------------

def test_families_are_chosen_by_name_list_or_all() -> None:
    assert families_of("all") == FAMILIES and set(NEW) <= set(FAMILIES)
    assert families_of("moe, attention,moe") == ("moe", "attention")
    for bad in ("", "moe,bogus", None, 3):
        with pytest.raises(GraphError, match="comma-separated list of mixed, experts, decode, moe"):
            families_of(bad)
    with pytest.raises(GraphError, match="family must be one of"):
        random_graph(0, family="moe,attention")
