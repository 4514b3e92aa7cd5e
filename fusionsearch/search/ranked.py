"""Ranking a space's plans by the cost model, fastest predicted first: what the study's ranked sampler measures.

Each trial takes the fastest-predicted plan that no trial of the study has taken yet. When the search corrects
its learned model on what it measured, the not-yet-taken plans are re-ranked by the new model, so the rest of
the budget follows what this graph's own measurements taught it. Candidate plans and their features are built
once; a re-rank is one call of the regressor. A space too large to rank whole is ranked on a sample, to which
the first learned ranking adds the plans met descending from the sample's best (`descend`): the model's
fastest plan of a three-matmul space is rarely in a sample. (The Optuna sampler over it lives in samplers.py,
with Optuna.)"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from fusionsearch.errors import PlanError
from fusionsearch.plan import Plan
from fusionsearch.search.space import Space, seed_plans

__all__ = ["RANK_CANDIDATES", "PlanRanking", "compile_fastest", "descend"]

RANK_CANDIDATES = 4096  # the whole space is ranked up to this size, a seeded random sample of it beyond
DESCENT_STARTS, DESCENT_SWEEPS = 4, 3  # beyond it: descents from the best-predicted of the sample (`descend`)
# The plans one descent may build and price: bounded, as the sample is, whatever the graph's size. Unbounded, a
# sweep built every option of every parameter, each plan as large as the graph, so that the work grew as the
# square of the graph (chains of 10, 20, 40 matmuls: 25, 95 and over 300 s here, for a 2-trial search).
DESCENT_BUDGET = 1024


class PlanRanking:
    """The space's distinct legal plans (those `admit` accepts), ordered by predicted time under the model
    that `model_of()` returns at the time of the call: a learned cost model, or None for the analytic one.

    Built on first use, not when made: ranking thousands of plans takes seconds, which belong to the search's
    time (its --timeout) and progress. `check(step, done, total)` is called between pieces of that work (a
    chunk of plans, a descent step); it may raise to stop it (search.progress.Watch: TimeUp)."""

    def __init__(self, space: Space, hw: Any, model_of: Callable[[], Any], admit: Callable[[Plan], bool],
                 seed: int = 0, compile_top: int = 0, arch: int = 90,
                 check: Callable[[str, int, int], None] | None = None) -> None:
        self.model_of, self.hw = model_of, hw
        self.compile_top, self.arch = compile_top, arch
        self.compiled = 0  # candidates whose templates were compiled for the GPU and priced with their figures
        self.space, self.admit, self.seed = space, admit, seed
        self.check = check or (lambda step, done, total: None)
        self.descended = 0  # candidates added by descending from the best-predicted ones (`_add_descents`)
        self._built = False
        self.params: list[dict[str, str]] = []
        self._plans: list[Plan] = []
        self._analytic = np.zeros(0)
        self._features: tuple[np.ndarray, np.ndarray] | None = None  # built on the first learned ranking

    def _build(self) -> None:
        """The candidates (distinct, admitted) and their analytic times, checked every CHUNK plans."""
        if self._built:
            return
        from fusionsearch.costmodel.analytic import estimate

        candidates = _candidates(self.space, self.seed)
        kept = [(params, plan) for params, plan in self.space.distinct_plans(
                _checked(candidates, self.check, "building the plans to rank")) if self.admit(plan)]
        self.params = [p for p, _ in kept]
        self._plans = [plan for _, plan in kept]
        self._analytic = np.array([estimate(p, self.hw).time_us
                                   for p in _checked(self._plans, self.check, "pricing the plans")])
        self._built = True

    def __len__(self) -> int:
        self._build()
        return len(self.params)

    def predicted_us(self) -> np.ndarray:
        """Each candidate's predicted time (µs) under the current model."""
        self._build()
        model = self.model_of()
        if model is None or not self._plans:
            return self._analytic
        from fusionsearch.costmodel.pricing import per_plan

        if self._features is None:
            self._features = _matrix(self._plans, self.hw, self.check)
            if self.space.size() > RANK_CANDIDATES:  # a sample of the space: its model-best may lie outside
                self._add_descents(model)
            if self.compile_top > 0:
                self.check("compiling the fastest-predicted plans", 0, self.compile_top)
                self.compiled += compile_fastest(model, self._plans, *self._features, self.hw, self.compile_top,
                                                 self.arch)
        X, starts = self._features
        return per_plan(_predict(model, X, self.check), starts)

    def _add_descents(self, model: Any) -> None:
        """Add to the candidates the plans met descending (`descend`) from the DESCENT_STARTS best-predicted."""
        from fusionsearch.costmodel.analytic import estimate
        from fusionsearch.costmodel.pricing import per_plan, plan_times_us, plans_matrix

        assert self._features is not None
        X, starts = self._features
        known = set(self._plans)  # by value: one graph's plans are equal when their JSON is
        new: list[tuple[dict[str, str], Plan]] = []
        priced = [0]

        def price(plans: list[Plan]) -> np.ndarray:
            self.check("descending from the best-predicted plans", priced[0], 0)
            priced[0] += len(plans)
            return np.asarray(plan_times_us(model, plans, self.hw))

        for i in np.argsort(per_plan(_predict(model, X, self.check), starts), kind="stable")[:DESCENT_STARTS]:
            for params, plan in descend(self.space, self.params[i], price, self.admit):
                if plan not in known:
                    known.add(plan)
                    new.append((params, plan))
        if new:
            X_new, starts_new = plans_matrix([plan for _, plan in new], self.hw)
            self._features = (np.concatenate([X, X_new]),
                              np.concatenate([starts, [len(X)], starts_new + len(X)]).astype(starts.dtype))
            self.params += [params for params, _ in new]
            self._plans += [plan for _, plan in new]
            self._analytic = np.concatenate([self._analytic, [estimate(plan, self.hw).time_us for _, plan in new]])
            self.descended += len(new)

    def order(self) -> list[dict[str, str]]:
        """The candidates' parameters, fastest predicted first."""
        return [self.params[i] for i in np.argsort(self.predicted_us(), kind="stable")]


