"""Refitting the learned cost model from a search's own measurements as they arrive.

The shipped model has never seen the graph being searched. After a few of its plans are measured kernel by
kernel, a small correction fitted on those kernels (the log ratio of measured to predicted time) says where
this graph departs from what the model learned: a prologue that costs more here, tile shapes that suit this
problem. The corrected model ranks the graph's remaining plans; it is fitted in a fraction of a second, so
the search refits every few measured plans, the first time early (FIRST_REFIT): a search measures few plans
(search.options.MEASURE), and a correction made after most of them were drawn would rank nothing. The search
calls `add` after each measured plan and swaps in `refit()`'s model when `add` says a refit is due; it draws
no more plans at a time than `until_due()`, so the plans after a correction are drawn by the corrected model."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fusionsearch.costmodel.features import plan_features, to_matrix
from fusionsearch.costmodel.hardware import Hardware
from fusionsearch.costmodel.learned import LearnedCostModel, blind_to_compiled, library_priced
from fusionsearch.errors import CostModelError
from fusionsearch.kinds import kind_of
from fusionsearch.plan import Plan

if TYPE_CHECKING:
    from sklearn.ensemble import HistGradientBoostingRegressor

__all__ = ["FIRST_REFIT", "CorrectedModel", "StudyRefit", "correct"]

FIRST_REFIT = 2  # measured plans before a search's first correction (then every `every`)


class StudyRefit:
    """The kernels a search measured, and the model corrected on them on demand.

    >>> # refit = StudyRefit(model, hw); due = refit.add(plan, [12.5, 40.1]); model = refit.refit() if due else model
    """

    def __init__(self, model: Any, hw: Hardware, every: int = 8, first: int | None = None) -> None:
        if every < 1 or (first is not None and first < 1):
            raise CostModelError(f"refit every {every} measured plans (the first after {first}): give positive "
                                 "numbers")
        self.base, self.hw, self.every = model, hw, every
        self.first = every if first is None else first  # plans before the first refit
        self._X: list[np.ndarray] = []
        self._y: list[float] = []
        self._since = 0
        self.refits = 0

    @property
    def measured_kernels(self) -> int:
        return len(self._y)

    def add(self, plan: Plan, kernel_us: Sequence[float]) -> bool:
        """Record one measured plan (one time per kernel, µs); True when a refit is due."""
        if len(kernel_us) != len(plan.kernels):
            raise CostModelError(f"{len(kernel_us)} kernel times for a plan of {len(plan.kernels)} kernels")
        X = to_matrix(plan_features(plan, self.hw))
        for row, t, k in zip(X, kernel_us, plan.kernels, strict=True):
            # a kind without a one-hot bit (the library) is priced by its analytic estimate, never by the model
            # being corrected (features.library_rows)
            if np.isfinite(t) and t > 0 and kind_of(k).onehot is not None:
                self._X.append(row)
                self._y.append(float(t))
        self._since += 1
        return self.until_due() == 0

    def until_due(self) -> int:
        """Measured plans still to add before the next refit is due (0: due now)."""
        return max(0, (self.every if self.refits else self.first) - self._since)

    def refit(self) -> Any:
        """The base model corrected on every kernel measured so far (the base model is left untouched: a
        search may still hold it); the base model itself while nothing was measured."""
        self._since = 0
        if not self._y:
            return self.base
        model = correct(self.base, np.array(self._X), np.array(self._y))
        self.refits += 1
        return model


class CorrectedModel:
    """A learned model times exp(correction), the correction fitted on one search's measured kernels (see
    costmodel/refit.py); it predicts like the model it corrects and is never saved."""

    def __init__(self, base: LearnedCostModel, correction: HistGradientBoostingRegressor) -> None:
        self.base, self.correction = base, correction
        self.hardware_ = base.hardware_

    def predict(self, X: Any) -> np.ndarray:
        """Predicted kernel times (µs), one per feature row."""
        X = LearnedCostModel._check_X(X)
        return library_priced(X, self.base.predict(X) * np.exp(self.correction.predict(blind_to_compiled(X))))



def correct(base: LearnedCostModel, X: Any, y: Any) -> CorrectedModel:
    """`base` corrected on measured kernels (features X, times y in µs): a small boosted model of the log ratio
    of measured to predicted time, so that a few dozen kernels fit in a fraction of a second."""
    X = LearnedCostModel._check_X(X)
    y = np.asarray(y, dtype=np.float64).ravel()
    if len(y) != len(X) or len(y) == 0 or not np.all(np.isfinite(y)) or np.any(y <= 0):
        raise CostModelError("a correction needs one positive, finite time (µs) per feature row")
    from sklearn.ensemble import HistGradientBoostingRegressor

    residual = np.log(y) - np.log(base.predict(X))
    correction = HistGradientBoostingRegressor(max_iter=100, learning_rate=0.1, max_leaf_nodes=8, min_samples_leaf=2,
                                               early_stopping=False, random_state=0)
    # Blind to compiled figures: the search's measured plans carry none, the candidates it compiled do.
    return CorrectedModel(base, correction.fit(blind_to_compiled(X), residual))
