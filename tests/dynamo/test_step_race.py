"""The step-level race and the control (issue 52): the backend times the whole step it builds against Inductor's
compilation of the whole graph and keeps the faster, restoring what the step writes in place; the outcome is
cached so that a second process builds only the winner; with `inductor_regions` every region runs Inductor's
code and nothing is searched. On the CPU: Inductor's C++ code, the interpreter, a stand-in timer."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import torch

from fusionsearch.dynamo.backend import BackendOptions, _Compiler
from fusionsearch.dynamo.plan_cache import PlanCache
from fusionsearch.dynamo.profile import KERNEL, MEMCPY, MEMSET, summarize
from fusionsearch.dynamo.step_race import StepChoice

backend_module = importlib.import_module("fusionsearch.dynamo.backend")  # the package exports a function by its name


class _Block(torch.nn.Module):
    """A matmul with a bias and GELU, a residual add, and a running sum kept in a buffer written in place (a
    write that is not idempotent: a step run twice would add twice)."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(32, 48), torch.nn.Linear(48, 32)
        self.register_buffer("seen", torch.zeros(32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.add_(x.sum(0))
        return x + self.down(torch.nn.functional.gelu(self.up(x)))


def _stand_in(faster: str, asked: list[dict[str, float]]) -> Any:
    """A timer that runs each candidate three times and reports `faster` 10x faster than the other."""

    def timer(candidates: dict[str, Any]) -> dict[str, float]:
        for fn in candidates.values():
            for _ in range(3):
                fn()
        times = {name: 1.0 if name == faster else 10.0 for name in candidates}
        asked.append(times)
        return times

    return timer


def _counted_inductor_step(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the calls of Inductor's whole-graph step (not its compiles)."""
    calls: list[int] = []
    build = backend_module.inductor_step

    def counted(*args: Any) -> Any:
        step = build(*args)
        return lambda *a: calls.append(1) or step(*a)

    monkeypatch.setattr(backend_module, "inductor_step", counted)
    return calls


def _compile(tmp_path: Path, timer: Any, **options: Any) -> tuple[Any, _Compiler]:
    compiler = _Compiler(BackendOptions(**{"trials": 2, "fallback": "eager", "cache": str(tmp_path),
                                           "search_backend": "model", "inductor": "default", **options}),
                         timer=timer)
    torch.manual_seed(0)
    block = _Block().eval()
    return torch.compile(block, backend=compiler, dynamic=False), compiler


@pytest.mark.parametrize("faster", ["inductor", "fusionsearch"])
def test_the_step_race_keeps_the_step_its_timer_finds_faster(tmp_path: Path, faster: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counted_inductor_step(monkeypatch)
    asked: list[dict[str, float]] = []
    compiled, compiler = _compile(tmp_path, _stand_in(faster, asked))
    torch.manual_seed(0)
    eager = _Block().eval()
    x = torch.randn(8, 32)
    with torch.no_grad():
        out = compiled(x)
        before = len(calls)
        again = compiled(x)
        ref, ref_again = eager(x), eager(x)
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-5) and torch.allclose(again, ref_again, rtol=1e-5, atol=1e-5)
    assert len(calls) - before == (1 if faster == "inductor" else 0)  # the kept step is what a call runs
    (step,) = compiler.stats.steps
    assert step.chosen == faster and {step.ours_us, step.inductor_us} == {1.0, 10.0}
    assert set(asked[-1]) == {"fusionsearch", "inductor"}  # the last race is the step's, both candidates in it
    kept = "Inductor's whole graph (default) kept" if faster == "inductor" else "fusionsearch's step kept"
    assert kept in compiler.stats.explain()


def test_the_step_race_restores_what_the_step_writes_in_place(tmp_path: Path) -> None:
    """The timer ran each step three times, each adding x to the buffer; after the first call the buffer holds
    one x, as eager's does."""
    compiled, _ = _compile(tmp_path, _stand_in("inductor", []))
    torch.manual_seed(0)
    eager = _Block().eval()
    x = torch.randn(8, 32)
    with torch.no_grad():
        compiled(x)
        eager(x)
        mine = compiled._orig_mod.seen.clone()
    assert torch.allclose(mine, eager.seen, rtol=1e-5, atol=1e-5) and mine.abs().sum() > 0


def test_a_cached_step_race_is_not_run_again_and_only_the_winner_is_built(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    with torch.no_grad():
        _compile(tmp_path, _stand_in("inductor", []))[0](torch.randn(8, 32))
    calls = _counted_inductor_step(monkeypatch)
    asked: list[dict[str, float]] = []
    torch._dynamo.reset()
    compiled, compiler = _compile(tmp_path, _stand_in("fusionsearch", asked))
    x = torch.randn(8, 32)
    torch.manual_seed(0)
    eager = _Block().eval()
    with torch.no_grad():
        out = compiled(x)
        ref = eager(x)
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-5)
    assert asked == [] and calls == [1]  # no race, Inductor's step ran the call
    assert compiler.stats.regions == 0 and [s.chosen for s in compiler.stats.steps] == ["inductor"]


def test_the_control_runs_every_region_as_inductor_and_searches_nothing(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from fusionsearch.search import study

    monkeypatch.setattr(study, "run_study", lambda *a, **k: pytest.fail("the control searched a region"))
    compiled, compiler = _compile(tmp_path, None, inductor_regions=True)
    torch.manual_seed(0)
    eager = _Block().eval()
    x = torch.randn(8, 32)
    with torch.no_grad():
        out, ref = compiled(x), eager(x)
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-5)
    assert compiler.stats.regions == 2 and compiler.stats.searched == 0 and not compiler.stats.choices
    assert not list(tmp_path.iterdir())  # nothing stored: no plan was searched, no race run


def test_damaged_step_records_are_misses() -> None:
    good = StepChoice("step", "inductor", 2.0, 1.0, "max-autotune").to_dict()
    assert StepChoice.from_dict(good) == StepChoice("step", "inductor", 2.0, 1.0, "max-autotune")
    for bad in (None, [], {**good, "chosen": "neither"}, {**good, "ours_us": "abc"}, {**good, "extra": 1},
                {**good, "profiles": [1]}):
        assert StepChoice.from_dict(bad) is None


def test_a_step_record_is_read_back_only_for_its_own_graph(tmp_path: Path) -> None:
    from fusionsearch.datasets.workloads import workload

    a, b = workload("mm_bias_gelu", M=16, K=32, N=32), workload("mm_bias_gelu", M=32, K=32, N=32)
    cache = PlanCache(str(tmp_path))
    key = cache.key(a, "cpu", {})
    cache.store_step(key, a, {"chosen": "inductor"})
    assert cache.load_step(key, a) == {"chosen": "inductor"}
    assert cache.load_step(key, b) is None and cache.load_step("nosuchkey", a) is None
    (tmp_path / f"{key}.json").write_text("{not json")
    assert cache.load_step(key, a) is None


def test_a_profile_sums_each_name_per_step_and_counts_idle_time_once() -> None:
    """Two steps of a kernel, a copy and a memset, with one overlap; the figures worked out by hand."""
    acts = [("gemm", 0.0, 10.0), ("Memcpy DtoD (Device -> Device)", 8.0, 12.0), ("add", 15.0, 17.0),
            ("gemm", 20.0, 30.0), ("Memset (Device)", 30.0, 31.0), ("Memcpy DtoD (Device -> Device)", 33.0, 36.0),
            ("add", 36.0, 40.0)]
    p = summarize(acts, steps=2)
    assert p.span_us == 20.0  # 0 to 40 over two steps
    assert p.busy_us == (12.0 + 2.0 + 11.0 + 7.0) / 2  # [0,12] [15,17] [20,31] [33,40]
    assert p.gap_us == 20.0 - 16.0
    assert [(r.name, r.kind, r.calls, r.us) for r in p.rows] == [
        ("gemm", KERNEL, 1.0, 10.0), ("Memcpy DtoD (Device -> Device)", MEMCPY, 1.0, 3.5), ("add", KERNEL, 1.0, 3.0),
        ("Memset (Device)", MEMSET, 0.5, 0.5)]
    assert p.count(KERNEL) == 2.0 and p.count(MEMCPY) == 1.0 and p.us(KERNEL) == 13.0
    assert "2 kernels (13.0 us), 1 copies (3.5 us), 0 memsets" in p.line()


@pytest.mark.parametrize("mode", ["max-autotune", "default"])
def test_a_declined_graph_runs_through_inductor_in_the_backends_mode_on_a_gpu(mode: str,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The Inductor fallback compiles in the mode the backend races in where the graph runs on a GPU (Inductor's
    defaults ran gpt-fast's int8 linears through aten._weight_int8pack_mm on the H100, 12x slower than
    max-autotune's step), in Inductor's defaults on a CPU. The GPU is stood in for by the inputs' `is_cuda`."""
    import torch._inductor.compile_fx as compile_fx_module
    from torch._inductor import config

    seen: list[bool] = []

    def recording(gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> Any:
        seen.append(bool(config.max_autotune))
        return gm.forward

    monkeypatch.setattr(compile_fx_module, "compile_fx", recording)
    compiler = _Compiler(BackendOptions(inductor=mode, cudagraphs=False))
    x = torch.randn(4, 8)
    with torch.no_grad():
        out = torch.compile(lambda t: torch.relu(t) * 2, backend=compiler, dynamic=False)(x)  # no matmul: declined
        assert torch.equal(out, torch.relu(x) * 2) and seen == [False]  # a CPU graph: Inductor's defaults
        monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda t: True))
        torch._dynamo.reset()
        torch.compile(lambda t: torch.relu(t) * 3, backend=compiler, dynamic=False)(x)
    monkeypatch.undo()
    assert seen == [False, mode == "max-autotune"] and "no matmul" in compiler.stats.declined[0]
