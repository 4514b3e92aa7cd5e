"""Training and evaluating the learned cost model on a measurements dataset.

The figures that matter to the search are rankings within one graph's candidate plans: does the model put
the fast plans first? A plan's time is the sum of its kernels' times, measured or predicted. Cross-validation
holds out whole graphs (GroupKFold by graph_id), so a model is always judged on graphs it never saw. Several
datasets (one per GPU) pool into one model whose features carry each row's GPU (schema v8); the figures are
reported over all graphs, per GPU and per family of graph (costmodel/families.py)."""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats
from sklearn.model_selection import GroupKFold

from fusionsearch.costmodel.families import row_family
from fusionsearch.costmodel.features import (
    ANALYTIC_FEATURE,
    FEATURE_NAMES,
    FEATURE_SCHEMA_VERSION,
    recompute_features,
    to_matrix,
)
from fusionsearch.costmodel.gpus import gpu_name, hardware_record
from fusionsearch.costmodel.learned import LearnedCostModel, without_compiled
from fusionsearch.datasets.measurements import read_rows, rows_for_fp32_dot
from fusionsearch.errors import CostModelError
from fusionsearch.plan import FP32_DOT, FP32_DOTS

__all__ = ["METRICS", "cross_validate", "cv_splits", "evaluate", "format_figures", "load_dataset", "train"]

METRICS = ("kendall_tau", "spearman", "pairwise_accuracy", "top1_regret", "top5_regret")

Dataset = tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]
Paths = str | Sequence[str]  # one dataset, or several pooled (one per GPU)


def _schema_rows(path: str, fp32_dot: str = FP32_DOT) -> list[dict[str, Any]]:
    """Every row in the current feature schema (any status), older rows re-featured from the graph and plan
    they carry, of plans whose fp32 matmuls (if any) were measured with `fp32_dot` (the code generator's
    default: what the search will run); CostModelError when the file has none."""
    if fp32_dot not in FP32_DOTS:  # before reading the file: a wrong argument is named at once
        raise CostModelError(f"fp32_dot must be one of {', '.join(FP32_DOTS)}, got {fp32_dot!r}")
    if not os.path.isfile(path):
        raise CostModelError(f"{path}: no such dataset file")
    rows = read_rows(path)
    if not rows:
        raise CostModelError(f"{path}: the dataset holds no rows; collect measurements first")
    current, _ = recompute_features([r for r in rows if isinstance(r, dict)])
    if not current:
        seen = sorted({str(r.get("schema_version")) for r in rows if isinstance(r, dict)})
        raise CostModelError(f"{path}: no rows of feature schema v{FEATURE_SCHEMA_VERSION} "
                             f"(found v{', v'.join(seen)}, without the graph and plan to recompute them); collect "
                             "the measurements again with this fusionsearch")
    return rows_for_fp32_dot(current, fp32_dot)


def _usable(row: dict[str, Any]) -> bool:
    t = row.get("time_us")
    return (row.get("status") == "ok" and isinstance(t, (int, float)) and math.isfinite(t) and t > 0
            and isinstance(row.get("features"), dict))


def load_dataset(path: Paths, fp32_dot: str = FP32_DOT) -> Dataset:
    """(X, y, groups, rows) of the measured kernels of one dataset or several pooled: features in FEATURE_NAMES
    order, times (µs), graph ids, and the rows themselves; only status-ok rows of the current feature schema,
    fp32 matmuls as measured with `fp32_dot`. CostModelError when none."""
    return _load(path, fp32_dot=fp32_dot)[:4]  # type: ignore[return-value]


def _load(paths: Paths, first_graphs: int | None = None, fp32_dot: str = FP32_DOT
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]], list[dict[str, Any]]]:
    """load_dataset's four, and every row of the current schema (failed ones too: they mark incomplete plans);
    with `first_graphs`, only the rows of the first that many graphs of each file, in its (collection) order."""
    every = []
    for path in [paths] if isinstance(paths, str) else list(paths):
        part = _schema_rows(path, fp32_dot)
        every.extend(part if first_graphs is None else _first_graphs(part, first_graphs, path))
    path = paths if isinstance(paths, str) else " + ".join(paths)
    if not every:
        raise CostModelError("no dataset given to train on")
    rows = [r for r in every if _usable(r)]
    if not rows:
        raise CostModelError(f"{path}: no successfully measured kernels (status 'ok' with a time) to learn from")
    for key in ("graph_id", "plan_id", "kernel_index"):
        if any(key not in r for r in rows):
            raise CostModelError(f"{path}: some rows lack {key!r}; the dataset was not written by the collector")
    X = to_matrix([r["features"] for r in rows])
    y = np.array([float(r["time_us"]) for r in rows])
    groups = np.array([str(r["graph_id"]) for r in rows])
    return X, y, groups, rows, every


