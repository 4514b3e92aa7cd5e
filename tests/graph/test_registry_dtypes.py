"""The registry's shape and dtype rules agree with PyTorch itself.

Every pointwise, layout and indexing op is built in a one-node OpGraph for every dtype (or dtype pair) and the
node's inferred dtype and shape are compared with an independent eager call of torch on tiny CPU tensors.
Where torch refuses the combination, `OpGraph.add` must refuse it too, with a GraphError naming the node and
the operand. The op's own torch reference must also return the dtype the graph declares (the reference
executor relies on that).
"""

from __future__ import annotations

import itertools
import operator
import re
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from fusionsearch.errors import GraphError
from fusionsearch.graph import OpGraph, get_op, ops_of_kind
from fusionsearch.graph.registry import dtype_name

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.int32, torch.int64, torch.bool]
PAIRS = list(itertools.product(DTYPES, DTYPES))
SCALARS: list[float | int | bool] = [0.5, 2, True]

# A CPU build may lack a kernel for a low-precision dtype that torch otherwise defines; only that is skipped.
_MISSING_CPU_KERNEL = re.compile(r"not implemented for '(Half|BFloat16)'")

Spec = tuple[tuple[int, ...], torch.dtype]


def _id(v: object) -> str:
    return dtype_name(v) if isinstance(v, torch.dtype) else repr(v)


def _tensors(specs: Sequence[Spec], device: str) -> list[torch.Tensor]:
    # Ones keep every op in its domain (log, pow of integers, integer division) so only dtype rules decide.
    return [torch.ones(shape, dtype=dt, device=device) for shape, dt in specs]


def torch_result(call: Callable[..., torch.Tensor], specs: Sequence[Spec]) -> torch.Tensor | Exception:
    """What torch itself does: the output tensor, or the exception it raises."""
    try:
        return call(*_tensors(specs, "cpu"))
    except Exception as cpu_error:  # noqa: BLE001 - torch's refusal is the expected value here
        if not _MISSING_CPU_KERNEL.search(str(cpu_error)):
            return cpu_error
        try:  # the op is defined for the dtype, only this build has no CPU kernel: meta tensors carry the rule
            return call(*_tensors(specs, "meta"))
        except Exception:  # noqa: BLE001
            pytest.skip(f"CPU torch has no kernel and meta cannot decide: {str(cpu_error).splitlines()[0]}")


def build(op: str, specs: Sequence[Spec], names: Sequence[str], attrs: dict[str, Any]) -> tuple[OpGraph, str]:
    g = OpGraph()
    ins = [g.input(n, shape, dt) for n, (shape, dt) in zip(names, specs, strict=True)]
    return g, g.add(op, ins, name="out", **attrs)


def check_against_torch(op: str, specs: Sequence[Spec], names: Sequence[str], attrs: dict[str, Any],
                        call: Callable[..., torch.Tensor], must_say: str | None = None) -> None:
    """Our add() refuses exactly when torch refuses (saying `must_say`); otherwise dtype and shape equal torch's."""
    expected = torch_result(call, specs)
    if isinstance(expected, Exception):
        with pytest.raises(GraphError) as err:
            build(op, specs, names, attrs)
        msg = str(err.value)
        assert f"node 'out' ({op})" in msg, msg
        if must_say is not None:
            assert re.search(must_say, msg), f"{msg!r} does not say {must_say!r} (torch said: {expected})"
        else:  # it names what to fix: an operand, or the attribute (a scalar) that torch also refused
            assert any(re.search(rf"\b{re.escape(w)}\b", msg) for w in [*names, *attrs]), \
                f"message names no operand or attribute: {msg} (torch said: {expected})"
        return
    try:
        g, out = build(op, specs, names, attrs)
    except GraphError as e:
        pytest.fail(f"torch computes {op} ({expected.dtype}, {list(expected.shape)}) but add() refused: {e}")
    node = g.node(out)
    assert node.dtype == expected.dtype, f"{op} {attrs}: ours {node.dtype}, torch {expected.dtype}"
    assert node.shape == tuple(expected.shape), f"{op} {attrs}: ours {list(node.shape)}, torch {list(expected.shape)}"
    # The registry's torch reference must produce what the graph declares, or reference() outputs drift.
    ref = get_op(op).torch_ref(_tensors(specs, "cpu"), node.attrs)
    assert (ref.dtype, tuple(ref.shape)) == (node.dtype, node.shape), f"{op} {attrs}: torch_ref gives {ref.dtype}"


