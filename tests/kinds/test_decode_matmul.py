"""The decode matmul kind (issue 27): every inner-product form, in fp32 and fp16, on even and uneven sizes, with
each prologue the issue lists (int8 and int4-group dequant of the weight, a cast and a scale of the
activations, a row gather) and an epilogue (bias + GELU), for mm, linear and bmm, against float64 in Triton's
interpreter; its configs, legality and JSON; the search offers it only where M <= 16."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.errors import PlanError
from fusionsearch.graph.tolerance import output_tolerances, rel_error
from fusionsearch.kinds import get
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
from fusionsearch.kinds.decode_matmul.configs import decode_candidates
from fusionsearch.plan import FusedMatmulKernel, Plan
from fusionsearch.search.space import enumerate_space

CASES = [("w8_dequant_mm", {"M": 1, "K": 128, "N": 64}),
         ("w8_dequant_mm", {"M": 5, "K": 100, "N": 72}),  # nothing divides the blocks
         ("w4_dequant_mm", {"M": 3, "K": 96, "N": 40, "G": 16}),
         ("cast_mm", {"M": 16, "K": 64, "N": 48}),
         ("scale_mm", {"M": 7, "K": 80, "N": 33}),
         ("gather_mm", {"M": 9, "K": 64, "N": 40, "T": 30}),
         ("mm_bias_gelu", {"M": 2, "K": 72, "N": 50}),
         ("moe_ffn", {"T": 2, "D": 48, "H": 40, "E": 3})]  # three bmms of one row per batch, gathers in B
CONFIGS = [DecodeConfig(32, 16, 1, 4, 2, "dot"), DecodeConfig(16, 32, 3, 4, 3, "dot_t"),
           DecodeConfig(64, 8, 4, 4, 2, "fma"), DecodeConfig(32, 16, 2, 4, 2, "fma_acc")]


def decode_plan(plan: Plan, cfg: DecodeConfig) -> Plan:
    """`plan` with every fused matmul run by the decode kind on `cfg`, its fused nodes as they were."""
    kernels = tuple(DecodeKernel(k.matmul, k.prologue_a, k.prologue_b, k.epilogue, cfg)
                    if isinstance(k, FusedMatmulKernel) else k for k in plan.kernels)
    return dataclasses.replace(plan, kernels=kernels).check()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.product)
@pytest.mark.parametrize(("name", "shape"), CASES, ids=[f"{n}-{'-'.join(map(str, s.values()))}" for n, s in CASES])
def test_fully_fused_decode_plans_match_float64(name: str, shape: dict[str, int], cfg: DecodeConfig,
                                                dtype: torch.dtype) -> None:
    g = fs.workload(name, dtype=dtype, **shape)
    plan = decode_plan(P.fully_fused(g), cfg)
    assert any(k.kind == "decode" and (k.prologue_a or k.prologue_b or k.epilogue) for k in plan.kernels) or \
        name == "cast_mm" and dtype == torch.float32  # fp32 cast_mm has no cast node to fuse
    inputs = fs.random_inputs(g, seed=3)
    refs = fs.reference(g, inputs, float64=True)
    out = fs.compile_plan(plan)(*inputs)
    outs = list(out) if isinstance(out, list | tuple) else [out]
    for o, ref, tol in zip(outs, refs, output_tolerances(g), strict=True):
        assert o.dtype == dtype and rel_error(o, ref) <= tol, rel_error(o, ref)
    assert fs.measure.validate(plan, g, inputs).ok


PAIRS = [DecodeConfig(32, 32, 1, 4, 2, "dot", True), DecodeConfig(16, 32, 3, 4, 3, "dot_t", True),
         DecodeConfig(64, 16, 2, 4, 2, "fma", True), DecodeConfig(32, 32, 1, 4, 2, "fma_acc", True)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("cfg", PAIRS, ids=lambda c: c.product)
@pytest.mark.parametrize("shape", [{"M": 3, "K": 96, "N": 40, "G": 16}, {"M": 1, "K": 192, "N": 24, "G": 64}],
                         ids=["G16", "G64"])
def test_the_pairs_form_unpacks_int4_as_float64_does(shape: dict[str, int], cfg: DecodeConfig,
                                                      dtype: torch.dtype) -> None:
    """Both nibbles from one byte load, the group scales a row a K block where the group holds the block."""
    g = fs.workload("w4_dequant_mm", dtype=dtype, **shape)
    plan = decode_plan(P.fully_fused(g), cfg)
    inputs = fs.random_inputs(g, seed=5)
    (ref,) = fs.reference(g, inputs, float64=True)
    compiled = fs.compile_plan(plan)
    (out,) = compiled(*inputs)
    (tol,) = output_tolerances(g)
    assert out.dtype == dtype and rel_error(out, ref) <= tol, rel_error(out, ref)
    loop = compiled.source.split("for k_tile in")[1].split("ws_off")[0]
    assert loop.count("tl.load(in1_ptr") == 1  # the packed weight: one load a K block for both parities
    if cfg.product == "fma_acc":  # accumulated over K in 3-D, reduced once after the loop
        assert loop.count("acc_3d += ") == 2 and loop.count("tl.sum(acc_3d, axis=1)") == 1


PAIR_CASES = [(n, s, product) for n, s in [*CASES[:-1], ("w8_dequant_mm", {"M": 4, "K": 64, "N": 24}),
                                            ("mm_bias_gelu", {"M": 2, "K": 64, "N": 50})]
              for product in ("dot", "dot_t", "fma", "fma_acc")
              if s["K"] % (16 if product.startswith("fma") else 32) == 0]


@pytest.mark.parametrize(("name", "shape", "product"), PAIR_CASES,
                         ids=[f"{n}-{'-'.join(map(str, s.values()))}-{p}" for n, s, p in PAIR_CASES])
def test_the_pairs_form_of_any_prologue_matches_float64(name: str, shape: dict[str, int], product: str) -> None:
    """The pairs form is a reading of K, not an int4 rewrite: every listed prologue (casts, gathers, scales,
    int8) and the epilogue give the float64 answer through it, in fp16 (K a whole number of blocks: the cases
    whose K is not are refused, tested below)."""
    g = fs.workload(name, dtype=torch.float16, **shape)
    block_k = 16 if product.startswith("fma") else 32
    blocks = shape["K"] // block_k
    plan = decode_plan(P.fully_fused(g), DecodeConfig(32, block_k, 2 if blocks % 2 == 0 else 1, 4, 2, product, True))
    inputs = fs.random_inputs(g, seed=11)
    refs = fs.reference(g, inputs, float64=True)
    out = fs.compile_plan(plan)(*inputs)
    outs = list(out) if isinstance(out, list | tuple) else [out]
    for o, ref, tol in zip(outs, refs, output_tolerances(g), strict=True):
        assert rel_error(o, ref) <= tol, rel_error(o, ref)


@pytest.mark.parametrize("cfg", [*CONFIGS[:2], DecodeConfig(32, 16, 2, 4, 2, "fma")], ids=lambda c: c.product)
def test_tma_loads_read_the_weight_through_a_descriptor_in_every_form(cfg: DecodeConfig) -> None:
    g = fs.workload("w8_dequant_mm", dtype=torch.float32, M=3, K=128, N=64)
    base = P.fully_fused(g)
    plan = decode_plan(dataclasses.replace(base, options=dataclasses.replace(base.options, tma_loads=True)), cfg)
    compiled = fs.compile_plan(plan)
    assert "tl.make_tensor_descriptor" in compiled.source
    inputs = fs.random_inputs(g, seed=2)
    (ref,) = fs.reference(g, inputs, float64=True)
    (out,) = compiled(*inputs)
    assert rel_error(out, ref) <= 1e-5, rel_error(out, ref)


def test_pairs_are_offered_for_int4_only_and_refused_where_k_is_not_whole_k_blocks() -> None:
    w4 = fs.workload("w4_dequant_mm", dtype=torch.float16, M=1, K=4096, N=512, G=128)
    offered = decode_candidates(w4, "y", 48)
    assert offered[0].pairs and sum(c.pairs for c in offered) >= 10
    assert all(4096 % c.block_k == 0 and 2 * c.split_k <= 4096 // c.block_k for c in offered if c.pairs)
    w8 = fs.workload("w8_dequant_mm", dtype=torch.float16, M=1, K=4096, N=512)
    assert not any(c.pairs for c in decode_candidates(w8, "y", 48))
    small = fs.workload("w4_dequant_mm", dtype=torch.float32, M=3, K=96, N=40, G=16)
    with pytest.raises(PlanError, match=r"pairs need K \(96\) a whole number of K blocks \(64\)"):
        decode_plan(P.fully_fused(small), DecodeConfig(32, 64, 1, 4, 2, "dot", True))
    with pytest.raises(PlanError, match="block_k at least 32 for product 'dot' in pairs"):
        DecodeConfig(32, 16, 1, 4, 2, "dot", True)
    cfg = DecodeConfig(32, 32, 3, 4, 2, "dot_t", True)
    assert cfg.short().endswith(" pairs") and DecodeConfig.from_short(cfg.short()) == cfg
    plan = decode_plan(P.fully_fused(small), cfg)
    assert Plan.from_json(plan.to_json(), small) == plan


def test_the_offered_splits_include_those_that_fill_one_and_two_ctas_a_multiprocessor_in_one_wave() -> None:
    from fusionsearch.kinds.decode_matmul.configs import MULTIPROCESSORS, splits_for, wave_split
    from fusionsearch.plan.matmul import problem

    g = fs.workload("w4_dequant_mm", dtype=torch.bfloat16, M=1, K=4096, N=11008, G=128)
    p = problem(g, "y")
    # 43 column blocks of 256: 3 splits are 129 CTAs (one an SM), 6 are 258 (two); 4 or 7 would start a second wave
    assert (wave_split(p, 256, 64, 1), wave_split(p, 256, 64, 2)) == (3, 6)
    assert splits_for(g, "y", 256, 64) == (8, 16, 3, 6)
    for bn, bk in ((64, 32), (128, 128), (256, 256), (512, 64)):
        blocks, ctas = 4096 // bk, -(-11008 // bn)
        for per_sm in (1, 2):
            s = wave_split(p, bn, bk, per_sm)
            assert 1 <= s <= max(1, blocks // 2) and (s == 1 or ctas * s <= per_sm * MULTIPROCESSORS)
            assert s == min(max(1, blocks // 2), 64) or ctas * (s + 1) > per_sm * MULTIPROCESSORS  # the most that fit
        assert all(1 <= s and (s == 1 or 2 * s <= blocks) for s in splits_for(g, "y", bn, bk))
    # 512 column blocks already fill two CTAs an SM: the wave rule adds nothing to the power-of-two rule's
    wide = fs.workload("w8_dequant_mm", dtype=torch.float16, M=1, K=256, N=16384)
    assert splits_for(wide, "y", 32, 64) == (1, 2)


RAGGED = [DecodeConfig(32, 32, 2, 4, 2, "dot", True), DecodeConfig(32, 32, 3, 4, 3, "dot_t", True),
          DecodeConfig(32, 16, 4, 4, 2, "fma", True), DecodeConfig(32, 32, 2, 4, 2, "fma_acc", True),
          DecodeConfig(64, 32, 3, 4, 2, "dot", True, True, True), DecodeConfig(32, 32, 4, 4, 2, "fma_acc", True, True),
          DecodeConfig(32, 32, 3, 4, 2, "dot")]  # the last not pairs: the int8 weight


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("cfg", RAGGED, ids=lambda c: c.short().replace(" ", "-"))
def test_splits_that_do_not_divide_the_k_blocks_share_them_unevenly(cfg: DecodeConfig, dtype: torch.dtype) -> None:
    """K 160: 5 blocks of 32 (10 of 16) over 2, 3 or 4 splits, each a whole number of blocks, no mask on K."""
    name, shape = ("w4_dequant_mm", {"G": 32}) if cfg.pairs else ("w8_dequant_mm", {})
    g = fs.workload(name, dtype=dtype, M=3, K=160, N=40, **shape)
    compiled = fs.compile_plan(decode_plan(P.fully_fused(g), cfg))
    blocks = 160 // cfg.block_k
    assert f"for kb in tl.range((pid_k * {blocks}) // {cfg.split_k}, " in compiled.source
    assert "mask_k" not in compiled.source
    inputs = fs.random_inputs(g, seed=3)
    (ref,) = fs.reference(g, inputs, float64=True)
    (out,) = compiled(*inputs)
    (tol,) = output_tolerances(g)
    assert rel_error(out, ref) <= tol, rel_error(out, ref)


def test_a_linear_over_a_3d_input_and_an_unfused_decode_kernel() -> None:
    x, w, b = torch.randn(2, 3, 40), torch.randn(24, 40), torch.randn(24)
    g = fs.capture(lambda x, w, b: torch.nn.functional.linear(x, w, b).relu(), x, w, b)
    for cfg in CONFIGS:
        for base in (P.unfused(g), P.fully_fused(g)):
            plan = decode_plan(base, cfg)
            (out,) = fs.compile_plan(plan)(x, w, b)
            ref = torch.nn.functional.linear(x.double(), w.double(), b.double()).relu()
            assert rel_error(out, ref) <= 1e-5, (cfg.product, rel_error(out, ref))


def test_the_serial_split_k_counters_are_reset_for_the_next_call() -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=4, K=128, N=32)
    run = fs.compile_plan(decode_plan(P.fully_fused(g), DecodeConfig(16, 16, 8, 4, 2, "dot")))
    for seed in (0, 1, 2):
        inputs = fs.random_inputs(g, seed=seed)
        (ref,) = fs.reference(g, inputs, float64=True)
        (out,) = run(*inputs)
        assert rel_error(out, ref) <= 1e-5


@pytest.mark.parametrize(("cfg", "loop"), [(DecodeConfig(128, 16, 4, 1, 2, "dot"), "range(0, 4, 2)"),
                                           (DecodeConfig(256, 16, 4, 1, 2, "dot"), "range(0, 4, 1)"),
                                           (DecodeConfig(32, 16, 4, 4, 2, "dot"), "tl.static_range(4)")],
                         ids=["chunks-of-2", "one-at-a-time", "all-at-once"])
def test_the_last_split_sums_the_partials_in_chunks_that_fit_its_registers(cfg: DecodeConfig, loop: str) -> None:
    """16 rows x 128 columns on one warp is 64 registers a partial: two splits' partials are loaded together;
    256 columns is 128, one at a time; 32 columns on four warps, all four. The sum is the same either way."""
    from fusionsearch.kinds.triton_source.matmul_tile import reduction_chunk
    assert [reduction_chunk(r, 8) for r in (8, 16, 32, 64, 128, 256)] == [8, 8, 4, 2, 1, 1]
    assert reduction_chunk(40, 6) == 3 and reduction_chunk(100, 7) == 1
    g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=13, K=100, N=300)
    run = fs.compile_plan(decode_plan(P.fully_fused(g), cfg))
    assert loop in run.source.split("arrived ==")[1]
    inputs = fs.random_inputs(g, seed=4)
    (ref,) = fs.reference(g, inputs, float64=True)
    (out,) = run(*inputs)
    assert rel_error(out, ref) <= 1e-5, rel_error(out, ref)


def test_config_bounds_labels_and_json() -> None:
    cfg = DecodeConfig(128, 64, 8, 8, 4, "fma")
    assert DecodeConfig.from_short(cfg.short()) == cfg and cfg.block_m(3) == 4 and cfg.block_m(1) == 1
    assert DecodeConfig(product="dot").block_m(1) == 16 and DecodeConfig(product="dot_t").block_m(9) == 16
    for bad, match in (({"product": "wmma"}, "product must be one of"), ({"block_n": 48}, "power of two"),
                       ({"block_k": 8}, "block_k at least 16"), ({"split_k": 0}, "positive integer"),
                       ({"num_stages": 9}, "at most 8"), ({"block_n": 2048}, "at most 1024"),
                       ({"pairs": 1}, "pairs must be true or false")):
        with pytest.raises(PlanError, match=match):
            DecodeConfig(**bad)  # type: ignore[arg-type]
    with pytest.raises(PlanError, match="not a decode config label"):
        DecodeConfig.from_short("64x64x64 g8 sk1 w4 s3")
    g = fs.workload("w8_dequant_mm", dtype=torch.float32, M=4, K=64, N=32)
    plan = decode_plan(P.fully_fused(g), cfg)
    again = Plan.from_json(plan.to_json(), g)
    assert again == plan and again.kernels[0].config == cfg


def test_more_than_16_rows_is_refused_with_the_way_out() -> None:
    g = fs.workload("w8_dequant_mm", dtype=torch.float32, M=17, K=64, N=32)
    with pytest.raises(PlanError, match="at most 16 rows.*run it as a template"):
        decode_plan(P.fully_fused(g), DecodeConfig())


def test_the_space_offers_decode_choices_only_for_small_m_and_builds_their_plans() -> None:
    small = fs.workload("w8_dequant_mm", dtype=torch.float32, M=8, K=512, N=256)
    space = enumerate_space(small, max_configs=12)
    labels = [label for label in space.parameter_choices()["mm0.config"] if label.startswith("decode ")]
    assert labels and len(labels) <= 12 and not any(" fma " in label for label in labels)  # fma: M <= 4 only
    params = {name: choices[-1] for name, choices in space.parameter_choices().items()}
    params["mm0.config"] = labels[0]
    plan = space.plan(params)
    assert [k.kind for k in plan.kernels if k.kind in ("decode", "template")] == ["decode"]
    tiny = fs.workload("w8_dequant_mm", dtype=torch.float32, M=1, K=512, N=256)
    assert any(" fma " in c.short() for c in decode_candidates(tiny, "y", 48))
    big = fs.workload("w8_dequant_mm", dtype=torch.float32, M=17, K=512, N=256)
    assert not any(label.startswith("decode ") for label in enumerate_space(big).parameter_choices()["mm0.config"])


def test_estimate_reads_the_weight_once_and_features_name_the_form() -> None:
    from fusionsearch.costmodel import H200, estimate
    from fusionsearch.costmodel.features import plan_features

    g = fs.workload("w8_dequant_mm", M=16, K=8192, N=8192)
    template = P.fully_fused(g)
    decode = decode_plan(template, DecodeConfig(128, 256, 8, 4, 4, "dot_t"))
    (d,), (t,) = estimate(decode, H200).per_kernel, estimate(template, H200).per_kernel
    weight = g.node("w").nbytes
    assert weight <= d.bytes_read < 1.05 * weight + 16 * 8192 * 4 * 8  # once, plus x and the workspace
    assert t.bytes_read >= d.bytes_read - 16 * 8192 * 4 * 8  # the template reads at least as much
    (f,) = plan_features(decode, H200)
    assert (f["kind_decode"], f["decode_dot_t"], f["decode_fma"], f["kind_template"]) == (1.0, 1.0, 0.0, 0.0)
    assert f["block_m"] == 16 and f["block_n"] == 128 and f["split_k"] == 8
    assert (f["decode_fma_acc"], f["decode_pairs"], f["decode_words"], f["decode_rows"]) == (0.0, 0.0, 0.0, 0.0)
    w4 = fs.workload("w4_dequant_mm", M=1, K=512, N=256, G=128)
    words = decode_plan(P.fully_fused(w4), DecodeConfig(256, 64, 8, 4, 3, "dot", True, True, True))
    acc = decode_plan(P.fully_fused(w4), DecodeConfig(64, 32, 2, 4, 3, "fma_acc", True))
    (fw,), (fa,) = plan_features(words, H200), plan_features(acc, H200)
    assert (fw["decode_fma_acc"], fw["decode_pairs"], fw["decode_words"], fw["decode_rows"]) == (0.0, 1.0, 1.0, 1.0)
    assert (fa["decode_fma_acc"], fa["decode_fma"], fa["decode_pairs"], fa["decode_words"]) == (1.0, 1.0, 1.0, 0.0)
    assert get("decode").accepts(g, "y")
