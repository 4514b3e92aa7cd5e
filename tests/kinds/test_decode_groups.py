"""The decode matmul's groups form (issue 27): a weight dequantised by groups along K, (cast(q) - c) * S + Z, read
by the dot as MAGIC + q and scaled after each K tile's dot (triton_source/group_scales.py). Against float64 in
Triton's interpreter (fp16: bf16 arithmetic is the GPU's to check) on uneven sizes, splits, groups of one and
several K blocks, with and without the zero, the offset, the rows form or a scalar factor, a signed int8 weight
(no magic: the dot reads q itself); what it refuses, in one line; its labels and where the search offers it."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen.module import generate_module
from fusionsearch.errors import PlanError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.tolerance import output_tolerances, rel_error
from fusionsearch.kinds.decode_matmul import DecodeConfig
from fusionsearch.kinds.decode_matmul.configs import decode_candidates, takes_groups
from fusionsearch.kinds.triton_source.group_scales import find_group_scale
from tests.kinds.test_decode_matmul import decode_plan


def _cfg(bn: int, bk: int, sk: int, rows: bool = True, stages: int = 2) -> DecodeConfig:
    return DecodeConfig(bn, bk, sk, 4, stages, "dot", True, True, rows, True)


CASES = [({"M": 3, "K": 128, "N": 136, "G": 64}, _cfg(64, 32, 2)),  # N not a whole number of blocks
         ({"M": 16, "K": 128, "N": 128, "G": 32}, _cfg(64, 32, 1, rows=False)),  # a group a K block
         ({"M": 1, "K": 256, "N": 64, "G": 128}, _cfg(64, 64, 4)),  # split-K, two blocks a group
         ({"M": 5, "K": 512, "N": 200, "G": 256}, _cfg(128, 32, 2, stages=3))]


def _loop(source: str) -> str:
    return source.split("for k_tile in")[1].split("ws_off")[0]


@pytest.mark.parametrize(("shape", "cfg"), CASES, ids=[f"{'-'.join(map(str, s.values()))}" for s, _ in CASES])
def test_the_groups_form_gives_the_int4_gemv_float64s_answer(shape: dict[str, int], cfg: DecodeConfig) -> None:
    g = fs.workload("w4_dequant_mm", dtype=torch.float16, **shape)
    plan = decode_plan(P.fully_fused(g), cfg)
    inputs = fs.random_inputs(g, seed=7)
    (ref,) = fs.reference(g, inputs, float64=True)
    compiled = fs.compile_plan(plan)
    (out,) = compiled(*inputs)
    assert out.dtype == torch.float16 and rel_error(out, ref) <= output_tolerances(g)[0], rel_error(out, ref)
    loop = _loop(compiled.source)
    # the weight's dequant is gone from the loop: per byte position one correction of the tile's two dots,
    # by the group's scale and zero, with the magic 128 and the workload's -8 folded into one shift
    assert loop.count("tl.dot(") == 8 and loop.count("136.0 *") == 4
    assert "tl.sum(a.to(tl.float32), axis=1)" in loop


def test_in_bf16_the_dot_reads_the_weight_made_from_its_bits() -> None:
    g = fs.workload("w4_dequant_mm", dtype=torch.bfloat16, M=16, K=4096, N=11008, G=128)
    loop = _loop(generate_module(decode_plan(P.fully_fused(g), _cfg(256, 64, 8))).source)
    assert loop.count("_bytes_bf16(") == 2 and "b_e0 = tl.broadcast_to(q16_" in loop


def _group_graph(zero: bool, offset: int, factor: float | None, signed: bool, k: int = 128, n: int = 96,
                 group: int = 64, dt: torch.dtype = torch.float16) -> OpGraph:
    """x @ (((cast(q) - offset) * S [* factor]) [+ Z]), S and Z per group of K rows: q uint8 nibbles-free bytes
    (q & 15) or a signed int8."""
    g = OpGraph()
    x = g.input("x", (4, k), dt)
    q = g.input("q", (k, n), torch.int8 if signed else torch.uint8)
    if not signed:
        q = g.add("bitwise_and", [q], name="q_low", scalar=15)
    v = g.add("cast", [q], name="q_float", dtype="float16" if dt == torch.float16 else "bfloat16")
    if offset:
        v = g.add("sub", [v], name="q_centered", scalar=offset)

    def per_group(name: str) -> str:
        p = g.input(name, (k // group, n), dt)
        rows = g.add("expand", [g.add("unsqueeze", [p], name=f"{name}_rows", dim=1)], name=f"{name}_groups",
                     shape=[k // group, group, n])
        return g.add("view", [rows], name=f"{name}_k", shape=[k, n])

    b = g.add("mul", [per_group("s"), v], name="w_scaled")
    if factor is not None:
        b = g.add("mul", [b], name="w_factored", scalar=factor)
    if zero:
        b = g.add("add", [b, per_group("z")], name="w")
    g.set_outputs([g.add("mm", [x, b], name="y")])
    return g.validate()


@pytest.mark.parametrize(("zero", "offset", "factor", "signed"),
                         [(False, 8, None, False), (True, 0, None, False), (True, -3, 0.25, False),
                          (False, 0, None, True), (True, 2, 0.5, True)],
                         ids=["no-zero", "no-offset", "negative-offset-factor", "int8", "int8-all"])
def test_every_form_of_the_group_dequant_matches_float64(zero: bool, offset: int, factor: float | None,
                                                          signed: bool) -> None:
    g = _group_graph(zero, offset, factor, signed)
    gs = find_group_scale(g, "y")
    assert gs is not None and gs.offset == offset and (gs.zero is not None) == zero
    assert gs.factor == (factor or 1.0)
    plan = decode_plan(P.fully_fused(g), _cfg(64, 32, 2))
    inputs = fs.random_inputs(g, seed=3)
    (ref,) = fs.reference(g, inputs, float64=True)
    compiled = fs.compile_plan(plan)
    (out,) = compiled(*inputs)
    assert rel_error(out, ref) <= output_tolerances(g)[0], rel_error(out, ref)
    loop = _loop(compiled.source)
    assert loop.count("tl.dot(") == 8 and ("a_sum" in loop) == bool(zero or offset or not signed)


def test_what_the_groups_form_cannot_run_is_refused_in_one_line() -> None:
    w4 = fs.workload("w4_dequant_mm", dtype=torch.float16, M=2, K=128, N=64, G=32)
    with pytest.raises(PlanError, match="constant inside each K block of 64"):  # a K block spans two groups
        decode_plan(P.fully_fused(w4), _cfg(64, 64, 1))
    fp32 = fs.workload("w4_dequant_mm", dtype=torch.float32, M=2, K=128, N=64, G=32)
    with pytest.raises(PlanError, match="need A in bfloat16 or float16"):
        decode_plan(P.fully_fused(fp32), _cfg(64, 32, 1))
    gelu = fs.workload("mm_bias_gelu", dtype=torch.float16, M=2, K=64, N=64)
    with pytest.raises(PlanError, match=r"need B's prologue to end in \(cast\(q\) - c\) \* s \+ z"):
        decode_plan(P.fully_fused(gelu), _cfg(64, 32, 1))
    with pytest.raises(PlanError, match="groups is a form of the words dot") as refused:
        DecodeConfig(64, 32, 1, 4, 2, "dot_t", True, True, False, True)
    assert "\n" not in str(refused.value)


def test_groups_configs_are_labelled_and_offered_where_they_can_run() -> None:
    cfg = _cfg(256, 64, 8, stages=3)
    assert cfg.short() == "decode dot n256 k64 sk8 w4 s3 pairs words rows groups"
    assert DecodeConfig.from_short(cfg.short()) == cfg
    w4 = fs.workload("w4_dequant_mm", dtype=torch.bfloat16, M=16, K=4096, N=11008, G=128)
    found = decode_candidates(w4, "y")
    assert takes_groups(w4, "y") and found[1] == cfg and sum(c.groups for c in found) > 2
    assert all(c.words and c.product == "dot" for c in found if c.groups)
    for name, dt, shape in (("w4_dequant_mm", torch.float32, {"M": 16, "K": 4096, "N": 11008, "G": 128}),
                            ("w8_dequant_mm", torch.bfloat16, {"M": 16, "K": 256, "N": 64})):
        g = fs.workload(name, dtype=dt, **shape)
        assert not any(c.groups for c in decode_candidates(g, "y"))


@settings(max_examples=20, deadline=None, derandomize=True, database=None)
@given(st.data())
def test_random_group_dequants_through_random_groups_configs_match_float64(data: st.DataObject) -> None:
    """Random rows, columns (a multiple of 4), K blocks, splits, groups (a multiple of the K block), forms of
    the dequant (zero, offset, factor, signed) and configs (rows, stages): the answer float64 gives."""
    block_k = data.draw(st.sampled_from([32, 64]))
    blocks, split = data.draw(st.integers(1, 4)), data.draw(st.sampled_from([1, 2]))
    k = block_k * blocks * split
    group = block_k * data.draw(st.sampled_from([d for d in (1, 2, 4) if (k // block_k) % d == 0]))
    g = _group_graph(data.draw(st.booleans()), data.draw(st.sampled_from([0, 8, -5])),
                     data.draw(st.sampled_from([None, 0.5, 3.0])), data.draw(st.booleans()), k=k,
                     n=4 * data.draw(st.integers(1, 50)), group=group)
    cfg = DecodeConfig(data.draw(st.sampled_from([64, 128])), block_k, split, 4, data.draw(st.sampled_from([1, 2, 3])),
                       "dot", True, True, data.draw(st.booleans()), True)
    inputs = fs.random_inputs(g, seed=data.draw(st.integers(0, 99)))
    (ref,) = fs.reference(g, inputs, float64=True)
    (out,) = fs.compile_plan(decode_plan(P.fully_fused(g), cfg))(*inputs)
    assert rel_error(out, ref) <= output_tolerances(g)[0], (cfg.short(), k, group)
