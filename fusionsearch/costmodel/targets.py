"""What the learned model's trees fit. A search ranks the plans of one graph, so the figure that chooses between
models is the held-out top-1 regret within graphs, and a target can give up each graph's level (which a search's
first measurements correct: refit.py) to spend the trees on the order of its plans."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["TARGETS", "fit_target"]

# "kernel": each kernel's log ratio of measured to roofline time; "graph": that ratio less its graph's mean, plus
# the mean over all rows (times stay µs on average); "balanced": the kernel ratio, every graph weighing the same.
TARGETS = ("kernel", "graph", "balanced")


def fit_target(log_ratio: np.ndarray, groups: Any, how: str) -> tuple[np.ndarray, np.ndarray | None]:
    """The values the trees fit and each row's weight (None: equal) for target `how` (one of TARGETS), from the
    kernels' log ratios and their graph ids (`groups`); without groups every target is the kernel one."""
    if how == "kernel" or groups is None:
        return log_ratio, None
    _, index, counts = np.unique(np.asarray(groups), return_inverse=True, return_counts=True)
    if how == "balanced":
        return log_ratio, len(log_ratio) / (len(counts) * counts[index])
    means = np.bincount(index, weights=log_ratio) / counts
    return log_ratio - means[index] + log_ratio.mean(), None
