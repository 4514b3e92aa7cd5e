"""The op registry: the single source of truth for every op's shape rule, dtype rule, fp32 flag,
Triton expression and torch reference. Adding an op is one `register(OpDef(...))` call."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fusionsearch.errors import GraphError

KINDS = ("input", "template", "pointwise", "layout", "indexing", "extern")

Shape = tuple[int, ...]
Attrs = dict[str, Any]

DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
}
DTYPE_NAMES: dict[torch.dtype, str] = {v: k for k, v in DTYPES.items()}
DTYPE_ALIASES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "half": "float16", "float": "float32",
                 "long": "int64", "int": "int32"}


def dtype_from_name(name: object, what: str = "dtype") -> torch.dtype:
    """Map 'bfloat16' (or 'bf16', or a torch.dtype) to a torch.dtype; a GraphError names the bad value."""
    if isinstance(name, torch.dtype):
        if name not in DTYPE_NAMES:
            raise GraphError(f"{what}: dtype {name} is not supported; use one of {', '.join(DTYPES)}")
        return name
    if isinstance(name, str):
        key = DTYPE_ALIASES.get(name, name.removeprefix("torch."))
        if key in DTYPES:
            return DTYPES[key]
    raise GraphError(f"{what}: unknown dtype {name!r}; use one of {', '.join(DTYPES)}")


def dtype_name(dtype: torch.dtype) -> str:
    """The registry's name of a torch dtype ('bfloat16')."""
    return DTYPE_NAMES[dtype]


@dataclass(frozen=True)
class InputInfo:
    """What a rule sees of one operand: its node name (for messages), shape and dtype."""

    name: str
    shape: Shape
    dtype: torch.dtype


@dataclass(frozen=True)
class OpDef:
    """One op: how its output shape and dtype follow from its inputs, how Triton and torch compute it.

    `triton(args, attrs)` builds an expression from operand expressions already cast to the compute dtype;
    `needs_fp32` says the Triton form calls libdevice and must compute in fp32 for low-precision inputs.
    """

    name: str
    kind: str
    arity: tuple[int, int]  # (min, max) tensor inputs
    shape_rule: Callable[[Sequence[InputInfo], Attrs], Shape]
    dtype_rule: Callable[[Sequence[InputInfo], Attrs], torch.dtype]
    torch_ref: Callable[[Sequence[torch.Tensor], Attrs], torch.Tensor]
    triton: Callable[[Sequence[str], Attrs], str] | None = None
    needs_fp32: bool = False
    attrs_check: Callable[[Attrs], None] | None = None
    doc: str = ""


REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    """Add an op to the registry; names are unique."""
    assert op.kind in KINDS, op.kind
    assert op.name not in REGISTRY, op.name
    REGISTRY[op.name] = op
    return op


def get_op(name: str, where: str = "") -> OpDef:
    """The registry entry for `name`; a GraphError lists the known ops when it is unknown."""
    _load_all()
    try:
        return REGISTRY[name]
    except KeyError:
        raise GraphError(f"{where}unknown op {name!r}; known ops: {', '.join(sorted(REGISTRY))}") from None


def ops_of_kind(kind: str) -> list[str]:
    """Names of the registered ops of one kind ('pointwise', 'template', ...)."""
    _load_all()
    return sorted(n for n, op in REGISTRY.items() if op.kind == kind)


def _load_all() -> None:
    # The op families register themselves on import; importing here keeps one entry point.
    from fusionsearch.graph import ops_extern, ops_pointwise, ops_structural  # noqa: F401
