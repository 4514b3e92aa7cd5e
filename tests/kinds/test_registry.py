"""The kernel-kind registry: the five built-in kinds are registered and implement the interface, and a kind
registered from outside the package (a toy matmul run by torch.matmul) is picked up by the search space, the
cost model, codegen and the plan's JSON without edits elsewhere, and gone once unregistered."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Literal

import pytest
import torch

import fusionsearch as fs
from fusionsearch import kinds
from fusionsearch.codegen.module import generate_module
from fusionsearch.costmodel import H200, estimate
from fusionsearch.costmodel.features import FEATURE_NAMES, plan_features
from fusionsearch.errors import PlanError, SpecError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.hardware import Hardware
from fusionsearch.kinds import KernelCode, KernelEstimate, KernelKind, MatmulKind, ModuleContext
from fusionsearch.measure import TOLERANCE, rel_error
from fusionsearch.plan import Plan, kernel_types
from fusionsearch.plan.kernels import StoresWhatItComputes
from fusionsearch.plan.tile import TileConfig
from fusionsearch.search.space import enumerate_space

TOY = "toy_torch_mm"


@dataclass(frozen=True)
class ToyKernel(StoresWhatItComputes):
    """One `mm` node, nothing fused, computed by torch.matmul in the generated module."""

    matmul: str
    kind: Literal["toy_torch_mm"] = "toy_torch_mm"

    @property
    def nodes(self) -> tuple[str, ...]:  # type: ignore[override]
        return (self.matmul,)

    def check(self, g: OpGraph, i: int, shared_memory_bytes: int | None) -> None:
        if g.node(self.matmul).op != "mm":
            raise PlanError(f"kernel {i}: the toy kind runs only mm nodes")

    def describe(self, g: OpGraph) -> str:
        return f"mm {self.matmul}; toy (torch.matmul)"

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> ToyKernel:
        if not isinstance(d.get("matmul"), str):
            raise SpecError(f"{where}: 'matmul' must be a node name")
        return cls(d["matmul"])


class ToyKind(MatmulKind):
    name = TOY
    kernel_type = ToyKernel

    def estimate(self, g: OpGraph, kernel: ToyKernel, i: int, stored: set[str], hw: Hardware) -> KernelEstimate:
        p = self.problem(g, kernel.matmul)
        read = sum(g.node(s).nbytes for s in g.node(kernel.matmul).inputs)
        written = g.node(kernel.matmul).nbytes
        memory = (read + written) / hw.bandwidth_bytes_per_s * 1e6
        flops = 2 * p.m * p.n * p.k
        return KernelEstimate(i, TOY, read, written, flops, memory + 100.0, memory, 0.0, 0, 0)

    def features(self, g: OpGraph, kernel: ToyKernel, stored: set[str], hw: Hardware,
                 resources: object) -> dict[str, float]:
        return {"log2_m": float(self.problem(g, kernel.matmul).m.bit_length() - 1)}

    def generate(self, ctx: ModuleContext, kernel: ToyKernel, stored: set[str], name: str) -> KernelCode:
        a, b = (ctx.buffers[s] for s in ctx.graph.node(kernel.matmul).inputs)
        return KernelCode(node=kernel.matmul, expression=f"torch.matmul({a}, {b})")

    def accepts(self, g: OpGraph, mm: str) -> bool:
        return g.node(mm).op == "mm"

    def choices(self, g: OpGraph, mm: str, fits: object, limit: int) -> tuple[str, ...]:
        return (TOY,)

    def kernel(self, mm: str, label: str, prologue_a: tuple[str, ...], prologue_b: tuple[str, ...],
               epilogue: tuple[str, ...]) -> ToyKernel:
        if prologue_a or prologue_b or epilogue:
            raise PlanError(f"the toy kind fuses nothing into {mm!r}")
        return ToyKernel(mm)


def _graph() -> OpGraph:
    return fs.capture(lambda x, w: torch.relu(x @ w) * 2.0, torch.randn(24, 40), torch.randn(40, 56))


def test_the_six_built_in_kinds_are_registered_and_implement_the_interface() -> None:
    assert kinds.BUILTIN == {"template", "pointwise", "extern", "library", "decode", "grouped"}
    for name in kinds.BUILTIN:
        kind = kinds.get(name)
        assert isinstance(kind, KernelKind) and kind.name == name
        assert not inspect.isabstract(type(kind)), f"{name} leaves abstract methods"
        assert kernel_types()[name] is kind.kernel_type
    assert {k.name for k in kinds.matmul_kinds()} == {"template", "library", "decode", "grouped"}
    with pytest.raises(PlanError):
        kinds.unregister("template")


def test_a_toy_kind_registered_from_outside_runs_through_every_stage() -> None:
    g = _graph()
    (mm,) = g.nodes_of_kind("template")
    with kinds.registered(ToyKind()) as toy:
        assert not inspect.isabstract(type(toy))
        space = enumerate_space(g, max_configs=4)
        assert TOY in space.parameter_choices()["mm0.config"]  # the search offers it for the matmul
        params = {name: choices[0] for name, choices in space.parameter_choices().items()}
        params["mm0.config"] = TOY
        plan = space.plan(params)
        assert [k.kind for k in plan.kernels].count(TOY) == 1

        est = estimate(plan, H200)  # the cost model estimates it with the toy's own figures
        toy_est = next(e for e in est.per_kernel if e.kind == TOY)
        assert toy_est.time_us > 100.0
        rows = plan_features(plan, H200)
        toy_row = rows[[k.kind for k in plan.kernels].index(TOY)]
        assert set(FEATURE_NAMES) <= set(toy_row) and toy_row["roofline_us"] == toy_est.time_us
        assert toy_row["log2_m"] == float((24).bit_length() - 1)

        inputs = fs.random_inputs(g, seed=0)  # codegen runs it; it matches eager PyTorch
        (out,) = fs.compile_plan(plan)(*inputs)
        (ref,) = fs.reference(g, inputs)
        assert rel_error(out, ref) <= TOLERANCE[torch.float32]
        assert "torch.matmul(" in generate_module(plan).source

        again = Plan.from_json(plan.to_json(), g)  # and the plan round-trips through JSON
        assert again == plan
        with pytest.raises(PlanError):  # fused nodes are refused by the toy's kernel maker
            toy.kernel(mm, TOY, (), (), ("x",))
    assert TOY not in kernel_types() and TOY not in {k.name for k in kinds.matmul_kinds()}
    with pytest.raises(SpecError):
        Plan.from_json(plan.to_json(), g)
    assert TOY not in enumerate_space(g, max_configs=4).parameter_choices()["mm0.config"]


def test_a_kind_name_cannot_be_taken_twice() -> None:
    with kinds.registered(ToyKind()):
        with pytest.raises(PlanError):
            kinds.register(ToyKind())
    with pytest.raises(PlanError):
        kinds.get(TOY)


def test_a_toy_tile_label_reads_back_as_its_config() -> None:
    cfg = TileConfig(16, 64, 256, 8, 2, 4, 3)
    assert TileConfig.from_short(cfg.short()) == cfg
    with pytest.raises(PlanError):
        TileConfig.from_short("not a config")