CHUNK = 256  # plans built, priced or featurized between two checks (a fraction of a second on a CPU)


def _checked(items: list[Any], check: Callable[[str, int, int], None], step: str) -> Iterator[Any]:
    """`items` one by one, calling `check(step, done, total)` before every CHUNK of them."""
    for i, item in enumerate(items):
        if i % CHUNK == 0:
            check(step, i, len(items))
        yield item


def _matrix(plans: list[Plan], hw: Any, check: Callable[[str, int, int], None]) -> tuple[np.ndarray, np.ndarray]:
    """plans_matrix of `plans`, built CHUNK plans at a time between checks."""
    from fusionsearch.costmodel.pricing import plans_matrix

    parts, starts, rows = [], [], 0
    for i in range(0, len(plans), CHUNK):
        check("reading the plans' features", i, len(plans))
        X, chunk_starts = plans_matrix(plans[i:i + CHUNK], hw)
        starts += ([rows] if i else []) + [rows + s for s in chunk_starts.tolist()]
        parts.append(X)
        rows += len(X)
    return np.concatenate(parts), np.asarray(starts, dtype=np.int64)


def _predict(model: Any, X: np.ndarray, check: Callable[[str, int, int], None]) -> np.ndarray:
    """model.predict(X), CHUNK * 4 kernel rows at a time between checks."""
    size = CHUNK * 4
    out = []
    for i in range(0, len(X), size):
        check("predicting the plans' times", i, len(X))
        out.append(np.asarray(model.predict(X[i:i + size])))
    return np.concatenate(out) if out else np.zeros(0)


def compile_fastest(model: Any, plans: list[Plan], X: np.ndarray, starts: np.ndarray, hw: Any, top: int,
                    arch: int = 90) -> int:
    """Compile the `top` plans `model` predicts fastest for the GPU (on the CPU, in parallel) and write their
    templates' registers, spills and shared memory into their rows of `X` (plans_matrix's rows of `plans`,
    in place), which the learned model reads where it has them; returns how many plans compiled (one that
    does not keeps its prediction; its trial will say why)."""
    from fusionsearch.codegen.resources import many_plan_resources
    from fusionsearch.costmodel.features import FEATURE_NAMES, plan_features
    from fusionsearch.costmodel.pricing import per_plan

    first = np.argsort(per_plan(model.predict(X), starts), kind="stable")[:top]
    bounds = np.concatenate([[0], starts, [len(X)]])
    compiled = 0
    for i, found in zip(first, many_plan_resources([plans[i] for i in first], arch), strict=True):
        if found is not None:
            rows = plan_features(plans[i], hw, found)
            X[bounds[i]:bounds[i + 1]] = [[f[name] for name in FEATURE_NAMES] for f in rows]
            compiled += 1
    return compiled


def descend(space: Space, start: dict[str, str], price: Callable[[list[Plan]], np.ndarray],
            admit: Callable[[Plan], bool]) -> list[tuple[dict[str, str], Plan]]:
    """Coordinate descent under a cost model: from `start`, each trial parameter in turn set to the choice
    `price` finds fastest with the others held, until a sweep changes nothing (at most DESCENT_SWEEPS). A plan's
    time is about the sum of its kernels', each set by its own matmul's config, so the model's fastest plan is a
    sweep or two from any start, while a sample of RANK_CANDIDATES of swiglu's 2.6 million plans rarely holds it.
    At most DESCENT_BUDGET plans are built: a large graph's descent stops, with what it found, when the next
    parameter's options would pass it. Returns the (parameters, plan) of each step taken."""
    current, steps = dict(start), []
    best = float(price([space.plan(current)])[0])
    built = 1
    for _ in range(DESCENT_SWEEPS):
        moved = False
        for name, options in space.parameter_choices().items():
            built += len(options) - 1
            if built > DESCENT_BUDGET:
                return steps
            tries = []
            for option in options:
                if option != current[name]:
                    with contextlib.suppress(PlanError):
                        params = {**current, name: option}
                        if admit(plan := space.plan(params)):
                            tries.append((params, plan))
            if not tries:
                continue
            times = price([plan for _, plan in tries])
            if float(times.min()) < best:
                best, (current, plan) = float(times.min()), tries[int(times.argmin())]
                steps.append((current, plan))
                moved = True
        if not moved:
            break
    return steps


def _candidates(space: Space, seed: int) -> list[dict[str, str]]:
    """The whole space when it is small; otherwise the seed plans (the heuristic and unfused plans on the
    known-good tile configs, which a random sample of a multi-matmul space almost never contains: swiglu's
    best measured plan on the H200 is one of them) and a seeded random sample."""
    if space.size() <= RANK_CANDIDATES:
        return list(space.every_params())
    rng, choices, seen = random.Random(seed), space.parameter_choices(), set()
    out = []
    for params in seed_plans(space):  # full parameter sets (Space.params_for)
        if (key := tuple(params[name] for name in choices)) not in seen:
            seen.add(key)
            out.append(params)
    for _ in range(4 * RANK_CANDIDATES):
        params = {name: rng.choice(options) for name, options in choices.items()}
        if (key := tuple(params.values())) not in seen:
            seen.add(key)
            out.append(params)
            if len(out) >= RANK_CANDIDATES:
                break
    return out
