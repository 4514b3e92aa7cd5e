"""Which Optuna sampler a search draws its trials from: TPE (multivariate, grouped: the space is conditional),
exhaustive, random, or ranked by the cost model (the fastest-predicted plans first)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import optuna
import torch

from fusionsearch.search.objective import Objective
from fusionsearch.search.options import SearchOptions
from fusionsearch.search.ranked import PlanRanking


class BruteForce(optuna.samplers.BruteForceSampler):
    """Exhaustive search that records exhaustion instead of calling study.stop(), which only works inside
    study.optimize(); the claim loop stops on `exhausted`."""

    exhausted = False

    def after_trial(self, study: optuna.Study, trial: Any, state: Any, values: Any) -> None:
        try:
            super().after_trial(study, trial, state, values)
        except RuntimeError:
            self.exhausted = True


def sampler_name(options: SearchOptions, objective: Objective) -> str:
    """The sampler a search uses: the one asked for; auto ranks by a learned cost model, else TPE."""
    if options.sampler != "auto":
        return options.sampler
    return "ranked" if objective.model is not None else "tpe"


def make_sampler(name: str, seed: int, objective: Objective) -> optuna.samplers.BaseSampler:
    """The Optuna sampler named `name` (SAMPLERS), drawing from `seed`; the ranked one reads the objective's
    current cost model."""
    if name == "brute":
        return BruteForce(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "ranked":
        ranking = PlanRanking(objective.space, objective.hw, lambda: objective.model,
                              lambda plan: not objective.bytes_rule_refuses(plan), seed,
                              compile_top=objective.options.compile_ranked, arch=_arch(),
                              check=lambda step, done, total: objective.watch.check(step, done, total))
        return RankedSampler(ranking, lambda: objective.model_version, seed)
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=8)


def _arch() -> int:
    """The compute capability kernels are compiled for to read their resources: this GPU's, else sm_90."""
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return 10 * major + minor
    return 90


def _key(params: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """Parameters as a hashable value, to tell the plans already taken."""
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
