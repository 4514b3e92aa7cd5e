"""Bitwise pointwise ops (and, or, shifts) over integers: what unpacking int4 weights from bytes needs.

Shifts follow torch's definition where C leaves them undefined: a shift amount that is negative or at least
the bit width gives 0 (left) or the sign fill (right: -1 for a negative value, else 0). Triton's `<<`/`>>` are
LLVM's, undefined there, so the generated expression clamps the amount and selects that result itself."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from fusionsearch.errors import GraphError
from fusionsearch.graph.ops_pointwise import (
    _check_scalar,
    _ensure_binary,
    _operands,
    _torch_operands,
    broadcast_shape,
    promote,
)
from fusionsearch.graph.registry import Attrs, InputInfo, OpDef, register

# A scalar shift amount in [0, 8) is in range for every integer dtype (int8 and up): a plain shift suffices.
_ALWAYS_IN_RANGE = range(8)


def _integer_rule(op: str, allow_bool: bool) -> Callable[[Sequence[InputInfo], Attrs], torch.dtype]:
    def rule(ins: Sequence[InputInfo], attrs: Attrs) -> torch.dtype:
        _ensure_binary(ins, attrs)
        if isinstance(attrs.get("scalar"), float):
            raise GraphError(f"{op} takes an integer or bool scalar operand, got {attrs['scalar']!r}")
        dt = promote(ins, attrs)
        if dt.is_floating_point or (dt == torch.bool and not allow_bool):
            kinds = "integer or bool" if allow_bool else "integer"
            names = ", ".join(f"{i.name} ({i.dtype})" for i in ins)
            raise GraphError(f"{op} needs {kinds} operands, got {names}; cast them first")
        return dt

    return rule


def _typed_operands(args: Sequence[str], attrs: Attrs) -> tuple[str, str]:
    """The operands, a scalar one made a value of the tensor's dtype the way torch converts it (wrapping: -3 is
    253 for uint8; True is 1, or True for a bool tensor); an int in [0, 128), which every integer dtype holds,
    stays a literal."""
    if len(args) == 2:
        return args[0], args[1]
    s = attrs["scalar"]
    if not isinstance(s, bool) and 0 <= s < 128:
        return _operands(args, attrs)
    typed = f"tl.full((), {int(s)}, tl.int64).to({args[0]}.dtype)"
    return (typed, args[0]) if attrs.get("scalar_first") else (args[0], typed)


def _logical_expr(sym: str) -> Callable[[Sequence[str], Attrs], str]:
    def expr(args: Sequence[str], attrs: Attrs) -> str:
        a, b = _typed_operands(args, attrs)
        return f"({a} {sym} {b})"

    return expr


def _shift_expr(sym: str) -> Callable[[Sequence[str], Attrs], str]:
    def expr(args: Sequence[str], attrs: Attrs) -> str:
        a, b = _typed_operands(args, attrs)
        if len(args) == 1 and not attrs.get("scalar_first") and attrs["scalar"] in _ALWAYS_IN_RANGE:
            return f"({a} {sym} {b})"
        t = args[0]  # a tensor operand: both are in the result dtype, whose width bounds the amount
        bits = f"{t}.dtype.primitive_bitwidth"
        ok = f"(({b} >= 0) & ({b} < {bits}))"
        outside = f"tl.where({a} < 0, -1, 0)" if sym == ">>" else "0"
        wide = f"tl.where({ok}, {a} {sym} tl.where({ok}, {b}, 0), {outside}).to({t}.dtype)"
        # Narrower than 32 bits: shifted in int32 (zero- or sign-extended as the dtype is) by the amount, or by
        # the width where it is out of range, which leaves torch's 0 or -1 once truncated back; no per-element
        # select (the int4 unpack's shift by a loaded amount paid one per nibble).
        shifted = f"tl.full((), {a}, {t}.dtype)" if a.isdigit() else a  # a literal scalar a: 3 >> w
        narrow = f"({shifted}.to(tl.int32) {sym} tl.where({ok}, {b}, {bits}).to(tl.int32)).to({t}.dtype)"
        return f"({narrow} if {bits} < 32 else {wide})"

    return expr


def _ref(fn: Callable[[object, object], torch.Tensor]) -> Callable[[Sequence[torch.Tensor], Attrs], torch.Tensor]:
    def ref(t: Sequence[torch.Tensor], attrs: Attrs) -> torch.Tensor:
        a, b = _torch_operands(t, attrs)
        return fn(a if isinstance(a, torch.Tensor) else torch.as_tensor(a), b)

    return ref


def _register(name: str, fn: Callable[[object, object], torch.Tensor], expr: Callable[[Sequence[str], Attrs], str],
              allow_bool: bool, doc: str) -> None:
    register(OpDef(name, "pointwise", (1, 2), broadcast_shape, _integer_rule(name, allow_bool), _ref(fn), expr,
                   False, _check_scalar, doc))


_register("bitwise_and", torch.bitwise_and, _logical_expr("&"), True, "a & b (integers or bools)")
_register("bitwise_or", torch.bitwise_or, _logical_expr("|"), True, "a | b (integers or bools)")
_register("bitwise_right_shift", torch.bitwise_right_shift, _shift_expr(">>"), False,
          "a >> b: arithmetic for signed, logical for unsigned; torch's result for amounts outside [0, bits)")
_register("bitwise_left_shift", torch.bitwise_left_shift, _shift_expr("<<"), False,
          "a << b, wrapping; 0 for amounts outside [0, bits), as torch gives")
