"""The ranked sampler: measure plans in the cost model's predicted order, fastest first.

Each trial takes the fastest-predicted plan that no trial of the study has taken yet. When the search refits
its learned model on what it measured, the not-yet-taken plans are re-ranked by the new model, so the rest of
the budget follows what this graph's own measurements taught it. Candidate plans and their features are built
once; a re-rank is one call of the regressor."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import optuna

from fusionsearch.errors import PlanError
from fusionsearch.search.plan import Plan
from fusionsearch.search.space import Space

__all__ = ["RANK_CANDIDATES", "PlanRanking", "RankedSampler"]

RANK_CANDIDATES = 4096  # the whole space is ranked up to this size, a seeded random sample of it beyond


class PlanRanking:
    """The space's distinct legal plans (those `admit` accepts), ordered by predicted time under the model
    that `model_of()` returns at the time of the call: a learned cost model, or None for the analytic one."""

    def __init__(self, space: Space, hw: Any, model_of: Callable[[], Any], admit: Callable[[Plan], bool],
                 seed: int = 0) -> None:
        from fusionsearch.costmodel.analytic import estimate

        self.model_of, self.hw = model_of, hw
        plans: dict[str, tuple[dict[str, str], Plan]] = {}
        for params in _candidates(space, seed):
            try:
                plan = space.plan(params)
            except PlanError:
                continue
            if admit(plan):
                plans.setdefault(plan.to_json(), (params, plan))
        self.params = [p for p, _ in plans.values()]
        self._plans = [plan for _, plan in plans.values()]
        self._analytic = np.array([estimate(p, hw).time_us for p in self._plans])
        self._features: tuple[np.ndarray, np.ndarray] | None = None  # built on the first learned ranking

    def __len__(self) -> int:
        return len(self.params)

    def predicted_us(self) -> np.ndarray:
        """Each candidate's predicted time (µs) under the current model."""
        model = self.model_of()
        if model is None or not self._plans:
            return self._analytic
        from fusionsearch.costmodel.learned import per_plan, plans_matrix

        if self._features is None:
            self._features = plans_matrix(self._plans, self.hw)
        X, starts = self._features
        return per_plan(model.predict(X), starts)

    def order(self) -> list[dict[str, str]]:
        """The candidates' parameters, fastest predicted first."""
        return [self.params[i] for i in np.argsort(self.predicted_us(), kind="stable")]


def _candidates(space: Space, seed: int) -> list[dict[str, str]]:
    if space.size() <= RANK_CANDIDATES:
        return list(space.every_params())
    rng, choices, seen = random.Random(seed), space.parameter_choices(), set()
    out = []
    for _ in range(4 * RANK_CANDIDATES):
        params = {name: rng.choice(options) for name, options in choices.items()}
        if (key := tuple(params.values())) not in seen:
            seen.add(key)
            out.append(params)
            if len(out) >= RANK_CANDIDATES:
                break
    return out


def _key(params: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, str(v)) for k, v in params.items()))


class RankedSampler(optuna.samplers.BaseSampler):
    """Optuna sampler over a PlanRanking: a trial's parameters are those of the fastest-predicted plan not
    yet taken by any trial of the study (re-ranked when `version_of()` changes, i.e. the model was refitted);
    once every candidate is taken, parameters are drawn at random."""

    def __init__(self, ranking: PlanRanking, version_of: Callable[[], int], seed: int = 0) -> None:
        self.ranking, self.version_of = ranking, version_of
        self._order: list[dict[str, str]] | None = None
        self._version: int | None = None
        self._picked: dict[int, dict[str, str] | None] = {}
        self._random = optuna.samplers.RandomSampler(seed=seed)

    def infer_relative_search_space(self, study: optuna.Study, trial: Any) -> dict[str, Any]:
        return {}

    def sample_relative(self, study: optuna.Study, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
        return {}

    def sample_independent(self, study: optuna.Study, trial: Any, param_name: str, param_distribution: Any) -> Any:
        if trial.number not in self._picked:
            self._picked[trial.number] = self._next(study)
        params = self._picked[trial.number]
        if params is None or param_name not in params:
            return self._random.sample_independent(study, trial, param_name, param_distribution)
        return params[param_name]

    def _next(self, study: optuna.Study) -> dict[str, str] | None:
        version = self.version_of()
        if self._order is None or version != self._version:
            self._order, self._version = self.ranking.order(), version
        taken = {_key(t.params) for t in study.get_trials(deepcopy=False)}
        taken |= {_key(p) for p in self._picked.values() if p is not None}
        return next((p for p in self._order if _key(p) not in taken), None)
