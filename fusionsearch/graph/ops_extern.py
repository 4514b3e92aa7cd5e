"""Extern ops: anything not fused (reductions, softmax, norms) kept in the graph and run by PyTorch's aten op.

A node holds the aten target by name ('aten.softmax.int') and its arguments as JSON values, tensors as
{"input": slot}; shape and dtype come from running the op on meta tensors, so any aten op works."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import torch

from fusionsearch.errors import GraphError
from fusionsearch.graph.registry import Attrs, InputInfo, OpDef, Shape, dtype_from_name, dtype_name, register

_TARGET = re.compile(r"^aten\.[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")


def resolve_target(target: object) -> torch._ops.OpOverload | torch._ops.OpOverloadPacket:
    """The aten op named by `target`; looked up by attribute, never evaluated."""
    if not isinstance(target, str) or not _TARGET.match(target):
        raise GraphError(f"extern attr 'target' must name an aten op like 'aten.softmax.int', got {target!r}")
    parts = target.split(".")[1:]
    op: Any = torch.ops.aten
    try:
        for p in parts:
            op = getattr(op, p)
    except (AttributeError, RuntimeError):
        raise GraphError(f"extern target {target!r} is not an aten op in this torch") from None
    return op


def encode_arg(value: object) -> object:
    """A non-tensor aten argument as a JSON value; dtypes become {"dtype": name}."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, torch.dtype):
        return {"dtype": dtype_name(value)}
    if isinstance(value, list | tuple):
        return [encode_arg(v) for v in value]
    if isinstance(value, torch.memory_format | torch.layout | torch.device):
        return None
    raise GraphError(f"extern argument {value!r} of type {type(value).__name__} cannot be stored in a graph")


def decode_arg(value: object, tensors: Sequence[Any]) -> object:
    """The inverse of encode_arg, with {"input": slot} replaced by the slot's tensor."""
    if isinstance(value, dict):
        if set(value) == {"input"} and isinstance(value["input"], int) and 0 <= value["input"] < len(tensors):
            return tensors[value["input"]]
        if set(value) == {"dtype"}:
            return dtype_from_name(value["dtype"], "extern argument")
        raise GraphError(f"extern argument {value!r} is neither {{'input': slot}} nor {{'dtype': name}}")
    if isinstance(value, list):
        return [decode_arg(v, tensors) for v in value]
    return value


def _call(tensors: Sequence[Any], attrs: Attrs) -> Any:
    op = resolve_target(attrs.get("target"))
    args = attrs.get("args", [])
    kwargs = attrs.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise GraphError("extern attrs 'args' must be a list and 'kwargs' an object")
    out = op(*decode_arg(args, tensors), **{k: decode_arg(v, tensors) for k, v in kwargs.items()})  # type: ignore[arg-type]
    if isinstance(out, tuple | list):
        out = out[int(attrs.get("output_index", 0))]
    return out


def _meta(ins: Sequence[InputInfo], attrs: Attrs) -> torch.Tensor:
    tensors = [torch.empty(i.shape, dtype=i.dtype, device="meta") for i in ins]
    try:
        out = _call(tensors, attrs)
    except GraphError:
        raise
    except Exception as e:  # an aten op refusing its arguments: report it as the graph's error
        raise GraphError(f"extern {attrs.get('target')} rejects its inputs "
                         f"{', '.join(f'{i.name} {list(i.shape)} {i.dtype}' for i in ins)}: "
                         f"{str(e).splitlines()[0]}") from None
    if not isinstance(out, torch.Tensor):
        raise GraphError(f"extern {attrs.get('target')} does not return a tensor")
    return out


def _shape(ins: Sequence[InputInfo], attrs: Attrs) -> Shape:
    return tuple(_meta(ins, attrs).shape)


def _dtype(ins: Sequence[InputInfo], attrs: Attrs) -> torch.dtype:
    return _meta(ins, attrs).dtype


def _check(attrs: Attrs) -> None:
    resolve_target(attrs.get("target"))


register(OpDef("extern", "extern", (0, 64), _shape, _dtype, lambda t, a: _call(t, a), attrs_check=_check,
               doc="any aten op run by PyTorch: attrs target, args (tensors as {'input': slot}), kwargs"))
