"""Measure few (issue 54 item 4): where a learned model ranks the plans a search measures, it measures at most
SearchOptions.measure of them (8), and calibrates the model on its first measurements (a refit after
FIRST_REFIT plans) early enough that the trials after it follow the corrected model.

The GPU is a stand-in: a judge whose kernel times are the model's own predictions, every Triton kernel
QUIRK times slower (a device the model was not trained on), the library's matmul as the model prices it. On
it the model's first choices are slow and the library plan, which the model ranks past the 8th, is the
fastest: only a correction made within the 8 measured plans can find it."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import fusionsearch as fs
from fusionsearch.costmodel import H200, fits
from fusionsearch.costmodel.features import ANALYTIC_FEATURE, plan_features, to_matrix
from fusionsearch.costmodel.learned import LearnedCostModel
from fusionsearch.costmodel.pricing import plan_time_us
from fusionsearch.costmodel.refit import FIRST_REFIT, StudyRefit
from fusionsearch.errors import CostModelError, SpecError
from fusionsearch.measure.judge import Judgement
from fusionsearch.measure.requests import Candidate
from fusionsearch.plan import Plan
from fusionsearch.search.loop import run_trials
from fusionsearch.search.options import MEASURE
from fusionsearch.search.session import open_session, setup
from fusionsearch.search.space import enumerate_space
from fusionsearch.search.study import SearchOptions, run_study

G = fs.workload("mm_bias_gelu", dtype=torch.float16, M=4096, K=1024, N=1024)
MAX_CONFIGS = 24
QUIRK = 3.0


def _belief(f: dict[str, float]) -> float:
    """What the model learned: the roofline, distorted by a few tile choices."""
    if not f["kind_template"]:
        return f[ANALYTIC_FEATURE]
    return f[ANALYTIC_FEATURE] * (1 + 0.5 * (f["num_warps"] == 8) + 0.3 * (f["block_n"] >= 128)
                                  + 0.2 * (f["split_k"] > 1))


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    space = enumerate_space(G, lambda g, mm, cfg: fits(g, mm, cfg, H200), MAX_CONFIGS, library=True)
    rows = [f for _, p in space.distinct_plans(list(space.every_params())) for f in plan_features(p, H200)]
    model = LearnedCostModel(max_iter=40, n_bags=1).fit(to_matrix(rows), [_belief(f) for f in rows], hardware=H200)
    return model.save(str(tmp_path_factory.mktemp("measure-few") / "model.npz"))


class StandIn:
    """The stand-in GPU: each kernel's time is the model's prediction, QUIRK times that for Triton kernels."""

    def __init__(self, model_path: str) -> None:
        from fusionsearch.costmodel.learned import load_cached

        self.model = load_cached(model_path)
        self.judged: list[str] = []

    def kernel_us(self, plan: Plan) -> list[float]:
        pred = self.model.predict(to_matrix(plan_features(plan, H200)))
        return [float(us) * (1.0 if k.kind == "library" else QUIRK) for us, k in zip(pred, plan.kernels, strict=True)]

    def judge(self, plan: Candidate, kernels: bool = False) -> Judgement:
        plan_json = plan.plan_json
        self.judged.append(plan_json)
        us = self.kernel_us(Plan.from_json(plan_json, G))
        return Judgement(True, rel_err=0.0, median_us=sum(us), kernel_us=tuple(us) if kernels else None)

    def close(self) -> None:
        pass


def _options(model_path: str, **kw: Any) -> SearchOptions:
    return SearchOptions(**{"trials": 32, "backend": "gpu", "cost_model": model_path, "compile_workers": 0,
                            "max_configs": MAX_CONFIGS, "finalists": 0, "prune_margin": 100.0, **kw})


def _ranked(model_path: str) -> tuple[list[str], str]:
    """The model's order of the space's plans (JSON), and the stand-in's fastest plan."""
    from fusionsearch.costmodel.learned import load_cached

    model, gpu = load_cached(model_path), StandIn(model_path)
    space = enumerate_space(G, lambda g, mm, cfg: fits(g, mm, cfg, H200), MAX_CONFIGS, library=True)
    plans = [p for _, p in space.distinct_plans(list(space.every_params()))]
    order = sorted(plans, key=lambda p: plan_time_us(model, p, H200))
    return [p.to_json() for p in order], min(plans, key=lambda p: sum(gpu.kernel_us(p))).to_json()


