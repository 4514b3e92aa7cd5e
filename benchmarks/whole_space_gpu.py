"""GPU ground truth for pruning: every plan of each reference case's enumerable space (bf16), compiled in
parallel, validated against float64 and timed; one JSON file per case under --out, written as soon as the
case is done. Regret curves for the learned model, the analytic model, TPE and random search replay these
measurements (a search that measures plan p observes exactly the time measured here).

Run on the GPU machine:  PYTHONPATH=. python benchmarks/whole_space_gpu.py --out $OUT
Single-matmul cases keep --max-configs tile configs per matmul, three-matmul swiglu --swiglu-configs."""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

import fusionsearch as fs
from fusionsearch.costmodel.analytic import fits
from fusionsearch.costmodel.collect import hardware_signature
from fusionsearch.datasets.workloads import REFERENCE_CASES
from fusionsearch.errors import PlanError, failure_reason
from fusionsearch.measure.isolate import CompilePool
from fusionsearch.search.space import enumerate_space


def all_plans(space: fs.search.space.Space) -> list:
    """Every legal plan of the space: each combination of group options and tile configs."""
    plans = {}
    for params in space.every_params():
        try:
            p = space.plan(params)
        except PlanError:
            continue
        plans.setdefault(p.to_json(), p)
    return list(plans.values())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    ap.add_argument("--max-configs", type=int, default=48)
    ap.add_argument("--swiglu-configs", type=int, default=4)
    ap.add_argument("--workers", type=int, default=14)
    ap.add_argument("--rep-ms", type=int, default=40)
    ap.add_argument("--cases", default="", help="comma-separated case indices (default: all)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    pool = CompilePool(args.workers)
    for ci, c in enumerate(REFERENCE_CASES):
        if args.cases and str(ci) not in args.cases.split(","):
            continue
        t0 = time.time()
        g = fs.workload(c["workload"], dtype=torch.bfloat16, **c["shape"])
        k = args.swiglu_configs if c["workload"] == "swiglu" else args.max_configs
        space = enumerate_space(g, lambda gg, mm, cfg: fits(gg, mm, cfg), k)
        plans = all_plans(space)
        failures = pool.warm(g.to_dict(), [p.to_json() for p in plans])
        inputs = fs.random_inputs(g, seed=0, device="cuda")
        refs = fs.reference(g, inputs, float64=True)
        rows = []
        for p, failure in zip(plans, failures, strict=True):
            row = {"plan": p.to_json(), "median_us": None, "reason": failure}
            if not failure:
                v = fs.measure.validate(p, g, inputs, refs=refs)
                if not v.ok:
                    row["reason"] = "invalid: " + v.reason
                else:
                    try:
                        t = fs.measure.benchmark(p, inputs, warmup_ms=10, rep_ms=args.rep_ms)
                        row["median_us"], row["reason"] = (t.median_us, "") if t.ok else (None, t.reason)
                    except Exception as e:  # one plan's failure is its own
                        row["reason"] = failure_reason(e, 200)
            rows.append(row)
        ok = [r["median_us"] for r in rows if r["median_us"]]
        name = f"{c['workload']} " + " ".join(f"{a}{b}" for a, b in c["shape"].items())
        with open(os.path.join(args.out, f"case{ci}.json"), "w") as f:
            json.dump({"case": c, "name": name, "space_size": space.size(), "max_configs": k,
                       "hardware": hardware_signature(), "plans": rows}, f)
        best = min(ok) if ok else float("nan")
        print(f"{name:<40} plans {len(plans):>4}  ok {len(ok):>4}  best {best:8.1f} us  {time.time() - t0:5.0f} s",
              flush=True)
        del inputs, refs
        torch.cuda.empty_cache()
    pool.close()


if __name__ == "__main__":
    main()
