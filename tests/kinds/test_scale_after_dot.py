"""The decode kind moves a prologue's last multiply by a factor constant along K after its K loop: the values
against float64 (every form, split-K or not, uneven sizes, either side, a computed factor, a division, a
batch, a bias), the factor's load outside the loop, and nothing moved where the factor varies along K."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen.module import generate_module
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.tolerance import output_tolerances, rel_error
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
from fusionsearch.kinds.triton_source.scale_after_dot import find_scales
from fusionsearch.plan import FusedMatmulKernel, Plan

CONFIGS = [DecodeConfig(32, 16, 1, 4, 2, "dot"), DecodeConfig(16, 32, 3, 4, 3, "dot_t"),
           DecodeConfig(64, 8, 4, 4, 2, "fma"), DecodeConfig(32, 16, 2, 4, 2, "fma_acc")]


def _decode(g: OpGraph, cfg: DecodeConfig, after: bool) -> Plan:
    plan = P.fully_fused(g)
    kernels = tuple(DecodeKernel(k.matmul, k.prologue_a, k.prologue_b, k.epilogue, cfg)
                    if isinstance(k, FusedMatmulKernel) else k for k in plan.kernels)
    return dataclasses.replace(plan, kernels=kernels,
                               options=plan.options.with_overrides(scale_after_dot=after)).check()


def _loop_and_tail(plan: Plan) -> tuple[str, str]:
    """The generated kernel up to the end of its K loop, and what follows it."""
    src = generate_module(plan).source
    start = re.search(r"for (k_tile|kb) in", src).start()  # kb: splits that share the K blocks unevenly
    lines = src[start:].splitlines()
    indent = len(lines[1]) - len(lines[1].lstrip())
    end = next(i for i, line in enumerate(lines[1:], 1) if line.strip() and len(line) - len(line.lstrip()) < indent)
    head = src[src.rindex("@triton.jit", 0, start):start]
    return head + "\n".join(lines[:end]), "\n".join(lines[end:])


def _factor_in_loop(loop: str, buffer: int) -> bool:
    """Whether the K loop computes with what buffer `buffer` holds (a load hoisted before the loop counts)."""
    loaded = re.search(rf"(\w+) = tl\.load\(in{buffer}_ptr\b", loop)
    body = loop[re.search(r"for (k_tile|kb) in", loop).start():]
    return loaded is not None and re.search(rf"\b{loaded.group(1)}\b", body) is not None


def _check(g: OpGraph, plan: Plan) -> float:
    inputs = fs.random_inputs(g, seed=5)
    refs = fs.reference(g, inputs, float64=True)
    out = fs.compile_plan(plan)(*inputs)
    outs = list(out) if isinstance(out, list | tuple) else [out]
    worst = 0.0
    for o, ref, tol in zip(outs, refs, output_tolerances(g), strict=True):
        err = rel_error(o, ref)
        assert o.dtype == ref.dtype or ref.dtype == torch.float64
        assert err <= tol, (err, tol)
        worst = max(worst, err)
    return worst


def _uses_in(text: str, buffer_of_input: int) -> bool:
    return re.search(rf"\bin{buffer_of_input}_ptr \+", text) is not None  # a load (not the parameter list)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c.product}-sk{c.split_k}")
@pytest.mark.parametrize("shape", [{"M": 1, "K": 128, "N": 64}, {"M": 5, "K": 100, "N": 72}], ids=["even", "uneven"])
def test_w8_scale_is_applied_after_the_loop_and_matches_float64(shape: dict[str, int], cfg: DecodeConfig,
                                                                 dtype: torch.dtype) -> None:
    g = fs.workload("w8_dequant_mm", dtype=dtype, **shape)
    after = _decode(g, cfg, True)
    loop, tail = _loop_and_tail(after)
    # inputs x, w, s are buffers in0, in1, in2: the scale is read only after the loop
    assert _uses_in(loop, 1) and not _uses_in(loop, 2) and _uses_in(tail, 2)
    _check(g, after)
    assert not _factor_in_loop(loop, 2)
    loop_before, _ = _loop_and_tail(_decode(g, cfg, False))
    assert _factor_in_loop(loop_before, 2)  # the option off: the scale multiplies every weight element in the loop
    _check(g, _decode(g, cfg, False))


def _graph(side: str, dtype: torch.dtype, computed: bool = False, divide: bool = False, first: bool = False,
           M: int = 3, K: int = 40, N: int = 24) -> OpGraph:
    g = OpGraph()
    x, w = g.input("x", (M, K), dtype), g.input("w", (K, N), torch.int8 if side == "B" else dtype)
    if side == "B":
        s = g.input("s", (1, N), torch.float32 if computed else dtype)
        s = g.add("cast", [g.add("exp", [s])], dtype=str(dtype).removeprefix("torch.")) if computed else s
        wf = g.add("cast", [w], dtype=str(dtype).removeprefix("torch."))
        b = g.add("div" if divide else "mul", [s, wf] if first else [wf, s])
        g.set_outputs([g.add("mm", [x, b])])
    else:
        r = g.input("r", (M, 1), dtype)
        r = g.add("add", [g.add("abs", [r])], scalar=0.5) if computed else r
        a = g.add("div" if divide else "mul", [r, x] if first else [x, r])
        g.set_outputs([g.add("mm", [a, w])])
    return g


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize(("side", "computed", "divide", "first"),
                         [("B", False, False, True), ("B", True, False, False), ("B", False, True, False),
                          ("A", False, False, False), ("A", True, True, False), ("A", False, False, True)],
                         ids=["B-factor-first", "B-computed", "B-divide", "A-row-scale", "A-computed-divide",
                              "A-factor-first"])
def test_either_side_a_computed_factor_and_a_division(side: str, computed: bool, divide: bool, first: bool,
                                                      dtype: torch.dtype) -> None:
    g = _graph(side, dtype, computed, divide, first)
    scales = find_scales(g, _decode(g, CONFIGS[1], True).kernels[0])
    assert list(scales) == [side] and [f.divide for f in scales[side].factors] == [divide]
    assert bool(scales[side].computed) == computed
    for cfg in CONFIGS:
        plan = _decode(g, cfg, True)
        loop, _ = _loop_and_tail(plan)
        assert not re.search(r"\b(exp|abs)\(", loop)  # the factor's own computation left the loop too
        assert not _factor_in_loop(loop, 2)  # s or r: the third buffer either way
        _check(g, plan)


def test_a_division_by_the_varying_operand_and_a_factor_varying_along_k_stay_in_the_loop() -> None:
    dt = torch.float16
    g = _graph("B", dt, divide=True, first=True)  # s / w: w is the divisor, nothing to move
    assert find_scales(g, _decode(g, CONFIGS[0], True).kernels[0]) == {}
    g = OpGraph()
    x, w, t = g.input("x", (2, 24), dt), g.input("w", (24, 16), torch.int8), g.input("t", (24, 1), dt)
    g.set_outputs([g.add("mm", [x, g.add("mul", [g.add("cast", [w], dtype="float16"), t])])])
    plan = _decode(g, CONFIGS[1], True)
    assert find_scales(g, plan.kernels[0]) == {}  # t is one value a row of K: it varies along K
    _check(g, plan)
    assert find_scales(fs.workload("scale_mm", dtype=dt, M=2, K=32, N=16),
                       _decode(fs.workload("scale_mm", dtype=dt, M=2, K=32, N=16), CONFIGS[0], True).kernels[0]) == {}
    g4 = fs.workload("w4_dequant_mm", dtype=dt, M=1, K=64, N=16, G=16)  # per-group scales vary along K
    assert find_scales(g4, _decode(g4, CONFIGS[0], True).kernels[0]) == {}


def test_a_batched_factor_and_an_addmm_bias_scale_only_the_product() -> None:
    dt = torch.float32
    g = OpGraph()
    a, w, s = g.input("a", (3, 2, 24), dt), g.input("w", (3, 24, 20), torch.int8), g.input("s", (3, 1, 20), dt)
    b = g.add("mul", [g.add("cast", [w], dtype="float32"), s])
    g.set_outputs([g.add("relu", [g.add("bmm", [a, b])])])
    for cfg in CONFIGS:
        plan = _decode(g, cfg, True)
        assert not _factor_in_loop(_loop_and_tail(plan)[0], 2)
        _check(g, plan)
    g = OpGraph()
    bias, x = g.input("bias", (20,), dt), g.input("x", (4, 24), dt)
    w, s = g.input("w", (24, 20), torch.int8), g.input("s", (20,), dt)
    b = g.add("mul", [g.add("cast", [w], dtype="float32"), s])
    g.set_outputs([g.add("addmm", [bias, x, b], beta=0.5, alpha=-1.5)])
    for cfg in CONFIGS:
        _check(g, _decode(g, cfg, True))


def test_a_chain_of_factors_moves_whole_and_stops_at_a_value_used_twice() -> None:
    """int8 * s * 2^-6 (the property test's dequant source): both factors leave the loop; a value of the chain
    that something else also reads stays, with what lies under it."""
    for dt in (torch.float32, torch.float16):
        g = OpGraph()
        x, w, s = g.input("x", (3, 40), dt), g.input("w", (40, 24), torch.int8), g.input("s", (24,), dt)
        ws = g.add("mul", [g.add("cast", [w], dtype=str(dt).removeprefix("torch.")), s])
        g.set_outputs([g.add("mm", [x, g.add("div", [g.add("mul", [ws], scalar=2.0 ** -6)], scalar=0.5)])])
        plan = _decode(g, CONFIGS[1], True)
        (found,) = find_scales(g, plan.kernels[0]).values()
        assert [(f.scale, f.scalar, f.divide) for f in found.factors] == [(None, 0.5, True), (None, 2.0 ** -6, False),
                                                                           ("s", None, False)]
        for cfg in CONFIGS:
            plan = _decode(g, cfg, True)
            assert not _factor_in_loop(_loop_and_tail(plan)[0], 2)
            _check(g, plan)
    g = OpGraph()
    dt = torch.float32
    x, w, s = g.input("x", (3, 40), dt), g.input("w", (40, 24), dt), g.input("s", (24,), dt)
    ws = g.add("mul", [w, s])
    b = g.add("mul", [g.add("add", [ws, g.add("exp", [ws])]), s])  # ws read twice: only the outer factor moves
    g.set_outputs([g.add("mm", [x, b])])
    plan = _decode(g, CONFIGS[0], True)
    (found,) = find_scales(g, plan.kernels[0]).values()
    assert [f.scale for f in found.factors] == ["s"] and g.node(found.operand).op == "add"
    _check(g, plan)
    g = OpGraph()
    x, w = g.input("x", (3, 40), dt), g.input("w", (40, 24), dt)
    g.set_outputs([g.add("mm", [x, g.add("mul", [w], scalar=float("inf"))])])
    assert find_scales(g, _decode(g, CONFIGS[0], True).kernels[0]) == {}  # x * inf: its NaNs stay where eager's are
