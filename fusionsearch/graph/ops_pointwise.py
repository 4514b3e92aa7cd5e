"""Pointwise ops: elementwise with broadcasting; dtype rules follow torch's type promotion."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from fusionsearch.errors import GraphError
from fusionsearch.graph.registry import Attrs, InputInfo, OpDef, Shape, dtype_from_name, register

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def broadcast_shape(ins: Sequence[InputInfo], attrs: Attrs) -> Shape:
    """torch broadcasting of all tensor operands; a mismatch names both operands."""
    out: Shape = ()
    first = None
    for info in ins:
        try:
            out = tuple(torch.broadcast_shapes(out, info.shape))
        except RuntimeError:
            raise GraphError(
                f"shapes do not broadcast: {first.name} {list(first.shape)} and {info.name} {list(info.shape)}"  # type: ignore[union-attr]
            ) from None
        if first is None or len(info.shape) >= len(first.shape):
            first = info
    return out


def _probe(dtype: torch.dtype, rank: int = 1) -> torch.Tensor:
    # result_type gives 0-dim tensors lower priority than dimensioned ones: probe with the operand's own rank.
    return torch.empty((1,) * min(rank, 1), dtype=dtype)


def _scalars(attrs: Attrs, *keys: str) -> list[float | int | bool]:
    return [attrs[k] for k in keys if attrs.get(k) is not None]


def promote(ins: Sequence[InputInfo], attrs: Attrs) -> torch.dtype:
    """torch.result_type over the tensor operands, then any scalar operand (attrs 'scalar'), as torch orders them."""
    result, rank = ins[0].dtype, len(ins[0].shape)
    for info in ins[1:]:
        result = torch.result_type(_probe(result, rank), _probe(info.dtype, len(info.shape)))
        rank = max(rank, len(info.shape))
    for scalar in _scalars(attrs, "scalar"):
        result = torch.result_type(_probe(result, rank), scalar)
    return result


def _no_bool(op: str, ins: Sequence[InputInfo]) -> None:
    for i in ins:
        if i.dtype == torch.bool:
            raise GraphError(f"{op} is not defined for bool operand {i.name}; cast it first")


def promote_no_bool_pair(op: str) -> Callable[[Sequence[InputInfo], Attrs], torch.dtype]:
    def rule(ins: Sequence[InputInfo], attrs: Attrs) -> torch.dtype:
        # torch refuses subtraction with any bool operand, tensor or scalar, whatever the other operand is.
        _no_bool(op, ins)
        if isinstance(attrs.get("scalar"), bool):
            raise GraphError(f"{op} is not defined for a bool scalar operand; use 0 or 1")
        return promote(ins, attrs)

    return rule


def true_div(ins: Sequence[InputInfo], attrs: Attrs) -> torch.dtype:
    dt = promote(ins, attrs)
    return dt if dt in _FLOATS else torch.get_default_dtype()


def to_float(ins: Sequence[InputInfo], attrs: Attrs) -> torch.dtype:
    """exp, log, sqrt...: integers and bools compute in the default float dtype."""
    dt = ins[0].dtype
    return dt if dt in _FLOATS else torch.get_default_dtype()


def same_numeric(op: str) -> Callable[[Sequence[InputInfo], Attrs], torch.dtype]:
    def rule(ins: Sequence[InputInfo], attrs: Attrs) -> torch.dtype:
        _no_bool(op, ins)
        return ins[0].dtype

    return rule


def float_only(op: str) -> Callable[[Sequence[InputInfo], Attrs], torch.dtype]:
    def rule(ins: Sequence[InputInfo], attrs: Attrs) -> torch.dtype:
        if ins[0].dtype not in _FLOATS:
            raise GraphError(f"{op} needs a floating operand, {ins[0].name} is {ins[0].dtype}; cast it first")
        return ins[0].dtype

    return rule


def boolean(ins: Sequence[InputInfo], attrs: Attrs) -> torch.dtype:
    return torch.bool


def pow_rule(ins: Sequence[InputInfo], attrs: Attrs) -> torch.dtype:
    dt = promote(ins, attrs)
    # torch has no bool pow kernel; only a bool tensor to a bool scalar power (a copy or a fill) avoids it.
    if dt == torch.bool and (len(ins) > 1 or attrs.get("scalar_first")):
        raise GraphError(f"pow with a bool result is not defined: {', '.join(i.name for i in ins)}; cast first")
    return dt


def clamp_rule(ins: Sequence[InputInfo], attrs: Attrs) -> torch.dtype:
    result = ins[0].dtype
    for bound in _scalars(attrs, "min", "max"):
        result = torch.result_type(_probe(result), bound)
    return result


def where_rule(ins: Sequence[InputInfo], attrs: Attrs) -> torch.dtype:
    if ins[0].dtype != torch.bool:
        raise GraphError(f"where needs a bool condition, {ins[0].name} is {ins[0].dtype}; compare or cast it first")
    return promote(ins[1:], attrs)


def cast_rule(ins: Sequence[InputInfo], attrs: Attrs) -> torch.dtype:
    return dtype_from_name(attrs.get("dtype"), "cast attr 'dtype'")


def _check_number(key: str, required: bool = False) -> Callable[[Attrs], None]:
    def check(attrs: Attrs) -> None:
        v = attrs.get(key)
        if v is None and not required:
            return
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise GraphError(f"attr {key!r} must be a number, got {v!r}")

    return check


def _check_scalar(attrs: Attrs) -> None:
    v = attrs.get("scalar")
    if v is not None and not isinstance(v, int | float | bool):
        raise GraphError(f"attr 'scalar' must be a number or bool, got {v!r}")
    if not isinstance(attrs.get("scalar_first", False), bool):
        raise GraphError("attr 'scalar_first' must be true or false")


def lit(v: float | int | bool) -> str:
    """A Python scalar as Triton source; numbers only, so no user string reaches generated code."""
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, int):
        return str(int(v))
    f = float(v)
    if math.isnan(f):
        return 'float("nan")'
    if math.isinf(f):
        return 'float("inf")' if f > 0 else 'float("-inf")'
    return repr(f)


def _tanh(x: str) -> str:
    """tanh through the sigmoid, which saturates exactly to +-1: no libdevice call, so the same source runs in
    Triton's CPU interpreter (which has no libdevice) and on the GPU."""
    return f"(2.0 * tl.sigmoid(2.0 * {x}) - 1.0)"


