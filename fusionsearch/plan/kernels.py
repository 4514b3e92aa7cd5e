"""The kernels a plan is made of, one frozen value per kind, and reading them back from a plan file."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

from fusionsearch.errors import PlanError, SpecError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.registry import show
from fusionsearch.plan.kernel_checks import (
    check_extern,
    check_library,
    check_pointwise,
    check_template,
    check_template_stored,
)
from fusionsearch.plan.tile import TileConfig


class KernelValue(Protocol):
    """What the plan layer reads of any kernel value: its kind's name, the nodes it computes, the nodes it can
    write, its own legality, and its JSON (the dataclass fields; `from_dict` reads them back)."""

    kind: str

    @property
    def nodes(self) -> tuple[str, ...]: ...

    def produced(self) -> tuple[str, ...]: ...

    def check(self, g: OpGraph, i: int, shared_memory_bytes: int | None) -> None: ...

    def check_stored(self, g: OpGraph, i: int, stored: set[str]) -> None: ...

    def describe(self, g: OpGraph) -> str: ...


class StoresWhatItComputes:
    """For kernel values that can write every node they compute, whatever its shape (all but the template, whose
    prologue values live in registers): nothing more to check of what the plan needs them to store."""

    nodes: tuple[str, ...]

    def produced(self) -> tuple[str, ...]:
        return self.nodes

    def check_stored(self, g: OpGraph, i: int, stored: set[str]) -> None:
        return None


class FusedMatmulKernel:
    """For kernel values that run one matmul with nodes fused into its A and B loads (prologues) and evaluated
    on its output tile (epilogue: downstream pointwise work, and whatever computes an addmm/linear bias): the
    template and the decode matmul. Their `config` is the kind's own (TileConfig, DecodeConfig), with `short()`
    and `shared_memory_bytes(itemsize)`."""

    matmul: str
    prologue_a: tuple[str, ...]
    prologue_b: tuple[str, ...]
    epilogue: tuple[str, ...]
    config: Any

    @property
    def nodes(self) -> tuple[str, ...]:
        return (*self.prologue_a, *self.prologue_b, self.matmul, *self.epilogue)

    def produced(self) -> tuple[str, ...]:
        """Prologue values live only in registers: the matmul and its epilogue can be written."""
        return (self.matmul, *self.epilogue)

    def check(self, g: OpGraph, i: int, shared_memory_bytes: int | None) -> None:
        check_template(g, self, i, shared_memory_bytes)

    def check_stored(self, g: OpGraph, i: int, stored: set[str]) -> None:
        check_template_stored(g, self, i, stored)

    @classmethod
    def fused_from_dict(cls, d: dict[str, Any], where: str, config_type: type) -> Any:
        """The kernel a plan file's entry describes, its `config` read as `config_type` (a frozen dataclass
        whose constructor raises PlanError for a bad value): the shared `from_dict` of the fused matmul kinds."""
        cfg = d.get("config", {})
        known = sorted(config_type.__dataclass_fields__)  # type: ignore[attr-defined]
        if not isinstance(cfg, dict) or set(cfg) - set(known):
            raise SpecError(f"{where}: 'config' must be an object with keys {known}")
        matmul = node_name(d, "matmul", where)
        try:
            config = config_type(**cfg)
        except PlanError as e:
            raise PlanError(f"{where} ({matmul!r}): {e}") from None
        return cls(matmul, names(d, "prologue_a", where), names(d, "prologue_b", where),  # type: ignore[call-arg]
                   names(d, "epilogue", where), config)

    def describe(self, g: OpGraph) -> str:
        parts = [f"{g.node(self.matmul).op} {self.matmul}"]
        for label, nodes in (("prologue A", self.prologue_a), ("prologue B", self.prologue_b),
                             ("epilogue", self.epilogue)):
            if nodes:
                parts.append(f"{label} [{', '.join(nodes)}]")
        parts.append(f"config {self.config.short()}")
        return "; ".join(parts)


@dataclass(frozen=True)
class TemplateKernel(FusedMatmulKernel):
    """One matmul as the Triton template: its tile config, prologues in its operand loads, an epilogue on its
    output tile."""

    matmul: str
    prologue_a: tuple[str, ...] = ()
    prologue_b: tuple[str, ...] = ()
    epilogue: tuple[str, ...] = ()
    config: TileConfig = field(default_factory=TileConfig)
    kind: Literal["template"] = "template"
    # Its `config` is a plan TileConfig (Plan.with_config may swap it; a second matmul may share its K loop).
    # A kernel type without this attribute has none.
    has_tile_config: ClassVar[bool] = True

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> TemplateKernel:
        return cls.fused_from_dict(d, where, TileConfig)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class PointwiseKernel(StoresWhatItComputes):
    """A fused group of pointwise, layout and indexing nodes, run over the shape of the values it stores."""

    nodes: tuple[str, ...]
    kind: Literal["pointwise"] = "pointwise"

    def check(self, g: OpGraph, i: int, shared_memory_bytes: int | None) -> None:
        check_pointwise(g, self, i)

    def describe(self, g: OpGraph) -> str:
        return f"{self.kind} [{', '.join(self.nodes)}]"

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> PointwiseKernel:
        return cls(names(d, "nodes", where))


@dataclass(frozen=True)
class ExternKernel(StoresWhatItComputes):
    """One extern node, run by PyTorch."""

    node: str
    kind: Literal["extern"] = "extern"

    @property
    def nodes(self) -> tuple[str, ...]:  # type: ignore[override]
        return (self.node,)

    def check(self, g: OpGraph, i: int, shared_memory_bytes: int | None) -> None:
        check_extern(g, self, i)

    def describe(self, g: OpGraph) -> str:
        return f"{self.kind} [{', '.join(self.nodes)}]"

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> ExternKernel:
        return cls(node_name(d, "node", where))


@dataclass(frozen=True)
class LibraryKernel(StoresWhatItComputes):
    """One matmul with nothing fused, run by PyTorch's own matmul (cuBLAS on NVIDIA GPUs): where no prologue
    or epilogue pays for a Triton template, the vendor library's main loop is the one to beat."""

    matmul: str
    kind: Literal["library"] = "library"

    @property
    def nodes(self) -> tuple[str, ...]:  # type: ignore[override]
        return (self.matmul,)

    def check(self, g: OpGraph, i: int, shared_memory_bytes: int | None) -> None:
        check_library(g, self, i)

    def describe(self, g: OpGraph) -> str:
        return f"{g.node(self.matmul).op} {self.matmul}; library (PyTorch's matmul: cuBLAS)"

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> LibraryKernel:
        return cls(node_name(d, "matmul", where))


