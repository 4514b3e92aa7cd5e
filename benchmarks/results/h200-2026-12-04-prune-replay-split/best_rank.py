"""One-off (CPU): where the shipped model ranks w8_dequant_mm M16's whole-space best plan in runs c-f and i.

    python benchmarks/results/h200-2026-12-04-prune-replay-split/best_rank.py > best_rank.txt
"""

from __future__ import annotations

import glob
import json

import numpy as np
import torch

import fusionsearch as fs
from fusionsearch.costmodel.hardware import H200
from fusionsearch.costmodel.learned import load, plan_times_us
from fusionsearch.search.plan import Plan

if __name__ == "__main__":
    model = load("fusionsearch/datasets/data/costmodel.skops")
    for run in "cdefi":
        for path in glob.glob(f"benchmarks/results/h200-2026-12-0*-whole-space-{run}/case0.json"):
            data = json.load(open(path))
            c = data["case"]
            g = fs.workload(c["workload"], dtype=torch.bfloat16, **c["shape"])
            rows = [r for r in data["plans"] if r["median_us"]]
            predicted = np.array(plan_times_us(model, [Plan.from_json(r["plan"], g) for r in rows], H200))
            measured = np.array([r["median_us"] for r in rows])
            best = int(np.argmin(measured))
            cfg = json.loads(rows[best]["plan"])["kernels"][0]["config"]
            print(f"run {run} {data['name']}: best {measured[best]:.1f} us on {cfg['block_m']}x{cfg['block_n']}x"
                  f"{cfg['block_k']} sk{cfg['split_k']} s{cfg['num_stages']}, the model's rank "
                  f"{int((predicted < predicted[best]).sum()) + 1} of {len(rows)}, predicted {predicted[best]:.1f} us "
                  f"(its first {predicted.min():.1f} us)")
