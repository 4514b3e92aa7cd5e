"""The search's finalists: on the GPU backend the fastest measured plans are timed again side by side and
the fastest by that wins, because one plan's first figure can be a lucky moment of the GPU (the suite's H200
run timed the same plan 896 µs in the search and 999 µs a minute later). The GPU is simulated: a judge
whose first figures carry a per-plan luck factor and whose re-timing gives the true times."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import torch

import fusionsearch as fs
from fusionsearch.errors import SpecError
from fusionsearch.measure.isolate import MeasureWorker
from fusionsearch.measure.judge import InProcessJudge, Judgement
from fusionsearch.measure.requests import Candidate
from fusionsearch.search.study import SearchOptions, run_study

G = fs.workload("mm_bias_gelu", dtype=torch.float16, M=32, K=256, N=256)  # the interpreter miscomputes bf16


def _unit(text: str, salt: str) -> float:
    """A fixed pseudo-random number in [0, 1) for this plan."""
    return int(hashlib.sha1((salt + text).encode()).hexdigest()[:8], 16) / 2**32


def true_us(plan_json: str) -> float:
    return 100.0 + 50.0 * _unit(plan_json, "true")


class SimulatedGPU:
    """First figures: the true time times a luck factor in [0.75, 1.25); retime: the true times."""

    def __init__(self, retime_error: Exception | None = None) -> None:
        self.retimed: list[list[str]] = []
        self.retime_error = retime_error

    def judge(self, plan: Candidate, kernels: bool = False) -> Judgement:
        plan_json = plan.plan_json
        return Judgement(True, rel_err=0.0, median_us=true_us(plan_json) * (0.75 + 0.5 * _unit(plan_json, "luck")))

    def retime(self, plans: list[Candidate], rounds: int = 5) -> list[float | None]:
        plan_jsons = [p.plan_json for p in plans]
        self.retimed.append(plan_jsons)
        if self.retime_error:
            raise self.retime_error
        return [true_us(p) for p in plan_jsons]

    def close(self) -> None:
        pass


def search(gpu: Any, finalists: int = 3) -> Any:
    # seed 3: its luck draws make the first-pass winner a wrong pick (seed 2 did before the known-good list grew)
    opts = SearchOptions(trials=16, backend="gpu", sampler="random", cost_model="analytic", compile_workers=0,
                         prune_margin=100.0, max_configs=8, finalists=finalists, seed=3, library=False)
    return run_study(G, opts, judge=gpu)


def first_figures(result: Any) -> list[tuple[float, str]]:
    """(first figure, plan JSON) of every measured trial, fastest first, one per plan."""
    seen: dict[str, float] = {}
    for t in result.trials:
        if t.status == "measured":
            seen.setdefault(result.space.plan(t.params).to_json(), t.value_us)
    return sorted((us, p) for p, us in seen.items())


def test_the_fastest_finalist_by_the_second_timing_wins() -> None:
    gpu = SimulatedGPU()
    result = search(gpu)
    ranked = first_figures(result)
    top3 = [p for _, p in ranked[:3]]
    assert gpu.retimed == [top3]  # the three fastest first figures, fastest first
    truly_best = min(top3, key=true_us)
    assert truly_best != top3[0], "the luck factors of this seed should make the first-pass winner a wrong pick"
    assert result.best.to_json() == truly_best
    assert result.best_us == pytest.approx(true_us(truly_best))
    finals = result.extra["finalists"]
    assert [f["final_us"] for f in finals] == pytest.approx([true_us(p) for p in top3])
    assert [f["first_us"] for f in finals] == pytest.approx([us for us, _ in ranked[:3]])
    assert "the 3 fastest timed again side by side" in result.explain().splitlines()[0]
    assert result.to_dict()["finalists"] == finals


def test_without_finalists_the_first_figures_decide() -> None:
    gpu = SimulatedGPU()
    result = search(gpu, finalists=0)
    assert gpu.retimed == [] and "finalists" not in result.extra
    us, plan = first_figures(result)[0]
    assert result.best.to_json() == plan and result.best_us == pytest.approx(us)


def test_a_failed_retiming_leaves_the_first_figures() -> None:
    gpu = SimulatedGPU(retime_error=RuntimeError("the measurement worker died"))
    result = search(gpu)
    us, plan = first_figures(result)[0]
    assert len(gpu.retimed) == 1
    assert result.best.to_json() == plan and result.best_us == pytest.approx(us)


@pytest.mark.parametrize("bad", [-1, 2.5, True])
def test_finalists_must_be_a_whole_number(bad: object) -> None:
    with pytest.raises(SpecError, match="finalists"):
        SearchOptions(finalists=bad)  # type: ignore[arg-type]


def _plans() -> list[str]:
    from fusionsearch.plan import build_plan, fully_fused

    return [fully_fused(G).to_json(), build_plan(G, {}).to_json()]


def test_retime_plans_times_each_plan_in_rounds_in_the_given_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """The judge side: each plan compiled (the interpreter here) and its median over the rounds returned in
    order; a plan that no longer loads gets None. The GPU timer is replaced by one that runs the callable
    and reports per plan fixed times."""
    import fusionsearch.measure.bench as bench

    inputs = fs.random_inputs(G, seed=0)
    ran: list[str] = []

    def rounds(fns: dict[str, Any], rounds: int) -> dict[str, list[float]]:
        out = {}
        for key, fn in fns.items():
            outs = fn()
            ran.append(key)
            assert outs[0].shape == (32, 256)
            out[key] = [10.0 * (int(key) + 1), 5.0, 30.0 * (int(key) + 1)][:rounds]
        return out

    monkeypatch.setattr(bench, "time_interleaved", rounds)
    judge = InProcessJudge(G, inputs)
    plans = _plans()
    assert judge.retime([plans[1], "not a plan", plans[0]], rounds=3) == [10.0, None, 30.0]
    assert ran == ["0", "2"]


def test_a_measurement_worker_retimes_without_a_gpu_as_nothing(caplog: pytest.LogCaptureFixture) -> None:
    """The worker's side of the protocol: on a CPU device there is nothing to time, so every plan comes back
    None (the search then keeps its first figures) and the timer's own reason is logged (the worker ran
    retime_plans, not its judge), and the worker still judges plans after it."""
    w = MeasureWorker(G.to_dict(), device="cpu")
    try:
        with caplog.at_level("WARNING", logger="fusionsearch.measure"):
            assert w.retime(_plans(), rounds=2) == [None, None]
        assert ("re-timing 2 plans in the measurement worker gave nothing: MeasureError: timing needs a CUDA GPU"
                in caplog.text)
        assert w.retime([], rounds=2) == []
        j = w.judge(_plans()[0])
        assert not j.ok and "GPU" in j.reason and j.rel_err is not None and j.rel_err < 1e-2
    finally:
        w.close()
