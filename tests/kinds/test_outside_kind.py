"""A complete matmul kind defined here, outside the package, and only registered (kinds.registered): a plain
Triton matmul, one program per output tile, with its epilogue fused on the accumulator. Registered, it is
searched (a "model" search tries it), priced (its own analytic estimate; learned features finite, no one-hot
bit, so the learned model prices it by that estimate), generated and validated against eager PyTorch under
Triton's interpreter (float32), and replayed from the plan's JSON; no package file names it."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
import torch

import fusionsearch as fs
from fusionsearch import kinds
from fusionsearch.costmodel import H200, estimate
from fusionsearch.costmodel.features import FEATURE_NAMES, library_rows, plan_features, to_matrix
from fusionsearch.errors import CostModelError, PlanError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.hardware import Hardware
from fusionsearch.kinds import KernelCode, KernelEstimate, MatmulKind, ModuleContext
from fusionsearch.kinds.counting import leaf_bytes, pointwise_work
from fusionsearch.kinds.triton_source.dtypes import Value
from fusionsearch.kinds.triton_source.emit import NameGen, Source
from fusionsearch.kinds.triton_source.kernel import GeneratedKernel
from fusionsearch.kinds.triton_source.tile import Buffers, TileEvaluator
from fusionsearch.kinds.triton_source.tile_index import Idx
from fusionsearch.measure import TOLERANCE, rel_error, validate
from fusionsearch.plan import Plan
from fusionsearch.plan.kernels import FusedMatmulKernel
from fusionsearch.plan.tile import TileConfig
from fusionsearch.search.space import enumerate_space

NAME = "outside_tile_mm"


@dataclass(frozen=True)
class OutsideConfig:
    """The blocks of one output tile and of its K step (powers of two from 16: tl.dot's least)."""

    block_m: int = 16
    block_n: int = 16
    block_k: int = 16
    num_stages: int = 1  # read by the plan's shared-memory check

    def __post_init__(self) -> None:
        for key in ("block_m", "block_n", "block_k"):
            v = getattr(self, key)
            if not isinstance(v, int) or v < 16 or v & (v - 1):
                raise PlanError(f"{NAME} config {key} must be a power of two from 16, got {v!r}")

    def short(self) -> str:
        return f"{NAME} {self.block_m}x{self.block_n}x{self.block_k}"

    def shared_memory_bytes(self, itemsize: int) -> int:
        return (self.block_m + self.block_n) * self.block_k * itemsize


@dataclass(frozen=True)
class OutsideKernel(FusedMatmulKernel):
    """One 2-D mm with an epilogue on its tile, no prologue (the template's legality for the rest)."""

    matmul: str
    prologue_a: tuple[str, ...] = ()
    prologue_b: tuple[str, ...] = ()
    epilogue: tuple[str, ...] = ()
    config: OutsideConfig = field(default_factory=OutsideConfig)
    kind: Literal["outside_tile_mm"] = "outside_tile_mm"

    def check(self, g: OpGraph, i: int, shared_memory_bytes: int | None) -> None:
        if g.node(self.matmul).op != "mm" or self.prologue_a or self.prologue_b:
            raise PlanError(f"kernel {i}: the {NAME} kind runs a 2-D mm with nothing fused into its operands")
        super().check(g, i, shared_memory_bytes)

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> OutsideKernel:
        return cls.fused_from_dict(d, where, OutsideConfig)  # type: ignore[no-any-return]


CONFIGS = (OutsideConfig(16, 16, 16), OutsideConfig(32, 32, 16))


class OutsideKind(MatmulKind):
    name = NAME
    kernel_type = OutsideKernel
    runs_triton = True

    def accepts(self, g: OpGraph, mm: str) -> bool:
        return g.node(mm).op == "mm"

    def offers(self, g: OpGraph, mm: str, fits: Callable[[OpGraph, str, TileConfig], bool] | None,
               limit: int) -> tuple[tuple[str, object], ...]:
        return tuple((c.short(), c) for c in CONFIGS[:limit])

    def choices(self, g: OpGraph, mm: str, fits: Callable[[OpGraph, str, TileConfig], bool] | None,
                limit: int) -> tuple[str, ...]:
        return tuple(label for label, _ in self.offers(g, mm, fits, limit))

    def kernel(self, mm: str, label: str, prologue_a: tuple[str, ...], prologue_b: tuple[str, ...],
               epilogue: tuple[str, ...]) -> OutsideKernel:
        if prologue_a or prologue_b:
            raise PlanError(f"the {NAME} kind fuses nothing into the operands of {mm!r}")
        config = {c.short(): c for c in CONFIGS}.get(label)
        if config is None:
            raise PlanError(f"{label!r} is not a {NAME} choice")
        return OutsideKernel(mm, (), (), epilogue, config)

    def regions(self, kernel: OutsideKernel) -> dict[str, tuple[str, ...]]:
        return {"pro_a": (), "pro_b": (), "epi": kernel.epilogue, "body": ()}

    def estimate(self, g: OpGraph, kernel: OutsideKernel, i: int, stored: set[str], hw: Hardware
                 ) -> KernelEstimate:
        """A and B read once per column / row of tiles, the epilogue's leaves once, stored values written once."""
        p, ops, cfg = self.problem(g, kernel.matmul), self.operands(g, kernel.matmul), kernel.config
        tiles_m, tiles_n = math.ceil(p.m / cfg.block_m), math.ceil(p.n / cfg.block_n)
        read = (g.node(ops["A"]).nbytes * tiles_n + g.node(ops["B"]).nbytes * tiles_m
                + leaf_bytes(g, {kernel.matmul, *kernel.epilogue}, kernel.epilogue))
        written = sum(g.node(n).nbytes for n in stored)
        flops = 2 * p.m * p.n * p.k + pointwise_work(g, kernel.epilogue)
        memory = (read + written) / hw.bandwidth_bytes_per_s * 1e6
        compute = flops / hw.peak(g.node(ops["A"]).dtype) * 1e6
        return KernelEstimate(i, NAME, read, written, flops, max(memory, compute) + hw.launch_us, memory, compute,
                              1, tiles_m * tiles_n)

    def generate(self, ctx: ModuleContext, kernel: OutsideKernel, stored: set[str], name: str) -> KernelCode:
        g, cfg = ctx.graph, kernel.config
        p, ops = self.problem(g, kernel.matmul), self.operands(g, kernel.matmul)
        buffers = Buffers(g)
        a, b = buffers.get(ops["A"]), buffers.get(ops["B"])
        src = Source(1, NameGen())
        src.extend([f"rm = tl.program_id(0) * {cfg.block_m} + tl.arange(0, {cfg.block_m})",
                    f"rn = tl.program_id(1) * {cfg.block_n} + tl.arange(0, {cfg.block_n})",
                    f"mask_m = rm[:, None] < {p.m}", f"mask_n = rn[None, :] < {p.n}",
                    f"acc = tl.zeros(({cfg.block_m}, {cfg.block_n}), dtype=tl.float32)",
                    f"for k0 in range(0, {p.k}, {cfg.block_k}):",
                    f"    rk = k0 + tl.arange(0, {cfg.block_k})",
                    f"    x = tl.load({a.ptr} + rm[:, None] * {a.strides[0]} + rk[None, :] * {a.strides[1]}, "
                    f"mask=mask_m & (rk[None, :] < {p.k}), other=0.0)",
                    f"    w = tl.load({b.ptr} + rk[:, None] * {b.strides[0]} + rn[None, :] * {b.strides[1]}, "
                    f"mask=(rk[:, None] < {p.k}) & mask_n, other=0.0)",
                    "    acc += tl.dot(x, w)"])
        index = (Idx("rm[:, None]", "mask_m"), Idx("rn[None, :]", "mask_n"))
        ev = TileEvaluator(g, set(kernel.epilogue), buffers, src, ctx.options.upcast_epilogue)
        ev.seed(kernel.matmul, index, Value("acc", torch.float32, g.node(kernel.matmul).dtype))
        for n in (kernel.matmul, *kernel.epilogue):
            if n in stored:
                ev.store(n, index, ev.value(n, index))
        head = Source(0)
        head.extend(["@triton.jit", f"def {name}({', '.join(buffers.params())}):"])
        head.splice(src)
        grid = (math.ceil(p.m / cfg.block_m), math.ceil(p.n / cfg.block_n), 1)
        return KernelCode([GeneratedKernel(name, head.text(), buffers.args, grid, {}, num_warps=4, num_stages=1,
                                           index_flag=buffers.flagged)])


def _graph() -> OpGraph:
    return fs.capture(lambda x, w: torch.relu(x @ w) * 2.0, torch.randn(24, 40), torch.randn(40, 56))


def _outside_plan(g: OpGraph) -> Plan:
    space = enumerate_space(g, max_configs=4)
    params = {f"{grp.key}.fusion": next(o for o in grp.options if o.startswith("epilogue")) for grp in space.groups}
    params["mm0.config"] = CONFIGS[1].short()
    return space.plan(params)


def test_an_outside_kind_is_searched_by_a_model_search() -> None:
    g = _graph()
    with kinds.registered(OutsideKind()):
        space = enumerate_space(g, max_configs=4)
        offered = space.parameter_choices()["mm0.config"]
        assert [c.short() for c in CONFIGS] == [label for label in offered if label.startswith(NAME)]
        res = fs.tune(g, trials=12, backend="model", seed=0)
        tried = [t.params.get("mm0.config") for t in res.trials]
        assert any(str(label).startswith(NAME) for label in tried), tried
    after = enumerate_space(g, max_configs=4).parameter_choices()["mm0.config"]
    assert not any(label.startswith(NAME) for label in after)  # gone once unregistered


def test_an_outside_kind_is_priced_by_its_own_estimate_without_a_one_hot_bit() -> None:
    g = _graph()
    with kinds.registered(OutsideKind()):
        plan = _outside_plan(g)
        (k,) = [k for k in plan.kernels if k.kind == NAME]
        assert k.epilogue and k.config == CONFIGS[1]
        est = estimate(plan, H200)
        mine = next(e for e in est.per_kernel if e.kind == NAME)
        # A read once per column of 32-wide tiles (2), B once per row (1); relu and the scale written once
        assert mine.bytes_read == 24 * 40 * 4 * 2 + 40 * 56 * 4 * 1
        assert mine.bytes_written == 24 * 56 * 4 and math.isfinite(mine.time_us) and mine.time_us > 0
        rows = plan_features(plan, H200)
        row = rows[plan.kernels.index(k)]
        assert all(math.isfinite(row[n]) for n in FEATURE_NAMES)
        assert not any(row[n] for n in FEATURE_NAMES if n.startswith("kind_"))  # no bit: none of the built-ins'
        assert row["roofline_us"] == mine.time_us and row["epi_pointwise"] == 2.0
        # the learned model never saw the kind: it prices its rows by the kind's own estimate
        X = to_matrix(rows)
        assert library_rows(X).tolist() == [kk.kind == NAME for kk in plan.kernels]


def test_an_outside_kind_naming_a_feature_the_schema_lacks_is_refused() -> None:
    class Misnamed(OutsideKind):
        onehot = "kind_outside"

    g = _graph()
    with kinds.registered(Misnamed()):
        with pytest.raises(CostModelError, match="'kind_outside'"):
            plan_features(_outside_plan(g), H200)


@pytest.fixture()
def interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    if not torch.cuda.is_available():
        monkeypatch.setenv("TRITON_INTERPRET", "1")


def test_an_outside_kind_generates_validates_against_eager_and_replays_from_json(interpreter: None) -> None:
    g = _graph()
    with kinds.registered(OutsideKind()):
        plan = _outside_plan(g)
        inputs = fs.random_inputs(g, seed=0)
        (out,) = fs.compile_plan(plan)(*inputs)
        x, w = inputs
        eager = torch.relu(x.double() @ w.double()) * 2.0
        assert rel_error(out, eager) <= TOLERANCE[torch.float32]
        check = validate(plan, g, inputs)  # poisoned outputs, against the float64 reference
        assert check.ok, check.reason
        again = Plan.from_json(plan.to_json(), g)
        assert again == plan and again.kernels[[k.kind for k in plan.kernels].index(NAME)].config == CONFIGS[1]
        (replayed,) = fs.compile_plan(again)(*inputs)
        assert torch.equal(replayed, out)
        with pytest.raises(PlanError, match="power of two"):
            Plan.from_json(plan.to_json().replace('"block_m": 32', '"block_m": 24'), g)
