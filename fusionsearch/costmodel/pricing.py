"""A plan's predicted time from a model's per-kernel predictions: every kernel of many plans priced in one call
of the regressor, then summed plan by plan (what the search ranks by)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fusionsearch.costmodel.features import plan_features, to_matrix
from fusionsearch.costmodel.hardware import Hardware
from fusionsearch.plan import Plan

__all__ = ["per_plan", "plan_time_us", "plan_times_us", "plans_matrix"]


def plan_time_us(model: Any, plan: Plan, hw: Hardware) -> float:
    """A plan's predicted time (µs): the sum of its kernels' predictions."""
    return plan_times_us(model, [plan], hw)[0]


def plan_times_us(model: Any, plans: list[Plan], hw: Hardware) -> list[float]:
    """plan_time_us of many plans with one call of the regressor."""
    if not plans:
        return []
    X, starts = plans_matrix(plans, hw)
    return [float(t) for t in per_plan(model.predict(X), starts)]


def plans_matrix(plans: list[Plan], hw: Hardware) -> tuple[np.ndarray, np.ndarray]:
    """The feature rows of every kernel of `plans` (one non-empty plan at least), and where each plan after the
    first starts among them: predict once, then `per_plan` sums each plan's kernels."""
    rows = [plan_features(p, hw) for p in plans]
    return to_matrix([f for r in rows for f in r]), np.cumsum([len(r) for r in rows])[:-1]


def per_plan(per_kernel: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Plan times from kernel times: the sum over each plan's kernels (`starts` from plans_matrix)."""
    return np.array([chunk.sum() for chunk in np.split(per_kernel, starts)])
