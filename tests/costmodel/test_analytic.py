"""The analytic cost model: bytes, re-reads, split-K traffic, roofline time, the prologue rule and `fits`."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.costmodel import H200, Hardware, estimate, fits
from fusionsearch.costmodel.analytic import least_bytes, matmul_flops, prologue_reads_ok
from fusionsearch.datasets.workloads import REFERENCE_CASES
from fusionsearch.graph.opgraph import OpGraph


def _with_config(plan: P.Plan, cfg: P.TileConfig) -> P.Plan:
    kernels = tuple(replace(k, config=cfg) if isinstance(k, P.TemplateKernel) else k for k in plan.kernels)
    return P.Plan(plan.graph, kernels, plan.recompute).check()


def _template(plan: P.Plan, est: fs.costmodel.Estimate) -> fs.costmodel.KernelEstimate:
    (i,) = [i for i, k in enumerate(plan.kernels) if isinstance(k, P.TemplateKernel)]
    return est.per_kernel[i]


def test_fused_int8_dequant_reads_the_int8_weight_once_and_is_predicted_faster() -> None:
    M, K, N = 16, 8192, 8192
    g = fs.workload("w8_dequant_mm", M=M, K=K, N=N, dtype=torch.bfloat16)
    fused, unfused = P.fully_fused(g), P.unfused(g)
    assert len(fused.kernels) == 1 and fused.kernels[0].prologue_b
    ef, eu = estimate(fused), estimate(unfused)
    int8_weight, bf16_weight = K * N, 2 * K * N
    workspace = fused.kernels[0].config.split_k * M * N * 4  # fp32 partial tiles when split-K
    # The template reads the int8 weight once (tiles_m = 1), plus x and s; nothing else.
    assert ef.bytes_read == int8_weight + M * K * 2 + N * 2 + workspace
    # Only the output is written: the bf16 weight never reaches memory.
    assert ef.bytes_written == M * N * 2 + workspace < bf16_weight
    # Unfused: the cast writes the bf16 weight, the mul reads and writes it, the matmul reads it.
    assert eu.bytes_written >= 2 * bf16_weight
    assert eu.bytes_read >= int8_weight + 2 * bf16_weight
    assert ef.bytes_read < eu.bytes_read
    assert ef.time_us < eu.time_us / 3


def test_prologue_rule_refuses_fp32_cast_and_accepts_int8_dequant_and_gather() -> None:
    cast = fs.workload("cast_mm", M=4096, K=4096, N=4096, dtype=torch.bfloat16)
    assert not prologue_reads_ok(cast, "y", "A", ["x_cast"])  # fp32 read: twice the bf16 operand
    w8 = fs.workload("w8_dequant_mm", M=4096, K=4096, N=4096, dtype=torch.bfloat16)
    assert prologue_reads_ok(w8, "y", "B", ["w_dequant", "w_scaled"])  # int8 + scale: about half
    gather = fs.workload("gather_mm", M=64, K=4096, N=4096, T=4096, dtype=torch.bfloat16)
    assert prologue_reads_ok(gather, "y", "A", ["x_rows"])
    # The heuristic plan follows the same rule.
    assert not any(isinstance(k, P.TemplateKernel) and k.prologue_a for k in P.heuristic(cast).kernels)


def test_halving_block_n_doubles_the_prologue_operand_rereads() -> None:
    g = fs.workload("scale_mm", M=4096, K=4096, N=4096, dtype=torch.bfloat16)
    plan = P.fully_fused(g)
    assert plan.kernels[0].prologue_a == ("x_scaled",)
    # group_m covering every row rasterises column-major: concurrent tiles share B, not A. Five stages keep
    # one CTA per multiprocessor for both shapes, so only BLOCK_N changes.
    wide = P.TileConfig(block_m=128, block_n=128, block_k=64, group_m=32, num_warps=4, num_stages=5)
    narrow = replace(wide, block_n=64)
    ew, en = estimate(_with_config(plan, wide)), estimate(_with_config(plan, narrow))
    kw, kn = ew.per_kernel[0], en.per_kernel[0]
    assert kn.reread_a == pytest.approx(2 * kw.reread_a, rel=0.05)
    assert kw.reread_a > 2
    assert kw.reread_b == kn.reread_b == 1.0
    a_once = g.node("x").nbytes + g.node("g").nbytes
    b_bytes = g.node("w").nbytes
    a_reads_wide = kw.bytes_read - b_bytes
    a_reads_narrow = kn.bytes_read - b_bytes
    assert a_reads_wide == pytest.approx(a_once * kw.reread_a, rel=1e-6)
    assert a_reads_narrow / a_reads_wide == pytest.approx(2.0, rel=0.05)
    # Prologue arithmetic repeats per column of tiles whatever L2 saves: twice the columns, twice the work.
    assert en.flops > ew.flops


def test_rereads_never_drop_below_reading_each_operand_once() -> None:
    for name in fs.list_workloads():
        g = fs.workload(name, dtype=torch.bfloat16)
        for plan in (P.unfused(g), P.fully_fused(g)):
            for k, e in zip(plan.kernels, estimate(plan).per_kernel, strict=True):
                if isinstance(k, P.TemplateKernel):
                    assert e.reread_a >= 1.0 and e.reread_b >= 1.0
                    ops = P.template_operands(g, k.matmul)
                    if not k.prologue_a and not k.prologue_b:
                        assert e.bytes_read >= g.node(ops["A"]).nbytes + g.node(ops["B"]).nbytes


def test_memory_bound_pointwise_time_is_bytes_over_bandwidth_plus_launch() -> None:
    g = OpGraph()
    x = g.input("x", (4096, 4096), torch.float32)
    g.set_outputs([g.add("relu", [x], name="r")])
    e = estimate(P.unfused(g))
    (k,) = e.per_kernel
    nbytes = 4096 * 4096 * 4
    assert (k.bytes_read, k.bytes_written) == (nbytes, nbytes)
    assert k.memory_us == pytest.approx(2 * nbytes / H200.bandwidth_bytes_per_s * 1e6)
    assert k.compute_us < k.memory_us
    assert k.time_us == pytest.approx(max(k.memory_us, k.compute_us) + H200.launch_us)
    assert e.time_us == pytest.approx(k.time_us)


def test_template_time_is_the_larger_roofline_term_plus_one_launch() -> None:
    big = fs.workload("mm_bias_gelu", M=4096, K=4096, N=4096, dtype=torch.bfloat16)
    small = fs.workload("mm_bias_gelu", M=16, K=4096, N=4096, dtype=torch.bfloat16)
    cfg = P.TileConfig(block_m=16, block_n=64, block_k=128, split_k=1, num_stages=3)
    for plan, bound in ((P.fully_fused(big), "compute"), (_with_config(P.fully_fused(small), cfg), "memory")):
        k = estimate(plan).per_kernel[0]
        assert k.time_us == pytest.approx(max(k.memory_us, k.compute_us) + H200.launch_us)
        assert (k.compute_us > k.memory_us) == (bound == "compute")
    # Compute-bound 4096^3 bf16: no faster than its flops at the bf16 peak.
    k = estimate(P.fully_fused(big)).per_kernel[0]
    assert k.compute_us >= 2 * 4096**3 / H200.peak_flops["bfloat16"] * 1e6


def test_split_k_adds_the_fp32_workspace_round_trip_in_one_launch() -> None:
    """Codegen's serial split-K: the partial tiles go out and come back, the reduction is the same kernel's tail."""
    M, K, N = 16, 4096, 4096
    g = fs.workload("mm_bias_gelu", M=M, K=K, N=N, dtype=torch.bfloat16)
    base = P.TileConfig(block_m=16, block_n=64, block_k=128, split_k=1, num_stages=3)
    one = estimate(_with_config(P.fully_fused(g), base)).per_kernel[0]
    four = estimate(_with_config(P.fully_fused(g), replace(base, split_k=4))).per_kernel[0]
    workspace = 4 * M * N * 4
    assert four.bytes_read - one.bytes_read == workspace
    assert four.bytes_written - one.bytes_written == workspace
    assert four.time_us >= max(four.memory_us, four.compute_us) + H200.launch_us - 1e-9
    assert four.time_us < max(four.memory_us, four.compute_us) + 2 * H200.launch_us
    # Split-K is clamped as codegen clamps it: never more slices than K blocks.
    huge = estimate(_with_config(P.fully_fused(g), replace(base, split_k=64))).per_kernel[0]
    clamped = estimate(_with_config(P.fully_fused(g), replace(base, split_k=32))).per_kernel[0]
    assert huge == clamped


def test_a_gather_reads_only_the_gathered_rows() -> None:
    M, K, N, T = 64, 4096, 4096, 4096
    g = fs.workload("gather_mm", M=M, K=K, N=N, T=T, dtype=torch.bfloat16)
    plan = P.unfused(g)
    est = estimate(plan)
    (i,) = [i for i, k in enumerate(plan.kernels) if isinstance(k, P.PointwiseKernel)]
    gathered = M * K * 2 + M * 8  # rows x row bytes, plus the int64 indices
    assert est.per_kernel[i].bytes_read == gathered < T * K * 2
    fused = P.fully_fused(g)
    assert fused.kernels[0].prologue_a == ("x_rows",)
    fused = _with_config(fused, P.TileConfig(block_m=16, block_n=64, block_k=128, split_k=1))
    k = _template(fused, estimate(fused))
    assert k.bytes_read == round(gathered * k.reread_a + K * N * 2 * k.reread_b)


@pytest.mark.parametrize("name", fs.list_workloads())
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_every_workload_reference_plan_has_a_finite_positive_estimate(name: str, dtype: torch.dtype) -> None:
    g = fs.workload(name, dtype=dtype)
    for plan in (P.unfused(g), P.fully_fused(g), P.heuristic(g)):
        e = estimate(plan)
        assert math.isfinite(e.time_us) and e.time_us > 0
        assert e.bytes_read > 0 and e.bytes_written > 0 and e.flops > 0
        assert len(e.per_kernel) == len(plan.kernels)
        for i, (k, ke) in enumerate(zip(plan.kernels, e.per_kernel, strict=True)):
            assert (ke.index, ke.kind) == (i, k.kind)
            assert math.isfinite(ke.time_us) and ke.time_us >= H200.launch_us
        assert e.time_us == pytest.approx(sum(k.time_us for k in e.per_kernel))
        assert e.bytes_read == sum(k.bytes_read for k in e.per_kernel)


def test_extern_kernel_reads_inputs_and_writes_its_output() -> None:
    g = OpGraph()
    x = g.input("x", (64, 1024), torch.float32)
    s = g.add("extern", [x], name="sm", target="aten._softmax.default", args=[{"input": 0}, -1, False])
    g.set_outputs([s])
    (k,) = estimate(P.unfused(g)).per_kernel
    assert (k.kind, k.bytes_read, k.bytes_written, k.flops) == ("extern", 64 * 1024 * 4, 64 * 1024 * 4, 0)
    assert k.time_us == pytest.approx(k.memory_us + H200.launch_us)


def test_fits_checks_shared_memory_block_sizes_and_split_k() -> None:
    g = fs.workload("mm_bias_gelu", M=16, K=4096, N=4096, dtype=torch.bfloat16)
    assert fits(g, "y", P.default_config(g, "y"))
    assert fits(g, "y", P.TileConfig(block_m=16, block_n=64, block_k=256, split_k=2, num_stages=3))
    assert not fits(g, "y", P.TileConfig(block_m=128, block_n=64, block_k=64))  # M=16 pads to 16
    assert not fits(g, "y", P.TileConfig(block_m=16, block_n=256, block_k=256, num_stages=4))  # 557 KiB
    assert not fits(g, "y", P.TileConfig(block_m=16, block_n=64, block_k=256, split_k=32))  # 16 K blocks
    assert fits(g, "y", P.TileConfig(block_m=16, block_n=64, block_k=256, split_k=16))
    small = replace(H200, shared_memory_bytes=48 * 1024)
    assert not fits(g, "y", P.TileConfig(block_m=16, block_n=64, block_k=256, num_stages=3), small)
    big = fs.workload("cast_mm", M=4096, K=4096, N=4096, dtype=torch.bfloat16)
    assert fits(big, "y", P.default_config(big, "y"))


def test_hardware_profile_is_a_loggable_hashable_value() -> None:
    if not torch.cuda.is_available():
        assert Hardware.detect() == H200
    d = H200.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["multiprocessors"] == 132 and d["peak_flops"]["bfloat16"] == 706e12
    assert "H200" in H200.signature() and "sm=132" in H200.signature()
    assert hash(H200) == hash(replace(H200))
    assert H200.peak(torch.int8) > H200.peak(torch.bfloat16) > H200.peak(torch.float32)
    # A slower device predicts a slower plan.
    g = fs.workload("w8_dequant_mm", dtype=torch.bfloat16)
    slow = replace(H200, bandwidth_bytes_per_s=H200.bandwidth_bytes_per_s / 2)
    assert estimate(P.fully_fused(g), slow).time_us > estimate(P.fully_fused(g)).time_us


@pytest.mark.parametrize("case", REFERENCE_CASES, ids=lambda c: f"{c['workload']}-M{c['shape']['M']}")
def test_the_roofline_floor_of_each_reference_case_is_the_anchors(case: dict) -> None:
    """shared/anchors counted each input once (a gather's table by the rows gathered) and each output once,
    at 4.27 TB/s and 706 TFLOP/s; the anchors round the peak, hence a tenth of a µs on compute-bound cases."""
    g = fs.workload(case["workload"], dtype=torch.bfloat16, **case["shape"])
    floor = max(least_bytes(g) / 4.27e12, matmul_flops(g) / 706e12) * 1e6
    assert floor == pytest.approx(case["floor_us"], abs=0.35)


def test_the_least_bytes_count_gathered_rows_and_each_value_once() -> None:
    g = fs.workload("gather_mm", M=64, K=256, N=128, T=1000, dtype=torch.float32)
    table, idx, w = (g.node(n) for n in g.inputs)
    out = g.node(g.outputs[0])
    assert least_bytes(g) == 64 * 256 * 4 + idx.nbytes + w.nbytes + out.nbytes < table.nbytes
    assert matmul_flops(g) == 2 * 64 * 256 * 128


@pytest.mark.parametrize(("name", "bandwidth"), [("NVIDIA H100 80GB HBM3", 3.00e12), ("NVIDIA H200", 4.27e12),
                                                 ("NVIDIA GH200 480GB", 4.27e12), ("NVIDIA A10", 1.0e12)])
def test_each_device_is_priced_at_its_own_measured_bandwidth(monkeypatch: pytest.MonkeyPatch, name: str,
                                                             bandwidth: float) -> None:
    """The H100 moves 3.00e12 B/s in a device copy (the suite's ceilings); priced at the H200's 4.27e12 its
    memory-bound kernels came out 1.42x too fast."""
    from types import SimpleNamespace

    props = SimpleNamespace(name=name, multi_processor_count=132, shared_memory_per_block_optin=232448,
                            L2_cache_size=50 * 2**20)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    hw = Hardware.detect()
    assert hw.name == name and hw.bandwidth_bytes_per_s == bandwidth
    assert hw.peak(torch.bfloat16) == {"H100": 740e12, "A10": 150e12}.get(name.split()[1], 706e12)
