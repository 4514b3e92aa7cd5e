"""The bitwise ops (and, or, shifts): registry rules, the Triton expression against torch on edge values (every
uint8 and int8 value; amounts outside [0, bits) included), capture's mapping, random shift amounts."""

from __future__ import annotations

import pytest
import torch

import fusionsearch as fs
from fusionsearch import GraphError
from fusionsearch import plan as P
from fusionsearch.graph.opgraph import OpGraph

OPS = {"bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or,
       "bitwise_right_shift": torch.bitwise_right_shift, "bitwise_left_shift": torch.bitwise_left_shift}
AMOUNTS = [-65, -3, -1, 0, 1, 3, 4, 7, 8, 9, 15, 16, 31, 32, 33, 63, 64, 100]


def _values(dt: torch.dtype) -> torch.Tensor:
    if dt == torch.bool:
        return torch.tensor([False, True])
    if dt in (torch.uint8, torch.int8):
        info = torch.iinfo(dt)
        return torch.arange(info.min, info.max + 1, dtype=torch.int64).to(dt)
    info = torch.iinfo(dt)
    return torch.tensor([info.min, info.min + 1, -300, -5, -1, 0, 1, 5, 255, 300, info.max], dtype=dt)


def _run(g: OpGraph, inputs: list[torch.Tensor]) -> torch.Tensor:
    """The graph's one output through its unfused plan's Triton kernel, checked against the reference."""
    (ref,) = fs.reference(g, inputs)
    out = fs.compile_plan(P.unfused(g))(*inputs)
    got = out[0] if isinstance(out, list | tuple) else out
    assert got.dtype == ref.dtype
    assert torch.equal(got, ref), [(i, got.flatten()[i].item(), ref.flatten()[i].item())
                                   for i in (got != ref).flatten().nonzero()[:5].flatten().tolist()]
    return got


# A bool shifted is left out: torch has none (test_a_shift_of_two_bools_is_refused_as_torch_refuses_it), and
# test_registry_dtypes checks a bool beside another dtype where torch allows it.
def _op_dtypes(dtypes: list[torch.dtype]) -> list[tuple[str, torch.dtype]]:
    return [(op, dt) for op in sorted(OPS) for dt in dtypes if not (dt == torch.bool and "shift" in op)]


@pytest.mark.parametrize(("op", "dt"), _op_dtypes([torch.uint8, torch.int8, torch.int32, torch.int64, torch.bool]),
                         ids=str)
def test_tensor_pairs_match_torch_in_triton(op: str, dt: torch.dtype) -> None:
    a = _values(dt)
    b = (torch.tensor(AMOUNTS, dtype=torch.int64).to(dt) if "shift" in op else _values(dt))
    aa, bb = (t.contiguous().flatten() for t in torch.meshgrid(a, b, indexing="ij"))
    g = OpGraph()
    g.set_outputs([g.add(op, [g.input("a", aa.shape, dt), g.input("b", bb.shape, dt)])])
    got = _run(g, [aa, bb])
    assert torch.equal(got, OPS[op](aa, bb))


@pytest.mark.parametrize("scalar_first", [False, True])
@pytest.mark.parametrize(("op", "dt"), _op_dtypes([torch.uint8, torch.int8, torch.bool]), ids=str)
def test_scalar_operands_match_torch_in_triton(op: str, dt: torch.dtype, scalar_first: bool) -> None:
    # 200 and -3 do not fit one of the dtypes: torch wraps them into it, and so must the kernel; True is 1.
    a = _values(dt)
    for s in (-3, 4, 9, 200, True):
        g = OpGraph()
        g.set_outputs([g.add(op, [g.input("a", a.shape, dt)], scalar=s, scalar_first=scalar_first)])
        got = _run(g, [a])
        expected = OPS[op](torch.as_tensor(s), a) if scalar_first else OPS[op](a, s)
        assert torch.equal(got, expected) and got.dtype == expected.dtype, s


