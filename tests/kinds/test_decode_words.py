"""The decode matmul's words form (issue 27): an int4 weight's bytes read as int32 words, unpacked word by word
(TileEvaluator._words_nibble), each product in an accumulator of its own byte position. Against float64 in
Triton's interpreter (which runs the unpack's shift-and-mask twin of the GPU's byte permute), for every product,
uneven sizes and shift amounts outside a byte; what it refuses; its configs; and on sm_90 SASS compiled on the
CPU, the K loop's instructions a weight element against the pairs form's."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen import resources as R
from fusionsearch.codegen.module import generate_module
from fusionsearch.datasets.workloads import _per_group
from fusionsearch.errors import PlanError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.tolerance import output_tolerances, rel_error
from fusionsearch.kinds.decode_matmul import DecodeConfig
from fusionsearch.kinds.decode_matmul.configs import decode_candidates, reads_words
from tests.kinds.test_decode_matmul import decode_plan

WORDS = [DecodeConfig(64, 32, 1, 4, 2, "dot", True, True), DecodeConfig(64, 32, 3, 4, 3, "dot_t", True, True),
         DecodeConfig(32, 16, 2, 4, 2, "fma", True, True), DecodeConfig(32, 32, 1, 4, 2, "fma_acc", True, True),
         # rows: the group scales and zeros read as whole rows, split into the byte positions in registers
         DecodeConfig(64, 32, 1, 4, 2, "dot", True, True, True),
         DecodeConfig(64, 32, 3, 4, 3, "dot_t", True, True, True),
         DecodeConfig(32, 16, 2, 4, 2, "fma", True, True, True)]
SHAPES = [{"M": 3, "K": 96, "N": 40, "G": 16},  # N not a whole number of blocks: the words' mask
          {"M": 1, "K": 192, "N": 24, "G": 64},
          {"M": 16, "K": 64, "N": 128, "G": 32}]


def runtime_shift_graph(dtype: torch.dtype, M: int, K: int, N: int, G: int) -> OpGraph:
    """The int4 GEMV with its two nibbles' shift amounts an input tensor [2, 1] (w4_dequant_mm before
    2026-12-06 m): the words form's runtime-amount path, any amount a byte's shift can take."""
    g = OpGraph()
    x, w = g.input("x", (M, K), dtype), g.input("w", (K // 2, N), torch.uint8)
    shifts = g.input("shifts", (2, 1), torch.uint8)
    pairs = g.add("unsqueeze", [w], name="w_pairs", dim=1)
    nibbles = g.add("bitwise_and", [g.add("bitwise_right_shift", [pairs, shifts], name="w_shifted")],
                    name="w_nibbles", scalar=15)
    q = g.add("cast", [g.add("view", [nibbles], name="w_int4", shape=[K, N])], name="w_float",
              dtype=str(dtype).removeprefix("torch."))
    scales, zeros = g.input("scales", (K // G, N), dtype), g.input("zeros", (K // G, N), dtype)
    scaled = g.add("mul", [g.add("sub", [q], name="w_centered", scalar=8), _per_group(g, scales, K, N, G)],
                   name="w_scaled")
    g.set_outputs([g.add("mm", [x, g.add("add", [scaled, _per_group(g, zeros, K, N, G)], name="w_dequant")],
                         name="y")])
    return g.validate()


def _loop(source: str) -> str:
    return source.split("for k_tile in")[1].split("ws_off")[0]


# FMAs only up to 4 rows, as the decode kind offers them
CASES = [(shape, cfg) for shape in SHAPES for cfg in WORDS if shape["M"] <= 4 or not cfg.on_cuda_cores]
CASE_IDS = [f"{'-'.join(map(str, s.values()))}-{c.product}{'-rows' if c.rows else ''}" for s, c in CASES]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize(("shape", "cfg"), CASES, ids=CASE_IDS)
def test_the_words_form_unpacks_int4_as_float64_does(shape: dict[str, int], cfg: DecodeConfig,
                                                      dtype: torch.dtype) -> None:
    g = fs.workload("w4_dequant_mm", dtype=dtype, **shape)
    plan = decode_plan(P.fully_fused(g), cfg)
    inputs = fs.random_inputs(g, seed=7)
    (ref,) = fs.reference(g, inputs, float64=True)
    compiled = fs.compile_plan(plan)
    (out,) = compiled(*inputs)
    (tol,) = output_tolerances(g)
    assert out.dtype == dtype and rel_error(out, ref) <= tol, rel_error(out, ref)
    loop = _loop(compiled.source)
    assert loop.count("tl.pointer_type(tl.int32)") == 1  # the packed weight: one word load a K block
    assert loop.count("_bytes_f32(") == 2  # each parity's four bytes from one permute call, no per-byte unpack
    assert ".to(tl.uint8)" not in loop
    assert all(f"accw{j}" in loop for j in range(4))
    # rows: where a K block lies in one group (the scales and zeros one row a block), two whole rows a K step
    assert loop.count("tl.split(tl.reshape(row") == (2 if cfg.rows and shape["G"] % cfg.block_k == 0 else 0)


@pytest.mark.parametrize("amounts", [(0, 4), (3, 7), (9, 2), (8, 255)], ids=str)
def test_shift_amounts_outside_a_byte_give_torchs_zero(amounts: tuple[int, int]) -> None:
    """The word's shift brings the next byte's bits in; the per-byte mask keeps them out, and an amount of 8
    or more leaves 0, as torch's uint8 >> does (real int4 code's amounts are 4 and 0)."""
    g = runtime_shift_graph(torch.float32, M=2, K=64, N=48, G=32)
    x, w, _, s, z = fs.random_inputs(g, seed=11)
    shifts = torch.tensor(amounts, dtype=torch.uint8).reshape(2, 1)
    (ref,) = fs.reference(g, [x, w, shifts, s, z], float64=True)
    for cfg in (WORDS[0], WORDS[3]):
        (out,) = fs.compile_plan(decode_plan(P.fully_fused(g), cfg))(x, w, shifts, s, z)
        assert rel_error(out, ref) <= output_tolerances(g)[0], (cfg.product, rel_error(out, ref))


def test_a_words_config_on_a_weight_not_of_bytes_reads_it_as_any_other() -> None:
    """Words is a reading of B's columns: without bytes to read as words, the tiles of the four byte positions
    load B like any operand and the answer is the same."""
    for name, shape in (("mm_bias_gelu", {"M": 2, "K": 64, "N": 52}), ("w8_dequant_mm", {"M": 3, "K": 64, "N": 64})):
        g = fs.workload(name, dtype=torch.float16, **shape)
        plan = decode_plan(P.fully_fused(g), WORDS[3])
        inputs = fs.random_inputs(g, seed=2)
        refs = fs.reference(g, inputs, float64=True)
        (out,) = fs.compile_plan(plan)(*inputs)
        assert rel_error(out, refs[0]) <= output_tolerances(g)[0]
        assert "pointer_type(tl.int32)" not in _loop(generate_module(plan).source)


def test_a_weight_not_4_byte_aligned_is_refused_in_one_line() -> None:
    g = fs.workload("w4_dequant_mm", dtype=torch.float32, M=1, K=64, N=32, G=32)
    x, w, s, z = fs.random_inputs(g, seed=1)
    run = fs.compile_plan(decode_plan(P.fully_fused(g), WORDS[3]))
    shifted = torch.empty(w.numel() + 1, dtype=torch.uint8)[1:].view(w.shape)
    shifted.copy_(w)
    with pytest.raises(ValueError, match="reads input 1 as 4-byte words: it must be 4-byte aligned"):
        run(x, shifted, s, z)


def test_words_configs_are_checked_and_labelled() -> None:
    cfg = DecodeConfig(256, 64, 8, 4, 3, "fma_acc", True, True)
    assert cfg.short() == "decode fma_acc n256 k64 sk8 w4 s3 pairs words"
    assert DecodeConfig.from_short(cfg.short()) == cfg
    with pytest.raises(PlanError, match="words is a form of pairs"):
        DecodeConfig(64, 32, 1, 4, 2, "fma", False, True)
    rows = DecodeConfig(256, 64, 8, 4, 3, "dot", True, True, True)
    assert rows.short() == "decode dot n256 k64 sk8 w4 s3 pairs words rows"
    assert DecodeConfig.from_short(rows.short()) == rows
    with pytest.raises(PlanError, match="rows is a form of words"):
        DecodeConfig(64, 32, 1, 4, 2, "dot", True, False, True)
    with pytest.raises(PlanError, match="block_n must be at least 64"):
        DecodeConfig(32, 32, 1, 4, 2, "dot", True, True)  # a quarter of 32 columns: below a dot's 16
    g = fs.workload("w4_dequant_mm", dtype=torch.float16, M=1, K=64, N=42, G=32)  # N not a multiple of 4
    with pytest.raises(PlanError, match="words need N"):
        decode_plan(P.fully_fused(g), DecodeConfig(32, 32, 1, 4, 2, "fma", True, True))


def test_the_words_form_is_offered_where_its_bytes_are_and_leads_with_its_wave_filling_rows() -> None:
    w4 = fs.workload("w4_dequant_mm", dtype=torch.bfloat16, M=1, K=4096, N=11008, G=128)
    found = decode_candidates(w4, "y")
    assert reads_words(w4, "y") and all(c.words for c in found[:3])
    # 43 column blocks of 256: at one row two CTAs a multiprocessor (6 splits, 258 CTAs on 132 SMs) lead, the
    # fastest measured (h100-2026-12-07b-uneven-split), then one a multiprocessor at k128, then the fma_acc words
    assert [c.short() for c in found[:2]] == ["decode dot n256 k64 sk6 w4 s3 pairs words rows",
                                             "decode dot n256 k128 sk3 w4 s3 pairs words rows"]
    assert any(c.words and c.product == "fma_acc" for c in found[:5])
    assert len({c.short() for c in found}) == len(found)
    # at 16 rows one CTA a multiprocessor at k128 leads (3 splits, 129 CTAs)
    at16 = decode_candidates(fs.workload("w4_dequant_mm", dtype=torch.bfloat16, M=16, K=4096, N=11008, G=128), "y")
    assert at16[0].short() == "decode dot n256 k128 sk3 w4 s3 pairs words rows"
    assert all(c.words and c.product == "dot" for c in at16 if c.rows) and sum(c.rows for c in at16) > 1
    for name, shape in (("w4_dequant_mm", {"M": 1, "K": 256, "N": 42, "G": 32}),  # N % 4
                        ("w8_dequant_mm", {"M": 1, "K": 256, "N": 64})):  # int8, no nibble pairs
        g = fs.workload(name, dtype=torch.bfloat16, **shape)
        assert not any(c.words for c in decode_candidates(g, "y"))


def test_the_words_k_loop_runs_fewer_instructions_a_weight_element_on_sm90() -> None:
    """The reason for the form: compiled for sm_90 on the CPU (the GPU's code, with the byte permute), the int4
    GEMV's K loop (one row, K 4096, N 11008) runs under 0.7 of the pairs form's instructions a weight element
    (measured 4.85 against 8.16, h100-2026-12-06g-w4-words) and spills nothing."""
    g = fs.workload("w4_dequant_mm", dtype=torch.bfloat16, M=1, K=4096, N=11008, G=128)
    per_element = {}
    for words in (False, True):
        cfg = DecodeConfig(256, 64, 8, 4, 3, "fma_acc", True, words)
        (res,) = R.plan_resources(decode_plan(P.fully_fused(g), cfg))  # in a child process under the interpreter
        assert res is not None and res.loop_local_ops == 0
        per_element[words] = res.loop_instructions / (cfg.block_n * cfg.block_k / (32 * cfg.num_warps))
    assert per_element[True] < 0.7 * per_element[False], per_element


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(st.data())
def test_random_int4_graphs_through_random_words_configs_match_float64(data: st.DataObject) -> None:
    """Random sizes (N a multiple of 4, K of the block, any group dividing K), dtypes, shift amounts (some past
    a byte) and words configs of every product: the answer float64 gives."""
    product = data.draw(st.sampled_from(["dot", "dot_t", "fma", "fma_acc"]))
    fma = product.startswith("fma")
    m = data.draw(st.integers(1, 4 if fma else 16))
    block_n = data.draw(st.sampled_from([16, 32, 64] if fma else [64, 128]))
    block_k = data.draw(st.sampled_from([16, 32] if fma else [32, 64]))
    blocks, split = data.draw(st.integers(1, 4)), data.draw(st.sampled_from([1, 2]))
    k = block_k * blocks * split
    n = 4 * data.draw(st.integers(1, 40))
    group = data.draw(st.sampled_from([gr for gr in (2, 8, 16, 32, 64) if k % gr == 0]))
    dtype = data.draw(st.sampled_from([torch.float32, torch.float16]))
    cfg = DecodeConfig(block_n, block_k, split, 4, data.draw(st.sampled_from([1, 2, 3])), product, True, True,
                       data.draw(st.booleans()))
    g = runtime_shift_graph(dtype, M=m, K=k, N=n, G=group)
    x, w, _, s, z = fs.random_inputs(g, seed=data.draw(st.integers(0, 99)))
    amounts = data.draw(st.sampled_from([(4, 0), (0, 4), (2, 6), (1, 9)]))
    shifts = torch.tensor(amounts, dtype=torch.uint8).reshape(2, 1)
    (ref,) = fs.reference(g, [x, w, shifts, s, z], float64=True)
    (out,) = fs.compile_plan(decode_plan(P.fully_fused(g), cfg))(x, w, shifts, s, z)
    assert rel_error(out, ref) <= output_tolerances(g)[0], (cfg.short(), m, k, n, group, amounts)


@pytest.mark.parametrize("amount", [4, 0, 9], ids=str)
def test_a_constant_shift_amount_is_unpacked_word_by_word_too(amount: int) -> None:
    """`(w >> c) & 15` with c a constant of the graph (not an input), both K parities the same nibble: the
    words path's constant-amount branch, c = 9 giving torch's 0."""
    from fusionsearch.graph.opgraph import OpGraph

    k, n = 64, 32
    g = OpGraph()
    x, w = g.input("x", (2, k), torch.float32), g.input("w", (k // 2, n), torch.uint8)
    pairs = g.add("expand", [g.add("unsqueeze", [w], name="w_pairs", dim=1)], name="w_both", shape=[k // 2, 2, n])
    nib = g.add("bitwise_and", [g.add("bitwise_right_shift", [pairs], name="w_shifted", scalar=amount)],
                name="w_nibbles", scalar=15)
    q = g.add("cast", [g.add("view", [nib], name="w_int4", shape=[k, n])], name="w_float", dtype="float32")
    g.set_outputs([g.add("mm", [x, g.add("sub", [q], name="w_centered", scalar=8)], name="y")])
    inputs = fs.random_inputs(g, seed=4)
    (ref,) = fs.reference(g, inputs, float64=True)
    plan = decode_plan(P.fully_fused(g), WORDS[3])
    (out,) = fs.compile_plan(plan)(*inputs)
    assert rel_error(out, ref) <= output_tolerances(g)[0]
    assert "_bytes_f32(" in _loop(generate_module(plan).source)