def _pow(a: str, b: str) -> str:
    """a ** b without libdevice: small integer exponents by multiplication (exact, any sign of a), 0.5 as
    sqrt, otherwise exp(b * log(a)) (NaN for a negative base, as torch gives for non-integer exponents)."""
    try:
        e = float(b)
    except ValueError:
        return f"tl.exp({b} * tl.log({a}))"
    if e == int(e) and 0 <= e <= 4:
        return " * ".join([a] * int(e)) if e else f"({a} * 0.0 + 1.0)"
    if e == 0.5:
        return f"tl.sqrt({a})"
    return f"tl.exp({b} * tl.log({a}))"


def _operands(args: Sequence[str], attrs: Attrs) -> tuple[str, str]:
    """The two operand expressions of a binary op, with a scalar operand placed on its side."""
    if len(args) == 2:
        return args[0], args[1]
    s = lit(attrs["scalar"])
    return (s, args[0]) if attrs.get("scalar_first") else (args[0], s)


def _torch_operands(t: Sequence[torch.Tensor], attrs: Attrs) -> tuple[object, object]:
    if len(t) == 2:
        return t[0], t[1]
    s = attrs["scalar"]
    return (s, t[0]) if attrs.get("scalar_first") else (t[0], s)


def _binary(name: str, sym: str | None, fn: Callable[[object, object], torch.Tensor],
            dtype_rule: Callable[[Sequence[InputInfo], Attrs], torch.dtype], triton_fn: str | None = None,
            needs_fp32: bool = False, doc: str = "") -> None:
    def triton(args: Sequence[str], attrs: Attrs) -> str:
        a, b = _operands(args, attrs)
        if triton_fn == "_POW":
            return f"({_pow(a, b)})"
        return f"({a} {sym} {b})" if sym else f"{triton_fn}({a}, {b})"

    def ref(t: Sequence[torch.Tensor], attrs: Attrs) -> torch.Tensor:
        a, b = _torch_operands(t, attrs)
        if not isinstance(a, torch.Tensor):
            # torch.gt(0.5, t) has no overload; a 0-dim tensor promotes exactly as the Python scalar would.
            return fn(torch.as_tensor(a), b)
        return fn(a, b)

    def check(attrs: Attrs) -> None:
        _check_scalar(attrs)

    register(OpDef(name, "pointwise", (1, 2), broadcast_shape, dtype_rule, ref, triton, needs_fp32, check, doc))


