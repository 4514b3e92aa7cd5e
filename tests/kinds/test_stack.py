"""The stack layout op: the form real int4 code unpacks a weight in, `torch.stack([(w >> 4) & 15, w & 15], 1)`, each
nibble by a constant shift. A tile whose index on the stacked dim is a constant (the decode kind's K parity tiles)
reads the one input it picks, so the unpack keeps constant amounts and the words form's byte permute; elsewhere
every input is evaluated and selected. Against float64 in Triton's interpreter for each matmul kind's form, a stack
in a pointwise kernel, its capture from torch code, its refusals, and the reason for it in sm_90 SASS: B's dot
operand stays in registers (the runtime shift amounts of w4_dequant_mm send it through shared memory)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch import settings
from fusionsearch.errors import GraphError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.tolerance import output_tolerances, rel_error
from fusionsearch.kinds.decode_matmul import DecodeConfig
from tests.kinds.test_decode_matmul import decode_plan


def int4_stack_graph(m: int, k: int, n: int, group: int, dt: torch.dtype) -> OpGraph:
    """x @ ((stack([(w >> 4) & 15, w & 15], 1).view(K, N) - 8) * s + z), s and z per group of K rows: the
    w4_dequant_mm workload since 2026-12-06 m."""
    g = fs.workload("w4_dequant_mm", dtype=dt, M=m, K=k, N=n, G=group)
    assert "stack" in {node.op for node in g}
    return g


def _loop(source: str) -> str:
    return source.split("for k_tile in")[1].split("ws_off")[0]


CONFIGS = [None,  # the template's default plan: K varies inside its tile, both nibbles evaluated and selected
           DecodeConfig(64, 32, 2, 4, 2, "dot", True), DecodeConfig(64, 32, 1, 4, 2, "dot", True, True),
           DecodeConfig(64, 32, 2, 4, 3, "dot", True, True, True), DecodeConfig(32, 16, 2, 4, 2, "fma_acc", True, True),
           DecodeConfig(64, 32, 2, 4, 2, "dot_t")]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.short().replace(" ", "-") if c else "template")
def test_an_int4_weight_unpacked_by_a_stack_gives_float64s_answer(cfg: DecodeConfig | None,
                                                                    dtype: torch.dtype) -> None:
    g = int4_stack_graph(3, 128, 72, 32, dtype)
    plan = P.fully_fused(g) if cfg is None else decode_plan(P.fully_fused(g), cfg)
    inputs = fs.random_inputs(g, seed=5)
    (ref,) = fs.reference(g, inputs, float64=True)
    compiled = fs.compile_plan(plan)
    (out,) = compiled(*inputs)
    assert rel_error(out, ref) <= output_tolerances(g)[0], rel_error(out, ref)
    if cfg is not None and cfg.pairs:  # each parity tile reads its own nibble: no select, constant amounts
        loop = _loop(compiled.source)
        assert "tl.where" not in loop
        assert loop.count("_bytes_f32(") == (2 if cfg.words else 0)


def test_a_stack_in_a_pointwise_kernel_selects_by_its_index() -> None:
    g = OpGraph()
    x = g.input("x", (5, 7), torch.float32)
    parts = [g.add("mul", [x], name="twice", scalar=2.0), g.add("add", [x], name="plus", scalar=1.0),
             g.add("neg", [x], name="minus")]
    g.set_outputs([g.add("stack", parts, name="y", dim=-1)])
    g.validate()
    assert g.node("y").shape == (5, 7, 3)
    (x_in,) = fs.random_inputs(g, seed=2)
    (out,) = fs.compile_plan(P.fully_fused(g))(x_in)
    torch.testing.assert_close(out, torch.stack([x_in * 2, x_in + 1, -x_in], dim=-1), rtol=0, atol=0)


def test_stack_refuses_inputs_of_other_shapes_or_dtypes_in_one_line() -> None:
    g = OpGraph()
    a, b = g.input("a", (4, 3), torch.float32), g.input("b", (4, 2), torch.float32)
    with pytest.raises(GraphError, match=r"stack needs inputs of one shape and dtype, got a \[4, 3\]") as refused:
        g.add("stack", [a, b], name="y", dim=0)
    assert "\n" not in str(refused.value)
    c = g.input("c", (4, 3), torch.float16)
    with pytest.raises(GraphError, match="one shape and dtype"):
        g.add("stack", [a, c], name="z", dim=0)
    with pytest.raises(GraphError, match="stack: dim 3 is out of range"):
        g.add("stack", [a, a], name="u", dim=3)


def test_torch_codes_stacked_nibbles_are_captured_as_the_stack() -> None:
    def int4_linear(x: torch.Tensor, w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        q = torch.stack([(w >> 4) & 15, w & 15], dim=1).reshape(2 * w.shape[0], w.shape[1])
        return x @ ((q.to(x.dtype) - 8) * s)

    x, w, s = torch.randn(2, 64), torch.randint(0, 256, (32, 24), dtype=torch.uint8), torch.rand(24)
    g = fs.capture(int4_linear, x, w, s)
    (stack,) = [n for n in g if n.op == "stack"]
    assert stack.shape == (32, 2, 24) and stack.attrs["dim"] == 1
    (ref,) = fs.reference(g, [x, w, s], float64=True)
    (out,) = fs.compile_plan(decode_plan(P.fully_fused(g), DecodeConfig(64, 32, 1, 4, 2, "dot", True, True)))(x, w, s)
    assert rel_error(out, ref) <= output_tolerances(g)[0]
    torch.testing.assert_close(out, int4_linear(x, w, s), rtol=1e-5, atol=1e-5)


_SM90_COUNTS = """
import json, sys
import torch
import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen import resources as R
from fusionsearch.codegen.module import generate_module
from fusionsearch.kinds.decode_matmul import DecodeConfig
from tests.kinds.test_decode_matmul import decode_plan
from tests.kinds.test_decode_words import runtime_shift_graph
from tests.kinds.test_stack import int4_stack_graph
cfg = DecodeConfig(256, 64, 8, 4, 3, "dot", True, True, True)
counts = {}
for name, g in (("stack", int4_stack_graph(16, 4096, 11008, 128, torch.bfloat16)),
                ("runtime", runtime_shift_graph(torch.bfloat16, 16, 4096, 11008, 128))):
    mod = generate_module(decode_plan(P.fully_fused(g), cfg))
    ops = R.loop_opcodes(R.kernel_sass(g, mod.kernels[0], mod.source))
    counts[name] = [ops["STS"], ops["LDSM"]]
print(json.dumps(counts))
"""


def test_with_constant_shifts_the_dot_operand_stays_in_registers_on_sm90() -> None:
    """The reason for the op: compiled for sm_90 on the CPU (in a child process: Triton's compiler, not its
    interpreter), the int4 GEMV's words-form K loop (16 rows, K 4096, N 11008, G 128) stores nothing to shared
    memory and loads no ldmatrix when its nibbles come from a stack of constant shifts; with the shift amounts
    an input tensor (w4_dequant_mm before 2026-12-06 m) each B tile makes the round trip
    (benchmarks/results/cpu-2026-12-06m-runtime-shift-sass: 32 STS and 16 LDSM a K step)."""
    env = settings.child_environment(**{settings.INTERPRET: "0"})
    done = subprocess.run([sys.executable, "-c", _SM90_COUNTS], env=env, capture_output=True, text=True,
                          timeout=600, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert done.returncode == 0, done.stderr[-2000:]
    counts = json.loads(done.stdout.strip().splitlines()[-1])
    assert counts["stack"] == [0, 0] and min(counts["runtime"]) > 0, counts
