"""The ranked sampler: trials take the cost model's fastest-predicted plans in order, never one twice, and
re-rank what is left when the model changes (a refit)."""

from __future__ import annotations

from typing import Any

import numpy as np
import optuna
import pytest

import fusionsearch as fs
from fusionsearch.costmodel.analytic import estimate, fits
from fusionsearch.costmodel.features import ANALYTIC_FEATURE, FEATURE_NAMES, HARDWARE_FEATURES
from fusionsearch.search.ranked import PlanRanking
from fusionsearch.search.samplers import RankedSampler
from fusionsearch.search.space import enumerate_space

optuna.logging.set_verbosity(optuna.logging.WARNING)


class _Reversed:
    """A 'learned' model that ranks plans slowest-roofline first."""

    def predict(self, X: np.ndarray) -> np.ndarray:
        return 1e6 - X[:, FEATURE_NAMES.index(ANALYTIC_FEATURE)]


def _space() -> Any:
    g = fs.workload("mm_bias_gelu", M=16, K=64, N=96)
    return enumerate_space(g, lambda gg, mm, cfg: fits(gg, mm, cfg), 3)


def test_the_ranking_holds_each_legal_admitted_plan_once_in_predicted_order() -> None:
    space = _space()
    ranking = PlanRanking(space, fs.costmodel.H200, lambda: None, lambda plan: len(plan.kernels) > 1)
    plans = [space.plan(p) for p in ranking.order()]
    assert len({p.to_json() for p in plans}) == len(plans) == len(ranking) > 1
    assert all(len(p.kernels) > 1 for p in plans)  # the admitted ones only
    times = [estimate(p).time_us for p in plans]
    assert times == sorted(times)


def test_trials_take_the_next_untaken_plan_and_follow_a_refitted_model() -> None:
    space = _space()
    state: dict[str, Any] = {"model": None, "version": 0}
    ranking = PlanRanking(space, fs.costmodel.H200, lambda: state["model"], lambda plan: True)
    analytic_order = ranking.order()
    study = optuna.create_study(sampler=RankedSampler(ranking, lambda: state["version"]))
    taken = []
    for _ in range(3):
        trial = study.ask()
        taken.append(space.suggest(trial))
        study.tell(trial, 1.0)
    assert taken == analytic_order[:3]
    state["model"], state["version"] = _Reversed(), 1  # the search refitted its model
    trial = study.ask()
    new_first = next(p for p in ranking.order() if p not in taken)  # the new model's best not yet measured
    assert new_first != analytic_order[3]
    assert space.suggest(trial) == new_first
    taken.append(new_first)
    study.tell(trial, 1.0)
    for _ in range(len(ranking) - 4):  # every other plan once
        trial = study.ask()
        taken.append(space.suggest(trial))
        study.tell(trial, 1.0)
    keys = [tuple(sorted(p.items())) for p in taken]
    assert len(set(keys)) == len(keys) == len(ranking)


class _ReadsSpills:
    """A 'learned' model that prices the roofline, plus a penalty for stack bytes where a row has them."""

    def predict(self, X: np.ndarray) -> np.ndarray:
        stack = np.nan_to_num(X[:, FEATURE_NAMES.index("stack_bytes")])
        return X[:, FEATURE_NAMES.index(ANALYTIC_FEATURE)] + stack


def test_the_fastest_predicted_plans_are_compiled_and_priced_again_with_their_spills(monkeypatch: Any) -> None:
    """compile_top: the N plans the blind model puts first get their templates' compiled figures; one that
    spills falls back, one that does not compile keeps its place, the rest are not compiled."""
    from fusionsearch.codegen import resources
    from fusionsearch.codegen.resources import KernelResources

    space = _space()
    blind = PlanRanking(space, fs.costmodel.H200, lambda: _ReadsSpills(), lambda plan: True).order()
    compiled: list[str] = []

    def fake(plans: list[Any], arch: int = 90, workers: Any = None) -> list[Any]:
        assert arch == 90
        compiled.extend(p.to_json() for p in plans)
        out: list[Any] = []
        for i, p in enumerate(plans):
            spills = KernelResources(registers=255, stack_bytes=10**6, shared_bytes=1024)
            clean = KernelResources(registers=96, stack_bytes=0, shared_bytes=1024)
            out.append(None if i == 1 else [(spills if i == 0 else clean) if k.kind == "template" else None
                                            for k in p.kernels])
        return out

    monkeypatch.setattr(resources, "many_plan_resources", fake)
    ranking = PlanRanking(space, fs.costmodel.H200, lambda: _ReadsSpills(), lambda plan: True, compile_top=3)
    order = ranking.order()
    assert compiled == [space.plan(p).to_json() for p in blind[:3]] and ranking.compiled == 2
    assert order[-1] == blind[0]  # the plan predicted fastest spills: now last
    assert order[:len(blind) - 1] == blind[1:]  # the others keep their order (one did not compile)
    assert PlanRanking(space, fs.costmodel.H200, lambda: _ReadsSpills(), lambda plan: True,
                       compile_top=0).order() == blind