# ---- binary pointwise ------------------------------------------------------------------------------

def _max_call(a: Any, b: Any) -> torch.Tensor:
    # torch.maximum takes tensors only; a 0-dim tensor is promoted exactly like a Python scalar (both rank below
    # any dimensioned operand), so it is torch's own definition of "maximum with a scalar".
    return torch.maximum(torch.as_tensor(a), torch.as_tensor(b))


def _min_call(a: Any, b: Any) -> torch.Tensor:
    return torch.minimum(torch.as_tensor(a), torch.as_tensor(b))


def _integral(fn: Callable[[Any, Any], torch.Tensor]) -> Callable[[Any, Any], torch.Tensor]:
    """A bitwise op: torch has no floating kernel for it on any device, but only the CPU says so (its meta
    function, which the check falls back to for float16 and bfloat16, computes a dtype anyway)."""
    def call(a: Any, b: Any) -> torch.Tensor:
        if any(isinstance(v, float) or (isinstance(v, torch.Tensor) and v.is_floating_point()) for v in (a, b)):
            raise RuntimeError(f"{fn.__name__} is not implemented for floating operands")
        return fn(a, b)

    return call


BINARY: dict[str, Callable[[Any, Any], torch.Tensor]] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv, "pow": operator.pow,
    "maximum": _max_call, "minimum": _min_call,
    "gt": operator.gt, "ge": operator.ge, "lt": operator.lt, "le": operator.le, "eq": operator.eq, "ne": operator.ne,
    "bitwise_and": _integral(operator.and_), "bitwise_or": _integral(operator.or_),
    "bitwise_right_shift": _integral(operator.rshift), "bitwise_left_shift": _integral(operator.lshift),
}
UNARY: dict[str, tuple[dict[str, Any], Callable[[torch.Tensor], torch.Tensor]]] = {
    "neg": ({}, torch.neg), "abs": ({}, torch.abs), "relu": ({}, torch.relu), "exp": ({}, torch.exp),
    "log": ({}, torch.log), "sqrt": ({}, torch.sqrt), "rsqrt": ({}, torch.rsqrt), "sigmoid": ({}, torch.sigmoid),
    "tanh": ({}, torch.tanh), "silu": ({}, F.silu), "gelu": ({}, F.gelu),
}
OTHER_POINTWISE = {"clamp", "where", "cast"}  # tested by their own tables below


@pytest.mark.parametrize(("a", "b"), PAIRS, ids=[f"{_id(a)}-{_id(b)}" for a, b in PAIRS])
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_tensor_pair_matches_torch(op: str, a: torch.dtype, b: torch.dtype) -> None:
    check_against_torch(op, [((2, 3), a), ((3,), b)], ["lhs", "rhs"], {}, BINARY[op])


_SCALAR_CASES = [(dt, s, first) for dt in DTYPES for s in SCALARS for first in (False, True)]


@pytest.mark.parametrize(("dt", "scalar", "scalar_first"), _SCALAR_CASES,
                         ids=[f"{_id(d)}-{s!r}-{'first' if f else 'second'}" for d, s, f in _SCALAR_CASES])
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_with_scalar_matches_torch(op: str, dt: torch.dtype, scalar: float | int | bool,
                                          scalar_first: bool) -> None:
    fn = BINARY[op]
    call = (lambda t: fn(scalar, t)) if scalar_first else (lambda t: fn(t, scalar))
    check_against_torch(op, [((2, 3), dt)], ["lhs"], {"scalar": scalar, "scalar_first": scalar_first}, call)


@pytest.mark.parametrize(("a", "b"), PAIRS, ids=[f"{_id(a)}-{_id(b)}" for a, b in PAIRS])
@pytest.mark.parametrize("op", ["add", "mul", "maximum", "gt"])
def test_zero_dim_operand_promotes_like_torch(op: str, a: torch.dtype, b: torch.dtype) -> None:
    # A 0-dim tensor operand ranks below a dimensioned one in torch's promotion: bf16[2,3] + f32[] is bf16.
    check_against_torch(op, [((2, 3), a), ((), b)], ["lhs", "rhs"], {}, BINARY[op])


def test_binary_scalar_attr_rules() -> None:
    g = OpGraph()
    x, y = g.input("x", (2,), "float32"), g.input("y", (2,), "float32")
    with pytest.raises(GraphError, match=r"one tensor input needs attr 'scalar'"):
        g.add("add", [x], name="lonely")
    with pytest.raises(GraphError, match=r"two tensor inputs takes no attr 'scalar'"):
        g.add("add", [x, y], name="both", scalar=0.5)
    with pytest.raises(GraphError, match=r"attr 'scalar' must be a number or bool, got 'half'"):
        g.add("mul", [x], name="bad", scalar="half")