def _unary(name: str, fn: Callable[[torch.Tensor], torch.Tensor], expr: Callable[[str], str],
           dtype_rule: Callable[[Sequence[InputInfo], Attrs], torch.dtype], needs_fp32: bool = False,
           doc: str = "") -> None:
    register(OpDef(name, "pointwise", (1, 1), broadcast_shape, dtype_rule, lambda t, a: fn(t[0]),
                   lambda args, a: expr(args[0]), needs_fp32, None, doc))


def _binary_scalar_ok(op: str) -> Callable[[Sequence[InputInfo], Attrs], torch.dtype]:
    return promote_no_bool_pair(op) if op == "sub" else promote


def _ensure_binary(ins: Sequence[InputInfo], attrs: Attrs) -> None:
    if len(ins) == 1 and attrs.get("scalar") is None:
        raise GraphError("a binary op with one tensor input needs attr 'scalar'")
    if len(ins) == 2 and attrs.get("scalar") is not None:
        raise GraphError("a binary op with two tensor inputs takes no attr 'scalar'")


def _with_binary_check(rule: Callable[[Sequence[InputInfo], Attrs], torch.dtype]
                       ) -> Callable[[Sequence[InputInfo], Attrs], torch.dtype]:
    def checked(ins: Sequence[InputInfo], attrs: Attrs) -> torch.dtype:
        _ensure_binary(ins, attrs)
        return rule(ins, attrs)

    return checked


_binary("add", "+", lambda a, b: torch.add(a, b), _with_binary_check(promote), doc="a + b")
_binary("sub", "-", lambda a, b: torch.sub(a, b), _with_binary_check(promote_no_bool_pair("sub")), doc="a - b")
_binary("mul", "*", lambda a, b: torch.mul(a, b), _with_binary_check(promote), doc="a * b")
_binary("div", "/", lambda a, b: torch.div(a, b), _with_binary_check(true_div), doc="true division a / b")
# A scalar operand becomes a 0-dim tensor, which promotes like the scalar (torch.maximum takes tensors only).
_binary("maximum", None, lambda a, b: torch.maximum(torch.as_tensor(a), torch.as_tensor(b)),
        _with_binary_check(promote), "tl.maximum", doc="elementwise max")
_binary("minimum", None, lambda a, b: torch.minimum(torch.as_tensor(a), torch.as_tensor(b)),
        _with_binary_check(promote), "tl.minimum", doc="elementwise min")
_binary("pow", None, lambda a, b: torch.pow(a, b), _with_binary_check(pow_rule), "_POW", needs_fp32=True,
        doc="a ** b")
for _name, _sym in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="), ("eq", "=="), ("ne", "!=")):
    _binary(_name, _sym, getattr(torch, _name), _with_binary_check(boolean), doc=f"comparison a {_sym} b")

_unary("neg", torch.neg, lambda x: f"(-{x})", same_numeric("neg"))
_unary("abs", torch.abs, lambda x: f"tl.abs({x})", same_numeric("abs"))
_unary("relu", torch.relu, lambda x: f"tl.where({x} < 0, 0, {x})", same_numeric("relu"))
_unary("exp", torch.exp, lambda x: f"tl.exp({x})", to_float, needs_fp32=True)
_unary("log", torch.log, lambda x: f"tl.log({x})", to_float, needs_fp32=True)
_unary("sqrt", torch.sqrt, lambda x: f"tl.sqrt({x})", to_float, needs_fp32=True)
_unary("rsqrt", torch.rsqrt, lambda x: f"tl.rsqrt({x})", to_float, needs_fp32=True)
_unary("sigmoid", torch.sigmoid, lambda x: f"tl.sigmoid({x})", to_float, needs_fp32=True)
_unary("tanh", torch.tanh, lambda x: _tanh(x), to_float, needs_fp32=True)
_unary("silu", F.silu, lambda x: f"({x} * tl.sigmoid({x}))", float_only("silu"), needs_fp32=True)


