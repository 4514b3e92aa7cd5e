"""Where the learned cost model's held-out ranking errors come from (CPU; reads a dataset, no GPU).

Prints, from one grouped cross-validation of the default model, blind to compiled figures (the "blind"
figures `fusionsearch costmodel train` reports, same folds):
  - the ranking figures split by the graphs' matmul operand width (16-bit: tensor cores; 32-bit: Triton's
    IEEE fp32 dot, which runs on the FMA units), learned beside analytic;
  - the kernels' held-out log error by kind and operand width, and measured / roofline time;
  - with --compiled: the same cross-validation (one model per fold) without and with each template kernel's
    compile-time figures (registers, stack bytes, shared memory compiled for sm_90, since feature schema v3;
    its SASS instructions, loops and spill ops, since v4), to show what they add;
  - with --halves: the shipped (bagged) model's compiled half as `costmodel train` reports it, by operand width,
    and priced by it only for some kernels (those that spill in a loop, that spill, with fp32 operands);
  - with --learning-curve: the compiled figures with each fold's model fitted on 1/4, 1/2, 3/4 and all of its
    training graphs, to tell a model short of data from one short of features;
  - with --by-width: the shipped kind of model (bagged, both halves) trained and held out on the graphs of one
    operand width only, to tell whether the fp32 graphs' erratic FMA-path kernels cost the 16-bit ones;
  - with --retest OLDER_DATASET: a test-retest bound, the older collection's times of the same plans used as
    the "prediction" of this one's (plans without split-K only, whose generated code did not change between
    the two), so that measurement noise and model error can be told apart.

    python benchmarks/costmodel_breakdown.py fusionsearch/datasets/data/h200-measurements.jsonl.gz \\
        [--compiled] [--retest OLDER.jsonl.gz] [--learning-curve] [--halves] [--by-width]"""

from __future__ import annotations

import argparse
from collections import defaultdict
from typing import Any

import numpy as np
from sklearn.ensemble import HistGradientBoostingRegressor

from fusionsearch.costmodel.features import ANALYTIC_FEATURE, COMPILED_FEATURES, FEATURE_NAMES
from fusionsearch.costmodel.train import (
    METRICS,
    _cross_validate,
    _figures,
    _graph_figures,
    _load,
    _oof_predictions,
    cv_splits,
)


def column(X: np.ndarray, name: str) -> np.ndarray:
    return X[:, FEATURE_NAMES.index(name)]


def graph_operand_bits(X: np.ndarray, rows: list[dict[str, Any]]) -> dict[str, int]:
    """Each graph's widest matmul operand (bits) over its template kernels; graphs without one are left out."""
    bits: dict[str, int] = {}
    for x, r in zip(column(X, "a_bits"), rows, strict=True):
        if r["kernel_kind"] == "template":
            bits[r["graph_id"]] = max(bits.get(r["graph_id"], 0), int(x))
    return bits


def mean_figures(per_graph: list[dict[str, Any]], prefix: str = "") -> str:
    return "  ".join(f"{m} {np.nanmean([g[prefix + m] for g in per_graph]):.3f}" for m in METRICS)


def by_operand_bits(X: np.ndarray, rows: list[dict[str, Any]], figures: dict[str, Any]) -> None:
    bits = graph_operand_bits(X, rows)
    for b in sorted(set(bits.values())):
        graphs = [g for g in figures["per_graph"] if bits.get(g["graph_id"]) == b]
        print(f"{b}-bit operands, {len(graphs)} graphs\n  learned   {mean_figures(graphs)}\n"
              f"  analytic  {mean_figures(graphs, 'analytic_')}")


def kernel_errors(X: np.ndarray, y: np.ndarray, rows: list[dict[str, Any]], pred: np.ndarray) -> None:
    err = np.abs(np.log(pred / y))
    over_roofline = np.log(y / np.maximum(column(X, ANALYTIC_FEATURE), 1e-3))
    kinds = np.array([r["kernel_kind"] for r in rows])
    a_bits = column(X, "a_bits")
    print("kernels: |log(predicted / measured)| median, p90; log(measured / roofline) median")
    for kind in sorted(set(kinds.tolist())):
        widths = sorted(set(a_bits[kinds == kind].tolist())) if kind == "template" else [None]
        for b in widths:
            m = (kinds == kind) & ((a_bits == b) if b is not None else True)
            label = f"{kind} {int(b)}-bit" if b is not None else kind
            print(f"  {label:<18} {m.sum():>5} rows  {np.median(err[m]):.3f}  {np.percentile(err[m], 90):.3f}  "
                  f"{np.median(over_roofline[m]):.2f}")