def _first_graphs(rows: list[dict[str, Any]], n: int, path: str) -> list[dict[str, Any]]:
    """The rows of the first `n` graphs in file order (a seeded collection's first n); CostModelError when n is
    not a positive whole number or the file holds fewer graphs."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise CostModelError(f"the number of graphs to train on must be a positive whole number, got {n!r}")
    order = list(dict.fromkeys(str(r.get("graph_id")) for r in rows))
    if n > len(order):
        raise CostModelError(f"{path}: asked for the first {n} graphs but the dataset holds {len(order)}")
    keep = set(order[:n])
    return [r for r in rows if str(r.get("graph_id")) in keep]


def _model(hyper: dict[str, Any]) -> LearnedCostModel:
    try:
        return LearnedCostModel(**hyper)
    except TypeError:
        names = ", ".join(LearnedCostModel().get_params())
        raise CostModelError(f"unknown hyperparameter in {sorted(hyper)}; the model takes {names}") from None


# ---- cross-validation ----------------------------------------------------------------------------

def cv_splits(groups: Sequence[str] | np.ndarray, folds: int = 5) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) row indices of each fold, whole graphs held out (GroupKFold by graph id); at most
    one fold per graph. CostModelError with fewer than two graphs."""
    groups = np.asarray(groups)
    n_graphs = len(set(groups.tolist()))
    if n_graphs < 2:
        raise CostModelError(f"cross-validation holds out whole graphs and needs at least 2; the data has {n_graphs}")
    if folds < 2:
        raise CostModelError(f"folds must be at least 2, got {folds}")
    splitter = GroupKFold(n_splits=min(folds, n_graphs))
    return list(splitter.split(np.zeros(len(groups)), groups=groups))


def _oof_predictions(X: np.ndarray, y: np.ndarray, groups: np.ndarray, folds: int,
                     hyper: dict[str, Any]) -> tuple[np.ndarray, list[list[str]], np.ndarray]:
    """Out-of-fold predictions (µs): each row predicted by the model of the fold that held its graph out; the
    held-out graphs of each fold; and the same predictions with the templates' compiled figures unknown."""
    pred, uncompiled = np.full(len(y), np.nan), np.full(len(y), np.nan)
    held_out = []
    for train_idx, test_idx in cv_splits(groups, folds):
        model = _model(hyper).fit(X[train_idx], y[train_idx], groups=groups[train_idx])
        pred[test_idx] = model.predict(X[test_idx])
        uncompiled[test_idx] = model.predict(without_compiled(X[test_idx]))
        held_out.append(sorted(set(groups[test_idx].tolist())))
    return pred, held_out, uncompiled


def cross_validate(data_path: Paths, folds: int = 5, fp32_dot: str = FP32_DOT, **hyper: Any) -> dict[str, Any]:
    """Held-out ranking figures: train one model per fold, predict the graphs it never saw, and score every
    graph's plans with those predictions (learned vs analytic, as `evaluate`). Adds `folds` and `held_out`
    (the graph ids of each fold's test set)."""
    return _cross_validate(*_load(data_path, fp32_dot=fp32_dot), folds, hyper)


def _cross_validate(X: np.ndarray, y: np.ndarray, groups: np.ndarray, rows: list[dict[str, Any]],
                    every: list[dict[str, Any]], folds: int, hyper: dict[str, Any]) -> dict[str, Any]:
    pred, held_out, uncompiled = _oof_predictions(X, y, groups, folds, hyper)
    figures = _figures(every, rows, pred, X)
    without = _figures(every, rows, uncompiled, X)
    figures.update({f"uncompiled_{m}{tail}": without[f"{m}{tail}"] for m in METRICS for tail in ("", "_median")})
    return {**figures, "folds": len(held_out), "held_out": held_out}