def test_a_search_ranked_by_a_learned_model_measures_at_most_8_plans_and_its_refit_finds_the_fastest(
        model_path: str) -> None:
    order, fastest = _ranked(model_path)
    assert order.index(fastest) >= MEASURE  # the scenario: the model alone would not measure it
    assert MEASURE == 8 and SearchOptions().measure == MEASURE

    gpu = StandIn(model_path)
    res = run_study(G, _options(model_path), judge=gpu)
    assert len(gpu.judged) == MEASURE and len(res.trials) == MEASURE  # 32 trials asked: 8 run, each measured
    assert res.best.to_json() == fastest
    assert res.best_us == pytest.approx(sum(gpu.kernel_us(res.best)))
    measured = sorted((t for t in res.trials if t.status == "measured"), key=lambda t: t.number)
    refitted = [t.number for t in measured if "refitted" in t.refit]
    assert refitted == [measured[FIRST_REFIT - 1].number, measured[FIRST_REFIT - 1 + 4].number]  # 2, then every 4
    assert gpu.judged[:FIRST_REFIT] == order[:FIRST_REFIT]  # before the first correction: the model's order
    assert gpu.judged[FIRST_REFIT:] != order[FIRST_REFIT:MEASURE]  # after it: re-ranked
    assert fastest in gpu.judged[FIRST_REFIT:]

    plain = StandIn(model_path)  # the same search without the correction measures the model's first 8
    res = run_study(G, _options(model_path, refit_every=0), judge=plain)
    assert plain.judged == order[:MEASURE] and res.best.to_json() != fastest


def test_the_bound_is_an_option_and_applies_only_where_a_learned_model_ranks_measured_plans(model_path: str) -> None:
    gpu = StandIn(model_path)
    run_study(G, _options(model_path, measure=3), judge=gpu)
    assert len(gpu.judged) == 3
    gpu = StandIn(model_path)
    run_study(G, _options(model_path, measure=0, trials=12), judge=gpu)  # 0: as many as trials
    assert len(gpu.judged) == 12
    gpu = StandIn(model_path)
    run_study(G, _options(model_path, sampler="random", trials=12), judge=gpu)  # not ranked: trials decide
    assert len(gpu.judged) == 12
    res = run_study(G, _options(model_path, backend="model", trials=12))  # nothing measured: no bound
    assert len(res.trials) == 12
    for bad in (-1, 1.5, True):
        with pytest.raises(SpecError, match="measure"):
            SearchOptions(measure=bad)  # type: ignore[arg-type]


class FakePool:
    """A compile pool of 8 processes that compiles nothing: records how many plans each batch held."""

    workers = 8

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def warm(self, graph: dict[str, Any], plans: list[Candidate]) -> list[str]:
        self.batches.append([p.plan_json for p in plans])
        return [""] * len(plans)


def test_batches_never_span_a_refit_so_the_corrected_model_draws_the_next_plans(model_path: str) -> None:
    order, fastest = _ranked(model_path)
    options = _options(model_path)
    gpu = StandIn(model_path)
    session = open_session(G, options, setup(G, options, judge=gpu), None)
    session.objective.judge = gpu
    pool = FakePool()
    run_trials(session.slots, session.objective, None, None, pool)
    assert [len(b) for b in pool.batches] == [2, 4, 2]  # the first refit after 2, then every 4
    assert pool.batches[0] == order[:2]
    assert fastest in pool.batches[1]  # drawn by the model corrected on the first batch


def test_the_first_refit_comes_early_then_every_few(model_path: str) -> None:
    from fusionsearch.costmodel.learned import load_cached

    plan = fs.plan.unfused(G)
    times = [10.0] * len(plan.kernels)
    refit = StudyRefit(load_cached(model_path), H200, every=4, first=FIRST_REFIT)
    assert FIRST_REFIT == 2 and refit.until_due() == 2
    assert [refit.add(plan, times), refit.add(plan, times)] == [False, True]
    refit.refit()
    assert refit.until_due() == 4
    assert [refit.add(plan, times) for _ in range(4)] == [False, False, False, True]
    assert StudyRefit(refit.base, H200, every=6).until_due() == 6  # without `first`: every N from the start
    with pytest.raises(CostModelError, match="positive"):
        StudyRefit(refit.base, H200, every=4, first=0)