def plan_times(path: str) -> tuple[dict[tuple[str, str], float], set[tuple[str, str]]]:
    """(graph, plan) -> measured plan time (sum of its kernels) of fully measured plans, and the split-K plans."""
    _, _, _, rows, _ = _load(path)
    kernels: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    n_kernels, split = {}, set()
    for r in rows:
        key = (r["graph_id"], r["plan_id"])
        kernels[key][int(r["kernel_index"])] = float(r["time_us"])
        n_kernels[key] = len(r["plan"]["kernels"])
        if any((k.get("config") or {}).get("split_k", 1) > 1 for k in r["plan"]["kernels"]):
            split.add(key)
    whole = {k: sum(v.values()) for k, v in kernels.items() if set(v) == set(range(n_kernels[k]))}
    return whole, split


def retest(path: str, older: str) -> None:
    new, split = plan_times(path)
    old, _ = plan_times(older)
    per_graph: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for key in set(new) & set(old) - split:
        per_graph[key[0]].append((new[key], old[key]))
    figures = [_graph_figures(np.array(t)[:, 0], np.array(t)[:, 1]) for t in per_graph.values() if len(t) >= 3]
    print(f"test-retest over {len(figures)} graphs (>= 3 common plans without split-K), the older collection "
          f"as the predictor:\n  {mean_figures(figures)}")


def compiled_columns(X: np.ndarray) -> np.ndarray:
    """The COMPILED_FEATURES columns (registers, stack bytes, shared KiB, SASS figures): the dataset's rows carry
    them since feature schema v3 and v4 (`fusionsearch costmodel compile` adds them to older data)."""
    return X[:, [FEATURE_NAMES.index(name) for name in COMPILED_FEATURES]]


def one_model_cv(X: np.ndarray, y: np.ndarray, groups: np.ndarray, graph_share: float = 1.0, seed: int = 0
                 ) -> np.ndarray:
    """Held-out predictions (µs) of one boosted model per fold on log(time / roofline), any number of columns
    (the shipped model's hyperparameters, one bag), each fold's model fitted on a seeded `graph_share` of its
    training graphs."""
    offset = np.log(np.maximum(column(X, ANALYTIC_FEATURE), 1e-3))
    pred = np.full(len(y), np.nan)
    for train, test in cv_splits(groups, 5):
        if graph_share < 1.0:
            names = np.unique(groups[train])
            keep = np.random.default_rng(seed).choice(names, max(1, round(len(names) * graph_share)), replace=False)
            train = train[np.isin(groups[train], keep)]
        model = HistGradientBoostingRegressor(learning_rate=0.1, max_iter=300, max_leaf_nodes=31, min_samples_leaf=10,
                                              early_stopping=False, random_state=0)
        model.fit(X[train], np.log(y[train]) - offset[train])
        pred[test] = np.exp(model.predict(X[test]) + offset[test])
    return pred


def with_compiled(X: np.ndarray, y: np.ndarray, groups: np.ndarray, rows: list[dict[str, Any]],
                  every: list[dict[str, Any]]) -> None:
    extra = compiled_columns(X)
    template = np.array([r["kernel_kind"] == "template" for r in rows])
    if np.isnan(extra[template]).any():
        raise SystemExit("--compiled needs every template row's compiled figures: run `fusionsearch costmodel "
                         "compile` on the dataset first")
    print(f"compile-time figures of {template.sum()} template kernels (sm_90): stack > 0 in "
          f"{int((extra[template, 1] > 0).sum())}, registers at 255 in {int((extra[template, 0] >= 255).sum())}")
    without = X.copy()
    without[:, [FEATURE_NAMES.index(name) for name in COMPILED_FEATURES]] = 0.0
    for label, features in (("without", without), ("with", X)):
        figures = _figures(every, rows, one_model_cv(features, y, groups), X)
        print(f"  one model per fold, {label} them: {mean_figures(figures['per_graph'])}")
        by_operand_bits(X, rows, figures)