# ---- unary pointwise, clamp, cast, where -----------------------------------------------------------

@pytest.mark.parametrize("dt", DTYPES, ids=_id)
@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_matches_torch(op: str, dt: torch.dtype) -> None:
    attrs, fn = UNARY[op]
    check_against_torch(op, [((2, 3), dt)], ["x"], attrs, fn)


@pytest.mark.parametrize("dt", DTYPES, ids=_id)
def test_gelu_tanh_matches_torch(dt: torch.dtype) -> None:
    check_against_torch("gelu", [((2, 3), dt)], ["x"], {"approximate": "tanh"},
                        lambda t: F.gelu(t, approximate="tanh"))


CLAMP_BOUNDS: list[dict[str, int | float]] = [
    {"min": 0}, {"max": 1}, {"min": -1, "max": 2}, {"min": 0.5}, {"max": 2.5}, {"min": 0, "max": 1.5},
    {"min": -0.5, "max": 3},
]


@pytest.mark.parametrize("bounds", CLAMP_BOUNDS, ids=lambda b: "-".join(f"{k}{v}" for k, v in b.items()))
@pytest.mark.parametrize("dt", DTYPES, ids=_id)
def test_clamp_matches_torch(dt: torch.dtype, bounds: dict[str, int | float]) -> None:
    check_against_torch("clamp", [((2, 3), dt)], ["x"], bounds,
                        lambda t: torch.clamp(t, min=bounds.get("min"), max=bounds.get("max")))


def test_clamp_bounds_must_be_numbers() -> None:
    g = OpGraph()
    x = g.input("x", (2,), "float32")
    with pytest.raises(GraphError, match=r"clamp needs attr 'min' or 'max'"):
        g.add("clamp", [x], name="c0")
    with pytest.raises(GraphError, match=r"attr 'min' must be a number, got '0'"):
        g.add("clamp", [x], name="c1", min="0")
    with pytest.raises(GraphError, match=r"attr 'max' must be a number, got True"):
        g.add("clamp", [x], name="c2", max=True)


@pytest.mark.parametrize(("src", "dst"), PAIRS, ids=[f"{_id(a)}-to-{_id(b)}" for a, b in PAIRS])
def test_cast_to_each_dtype(src: torch.dtype, dst: torch.dtype) -> None:
    check_against_torch("cast", [((2, 3), src)], ["x"], {"dtype": dtype_name(dst)}, lambda t: t.to(dst))


def test_cast_accepts_aliases_and_refuses_unknown_dtype() -> None:
    g = OpGraph()
    x = g.input("x", (2,), "float32")
    assert g.node(g.add("cast", [x], name="h", dtype="bf16")).dtype == torch.bfloat16
    with pytest.raises(GraphError, match=r"node 'c' \(cast\): cast attr 'dtype': unknown dtype 'float8'"):
        g.add("cast", [x], name="c", dtype="float8")


@pytest.mark.parametrize(("a", "b"), PAIRS, ids=[f"{_id(a)}-{_id(b)}" for a, b in PAIRS])
def test_where_mixed_branches_match_torch(a: torch.dtype, b: torch.dtype) -> None:
    check_against_torch("where", [((2, 3), torch.bool), ((2, 3), a), ((3,), b)], ["cond", "lhs", "rhs"], {},
                        torch.where)


@pytest.mark.parametrize("cond", [d for d in DTYPES if d != torch.bool], ids=_id)
def test_where_refuses_non_bool_condition(cond: torch.dtype) -> None:
    check_against_torch("where", [((2, 3), cond), ((2, 3), torch.float32), ((2, 3), torch.float32)],
                        ["cond", "lhs", "rhs"], {}, torch.where)


@pytest.mark.parametrize(("dt", "scalar", "scalar_first"), _SCALAR_CASES,
                         ids=[f"{_id(d)}-{s!r}-{'first' if f else 'second'}" for d, s, f in _SCALAR_CASES])