def train(data_path: Paths, out_path: str, folds: int = 5, first_graphs: int | None = None,
          fp32_dot: str = FP32_DOT, **hyper: Any) -> dict[str, Any]:
    """Fit a model on every ok row of `data_path` (one dataset, or several pooled; of each one's first
    `first_graphs` graphs, when given), save it to `out_path`, and report grouped cross-validation (`cv`: the
    held-out figures of `cross_validate`) with the row and graph counts. Rows of several GPUs make a pooled
    model, whose file names each GPU (gpus.hardware_record)."""
    X, y, groups, rows, every = _load(data_path, first_graphs, fp32_dot)
    cv = _cross_validate(X, y, groups, rows, every, folds, hyper)
    model = _model(hyper).fit(X, y, hardware=hardware_record(rows), groups=groups)
    model.save(out_path)
    return {"model_path": out_path, "rows": len(rows), "graphs": len(set(groups.tolist())),
            "params": model.get_params(), "cv": cv}


def evaluate(model: LearnedCostModel, data_path: Paths, fp32_dot: str = FP32_DOT) -> dict[str, Any]:
    """Ranking figures of `model` on every graph of `data_path` (optimistic if it was trained on them: use
    `cross_validate` for held-out figures). Per graph, over its fully measured plans: Kendall tau and
    Spearman between predicted and measured plan times, pairwise ranking accuracy, and top-1/top-5 regret
    ((measured time of the best of the model's k first plans − measured best) / measured best); the mean
    over graphs under each name, the median under `<name>_median`, the analytic model's under `analytic_<name>`."""
    X, _, _, rows, every = _load(data_path, fp32_dot=fp32_dot)
    return _figures(every, rows, model.predict(X), X)


# ---- figures -------------------------------------------------------------------------------------

def _plan_times(all_rows: list[dict[str, Any]], rows: list[dict[str, Any]], pred: np.ndarray, X: np.ndarray
                ) -> dict[tuple[str, str], dict[str, tuple[float, float, float]]]:
    """(GPU, graph id) -> plan id -> (measured, predicted, analytic) plan time (µs), for plans whose every kernel
    was measured ok (kernel indices 0..n-1; repeated measurements of a kernel are averaged)."""
    failed = {(gpu_name(r), str(r.get("graph_id")), str(r.get("plan_id"))) for r in all_rows if not _usable(r)}
    analytic = X[:, FEATURE_NAMES.index(ANALYTIC_FEATURE)]
    kernels: dict[tuple[str, str, str], dict[int, list[tuple[float, float, float]]]] = \
        defaultdict(lambda: defaultdict(list))
    for r, p, a in zip(rows, pred, analytic, strict=True):
        key = (gpu_name(r), str(r["graph_id"]), str(r["plan_id"]))
        kernels[key][int(r["kernel_index"])].append((float(r["time_us"]), p, a))
    out: dict[tuple[str, str], dict[str, tuple[float, float, float]]] = defaultdict(dict)
    for (gpu, gid, pid), per in kernels.items():
        if (gpu, gid, pid) in failed or set(per) != set(range(len(per))):
            continue
        means = [np.mean(np.array(v), axis=0) for v in per.values()]
        out[(gpu, gid)][pid] = tuple(float(x) for x in np.sum(means, axis=0))  # type: ignore[assignment]
    return out