def learning_curve(X: np.ndarray, y: np.ndarray, groups: np.ndarray, rows: list[dict[str, Any]],
                   every: list[dict[str, Any]], seeds: int = 3) -> None:
    """The same held-out figures with each fold's model fitted on a share of its training graphs (mean over
    `seeds` draws of the share): how the figures grow with the number of graphs measured."""
    folds = len(cv_splits(groups, 5))
    graphs = len(np.unique(groups))
    print(f"learning curve (compiled figures, one model per fold, mean over {seeds} draws of the training graphs):")
    for share in (0.25, 0.5, 0.75, 1.0):
        draws = [[g for g in _figures(every, rows, one_model_cv(X, y, groups, share, seed), X)["per_graph"]]
                 for seed in range(seeds if share < 1.0 else 1)]
        means = {m: np.mean([np.nanmean([g[m] for g in d]) for d in draws]) for m in METRICS}
        trained = round(graphs * (folds - 1) / folds * share)
        print(f"  {share:4.2f} of the training graphs (~{trained} graphs): "
              + "  ".join(f"{m} {v:.3f}" for m, v in means.items()))


def shipped_halves(X: np.ndarray, rows: list[dict[str, Any]], every: list[dict[str, Any]], compiled: np.ndarray,
                   blind: np.ndarray) -> None:
    """The shipped (bagged) model's held-out figures as `costmodel train` computes them: its compiled half by
    operand width, and the compiled half used for only some template kernels (the blind half for the rest)."""
    figures = _figures(every, rows, compiled, X)
    print(f"shipped model, compiled half\n  learned   {mean_figures(figures['per_graph'])}")
    by_operand_bits(X, rows, figures)
    for label, some in (("that spill inside a loop", column(X, "loop_local_ops") > 0),
                        ("that spill", column(X, "stack_bytes") > 0),
                        ("with fp32 operands", column(X, "a_bits") == 32)):
        mixed = _figures(every, rows, np.where(some, compiled, blind), X)
        print(f"  compiled half only for the {int(some.sum())} kernels {label}: {mean_figures(mixed['per_graph'])}")


def by_width(X: np.ndarray, y: np.ndarray, groups: np.ndarray, rows: list[dict[str, Any]],
             every: list[dict[str, Any]]) -> None:
    """`costmodel train`'s cross-validation (5 folds, whole graphs held out) on the graphs of each operand width
    alone: each model sees only graphs of the width it is judged on."""
    bits = graph_operand_bits(X, rows)
    print("one model per operand width (trained and held out on those graphs only; compiled | blind):")
    for width in sorted(set(bits.values())):
        keep = np.array([bits.get(g) == width for g in groups])
        figures = _cross_validate(X[keep], y[keep], groups[keep], [r for r, k in zip(rows, keep, strict=True) if k],
                                  [r for r in every if bits.get(r.get("graph_id")) == width], 5, {})
        print(f"  {width}-bit operands, {figures['graphs']} graphs: "
              + "  ".join(f"{m} {figures[m]:.3f}" for m in METRICS) + "  |  "
              + "  ".join(f"{m} {figures['uncompiled_' + m]:.3f}" for m in METRICS))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data")
    ap.add_argument("--compiled", action="store_true", help="also cross-validate with compile-time figures")
    ap.add_argument("--retest", help="an older dataset of the same graphs (e.g. from git history)")
    ap.add_argument("--halves", action="store_true",
                    help="also the shipped model's compiled half by operand width and used for some kernels only")
    ap.add_argument("--learning-curve", action="store_true",
                    help="also cross-validate on shares of the training graphs (compiled figures)")
    ap.add_argument("--by-width", action="store_true",
                    help="also one model per operand width, trained and held out on those graphs only")
    args = ap.parse_args()
    X, y, groups, rows, every = _load(args.data)
    compiled, _, blind = _oof_predictions(X, y, groups, 5, {})  # blind: as the search prices plans not compiled
    figures = _figures(every, rows, blind, X)
    print(f"all {figures['graphs']} graphs\n  learned   {mean_figures(figures['per_graph'])}\n"
          f"  analytic  {mean_figures(figures['per_graph'], 'analytic_')}")
    by_operand_bits(X, rows, figures)
    kernel_errors(X, y, rows, blind)
    if args.compiled:
        with_compiled(X, y, groups, rows, every)
    if args.retest:
        retest(args.data, args.retest)
    if args.learning_curve:
        learning_curve(X, y, groups, rows, every)
    if args.halves:
        shipped_halves(X, rows, every, compiled, blind)
    if args.by_width:
        by_width(X, y, groups, rows, every)


if __name__ == "__main__":
    main()