def test_int4_unpack_of_every_byte_gives_its_high_then_low_nibble() -> None:
    w = torch.arange(256, dtype=torch.int64).to(torch.uint8).reshape(16, 16)
    g = OpGraph()
    pairs = g.add("unsqueeze", [g.input("w", (16, 16), torch.uint8)], dim=1)
    shifted = g.add("bitwise_right_shift", [pairs, g.input("shifts", (2, 1), torch.uint8)])
    q = g.add("view", [g.add("bitwise_and", [shifted], scalar=15)], shape=[32, 16])
    g.set_outputs([q])
    got = _run(g, [w, torch.tensor([[4], [0]], dtype=torch.uint8)])
    as_int = w.to(torch.int64)
    assert torch.equal(got[0::2].to(torch.int64), as_int // 16) and torch.equal(got[1::2].to(torch.int64), as_int % 16)


@pytest.mark.parametrize(("op", "dtypes", "expected"), [
    ("bitwise_and", (torch.bool, torch.bool), torch.bool),
    ("bitwise_or", (torch.uint8, torch.int8), torch.int16),
    ("bitwise_right_shift", (torch.uint8, torch.int64), torch.int64),
    ("bitwise_left_shift", (torch.int32, torch.uint8), torch.int32),
])
def test_result_dtype_follows_torch_promotion(op: str, dtypes: tuple[torch.dtype, torch.dtype],
                                              expected: torch.dtype) -> None:
    g = OpGraph()
    out = g.add(op, [g.input("a", (3,), dtypes[0]), g.input("b", (1,), dtypes[1])])
    eager = OPS[op](torch.ones(3, dtype=dtypes[0]), torch.ones(1, dtype=dtypes[1]))
    assert g.node(out).dtype == expected == eager.dtype


@pytest.mark.parametrize(("op", "dtype", "attrs", "message"), [
    ("bitwise_and", torch.float32, {"scalar": 1}, "needs integer or bool operands"),
    ("bitwise_left_shift", torch.int32, {"scalar": 1.5}, "takes an integer or bool scalar"),
    ("bitwise_or", torch.int32, {}, "needs attr 'scalar'"),
])
def test_refusals_name_what_to_fix(op: str, dtype: torch.dtype, attrs: dict[str, object], message: str) -> None:
    g = OpGraph()
    with pytest.raises(GraphError, match=message):
        g.add(op, [g.input("a", (3,), dtype)], **attrs)


def test_a_shift_of_two_bools_is_refused_as_torch_refuses_it() -> None:
    g = OpGraph()
    a, b = g.input("a", (3,), torch.bool), g.input("b", (3,), torch.bool)
    with pytest.raises(GraphError, match="needs integer operands"):
        g.add("bitwise_right_shift", [a, b])
    with pytest.raises(RuntimeError):
        torch.bitwise_right_shift(torch.ones(3, dtype=torch.bool), torch.ones(3, dtype=torch.bool))


def test_capture_maps_the_aten_bitwise_ops_onto_the_registry() -> None:
    def fn(w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        hi = (w.unsqueeze(1) >> s) & 15
        return hi | torch.bitwise_left_shift(w.unsqueeze(1), 2) | (3 >> w.unsqueeze(1)) | (w.unsqueeze(1) ^ 1)

    w = torch.arange(256, dtype=torch.int64).to(torch.uint8).reshape(16, 16)
    s = torch.tensor([[4], [0]], dtype=torch.uint8)
    g = fs.capture(fn, w, s)
    ops = [n.op for n in g if n.op != "input"]
    assert ops.count("bitwise_right_shift") == 2 and ops.count("bitwise_left_shift") == 1
    assert ops.count("bitwise_and") == 1 and ops.count("bitwise_or") == 3
    assert [n.attrs["target"] for n in g if n.op == "extern"] == ["aten.bitwise_xor.Scalar"]  # not in the registry
    assert torch.equal(fs.reference(g, [w, s])[0], fn(w, s))


def test_random_shift_amounts_stay_within_the_bit_width() -> None:
    g = OpGraph()
    w, s = g.input("w", (64, 8), torch.uint8), g.input("s", (64, 1), torch.int8)
    g.set_outputs([g.add("bitwise_right_shift", [g.add("cast", [w], dtype="int8"), s])])
    _, amounts = fs.random_inputs(g, seed=3)
    assert amounts.min() >= 0 and amounts.max() < 8 and len(amounts.unique()) > 4
