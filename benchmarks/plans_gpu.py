"""GPU check of the code generator: every reference case in bf16 through the fully fused and the unfused plan,
validated against the float64 reference and timed (do_bench median, L2 flushed), beside the anchor figures.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/plans_gpu.py --out $OUT
A small sweep of tile configs is timed for the fused plan, so its figure reflects a fair config."""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import torch
import triton

import fusionsearch as fs
from fusionsearch.datasets.workloads import REFERENCE_CASES, WORKLOADS, case_name
from fusionsearch.measure import time_callable, validate
from fusionsearch.search import plan as P

SWEEP_SMALL_M = [
    P.TileConfig(16, 64, 128, 8, 4, 4, 4), P.TileConfig(16, 128, 128, 8, 4, 4, 4),
    P.TileConfig(16, 64, 256, 8, 2, 4, 3), P.TileConfig(16, 128, 128, 8, 8, 4, 3),
    P.TileConfig(16, 64, 128, 8, 8, 4, 4), P.TileConfig(32, 64, 128, 8, 4, 4, 4),
]
SWEEP_LARGE_M = [
    P.TileConfig(128, 128, 64, 8, 1, 8, 3), P.TileConfig(128, 256, 64, 8, 1, 8, 3),
    P.TileConfig(128, 128, 64, 8, 1, 4, 4), P.TileConfig(64, 128, 64, 8, 1, 4, 4),
    P.TileConfig(256, 128, 64, 8, 1, 8, 3),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    ap.add_argument("--cases", default="")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    dev = "cuda"
    rows = []
    for c in REFERENCE_CASES:
        if args.cases and c["workload"] not in args.cases.split(","):
            continue
        g = fs.workload(c["workload"], dtype=torch.bfloat16, **c["shape"])
        inputs = fs.random_inputs(g, seed=0, device=dev)
        fn = WORKLOADS[c["workload"]].torch_fn
        eager = time_callable(lambda fn=fn, inputs=inputs: fn(*inputs))
        row = {"case": case_name(c), "anchor": {k: v for k, v in c.items() if k.endswith("_us")},
               "eager_us_this_run": eager.median_us, "eager_peak_bytes": eager.peak_bytes}
        for label, base in (("unfused", P.unfused(g)), ("fused", P.fully_fused(g))):
            val = validate(base, g, inputs)
            t0 = time.time()
            timing = fs.measure.benchmark(base, inputs)
            entry = {"plan": base.to_dict(), "valid": val.ok, "rel_err": val.rel_err, "reason": val.reason,
                     "median_us": timing.median_us, "peak_bytes": timing.peak_bytes, "timing_reason": timing.reason,
                     "config": "default"}
            if label == "fused":
                sweep = SWEEP_SMALL_M if c["shape"]["M"] <= 64 else SWEEP_LARGE_M
                tried = []
                for cfg in sweep:
                    p = base.with_config(cfg)
                    t = fs.measure.benchmark(p, inputs)
                    tried.append({"config": cfg.short(), "median_us": t.median_us, "reason": t.reason})
                    if t.ok and t.median_us < entry["median_us"]:
                        v = validate(p, g, inputs)
                        if v.ok:
                            entry.update(median_us=t.median_us, config=cfg.short(), rel_err=v.rel_err,
                                         plan=p.to_dict(), peak_bytes=t.peak_bytes)
                entry["sweep"] = tried
            entry["wall_s"] = time.time() - t0
            row[label] = entry
        rows.append(row)
        print(f"{row['case']:<36} eager {eager.median_us:8.1f}  unfused {row['unfused']['median_us']:8.1f} "
              f"({'ok' if row['unfused']['valid'] else 'INVALID'})  fused {row['fused']['median_us']:8.1f} "
              f"({'ok' if row['fused']['valid'] else 'INVALID'}) {row['fused']['config']}", flush=True)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d")}
    with open(os.path.join(args.out, "plans_gpu.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    lines = ["| case (bf16) | floor | eager (anchor) | max-autotune (anchor) | eager (this run) | unfused plan | "
             "fully fused plan | fused config | fused rel err | fused / floor |", "|---|" + "---|" * 9]
    for r in rows:
        a, u, f_ = r["anchor"], r["unfused"], r["fused"]
        mark = lambda e: f"{e['median_us']:.1f}" + ("" if e["valid"] else " (INVALID)")  # noqa: E731
        lines.append(f"| {r['case']} | {a['floor_us']} | {a['eager_us']} | {a['max_autotune_us']} | "
                     f"{r['eager_us_this_run']:.1f} | {mark(u)} | {mark(f_)} | {f_['config']} | {f_['rel_err']:.2e} | "
                     f"{f_['median_us'] / a['floor_us']:.2f} |")
    table = "\n".join(lines)
    with open(os.path.join(args.out, "plans_gpu.md"), "w") as f:
        f.write(f"Device: {meta['device']}, torch {meta['torch']}, triton {meta['triton']}, {meta['date']}. "
                "Times in µs (do_bench median).\n\n" + table + "\n")
    print(table)


if __name__ == "__main__":
    main()
