"""One-off (CPU): which kernels a model of the 16-bit graphs should price, on the dataset's first 236 graphs,
the same 5 grouped folds for every rule; each fold fits one all-graph model and one 16-bit-graph model (both
the default bagged kind, without the width split) and routes the held-out kernels by each rule.

    python benchmarks/results/h200-2026-12-04b-collect/one-off/width_rules.py > width_rules.txt
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".."))
from costmodel_breakdown import graph_operand_bits  # noqa: E402

from fusionsearch.costmodel.features import FEATURE_NAMES  # noqa: E402
from fusionsearch.costmodel.learned import LearnedCostModel, wide_templates, without_compiled  # noqa: E402
from fusionsearch.costmodel.train import METRICS, _figures, _load, cv_splits  # noqa: E402

if __name__ == "__main__":
    X, y, groups, rows, every = _load("fusionsearch/datasets/data/h200-measurements.jsonl.gz", 236)
    bits = graph_operand_bits(X, rows)
    g16 = np.array([bits.get(g) == 16 for g in groups])
    wide = wide_templates(X)
    rules = {"no split": np.zeros(len(y), bool),
             "16-bit templates": (X[:, FEATURE_NAMES.index("kind_template")] == 1) & ~wide,
             "all but fp32 templates": ~wide, "by graph width": g16}
    preds = {(r, c): np.full(len(y), np.nan) for r in rules for c in ("compiled", "blind")}
    for tr, te in cv_splits(groups, 5):
        m_all = LearnedCostModel(width_split=False).fit(X[tr], y[tr], groups=groups[tr])
        tr16 = tr[g16[tr]]
        m16 = LearnedCostModel(width_split=False).fit(X[tr16], y[tr16], groups=groups[tr16])
        for c, Xt in (("compiled", X[te]), ("blind", without_compiled(X[te]))):
            pa, p16 = m_all.predict(Xt), m16.predict(Xt)
            for r, mask in rules.items():
                preds[(r, c)][te] = np.where(mask[te], p16, pa)
    print("priced by the 16-bit-graph models | all graphs: metrics | 16-bit graphs | fp32 graphs")
    for (r, c), p in preds.items():
        f = _figures(every, rows, p, X)
        w = {b: [g for g in f["per_graph"] if bits.get(g["graph_id"]) == b] for b in (16, 32)}
        print(f"{r:<24} {c:<8} " + " ".join(f"{m} {f[m]:.3f}" for m in METRICS)
              + " | " + " ".join(f"{np.nanmean([g[m] for g in w[16]]):.3f}" for m in METRICS)
              + " | " + " ".join(f"{np.nanmean([g[m] for g in w[32]]):.3f}" for m in METRICS), flush=True)