Kernel = TemplateKernel | PointwiseKernel | ExternKernel | LibraryKernel


def produced(k: KernelValue) -> tuple[str, ...]:
    """Nodes a kernel can write to memory: prologue values live only in registers."""
    return k.produced()


# ---- the kernel value types, by kind name ------------------------------------------------------

# Filled by the kinds (fusionsearch/kinds/), one entry per registered kind: the plan layer reads a kernel's
# JSON through its type without knowing the kinds above it.
_KERNEL_TYPES: dict[str, type] = {}


def register_kernel_type(kind: str, value_type: type) -> None:
    """Read plan kernels of `kind` as `value_type` (a frozen dataclass with KernelValue's methods and a
    `from_dict(d, where)` classmethod). A name already taken by another type is an error."""
    if _KERNEL_TYPES.get(kind, value_type) is not value_type:
        raise PlanError(f"kernel kind {kind!r} is already registered for {_KERNEL_TYPES[kind].__name__}")
    _KERNEL_TYPES[kind] = value_type


def unregister_kernel_type(kind: str) -> None:
    _KERNEL_TYPES.pop(kind, None)


def kernel_types() -> dict[str, type]:
    """The registered kernel value types by kind name."""
    return dict(_KERNEL_TYPES)


for _builtin in (TemplateKernel, PointwiseKernel, ExternKernel, LibraryKernel):
    register_kernel_type(_builtin.kind, _builtin)


def names(d: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    """Field `key` of a kernel's JSON as a tuple of node names (absent: empty)."""
    v = d.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise SpecError(f"{where}: {key!r} must be a list of node names, got {show(v)}")
    return tuple(v)


def node_name(d: dict[str, Any], key: str, where: str) -> str:
    if not isinstance(d.get(key), str):
        raise SpecError(f"{where}: {key!r} must be a node name")
    return str(d[key])


def kernel_from_dict(d: Any, where: str) -> KernelValue:
    """The kernel a plan file's entry describes, read by its kind's registered type."""
    if not isinstance(d, dict):
        raise SpecError(f"{where}: must be an object")
    kind = d.get("kind")
    value_type = _KERNEL_TYPES.get(kind) if isinstance(kind, str) else None
    if value_type is None:
        known = ", ".join(_KERNEL_TYPES)
        raise SpecError(f"{where}: 'kind' must be one of {known}, got {show(kind)}")
    # A misspelt key would otherwise be dropped silently, and the plan replayed would not be the plan written.
    unknown = set(d) - set(value_type.__dataclass_fields__)  # type: ignore[attr-defined]
    if unknown:
        raise SpecError(f"{where}: unknown field(s) {show(sorted(unknown))} for a {kind} kernel")
    return value_type.from_dict(d, where)  # type: ignore[attr-defined, no-any-return]
