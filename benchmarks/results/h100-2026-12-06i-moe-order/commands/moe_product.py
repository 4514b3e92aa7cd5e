"""GPU (issue 27): the plan `fusionsearch search` chose for moe_ffn (plan.json), validated against a float64
expert loop and timed against the cuBLAS loop over the touched experts (the grouped matmuls without the gather),
in 5 alternating rounds (clean L2 flush, median µs); the floor at the copy bandwidth of the same run.
    python3 gpu/moe_product.py PLAN.json TOKENS"""
import os
import statistics
import sys

import torch

import fusionsearch as fs
from fusionsearch.measure import validate
from fusionsearch.measure.bench import benchmark, measure_ceilings
from fusionsearch.plan import Plan

sys.path.insert(0, os.getcwd())
from benchmarks.grouped_sweep_gpu import expert_loop_float64, touched_bytes  # noqa: E402
from benchmarks.suite import measure_cublas_per_expert  # noqa: E402


def main():
    path, tokens = sys.argv[1], int(sys.argv[2])
    g = fs.workload("moe_ffn", T=tokens, D=4096, H=14336, E=8, dtype=torch.bfloat16)
    plan = Plan.from_json(open(path).read(), g)
    inputs = fs.random_inputs(g, seed=0, device="cuda")
    v = validate(plan, g, inputs, refs=expert_loop_float64(inputs))
    print(f"valid {v.ok} rel_err {v.rel_err:.2e} {v.reason}")
    ours, loop = [], []
    for _ in range(5):
        ours.append(benchmark(plan, inputs, warmup_ms=5, rep_ms=50).median_us)
        loop.append(measure_cublas_per_expert(inputs)["median_us"])
    floor = touched_bytes(inputs) / measure_ceilings()["bandwidth_bytes_per_s"] * 1e6
    a, b = statistics.median(ours), statistics.median(loop)
    print(f"| moe_ffn T{tokens} | searched plan {a:.1f} | cuBLAS loop {b:.1f} | ÷ cuBLAS loop {a / b:.3f} | "
          f"floor {floor:.1f} | ÷ floor {a / floor:.2f} |")
    print("rounds", [round(x, 1) for x in ours], [round(x, 1) for x in loop])


if __name__ == "__main__":
    main()
