"""One-off (CPU): which plans each live search of this run measured, against the plans the model it searched
with ranks first (its first `trials`), and the best of the measured plans on the whole-space timings.

    python -m fusionsearch costmodel train fusionsearch/datasets/data/h200-measurements.jsonl.gz --graphs 272 \\
        --out m272.skops        # the model of commit 3fd45be, the one this run searched with
    python benchmarks/results/h200-2026-12-04-whole-space-i/live_check.py m272.skops > live_check.txt
"""

from __future__ import annotations

import glob
import json
import math
import os
import sys

import torch

import fusionsearch as fs
from fusionsearch.costmodel.analytic import fits
from fusionsearch.costmodel.hardware import H200
from fusionsearch.costmodel.learned import load, plan_times_us
from fusionsearch.search.plan import Plan
from fusionsearch.search.space import enumerate_space

if __name__ == "__main__":
    model = load(sys.argv[1])
    here = os.path.dirname(os.path.abspath(__file__))
    for path in sorted(glob.glob(os.path.join(here, "case*.json")), key=lambda p: int(p.split("case")[-1][:-5])):
        data = json.load(open(path))
        c, s = data["case"], data["search"]
        g = fs.workload(c["workload"], dtype=torch.bfloat16, **c["shape"])
        times = {r["plan"]: (r["median_us"] or math.inf) for r in data["plans"]}
        keys = list(times)
        predicted = plan_times_us(model, [Plan.from_json(k, g) for k in keys], H200)
        first = {k for _, k in sorted(zip(predicted, keys, strict=True))[:s["trials"]]}
        space = enumerate_space(g, lambda gg, mm, cfg: fits(gg, mm, cfg), data["max_configs"],
                                library=data.get("library", False))
        measured = [space.plan(t["params"]).to_json() for t in s["trial_records"] if t["status"] == "measured"]
        over = 100 * (min(times[k] for k in measured) / min(times.values()) - 1)
        print(f"{data['name']:<34} measured {len(measured)}, of them in the model's first {s['trials']}: "
              f"{sum(k in first for k in measured)}; best measured {over:.2f}% "
              f"over the whole space's best; pick {100 * s['regret']:.2f}%; side by side "
              f"{100 * s['side_by_side']['regret']:.2f}%")
