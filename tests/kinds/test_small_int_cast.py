"""A small non-negative integer cast to a float by its bits (triton_source.magic.small_int_bits): x & m, or a
uint8, OR'd onto the bits of MAGIC (128 in bf16, 1024 in fp16, 2**23 in fp32) less MAGIC, with an integer
offset after it (the int4 unpack's - 8) folded into that one subtraction. It must give eager's values bit for
bit over every input value, fall back to the plain conversion wherever the range or the offset is not one the
float holds exactly, and the narrow shifts (now in int32, no per-element select) keep torch's results."""

from __future__ import annotations

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen.module import generate_module
from fusionsearch.graph.opgraph import OpGraph


def _graph(src: torch.dtype, n: int, mask: int | None, dt: torch.dtype, offset: tuple[str, float, bool] | None
           ) -> OpGraph:
    g = OpGraph()
    x = g.input("x", (n,), src)
    q = g.add("bitwise_and", [x], scalar=mask) if mask is not None else x
    v = g.add("cast", [q], dtype=str(dt).removeprefix("torch."))
    if offset:
        op, c, first = offset
        v = g.add(op, [v], scalar=c, scalar_first=first)
    g.set_outputs([v])
    return g


def _every_value(src: torch.dtype) -> torch.Tensor:
    info = torch.iinfo(src)
    if info.bits <= 16:
        return torch.arange(info.min, info.max + 1, dtype=torch.int64).to(src)
    edge = torch.tensor([info.min, info.min + 1, -1, 0, 1, (1 << 23) - 1, 1 << 23, (1 << 23) + 1, info.max])
    return torch.cat([edge, torch.randint(info.min, info.max, (4000,), generator=torch.Generator().manual_seed(0))]
                     ).to(src)


def _one_kernel(g: OpGraph) -> P.Plan:
    return P.Plan(g, (P.PointwiseKernel(tuple(n for n in g.topo_order() if g.node(n).kind != "input")),)).check()


def _check(g: OpGraph, x: torch.Tensor) -> str:
    """The graph as one pointwise kernel gives eager's values bit for bit; its kernels' source (not the module's
    prelude), to see which form it took."""
    (ref,) = fs.reference(g, [x])
    out = fs.compile_plan(_one_kernel(g))(x)
    got = out[0] if isinstance(out, list | tuple) else out
    assert got.dtype == ref.dtype
    assert torch.equal(got, ref), [(x[i].item(), got[i].item(), ref[i].item())
                                   for i in (got != ref).nonzero()[:5].flatten().tolist()]
    return "\n".join(k.source for k in generate_module(_one_kernel(g)).kernels)


@pytest.mark.parametrize(("src", "mask", "dt", "bits"), [
    (torch.int16, 15, torch.float16, True),
    (torch.int16, 1023, torch.float16, True),  # the largest fp16's MAGIC reaches
    (torch.int16, 1024, torch.float16, False),  # 1024 is beyond it: the plain conversion
    (torch.int16, -1, torch.float16, False),  # a negative mask keeps the sign
    (torch.uint8, None, torch.float16, True),  # a uint8 is at most 255
    (torch.int8, None, torch.float16, False),  # an int8 may be negative
    (torch.int32, (1 << 23) - 1, torch.float32, True),
    (torch.int32, 1 << 23, torch.float32, False),
    (torch.uint8, None, torch.float32, True),
    (torch.uint8, 15, torch.float64, False),  # no MAGIC for float64
])
def test_a_small_int_cast_by_its_bits_equals_eager_over_every_value(src, mask, dt, bits):
    x = _every_value(src)
    source = _check(_graph(src, x.numel(), mask, dt, None), x)
    assert ("bitcast=True" in source) == bits


@pytest.mark.parametrize(("op", "c", "first", "folded"), [
    ("sub", 8, False, 1032),  # the int4 unpack's centring: one subtraction of 1024 + 8
    ("add", 5, False, 1019),
    ("sub", 8.0, False, 1032),  # an integral float scalar
    ("sub", 0.5, False, None),  # not an integer: the offset's own op
    ("sub", 8, True, None),  # 8 - q is not an offset of the biased value
    ("sub", 1025, False, None),  # MAGIC + c beyond the integers fp16 holds exactly
    ("add", 1025, False, None),  # MAGIC - c negative
])
def test_an_integer_offset_folds_into_the_bias_only_where_exact(op, c, first, folded):
    x = _every_value(torch.int16)
    source = _check(_graph(torch.int16, x.numel(), 15, torch.float16, (op, c, first)), x)
    assert "bitcast=True" in source
    assert (f"tl.full((), {folded}, tl.float16)" in source) == (folded is not None)


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
def test_the_int4_unpack_casts_by_bits_and_folds_its_centring(dt):
    """The w4 workload's dequant (bf16 is computed on the GPU only: its source is checked here, its values by
    the suite's validation; fp16 both)."""
    g = fs.workload("w4_dequant_mm", M=3, K=64, N=40, G=32, dtype=dt)
    source = generate_module(P.fully_fused(g)).source
    magic = {torch.bfloat16: ("17152", 136, "bfloat16"), torch.float16: ("25600", 1032, "float16")}[dt]
    assert f"tl.full((), {magic[0]}, tl.int16)).to(tl.{magic[2]}, bitcast=True)" in source
    assert f"tl.full((), {magic[1]}, tl.{magic[2]})" in source
    if dt == torch.float16:
        inputs = fs.random_inputs(g, seed=0)
        (ref,) = fs.reference(g, inputs, float64=True)
        out = fs.compile_plan(P.fully_fused(g))(*inputs)
        got = out[0] if isinstance(out, list | tuple) else out
        assert ((got.double() - ref).abs().max() / ref.abs().max()).item() < 2e-3


@pytest.mark.parametrize("dt", [torch.uint8, torch.int8, torch.int16])
@pytest.mark.parametrize("op", ["bitwise_right_shift", "bitwise_left_shift"])
def test_a_narrow_shift_by_a_loaded_amount_keeps_torchs_results(dt, op):
    """The int32 form (no select) on every in- and out-of-range amount; its instruction count is in
    benchmarks/results/cpu-2026-12-06-w4-sass, not asserted here."""
    info = torch.iinfo(dt)
    a = torch.tensor([info.min, info.min + 1, -5, -1, 0, 1, 5, 100, info.max], dtype=torch.int64).clamp(
        info.min, info.max).to(dt)
    amounts = torch.tensor([-70, -17, -9, -8, -1, 0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 100])
    aa, bb = (t.contiguous().flatten() for t in torch.meshgrid(a, amounts.to(dt), indexing="ij"))
    g = OpGraph()
    g.set_outputs([g.add(op, [g.input("a", aa.shape, dt), g.input("b", bb.shape, dt)])])
    (ref,) = fs.reference(g, [aa, bb])
    out = fs.compile_plan(P.unfused(g))(aa, bb)
    got = out[0] if isinstance(out, list | tuple) else out
    assert torch.equal(got, ref) and torch.equal(ref, getattr(torch, op)(aa, bb))
