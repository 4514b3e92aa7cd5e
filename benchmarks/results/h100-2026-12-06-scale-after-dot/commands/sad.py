"""GPU: the w8 decode plans with the per-column scale in the K loop (scale_after_dot off) and after it (on),
same configs, interleaved rounds, L2 flushed clean (benchmark()). Writes sad.json under --out."""
import argparse
import dataclasses
import json
import os
import sys

import torch

import fusionsearch as fs
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
from fusionsearch.measure import validate
from fusionsearch.measure.bench import benchmark
from fusionsearch.plan import fully_fused

sys.path.insert(0, os.getcwd())
from benchmarks.decode_sweep_gpu import with_kernel  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--out", default=".")
a = ap.parse_args()
CFGS = [DecodeConfig(128, 64, 8, 4, 3, "dot_t"), DecodeConfig(64, 128, 4, 4, 3, "dot_t"),
        DecodeConfig(128, 64, 16, 4, 3, "dot_t"), DecodeConfig(256, 32, 16, 4, 3, "dot_t"),
        DecodeConfig(128, 128, 8, 8, 3, "dot_t"), DecodeConfig(256, 16, 16, 8, 4, "fma")]
rows = []
for M in (1, 16):
    g = fs.workload("w8_dequant_mm", M=M, K=8192, N=8192)
    base = fully_fused(g)
    inputs = fs.random_inputs(g, seed=0, device="cuda")
    refs = fs.reference(g, inputs, float64=True)
    plans = []
    for c in CFGS:
        if c.product == "fma" and M > 4:
            continue
        p = with_kernel(base, lambda k, c=c: DecodeKernel(k.matmul, k.prologue_a, k.prologue_b, k.epilogue, c))
        for after in (False, True):
            q = dataclasses.replace(p, options=p.options.with_overrides(scale_after_dot=after))
            v = validate(q, g, inputs, refs=refs)
            plans.append((c.short(), after, q, v.ok, v.rel_err))
    times = {i: [] for i in range(len(plans))}
    for _round in range(3):
        for i, (_, _, q, ok, _) in enumerate(plans):
            if ok:
                t = benchmark(q, inputs, 5, 40)
                if t.ok:
                    times[i].append(t.median_us)
    for i, (name, after, _, ok, err) in enumerate(plans):
        ts = sorted(times[i])
        us = ts[len(ts) // 2] if ts else None
        rows.append({"M": M, "config": name, "scale_after_dot": after, "ok": ok, "rel_err": err, "us": us,
                     "rounds": ts})
        print(f"M{M:<3d} {name:36s} after={after!s:5s} ok={ok} err={err:.2e} us={us}", flush=True)
os.makedirs(a.out, exist_ok=True)
with open(os.path.join(a.out, "sad.json"), "w") as f:
    json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
print("\nM  config  in-loop  after  (us)")
for M in (1, 16):
    for name in dict.fromkeys(r["config"] for r in rows if r["M"] == M):
        b = [r["us"] for r in rows if r["M"] == M and r["config"] == name]
        print(f"M{M} {name:36s} {b[0]}  {b[1]}")