def _gelu_expr(args: Sequence[str], attrs: Attrs) -> str:
    x = args[0]
    if attrs.get("approximate", "none") == "tanh":
        return f"(0.5 * {x} * (1.0 + {_tanh(f'(0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x}))')}))"
    return f"(0.5 * {x} * (1.0 + tl.erf({x} * 0.7071067811865476)))"


def _gelu_check(attrs: Attrs) -> None:
    if attrs.get("approximate", "none") not in ("none", "tanh"):
        raise GraphError(f"gelu attr 'approximate' must be 'none' or 'tanh', got {attrs.get('approximate')!r}")


register(OpDef("gelu", "pointwise", (1, 1), broadcast_shape, float_only("gelu"),
               lambda t, a: F.gelu(t[0], approximate=a.get("approximate", "none")), _gelu_expr, True, _gelu_check,
               "gelu, erf form or approximate='tanh'"))


def _clamp_expr(args: Sequence[str], attrs: Attrs) -> str:
    x = args[0]
    if attrs.get("min") is not None:
        x = f"tl.maximum({x}, {lit(attrs['min'])})"
    if attrs.get("max") is not None:
        x = f"tl.minimum({x}, {lit(attrs['max'])})"
    return x


def _clamp_check(attrs: Attrs) -> None:
    _check_number("min")(attrs)
    _check_number("max")(attrs)
    if attrs.get("min") is None and attrs.get("max") is None:
        raise GraphError("clamp needs attr 'min' or 'max'")


register(OpDef("clamp", "pointwise", (1, 1), broadcast_shape, clamp_rule,
               lambda t, a: torch.clamp(t[0], a.get("min"), a.get("max")), _clamp_expr, False, _clamp_check,
               "clamp(x, min, max) with scalar bounds"))


def _where_expr(args: Sequence[str], attrs: Attrs) -> str:
    if len(args) == 3:
        return f"tl.where({args[0]}, {args[1]}, {args[2]})"
    s = lit(attrs["scalar"])
    a, b = (s, args[1]) if attrs.get("scalar_first") else (args[1], s)
    return f"tl.where({args[0]}, {a}, {b})"


def _where_ref(t: Sequence[torch.Tensor], attrs: Attrs) -> torch.Tensor:
    if len(t) == 3:
        return torch.where(t[0], t[1], t[2])
    s = attrs["scalar"]
    return torch.where(t[0], s, t[1]) if attrs.get("scalar_first") else torch.where(t[0], t[1], s)


def _where_rule(ins: Sequence[InputInfo], attrs: Attrs) -> torch.dtype:
    if len(ins) == 2 and attrs.get("scalar") is None:
        raise GraphError("where with two tensor inputs needs attr 'scalar' for the missing branch")
    if len(ins) == 3 and attrs.get("scalar") is not None:
        raise GraphError("where with three tensor inputs takes no attr 'scalar'")
    return where_rule(ins, attrs)


register(OpDef("where", "pointwise", (2, 3), broadcast_shape, _where_rule, _where_ref, _where_expr, False,
               _check_scalar,
               "where(cond, a, b); one branch may be attr 'scalar'"))


def _cast_expr(args: Sequence[str], attrs: Attrs) -> str:
    # The codegen performs the conversion itself (it knows the source dtype); the expression is the identity.
    return args[0]


def _cast_check(attrs: Attrs) -> None:
    dtype_from_name(attrs.get("dtype"), "cast attr 'dtype'")


register(OpDef("cast", "pointwise", (1, 1), broadcast_shape, cast_rule,
               lambda t, a: t[0].to(dtype_from_name(a["dtype"])), _cast_expr, False, _cast_check,
               "x.to(dtype)"))
