"""How many plans per second the analytic cost model prices on one CPU core (the search prunes with it).

    python benchmarks/costmodel_speed.py [--workload swiglu] [--seconds 2]

Prices the workload's three reference plans, plus one plan per tile config of a small sweep, round-robin,
and prints plans/second and µs/plan."""

from __future__ import annotations

import argparse
import itertools
import time
from dataclasses import replace

import torch

import fusionsearch as fs
from fusionsearch.costmodel import H200, estimate
from fusionsearch.search import plan as P

CONFIGS = [P.TileConfig(block_m=bm, block_n=bn, block_k=bk, split_k=sk, num_stages=3)
           for bm, bn, bk, sk in itertools.product((16, 64, 128), (64, 128), (64, 128), (1, 2))]


def plans_for(g: fs.OpGraph) -> list[P.Plan]:
    """The reference plans and the fully fused plan under each sweep config."""
    fused = P.fully_fused(g)
    out = [P.unfused(g), fused, P.heuristic(g)]
    for cfg in CONFIGS:
        kernels = tuple(replace(k, config=cfg) if isinstance(k, P.TemplateKernel) else k for k in fused.kernels)
        out.append(P.Plan(g, kernels, fused.recompute))
    return out


def measure(plans: list[P.Plan], seconds: float) -> tuple[int, float]:
    """Estimate plans round-robin for about `seconds`; returns (plans priced, wall seconds)."""
    count, start = 0, time.perf_counter()
    while True:
        for plan in plans:
            estimate(plan, H200)
        count += len(plans)
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return count, elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="swiglu")
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for M in (16, 2048):
        g = fs.workload(args.workload, dtype=torch.bfloat16, M=M)
        plans = plans_for(g)
        measure(plans, 0.2)  # warm imports and caches
        count, elapsed = measure(plans, args.seconds)
        print(f"{args.workload} M={M}: {len(plans)} distinct plans, {count} estimates in {elapsed:.2f} s: "
              f"{count / elapsed:,.0f} plans/s ({elapsed / count * 1e6:.0f} us/plan, one core)")


if __name__ == "__main__":
    main()