def test_where_scalar_branch_matches_torch(dt: torch.dtype, scalar: float | int | bool, scalar_first: bool) -> None:
    def call(c: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return torch.where(c, scalar, t) if scalar_first else torch.where(c, t, scalar)

    check_against_torch("where", [((2, 3), torch.bool), ((2, 3), dt)], ["cond", "lhs"],
                        {"scalar": scalar, "scalar_first": scalar_first}, call)


def test_where_branch_count_rules() -> None:
    g = OpGraph()
    c, x = g.input("c", (2,), "bool"), g.input("x", (2,), "float32")
    with pytest.raises(GraphError, match=r"two tensor inputs needs attr 'scalar' for the missing branch"):
        g.add("where", [c, x], name="w0")
    with pytest.raises(GraphError, match=r"three tensor inputs takes no attr 'scalar'"):
        g.add("where", [c, x, x], name="w1", scalar=0.0)


# ---- layout and indexing ---------------------------------------------------------------------------

# (op, attrs, torch call, what the refusal must say when torch refuses too) on a [2, 3, 4] input.
LAYOUT: list[tuple[str, dict[str, Any], Callable[[torch.Tensor], torch.Tensor], str | None]] = [
    ("transpose", {"dim0": 0, "dim1": 2}, lambda t: t.transpose(0, 2), None),
    ("transpose", {"dim0": -1, "dim1": 1}, lambda t: t.transpose(-1, 1), None),
    ("transpose", {"dim0": 0, "dim1": 3}, lambda t: t.transpose(0, 3), r"dim 3 is out of range for rank 3"),
    ("permute", {"dims": [2, 0, 1]}, lambda t: t.permute(2, 0, 1), None),
    ("permute", {"dims": [0, 0, 1]}, lambda t: t.permute(0, 0, 1), r"'dims' must be a permutation of 0\.\.2"),
    ("view", {"shape": [6, -1]}, lambda t: t.view(6, -1), None),
    ("view", {"shape": [5, -1]}, lambda t: t.view(5, -1), r"cannot infer -1 in \[5, -1\] for 24 elements"),
    ("reshape", {"shape": [4, 6]}, lambda t: t.reshape(4, 6), None),
    ("reshape", {"shape": [5, 5]}, lambda t: t.reshape(5, 5), r"shape \[5, 5\] has 25 elements, the input has 24"),
    ("reshape", {"shape": [-1, -1]}, lambda t: t.reshape(-1, -1), r"at most one -1"),
    ("expand", {"shape": [5, 2, 3, 4]}, lambda t: t.expand(5, 2, 3, 4), None),
    ("expand", {"shape": [2, -1, 4]}, lambda t: t.expand(2, -1, 4), None),
    ("expand", {"shape": [2, 6, 4]}, lambda t: t.expand(2, 6, 4), r"cannot expand x \[2, 3, 4\] to \[2, 6, 4\]"),
    ("unsqueeze", {"dim": -1}, lambda t: t.unsqueeze(-1), None),
    ("unsqueeze", {"dim": 1}, lambda t: t.unsqueeze(1), None),
    ("unsqueeze", {"dim": 5}, lambda t: t.unsqueeze(5), r"dim 5 is out of range for rank 4"),
    ("slice", {"dim": 1, "start": 1, "end": 3, "step": 1}, lambda t: t[:, 1:3], None),
    ("slice", {"dim": -1, "start": 0, "end": 4, "step": 3}, lambda t: t[..., 0:4:3], None),
    ("slice", {"dim": 0, "start": 1, "end": 5}, lambda t: t.narrow(0, 1, 4), r"0 <= start <= end <= 2"),
    ("slice", {"dim": 2, "start": 3, "end": 1}, lambda t: t.narrow(2, 3, -2), r"0 <= start <= end <= 4"),
    ("stack", {"dim": 1}, lambda t: torch.stack([t], 1), None),  # of one input here; of several: test_stack.py
    ("stack", {"dim": -1}, lambda t: torch.stack([t], -1), None),
    ("stack", {"dim": 5}, lambda t: torch.stack([t], 5), r"dim 5 is out of range for rank 4"),
]


@pytest.mark.parametrize("dt", DTYPES, ids=_id)
@pytest.mark.parametrize(("op", "attrs", "fn", "must_say"), LAYOUT,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(LAYOUT)])
def test_layout_matches_torch(op: str, attrs: dict[str, Any], fn: Callable[[torch.Tensor], torch.Tensor],
                              must_say: str | None, dt: torch.dtype) -> None:
    expected = torch_result(fn, [((2, 3, 4), dt)])
    assert isinstance(expected, Exception) == (must_say is not None), f"table out of date: torch gives {expected}"
    check_against_torch(op, [((2, 3, 4), dt)], ["x"], attrs, fn, must_say)


