"""GPU: the pointwise kernels around a library matmul, against eager PyTorch's, at several block sizes and warps.

Where the search runs a matmul in cuBLAS, what separates its plan from eager PyTorch is the pointwise kernel
beside it (the suite of 2026-12-03: cast_mm's fp32 -> bf16 cast about 35 us in the plan, about 28 in eager).
For each such reference case this times the plan's pointwise kernels alone (the plan's `steps`) with every
(XBLOCK, num_warps) of the grid, eager PyTorch's pointwise ops on the same tensors, and the bytes the kernels
move at the run's copy bandwidth; and the peak memory of the library plans against eager's.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/pointwise_gpu.py --out $OUT"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable

import torch
import torch.nn.functional as F
import triton

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen import pointwise
from fusionsearch.codegen.runtime import compile_plan
from fusionsearch.datasets.workloads import REFERENCE_CASES, case_name, get_workload

GRID = [(1024, 4), (2048, 4), (4096, 4), (1024, 8), (2048, 8), (4096, 8)]


def eager_pointwise(workload: str, inputs: list[torch.Tensor]) -> Callable[[], object]:
    """Eager PyTorch's pointwise work of the case, on the matmul outputs computed once beforehand."""
    if workload == "w8_dequant_mm":
        x, w, s = inputs
        return lambda: w.to(x.dtype) * s
    if workload == "cast_mm":
        x, w = inputs
        return lambda: x.to(w.dtype)
    if workload == "scale_mm":
        x, g, w = inputs
        return lambda: x * g
    if workload == "mm_bias_gelu":
        x, w, b = inputs
        y = x @ w
        return lambda: F.gelu(y + b)
    x, w1, w3, _ = inputs
    gate, up = x @ w1, x @ w3
    return lambda: F.silu(gate) * up


def peak_mb(fn: Callable[..., object], inputs: list[torch.Tensor]) -> float:
    """Memory a call allocates at its peak beyond what was allocated before it (MB)."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn(*inputs)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak / 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    ap.add_argument("--cases", default="1,5,6,7,9", help="REFERENCE_CASES indices (default: the library picks)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    src = torch.empty(2**28, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    bandwidth = 2 * src.numel() / (triton.testing.do_bench(lambda: dst.copy_(src), warmup=25, rep=100) * 1e-3)
    rows = []
    for index in [int(i) for i in args.cases.split(",")]:
        case = REFERENCE_CASES[index]
        g = fs.workload(case["workload"], dtype=torch.bfloat16, **case["shape"])
        inputs = fs.random_inputs(g, seed=0, device="cuda")
        plan = P.build_plan(g, {}, library=g.nodes_of_kind("template"))
        kernels = [i for i, k in enumerate(plan.kernels) if k.kind == "pointwise"]
        est = fs.costmodel.estimate(plan).per_kernel
        moved = sum(est[i].bytes_read + est[i].bytes_written for i in kernels)
        eager = eager_pointwise(case["workload"], inputs)
        row = {"case": case_name(case), "bytes": moved, "copy_us": moved / bandwidth * 1e6,
               "eager_pointwise_us": triton.testing.do_bench(eager, warmup=25, rep=100) * 1e3, "grid": []}
        ok = fs.measure.validate(plan, g, inputs)
        row["valid"] = ok.ok
        for xblock, warps in GRID:
            pointwise.XBLOCK, pointwise.NUM_WARPS = xblock, warps
            steps, _ = compile_plan(plan).module.steps(*inputs)
            us = sum(triton.testing.do_bench(steps[i], warmup=25, rep=100) * 1e3 for i in kernels)
            row["grid"].append({"xblock": xblock, "num_warps": warps, "pointwise_us": us})
        pointwise.XBLOCK, pointwise.NUM_WARPS = GRID[0]
        row["peak_mb_plan"] = peak_mb(compile_plan(plan).module.run, inputs)
        row["peak_mb_eager"] = peak_mb(get_workload(case["workload"]).torch_fn, inputs)
        rows.append(row)
        best = min(row["grid"], key=lambda r: r["pointwise_us"])
        print(f"{row['case']:<34} copy {row['copy_us']:6.1f}  eager {row['eager_pointwise_us']:6.1f}  "
              + "  ".join(f"{r['xblock']}/{r['num_warps']} {r['pointwise_us']:6.1f}" for r in row["grid"])
              + f"  best {best['xblock']}/{best['num_warps']}  peak MB plan {row['peak_mb_plan']:.1f} eager "
              f"{row['peak_mb_eager']:.1f}  valid {row['valid']}", flush=True)
    with open(os.path.join(args.out, "pointwise.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "bandwidth_bytes_per_s": bandwidth, "rows": rows}, f,
                  indent=1)


if __name__ == "__main__":
    main()
