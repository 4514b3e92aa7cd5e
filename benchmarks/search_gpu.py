"""GPU run of the search: `fusionsearch.tune` on each reference case (bf16), its best plan's measured time
beside eager (this run) and the anchors' torch.compile and max-autotune, with trials measured/pruned/failed.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/search_gpu.py --trials 16 --out $OUT"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

import fusionsearch as fs
from fusionsearch.datasets.workloads import REFERENCE_CASES, WORKLOADS, case_name
from fusionsearch.measure import time_callable
from fusionsearch.search.study import SearchOptions, run_study


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--out", default="out")
    ap.add_argument("--cases", default="")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for c in REFERENCE_CASES:
        if args.cases and c["workload"] not in args.cases.split(","):
            continue
        name = case_name(c)
        g = fs.workload(c["workload"], dtype=torch.bfloat16, **c["shape"])
        inputs = fs.random_inputs(g, seed=0, device="cuda")
        eager = time_callable(lambda fn=WORKLOADS[c["workload"]].torch_fn, i=inputs: fn(*i)).median_us
        t0 = time.time()
        res = run_study(g, SearchOptions(trials=args.trials, backend="gpu", seed=0), inputs)
        row = {"case": name, "anchor": {k: v for k, v in c.items() if k.endswith("_us")}, "eager_us_this_run": eager,
               "best_us": res.best_us, "search_s": time.time() - t0, "counts": res.counts(),
               "best_plan": res.best.describe(), "trials": [t.__dict__ for t in res.trials]}
        rows.append(row)
        with open(os.path.join(args.out, "search_gpu.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}, f, indent=1)
        print(f"{name:<34} best {res.best_us:8.1f} us  eager {eager:8.1f}  MA {c['max_autotune_us']:7.1f}  "
              f"search {row['search_s']:5.0f} s  {res.counts()}", flush=True)
    lines = ["| case (bf16) | floor | eager (this run) | torch.compile (anchor) | max-autotune (anchor) | "
             "search best | "
             "best / max-autotune | trials (by status) | search s |", "|---|" + "---|" * 8]
    for r in rows:
        a = r["anchor"]
        lines.append(f"| {r['case']} | {a['floor_us']} | {r['eager_us_this_run']:.1f} | {a['inductor_us']} | "
                     f"{a['max_autotune_us']} | {r['best_us']:.1f} | {r['best_us'] / a['max_autotune_us']:.2f} | "
                     f"{', '.join(f'{v} {k}' for k, v in sorted(r['counts'].items()))} | {r['search_s']:.0f} |")
    table = "\n".join(lines)
    with open(os.path.join(args.out, "search_gpu.md"), "w") as f:
        f.write(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
