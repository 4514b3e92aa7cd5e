"""One-off (CPU): the held-out top-1 regret per graph of `costmodel train`'s cross-validation (the shipped
kind of model, 300 graphs), worst first with each graph's operand width, and the mean without the worst few.

    python benchmarks/results/h200-2026-12-04b-collect/one-off/top1_tail.py > top1_tail.txt
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".."))
from costmodel_breakdown import graph_operand_bits  # noqa: E402

from fusionsearch.costmodel.train import _cross_validate, _load  # noqa: E402

if __name__ == "__main__":
    X, y, groups, rows, every = _load("fusionsearch/datasets/data/h200-measurements.jsonl.gz")
    bits = graph_operand_bits(X, rows)
    figures = _cross_validate(X, y, groups, rows, every, 5, {})
    per_graph = sorted(figures["per_graph"], key=lambda g: -g["top1_regret"])
    print("mean", sum(g["top1_regret"] for g in per_graph) / len(per_graph), "graphs", len(per_graph))
    for g in per_graph[:12]:
        print(g["graph_id"], bits.get(g["graph_id"]), g["plans"], round(g["top1_regret"], 3),
              round(g["pairwise_accuracy"], 3))
    for k in (1, 3, 5, 10):
        print(f"without the worst {k}: mean top-1 {sum(g['top1_regret'] for g in per_graph[k:]) / len(per_graph):.3f}")