INDEXING: list[tuple[str, tuple[int, ...], Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]] = [
    ("index_select", (4,), lambda x, i: torch.index_select(x, 0, i)),
    ("index", (4,), lambda x, i: x[i]),
    ("index", (2, 4), lambda x, i: x[i]),
    ("embedding", (2, 4), lambda w, i: F.embedding(i, w)),
]


@pytest.mark.parametrize(("table", "idx"), PAIRS, ids=[f"{_id(a)}-idx{_id(b)}" for a, b in PAIRS])
@pytest.mark.parametrize(("op", "idx_shape", "fn"), INDEXING, ids=[f"{o}-{len(s)}d" for o, s, _ in INDEXING])
def test_indexing_matches_torch(op: str, idx_shape: tuple[int, ...], fn: Callable[..., torch.Tensor],
                                table: torch.dtype, idx: torch.dtype) -> None:
    # 5 table rows and 4 indices: a bool index cannot pass as a mask, so torch itself refuses it (see below).
    check_against_torch(op, [((5, 3), table), (idx_shape, idx)], ["table", "ids"], {}, fn)


def test_bool_mask_indexing_is_not_a_gather() -> None:
    # torch reads x[mask] as a masked select whose row count depends on the data; the graph cannot give it a
    # static shape, so the registry refuses it on purpose, with a message that says what indices it needs.
    x, mask = torch.ones(4, 3), torch.tensor([True, False, True, True])
    assert tuple(x[mask].shape) == (3, 3)
    g = OpGraph()
    t, m = g.input("table", (4, 3), "float32"), g.input("mask", (4,), "bool")
    with pytest.raises(GraphError, match=r"node 'out' \(index\): index indices mask must be int32 or int64"):
        g.add("index", [t, m], name="out")


def test_every_registered_op_is_covered() -> None:
    """A new pointwise, layout or indexing op must be added to these tables, so its rules get checked."""
    assert set(ops_of_kind("pointwise")) == set(BINARY) | set(UNARY) | OTHER_POINTWISE
    assert set(ops_of_kind("layout")) == {case[0] for case in LAYOUT}
    assert set(ops_of_kind("indexing")) == {op for op, _, _ in INDEXING}


# ---- shapes ----------------------------------------------------------------------------------------

BROADCASTS = [((2, 3), (3,)), ((4, 1, 3), (2, 1)), ((1,), (5,)), ((), (2, 3)), ((2, 3), ()), ((2, 3), (2, 3)),
              ((1, 4), (3, 1)), ((0, 3), (1, 3)), ((2, 1, 1, 5), (7, 1))]


