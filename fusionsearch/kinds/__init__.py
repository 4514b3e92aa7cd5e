"""The kernel-kind registry: one object per kind of plan kernel (base.KernelKind), looked up by the `kind`
name of a plan kernel. Stages dispatch through it instead of testing kernel types: the cost model's estimate
and features, codegen's module code, the search space's matmul choices. A new kind is one module with its
kernel value type and its KernelKind, and one `register(...)` (a line below for the built-in ones)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fusionsearch.errors import PlanError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.reference import Replacement
from fusionsearch.kinds.base import KernelCode, KernelKind, MatmulKind, ModuleContext, Scratch
from fusionsearch.kinds.counting import KernelEstimate
from fusionsearch.kinds.decode_matmul import DECODE
from fusionsearch.kinds.extern import EXTERN
from fusionsearch.kinds.grouped_matmul import GROUPED
from fusionsearch.kinds.library import LIBRARY_KIND
from fusionsearch.kinds.matmul_template import TEMPLATE
from fusionsearch.kinds.pointwise import POINTWISE
from fusionsearch.plan.kernels import KernelValue, register_kernel_type, unregister_kernel_type

__all__ = ["BUILTIN", "KernelCode", "KernelEstimate", "KernelKind", "MatmulKind", "ModuleContext", "Scratch",
           "all_kinds", "compiled_kinds", "get",
           "kind_of", "matmul_kinds", "reference_replacements", "register", "registered", "unregister"]

_KINDS: dict[str, KernelKind] = {}


def register(kind: KernelKind) -> KernelKind:
    """Add `kind` to the registry (and its kernel value type to the plan's JSON reader); returns it. A name
    already registered for another kind is a PlanError."""
    if _KINDS.get(kind.name, kind) is not kind:
        raise PlanError(f"a kernel kind named {kind.name!r} is already registered")
    register_kernel_type(kind.name, kind.kernel_type)
    _KINDS[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Remove the kind named `name` (built-in kinds stay: the package's own plans need them)."""
    if name in BUILTIN:
        raise PlanError(f"{name!r} is a built-in kernel kind; it cannot be unregistered")
    if _KINDS.pop(name, None) is not None:
        unregister_kernel_type(name)


@contextmanager
def registered(kind: KernelKind) -> Iterator[KernelKind]:
    """`kind` registered for the duration of a `with` block (tests, experiments)."""
    register(kind)
    try:
        yield kind
    finally:
        unregister(kind.name)


def get(name: str) -> KernelKind:
    """The kind named `name`; PlanError when none is registered under it."""
    try:
        return _KINDS[name]
    except KeyError:
        raise PlanError(f"no kernel kind named {name!r} is registered (known: {', '.join(_KINDS)})") from None


def kind_of(kernel: KernelValue) -> KernelKind:
    """The kind of a plan kernel (by its `kind` field)."""
    return get(kernel.kind)


def matmul_kinds() -> tuple[MatmulKind, ...]:
    """The registered kinds that can run a matmul, in registration order (the built-in template first)."""
    return tuple(k for k in _KINDS.values() if isinstance(k, MatmulKind))


def compiled_kinds() -> tuple[str, ...]:
    """Names of the registered kinds whose features include what their compiled kernel uses (each generates one
    kernel headed '# fusionsearch <name> kernel' per plan kernel; codegen/resources.py compiles it)."""
    return tuple(name for name, k in _KINDS.items() if getattr(k, "compiled_features", False))


def all_kinds() -> tuple[KernelKind, ...]:
    return tuple(_KINDS.values())


def reference_replacements(g: OpGraph) -> dict[str, Replacement]:
    """What the registered kinds compute otherwise than op by op in `g`'s float64 reference."""
    out: dict[str, Replacement] = {}
    for kind in _KINDS.values():
        out.update(kind.reference_replacements(g))
    return out


for _kind in (TEMPLATE, POINTWISE, EXTERN, LIBRARY_KIND, DECODE, GROUPED):
    register(_kind)
BUILTIN = frozenset(_KINDS)
