"""The kernels a plan is made of, one frozen value per kind, and reading them back from a plan file."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from fusionsearch.errors import PlanError, SpecError
from fusionsearch.graph.registry import show
from fusionsearch.plan.tile import TileConfig


@dataclass(frozen=True)
class TemplateKernel:
    """One matmul with the nodes fused into its A and B loads (prologues) and evaluated on its output tile
    (epilogue: downstream pointwise work, and whatever computes an addmm/linear bias)."""

    matmul: str
    prologue_a: tuple[str, ...] = ()
    prologue_b: tuple[str, ...] = ()
    epilogue: tuple[str, ...] = ()
    config: TileConfig = field(default_factory=TileConfig)
    kind: Literal["template"] = "template"

    @property
    def nodes(self) -> tuple[str, ...]:
        return (*self.prologue_a, *self.prologue_b, self.matmul, *self.epilogue)


@dataclass(frozen=True)
class PointwiseKernel:
    """A fused group of pointwise, layout and indexing nodes, run over the shape of the values it stores."""

    nodes: tuple[str, ...]
    kind: Literal["pointwise"] = "pointwise"


@dataclass(frozen=True)
class ExternKernel:
    """One extern node, run by PyTorch."""

    node: str
    kind: Literal["extern"] = "extern"

    @property
    def nodes(self) -> tuple[str, ...]:
        return (self.node,)


@dataclass(frozen=True)
class LibraryKernel:
    """One matmul with nothing fused, run by PyTorch's own matmul (cuBLAS on NVIDIA GPUs): where no prologue
    or epilogue pays for a Triton template, the vendor library's main loop is the one to beat."""

    matmul: str
    kind: Literal["library"] = "library"

    @property
    def nodes(self) -> tuple[str, ...]:
        return (self.matmul,)


Kernel = TemplateKernel | PointwiseKernel | ExternKernel | LibraryKernel


def produced(k: Kernel) -> tuple[str, ...]:
    """Nodes a kernel can write to memory: prologue values live only in registers."""
    if isinstance(k, TemplateKernel):
        return (k.matmul, *k.epilogue)
    return k.nodes



_KERNEL_FIELDS = {"template": {"kind", "matmul", "prologue_a", "prologue_b", "epilogue", "config"},
                  "pointwise": {"kind", "nodes"}, "extern": {"kind", "node"}, "library": {"kind", "matmul"}}


def kernel_from_dict(d: Any, where: str) -> Kernel:
    if not isinstance(d, dict):
        raise SpecError(f"{where}: must be an object")
    kind = d.get("kind")
    # A misspelt key would otherwise be dropped silently, and the plan replayed would not be the plan written.
    unknown = set(d) - _KERNEL_FIELDS[kind] if isinstance(kind, str) and kind in _KERNEL_FIELDS else set()
    if unknown:
        raise SpecError(f"{where}: unknown field(s) {show(sorted(unknown))} for a {kind} kernel")

    def names(key: str) -> tuple[str, ...]:
        v = d.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise SpecError(f"{where}: {key!r} must be a list of node names, got {show(v)}")
        return tuple(v)

    if kind == "template":
        cfg = d.get("config", {})
        if not isinstance(cfg, dict) or set(cfg) - set(TileConfig.__dataclass_fields__):
            raise SpecError(f"{where}: 'config' must be an object with keys {sorted(TileConfig.__dataclass_fields__)}")
        if not isinstance(d.get("matmul"), str):
            raise SpecError(f"{where}: 'matmul' must be a node name")
        try:
            config = TileConfig(**cfg)
        except PlanError as e:
            raise PlanError(f"{where} ({d['matmul']!r}): {e}") from None
        return TemplateKernel(d["matmul"], names("prologue_a"), names("prologue_b"), names("epilogue"), config)
    if kind == "pointwise":
        return PointwiseKernel(names("nodes"))
    if kind == "extern":
        if not isinstance(d.get("node"), str):
            raise SpecError(f"{where}: 'node' must be a node name")
        return ExternKernel(d["node"])
    if kind == "library":
        if not isinstance(d.get("matmul"), str):
            raise SpecError(f"{where}: 'matmul' must be a node name")
        return LibraryKernel(d["matmul"])
    raise SpecError(f"{where}: 'kind' must be template, library, pointwise or extern, got {show(kind)}")