@pytest.mark.parametrize(("sa", "sb"), BROADCASTS, ids=str)
@pytest.mark.parametrize("op", ["add", "mul", "ge", "maximum"])
def test_broadcast_shape_equals_torch(op: str, sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    g, out = build(op, [(sa, torch.float32), (sb, torch.float32)], ["lhs", "rhs"], {})
    assert g.node(out).shape == tuple(torch.broadcast_shapes(sa, sb))
    assert g.node(out).strides == tuple(torch.empty(torch.broadcast_shapes(sa, sb)).stride())


@pytest.mark.parametrize(("sa", "sb"), [((2, 3), (4,)), ((2, 3), (3, 2)), ((5, 1, 3), (4, 2))], ids=str)
def test_broadcast_mismatch_names_both_operands(sa: tuple[int, ...], sb: tuple[int, ...]) -> None:
    with pytest.raises(RuntimeError):
        torch.broadcast_shapes(sa, sb)
    with pytest.raises(GraphError) as err:
        build("add", [(sa, torch.float32), (sb, torch.float32)], ["lhs", "rhs"], {})
    msg = str(err.value)
    assert "do not broadcast" in msg
    assert f"lhs {list(sa)}" in msg and f"rhs {list(sb)}" in msg, msg


def test_where_broadcast_mismatch_names_the_operands() -> None:
    with pytest.raises(GraphError) as err:
        build("where", [((2, 3), torch.bool), ((3,), torch.float32), ((4,), torch.float32)],
              ["cond", "lhs", "rhs"], {})
    assert "cond [2, 3]" in str(err.value) and "rhs [4]" in str(err.value)
    g, out = build("where", [((2, 1), torch.bool), ((3,), torch.float32), ((1, 1, 3), torch.float32)],
                   ["cond", "lhs", "rhs"], {})
    assert g.node(out).shape == (1, 2, 3) == tuple(torch.where(torch.ones(2, 1, dtype=torch.bool),
                                                               torch.ones(3), torch.ones(1, 1, 3)).shape)


# Templates: (op, operand names, operand shapes, torch call, operands a refusal must name with their shapes).
TEMPLATE_SHAPES: list[tuple[str, list[str], list[tuple[int, ...]], Callable[..., torch.Tensor], list[str]]] = [
    ("mm", ["a", "b"], [(2, 3), (3, 5)], torch.mm, []),
    ("mm", ["a", "b"], [(2, 3), (4, 5)], torch.mm, ["a", "b"]),
    ("mm", ["a", "b"], [(2, 3, 1), (3, 5)], torch.mm, ["a", "b"]),
    ("bmm", ["a", "b"], [(4, 2, 3), (4, 3, 5)], torch.bmm, []),
    ("bmm", ["a", "b"], [(4, 2, 3), (2, 3, 5)], torch.bmm, ["a", "b"]),
    ("bmm", ["a", "b"], [(4, 2, 3), (4, 2, 5)], torch.bmm, ["a", "b"]),
    ("addmm", ["bias", "a", "b"], [(5,), (2, 3), (3, 5)], torch.addmm, []),
    ("addmm", ["bias", "a", "b"], [(2, 5), (2, 3), (4, 5)], torch.addmm, ["a", "b"]),
    ("addmm", ["bias", "a", "b"], [(3,), (2, 3), (3, 5)], torch.addmm, ["bias"]),
    ("linear", ["x", "w"], [(2, 3), (5, 3)], F.linear, []),
    ("linear", ["x", "w", "bias"], [(7, 2, 3), (5, 3), (5,)], F.linear, []),
    ("linear", ["x", "w"], [(2, 3), (3, 5)], F.linear, ["x", "w"]),
    ("linear", ["x", "w", "bias"], [(2, 3), (5, 3), (4,)], F.linear, ["bias"]),
]


@pytest.mark.parametrize(("op", "names", "shapes", "fn", "named"), TEMPLATE_SHAPES,
                         ids=[f"{t[0]}-{i}" for i, t in enumerate(TEMPLATE_SHAPES)])
def test_template_shapes_match_torch(op: str, names: list[str], shapes: list[tuple[int, ...]],
                                     fn: Callable[..., torch.Tensor], named: list[str]) -> None:
    specs = [(s, torch.float32) for s in shapes]
    expected = torch_result(fn, specs)
    if not isinstance(expected, Exception):
        assert not named
        g, out = build(op, specs, names, {})
        assert g.node(out).shape == tuple(expected.shape)
        return
    assert named, f"torch refuses {op} {shapes}: {expected}"
    with pytest.raises(GraphError) as err:
        build(op, specs, names, {})
    msg = str(err.value)
    assert f"node 'out' ({op})" in msg, msg
    for n in named:  # the operands whose sizes disagree, each with its shape
        shape = list(shapes[names.index(n)])
        assert re.search(rf"\b{n}( is)? {re.escape(str(shape))}", msg), f"{n} {shape} not named in: {msg}"
    if "bias" in named:  # and what the bias had to fit
        assert str(list(expected_shape(op, shapes))) in msg, msg


def expected_shape(op: str, shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    a, b = (shapes[1], shapes[2]) if op == "addmm" else (shapes[0], shapes[1])
    return (*a[:-1], b[0]) if op == "linear" else (a[0], b[1])


@pytest.mark.parametrize(("op", "names", "shapes"), [
    ("mm", ["a", "b"], [(2, 3), (3, 5)]),
    ("bmm", ["a", "b"], [(4, 2, 3), (4, 3, 5)]),
    ("addmm", ["bias", "a", "b"], [(5,), (2, 3), (3, 5)]),
    ("linear", ["x", "w"], [(2, 3), (5, 3)]),
])
def test_template_dtype_mismatch_names_both_operands(op: str, names: list[str], shapes: list[tuple[int, ...]]) -> None:
    dts = [torch.bfloat16] * len(names)
    dts[-1] = torch.float32
    with pytest.raises(GraphError) as err:
        build(op, list(zip(shapes, dts, strict=True)), names, {})
    msg = str(err.value)
    assert f"{names[-2]} is torch.bfloat16" in msg and f"{names[-1]} is torch.float32" in msg, msg
    # Torch refuses the same mixture, so the graph is not stricter than eager here.
    with pytest.raises(RuntimeError):
        {"mm": torch.mm, "bmm": torch.bmm, "addmm": torch.addmm, "linear": F.linear}[op](
            *_tensors(list(zip(shapes, dts, strict=True)), "cpu"))
