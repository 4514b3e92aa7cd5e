"""The op registry: the single source of truth for every op's shape rule, dtype rule, fp32 flag,
Triton expression and torch reference. Adding an op is one `register(OpDef(...))` call."""

from __future__ import annotations

import reprlib
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


INT64_MAX = 2**63 - 1
# Deeper than any spec or plan needs (an extern's nested argument lists are a few levels): refused before anything
# walks the value recursively (deepcopy, json.dumps, repr).
MAX_JSON_DEPTH = 32


class _ShortRepr(reprlib.Repr):
    """repr bounded in length and depth; an integer too long to print (Python's 4,300-digit limit) shows its size."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxstring, self.maxother, self.maxlong = 4, 80, 80, 40
        self.maxlist = self.maxtuple = self.maxdict = self.maxset = 8

    def repr_int(self, x: int, level: int) -> str:
        if abs(x) > 10**self.maxlong:
            return f"<an integer of {x.bit_length()} bits>"
        return repr(x)


_SHORT = _ShortRepr()


def show(value: object) -> str:
    """A user value as it goes into an error message: one line, bounded, whatever it holds (a huge integer, deep
    nesting, a lone surrogate)."""
    return _SHORT.repr(value)


def printable(text: str) -> str:
    """`text` unchanged when it prints as one line; otherwise with newlines and lone surrogates escaped."""
    return text if text.isprintable() else repr(text)[1:-1]


def is_utf8(text: str) -> bool:
    """False for a string holding a lone surrogate (JSON's '\\ud800'), which no file or terminal can take."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def json_problem(value: object, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """What makes `value` unfit as plain JSON data and where ('at nodes[2].attrs.scalar: ...'), or None: nesting
    deeper than `max_depth`, an integer outside int64, a string that is not UTF-8, a key that is not a string, a
    value of another type. Iterative, so any depth is safe to check."""
    stack: list[tuple[object, int, str]] = [(value, 1, "")]
    while stack:
        v, depth, path = stack.pop()
        at = f"at {path.lstrip('.')}: " if path else ""
        if isinstance(v, bool) or v is None or isinstance(v, float):
            continue
        if isinstance(v, int):
            if not -INT64_MAX - 1 <= v <= INT64_MAX:
                return f"{at}the integer {show(v)} is outside int64"
            continue
        if isinstance(v, str):
            if not is_utf8(v):
                return f"{at}the string {show(v)} is not valid Unicode (a lone surrogate)"
            continue
        if depth > max_depth:
            return f"{at}values are nested more than {max_depth} levels deep"
        if isinstance(v, list | tuple):
            stack.extend((x, depth + 1, f"{path}[{i}]") for i, x in reversed(list(enumerate(v))))
        elif isinstance(v, dict):
            for k, x in reversed(list(v.items())):
                if not isinstance(k, str):
                    return f"{at}the key {show(k)} is not a string"
                if not is_utf8(k):
                    return f"{at}the key {show(k)} is not valid Unicode (a lone surrogate)"
                stack.append((x, depth + 1, f"{path}.{printable(k[:40])}"))
        else:
            return f"{at}{show(v)} of type {type(v).__name__} is not a JSON value (number, string, bool, list, object)"
    return None


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
    raise GraphError(f"{what}: unknown dtype {show(name)}; use one of {', '.join(DTYPES)}")


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
    if isinstance(name, str) and name in REGISTRY:
        return REGISTRY[name]
    raise GraphError(f"{where}unknown op {show(name)}; known ops: {', '.join(sorted(REGISTRY))}")


def ops_of_kind(kind: str) -> list[str]:
    """Names of the registered ops of one kind ('pointwise', 'template', ...)."""
    return sorted(n for n, op in REGISTRY.items() if op.kind == kind)
