"""One-off replays of the whole-space runs c-f (CPU, no GPU) behind figures in the README; see README.md here.

    python .../replay_checks.py seeds          # > seeds.txt
    python .../replay_checks.py width16        # > width16.txt
    python .../replay_checks.py all-compiled e # > all_compiled-e.txt
"""

from __future__ import annotations

import glob
import json
import math
import sys

import numpy as np
import torch

import fusionsearch as fs
from fusionsearch.costmodel.features import FEATURE_NAMES
from fusionsearch.costmodel.hardware import H200
from fusionsearch.costmodel.learned import LearnedCostModel, load, per_plan, plans_matrix
from fusionsearch.costmodel.train import _load
from fusionsearch.search.plan import Plan
from fusionsearch.search.ranked import compile_fastest

DATA = {"104": "/tmp/data104.jsonl.gz", "236": "fusionsearch/datasets/data/h200-measurements.jsonl.gz"}


def cases(runs: str) -> list[tuple[str, str, np.ndarray, list[Plan], np.ndarray, np.ndarray]]:
    """(run, case name, measured µs per plan, plans, feature rows, plan starts) of each case of `runs`."""
    out = []
    for run in runs:
        for path in sorted(glob.glob(f"benchmarks/results/h200-2026-12-03-whole-space-{run}/case*.json")):
            data = json.load(open(path))
            c = data["case"]
            g = fs.workload(c["workload"], dtype=torch.bfloat16, **c["shape"])
            times = {r["plan"]: (r["median_us"] or math.inf) for r in data["plans"]}
            plans = [Plan.from_json(k, g) for k in times]
            X, starts = plans_matrix(plans, H200)
            out.append((run, data["name"], np.array(list(times.values())), plans, X, starts))
    return out


def regret(measured: np.ndarray, predicted: np.ndarray) -> float:
    """Regret at a tenth of the space: the best measured of the plans predicted fastest, over the best."""
    n = math.ceil(len(measured) / 10)
    return measured[np.argsort(predicted, kind="stable")[:n]].min() / measured.min() - 1


def report(label: str, model: LearnedCostModel, all_cases: list) -> None:
    per_run: dict[str, list[float]] = {}
    w8 = []
    for run, name, measured, _, X, starts in all_cases:
        r = regret(measured, per_plan(model.predict(X), starts))
        per_run.setdefault(run, []).append(r)
        if name.startswith("w8_dequant_mm M16"):
            w8.append(r)
    runs = " ".join(f"{run}:{100 * (math.exp(np.mean(np.log1p(v))) - 1):.2f}/{100 * max(v):.2f}"
                    for run, v in per_run.items())
    print(label, runs, "w8M16", " ".join(f"{100 * x:.1f}" for x in w8), flush=True)


def seeds() -> None:
    """Models of the 104- and 236-graph data with bagging seeds 0, 1, 2."""
    all_cases = cases("cdef")
    for label, path in DATA.items():
        X, y, groups, _, _ = _load(path)
        for seed in (0, 1, 2):
            report(f"{label} seed {seed}", LearnedCostModel(random_state=seed).fit(X, y, groups=groups), all_cases)


def width16() -> None:
    """Models fitted on the graphs with 16-bit matmul operands only."""
    all_cases = cases("cdef")
    a_bits = FEATURE_NAMES.index("a_bits")
    for label, path in DATA.items():
        X, y, groups, rows, _ = _load(path)
        bits: dict[str, int] = {}
        for x, r in zip(X[:, a_bits], rows, strict=True):
            if r["kernel_kind"] == "template":
                bits[r["graph_id"]] = max(bits.get(r["graph_id"], 0), int(x))
        keep = np.array([bits.get(g, 0) == 16 for g in groups])
        model = LearnedCostModel().fit(X[keep], y[keep], groups=groups[keep])
        report(f"{label} 16-bit graphs only {len(set(groups[keep]))}", model, all_cases)


def all_compiled(runs: str) -> None:
    """Blind order, the search's re-ranking (the first 2n plans compiled) and every plan compiled."""
    models = {"v4old": load("/tmp/v4old.skops"), "new": load("costmodel-236.skops")}
    for run, name, measured, plans, X, starts in cases(runs):
        n = math.ceil(len(measured) / 10)
        out = []
        for label, m in models.items():
            blind = per_plan(m.predict(X), starts)
            every, mixed = X.copy(), X.copy()
            compile_fastest(m, plans, every, starts, H200, len(plans))
            compile_fastest(m, plans, mixed, starts, H200, 2 * n)
            figures = [regret(measured, blind), regret(measured, per_plan(m.predict(mixed), starts)),
                       regret(measured, per_plan(m.predict(every), starts))]
            out.append(f"{label}: blind {100 * figures[0]:5.2f}% mixed {100 * figures[1]:5.2f}% "
                       f"all-compiled {100 * figures[2]:5.2f}%")
        print(run, f"{name:<30}", " | ".join(out), flush=True)


if __name__ == "__main__":
    {"seeds": seeds, "width16": width16, "all-compiled": lambda: all_compiled(sys.argv[2])}[sys.argv[1]]()