def test_a_space_too_large_to_rank_whole_still_ranks_its_seed_plans() -> None:
    """swiglu at M 2048 has three matmuls of 48 configs each: far over RANK_CANDIDATES, so a random sample is
    ranked. The heuristic and unfused plans on the known-good configs (on the H200 its best measured plan is
    one of them) are ranked too; a random sample of ~10^6 combinations would almost never hold them."""
    from fusionsearch.search.ranked import RANK_CANDIDATES, _candidates
    from fusionsearch.search.space import seed_plans

    g = fs.workload("swiglu", M=2048, D=4096, H=11008)
    space = enumerate_space(g, lambda gg, mm, cfg: fits(gg, mm, cfg), 48)
    assert space.size() > 50 * RANK_CANDIDATES
    candidates = _candidates(space, seed=0)
    assert len(candidates) == RANK_CANDIDATES
    keys = {tuple(sorted(c.items())) for c in candidates}
    seeds = seed_plans(space)
    assert len(seeds) >= 4
    assert all(tuple(sorted(s.items())) in keys for s in seeds)


class _Scrambled:
    """A 'learned' model that prices each kernel by its roofline estimate plus up to 60 µs set by its feature
    row (its config): plan times add up by kernel, and the fastest plan is nowhere the roofline would put it."""

    def predict(self, X: np.ndarray) -> np.ndarray:
        own = [i for i, name in enumerate(FEATURE_NAMES) if name not in HARDWARE_FEATURES]  # the plan's, not the GPU's
        return X[:, FEATURE_NAMES.index(ANALYTIC_FEATURE)] + 10.0 * (np.round(np.nansum(X[:, own], axis=1) * 1e3) % 7)


def test_a_sampled_space_gains_the_plans_met_descending_from_its_best_predicted(monkeypatch: Any) -> None:
    """Of swiglu's 648 plans (three matmuls, 6 choices each, 3 fusion options) a sample of 24 is ranked; the
    descent from the sample's best-predicted plans adds the model's fastest plan of the whole space, found
    here by pricing every plan."""
    import fusionsearch.search.ranked as ranked
    from fusionsearch.costmodel.pricing import plan_times_us

    g = fs.workload("swiglu", M=16, D=64, H=96)
    space = enumerate_space(g, lambda gg, mm, cfg: fits(gg, mm, cfg), 3)
    every = [plan for _, plan in space.distinct_plans()]
    fastest = min(plan_times_us(_Scrambled(), every, fs.costmodel.H200))
    monkeypatch.setattr(ranked, "RANK_CANDIDATES", 24)
    found = {}
    for starts in (0, ranked.DESCENT_STARTS):
        monkeypatch.setattr(ranked, "DESCENT_STARTS", starts)
        ranking = PlanRanking(space, fs.costmodel.H200, lambda: _Scrambled(), lambda plan: True)
        found[starts] = (float(ranking.predicted_us().min()), ranking.descended, len(ranking))
    sampled, descended = found[0], found[ranked.DESCENT_STARTS]
    assert sampled[1] == 0 and sampled[0] > fastest * 1.01  # the sample alone misses it
    assert descended[0] == pytest.approx(fastest) and descended[1] > 0 and descended[2] == sampled[2] + descended[1]


def test_a_descent_builds_at_most_its_budget_of_plans(monkeypatch: Any) -> None:
    """Issue 53 item 17: a descent built every option of every parameter each sweep, each plan as large as the
    graph, so its work grew as the square of the graph (40 chained matmuls: minutes for a 2-trial search)."""
    import fusionsearch.search.ranked as ranked
    from fusionsearch.costmodel.pricing import plan_times_us

    g = fs.workload("swiglu", M=16, D=64, H=96)
    space = enumerate_space(g, lambda gg, mm, cfg: fits(gg, mm, cfg), 3)
    start = space.params_for({})
    built = []
    original = type(space).plan
    monkeypatch.setattr(type(space), "plan", lambda self, params: built.append(1) or original(self, params))

    def price(plans: list[Any]) -> np.ndarray:
        return np.asarray(plan_times_us(_Scrambled(), plans, fs.costmodel.H200))

    free = ranked.descend(space, start, price, lambda plan: True)
    unbounded = len(built)
    assert unbounded > 12 and free
    monkeypatch.setattr(ranked, "DESCENT_BUDGET", 12)
    built.clear()
    ranked.descend(space, start, price, lambda plan: True)
    assert 0 < len(built) <= 12
