"""The kernel-kind interface: everything the stages need to know of one kind of plan kernel, in one object.

The plan layer holds the kernel values (frozen dataclasses with their JSON and legality); a kind adds what
the later stages ask of them: the analytic estimate (costmodel/analytic.py), the learned model's per-kernel
features (costmodel/features.py), the module code that runs it (codegen/module.py), and for a matmul kind
the choices the search space offers and the kernel each choice builds (search/space.py)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.reference import Replacement
from fusionsearch.hardware import Hardware
from fusionsearch.kinds.counting import KernelEstimate, log2
from fusionsearch.kinds.triton_source.kernel import GeneratedKernel
from fusionsearch.plan.kernels import KernelValue
from fusionsearch.plan.matmul import Problem, problem, template_operands
from fusionsearch.plan.options import CodegenOptions
from fusionsearch.plan.resources import KernelResources
from fusionsearch.plan.tile import TileConfig


@dataclass
class ModuleContext:
    """What a kind sees of the module being generated: the graph, the buffer name of every node, the options,
    and the extern specs listed so far (a kind calling an extern op appends its spec and calls it by index)."""

    graph: OpGraph
    buffers: dict[str, str]
    options: CodegenOptions
    externs: list[dict[str, object]] = field(default_factory=list)


@dataclass
class KernelCode:
    """One plan kernel's part of the generated module: Triton kernels launched in order over buffers allocated
    for the values it stores, or one PyTorch expression assigned to the buffer of node `node`, or neither
    (nothing to run; `note` says why in a comment)."""

    triton: list[GeneratedKernel] = field(default_factory=list)
    node: str | None = None
    expression: str | None = None
    note: str = ""


@dataclass
class Scratch:
    """Scratch buffers a plan kernel's Triton kernels share beyond the plan's values: the module statements
    that allocate them (kept per device between calls; fresh and poisoned under validation, so that an entry
    never written cannot pass for a previous call's), and per generated kernel, in order, the arguments that
    pass them after its tensors and index flag."""

    lines: list[str] = field(default_factory=list)
    args: list[list[str]] = field(default_factory=list)


class KernelKind(ABC):
    """One kind of plan kernel. `name` is its kernel values' `kind` field; `kernel_type` their dataclass."""

    name: ClassVar[str]
    kernel_type: ClassVar[type]
    runs_triton: ClassVar[bool] = False  # whether its module code launches Triton kernels
    # The learned cost model's one-hot feature naming this kind (costmodel/features.py FEATURE_NAMES), or None:
    # a kind the shipped model was never trained on has no bit, and the learned model prices its kernels by
    # the kind's own analytic estimate (features.library_rows).
    onehot: ClassVar[str | None] = None
    # Whether its kernels run in PyTorch's own (vendor library) call rather than generated code: a search
    # offers its choices only when asked for the library (enumerate_space(library=True)).
    runs_in_library: ClassVar[bool] = False

    def from_dict(self, d: dict[str, Any], where: str) -> KernelValue:
        """The kernel value a plan file's entry describes (SpecError/PlanError say what is wrong)."""
        return self.kernel_type.from_dict(d, where)  # type: ignore[attr-defined, no-any-return]

    def check(self, g: OpGraph, kernel: KernelValue, i: int, shared_memory_bytes: int | None = None) -> None:
        """PlanError unless kernel `i` is legal on `g` (the value's own rules)."""
        kernel.check(g, i, shared_memory_bytes)

    @abstractmethod
    def estimate(self, g: OpGraph, kernel: Any, i: int, stored: set[str], hw: Hardware) -> KernelEstimate:
        """Bytes, flop and roofline time (µs) of kernel `i`, which writes `stored`, on `hw`."""

    def regions(self, kernel: Any) -> dict[str, tuple[str, ...]]:
        """Its fused nodes by feature region (pro_a, pro_b, epi, body): op counts per region are features."""
        return {"pro_a": (), "pro_b": (), "epi": (), "body": ()}

    def features(self, g: OpGraph, kernel: Any, stored: set[str], hw: Hardware,
                 resources: KernelResources | None) -> dict[str, float]:
        """The learned model's features this kind sets beyond the shared ones (costmodel/features.py): by
        default only the size of what it writes, log2 of the largest stored value's elements."""
        outs = stored or set(kernel.nodes[-1:])
        return {"log2_numel": log2(max(g.node(n).numel for n in outs))}

    def reference_replacements(self, g: OpGraph) -> dict[str, Replacement]:
        """Nodes of `g` whose float64 reference this kind computes otherwise than op by op (none by default):
        graph.reference's `replaced`, for patterns whose op-by-op values do not fit in memory."""
        return {}

    @abstractmethod
    def generate(self, ctx: ModuleContext, kernel: Any, stored: set[str], name: str) -> KernelCode:
        """The module code of one plan kernel; `name` is free for its (first) Triton kernel."""

    def scratch(self, step: list[GeneratedKernel], i: int) -> Scratch:
        """The scratch buffers of plan kernel `i`, generated as `step` (codegen/module.py allocates and passes
        them): by default a split-K workspace of fp32 partial tiles (NaN when poisoned) and the serial
        split-K semaphores, where its kernels have them."""
        out = Scratch()
        ws = next((gk for gk in step if gk.workspace), None)
        if ws is not None:
            out.lines.append(f"ws{i} = _alloc(({ws.workspace},), torch.float32, device, True) if poison else "
                             f"_workspace({ws.name!r}, {ws.workspace}, device)")
        for gk in step:
            out.args.append(([f"ws{i}"] if gk.workspace else [])
                            + ([f"_semaphores({gk.name!r}, {gk.semaphores}, device)"] if gk.semaphores else []))
        return out


class MatmulKind(KernelKind):
    """A kind that can run a matmul node: the search offers its `choices` for every matmul it `accepts`."""

    def operands(self, g: OpGraph, mm: str) -> dict[str, str]:
        """The matmul's operand nodes by role: A, B, and bias where the op has one."""
        return template_operands(g, mm)

    def problem(self, g: OpGraph, mm: str) -> Problem:
        """The matmul's sizes (batch, M, N, K)."""
        return problem(g, mm)

    def accepts(self, g: OpGraph, mm: str) -> bool:
        """Whether this kind can run matmul node `mm` at all."""
        return True

    def required_prologue(self, g: OpGraph, mm: str) -> dict[str, tuple[str, ...]]:
        """The nodes this kind must fuse into `mm`'s operand loads, by side ("A", "B"): the search fuses them
        whenever it runs `mm` as this kind, as every plan without them would be illegal."""
        return {}

    @abstractmethod
    def choices(self, g: OpGraph, mm: str, fits: Callable[[OpGraph, str, TileConfig], bool] | None,
                limit: int) -> tuple[str, ...]:
        """The labels the search space offers for running `mm` as this kind (at most `limit`), each unique
        across kinds (prefix them with the kind's name)."""

    def offers(self, g: OpGraph, mm: str, fits: Callable[[OpGraph, str, TileConfig], bool] | None,
               limit: int) -> tuple[tuple[str, object], ...]:
        """(label, config value) of each of its `choices` for `mm`: a kind whose labels stand for typed configs
        gives the values (the search space keeps them beside the labels); by default a label stands for itself."""
        return tuple((label, label) for label in self.choices(g, mm, fits, limit))

    def known_good(self, g: OpGraph, mm: str) -> tuple[str, ...]:
        """Labels of its choices known to run `mm` well: the search seeds its study with the first two of them
        that it offers (none by default)."""
        return ()

    @abstractmethod
    def kernel(self, mm: str, label: str, prologue_a: tuple[str, ...], prologue_b: tuple[str, ...],
               epilogue: tuple[str, ...]) -> KernelValue:
        """The kernel value that runs `mm` as choice `label` with these fused nodes (PlanError where this kind
        cannot fuse them)."""


def matmul_flops(p: Problem) -> int:
    """2*B*M*N*K (flop)."""
    return 2 * p.batch * p.m * p.n * p.k