def _graph_figures(measured: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    """The METRICS of one graph's plans."""
    with np.errstate(invalid="ignore"):
        tau = stats.kendalltau(predicted, measured).statistic
        rho = stats.spearmanr(predicted, measured).statistic
    i, j = np.triu_indices(len(measured), k=1)
    dm, dp = np.sign(measured[i] - measured[j]), np.sign(predicted[i] - predicted[j])
    decided = dm != 0
    agree = np.where(dp[decided] == 0, 0.5, (dp[decided] == dm[decided]).astype(float))
    best = measured.min()
    order = np.argsort(predicted, kind="stable")
    return {"kendall_tau": float(tau), "spearman": float(rho),
            "pairwise_accuracy": float(agree.mean()) if decided.any() else float("nan"),
            "top1_regret": float((measured[order[:1]].min() - best) / best),
            "top5_regret": float((measured[order[:5]].min() - best) / best)}


def _figures(all_rows: list[dict[str, Any]], rows: list[dict[str, Any]], pred: np.ndarray, X: np.ndarray
             ) -> dict[str, Any]:
    per_graph = []
    families: dict[str, str] = {}
    graph_rows = {(gpu_name(r), str(r["graph_id"])): r for r in rows}
    for (gpu, gid), plans in sorted(_plan_times(all_rows, rows, pred, X).items()):
        if len(plans) < 2:
            continue  # nothing to rank
        t = np.array(list(plans.values()))
        learned, analytic = _graph_figures(t[:, 0], t[:, 1]), _graph_figures(t[:, 0], t[:, 2])
        per_graph.append({"graph_id": gid, "gpu": gpu, "family": row_family(graph_rows[(gpu, gid)], families),
                          "plans": len(plans), **learned, **{f"analytic_{k}": v for k, v in analytic.items()}})
    if not per_graph:
        raise CostModelError("no graph has two or more fully measured plans, so there is nothing to rank")
    out = _summary(per_graph)
    out["rows"] = len(rows)
    for key in ("gpu", "family"):
        out[f"by_{key}"] = {name: _summary([g for g in per_graph if g[key] == name])
                            for name in sorted({g[key] for g in per_graph})}
    out["per_graph"] = per_graph
    return out


def _summary(per_graph: list[dict[str, Any]]) -> dict[str, Any]:
    """The graphs and plans counted, and the mean and median of each METRIC over the graphs (learned, analytic)."""
    out: dict[str, Any] = {"graphs": len(per_graph), "plans": sum(g["plans"] for g in per_graph)}
    for prefix in ("", "analytic_"):
        for m in METRICS:
            values = np.array([g[prefix + m] for g in per_graph], dtype=float)
            values = values[np.isfinite(values)]
            out[prefix + m] = float(values.mean()) if len(values) else float("nan")
            out[f"{prefix}{m}_median"] = float(np.median(values)) if len(values) else float("nan")
    return out


def format_figures(figures: dict[str, Any]) -> str:
    """A plain-text table of the METRICS, learned vs analytic (mean and median over graphs); cross-validation
    figures add the learned model blind to the templates' compiled figures (as a search prices plans it has
    not compiled)."""
    prefixes = ["", *(["uncompiled_"] if "uncompiled_kendall_tau" in figures else []), "analytic_"]
    names = {"": "learned", "uncompiled_": "blind", "analytic_": "analytic"}
    lines = [f"{figures['graphs']} graphs, {figures['plans']} plans, {figures['rows']} kernel rows",
             f"{'metric':<18} " + " ".join(f"{names[p]:>10} {'(median)':>9}" for p in prefixes)]
    for m in METRICS:
        lines.append(f"{m:<18} " + " ".join(f"{figures[p + m]:>10.3f} {figures[p + m + '_median']:>9.3f}"
                                            for p in prefixes))
    return "\n".join(lines + _group_lines(figures))


GROUP_METRICS = ("kendall_tau", "pairwise_accuracy", "top1_regret")  # per group: the figures that decide


def _group_lines(figures: dict[str, Any]) -> list[str]:
    """Per GPU and per family: the graphs, and the mean of GROUP_METRICS, learned then analytic."""
    lines = []
    head = " ".join(f"{m.replace('_accuracy', '').replace('kendall_', ''):>11}" for m in GROUP_METRICS)
    for key, what in (("by_gpu", "GPU"), ("by_family", "family")):
        if key not in figures:
            continue
        lines.append(f"{'per ' + what + ' (mean over graphs)':<40} {'graphs':>6} | learned {head} | analytic {head}")
        for name, f in figures[key].items():
            learned = " ".join(f"{f[m]:>11.3f}" for m in GROUP_METRICS)
            analytic = " ".join(f"{f['analytic_' + m]:>11.3f}" for m in GROUP_METRICS)
            lines.append(f"  {name:<38} {f['graphs']:>6} | {'':7} {learned} | {'':8} {analytic}")
    return lines
