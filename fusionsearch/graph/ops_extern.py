"""Extern ops: anything not fused (reductions, softmax, norms) kept in the graph and run by PyTorch's aten op.

A node holds the aten target by name ('aten.softmax.int') and its arguments as JSON values, tensors as
{"input": slot}; shape and dtype come from running the op on fake tensors (torch's FakeTensorMode: shapes and
dtypes, no data), so any aten op works and none allocates at load, a factory (aten.full) included."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from fusionsearch.errors import GraphError
from fusionsearch.graph.registry import (
    Attrs,
    InputInfo,
    OpDef,
    Shape,
    dtype_from_name,
    dtype_name,
    printable,
    register,
    show,
)

_TARGET = re.compile(r"^aten\.[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$")


def resolve_target(target: object) -> torch._ops.OpOverload:
    """The aten operator overload named by `target` ('aten.softmax.int').

    The name is first looked up in the dispatcher's registry of operator schemas; only a registered overload is
    then fetched from torch.ops.aten, through the namespace's and packet's own op lookup, never through ordinary
    attribute access. A spec is data: a name such as 'aten.__setattr__' must not reach Python's attributes of
    torch.ops.aten (calling it once replaced torch.ops.aten.mm for the rest of the process)."""
    if not isinstance(target, str) or not _TARGET.match(target):
        raise GraphError(f"extern attr 'target' must name an aten operator overload like 'aten.softmax.int' or "
                         f"'aten.mm.default', got {show(target)}")
    _, name, overload = target.split(".")
    try:
        torch._C._dispatch_find_schema_or_throw(f"aten::{name}", "" if overload == "default" else overload)
    except RuntimeError:
        raise GraphError(f"extern target {target!r} is not a registered aten operator overload in this "
                         f"torch {torch.__version__}") from None
    namespace = torch.ops.aten
    packet = vars(namespace).get(name)
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        packet = type(namespace).__getattr__(namespace, name)
    op = vars(packet).get(overload)
    if not isinstance(op, torch._ops.OpOverload):
        op = type(packet).__getattr__(packet, overload)
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
        slot = value.get("input")
        if set(value) == {"input"} and type(slot) is int and 0 <= slot < len(tensors):
            return tensors[slot]
        if set(value) == {"dtype"}:
            return dtype_from_name(value["dtype"], "extern argument")
        raise GraphError(f"extern argument {show(value)} is neither {{'input': slot}} (a slot of its {len(tensors)} "
                         "inputs) nor {'dtype': name}")
    if isinstance(value, list):
        return [decode_arg(v, tensors) for v in value]
    return value


def _call(tensors: Sequence[Any], attrs: Attrs) -> Any:
    op = resolve_target(attrs.get("target"))
    args = attrs.get("args", [])
    kwargs = attrs.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise GraphError("extern attrs 'args' must be a list and 'kwargs' an object")
    index = attrs.get("output_index", 0)
    if type(index) is not int:
        raise GraphError(f"extern attr 'output_index' must be an integer, got {show(index)}")
    out = op(*decode_arg(args, tensors), **{k: decode_arg(v, tensors) for k, v in kwargs.items()})  # type: ignore[arg-type]
    if isinstance(out, tuple | list):
        if not 0 <= index < len(out):
            raise GraphError(f"extern attr 'output_index' {index} is out of range: the op returns {len(out)} values")
        out = out[index]
    return out


@contextlib.contextmanager
def _no_fake_tensor_log() -> Iterator[None]:
    """FakeTensorMode logs an op's refusal of its fake inputs as an ERROR with torch's 17-line traceback before
    raising it; `_meta` reports that refusal as the graph's error in one line, so the log is held back."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    disabled, logger.disabled = logger.disabled, True
    try:
        yield
    finally:
        logger.disabled = disabled


def _meta(ins: Sequence[InputInfo], attrs: Attrs) -> torch.Tensor:
    """The op's result on fake tensors: shape and dtype as eager PyTorch gives them, no memory touched. Fallback
    kernels (real kernels run on zeros where an op has no fake rule) are off, so nothing is ever allocated."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    try:
        with _no_fake_tensor_log(), FakeTensorMode(allow_fallback_kernels=False):
            tensors = [torch.empty(i.shape, dtype=i.dtype) for i in ins]
            out = _call(tensors, attrs)
    except GraphError:
        raise
    except Exception as e:  # an aten op refusing its arguments: report it as the graph's error
        reason = next(iter(str(e).strip().splitlines()), "") or type(e).__name__
        raise GraphError(f"extern {attrs.get('target')} rejects its inputs "
                         f"{', '.join(f'{printable(i.name)} {list(i.shape)} {i.dtype}' for i in ins)}: "
                         f"{printable(reason[:300])}") from None
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
