"""GPU: do Triton's warp-specialised persistent templates close the compute-bound cases' gap to cuBLAS?

The suite's compute-bound cases (M >= 2048) run their matmul in cuBLAS beside a pointwise kernel, because
the Triton template's main loop is 7-8% slower than cuBLAS's and that gap exceeds the pointwise kernel's
cost. Hopper's cuBLAS kernels are warp-specialised (TMA load warps feeding the MMA warps); Triton 3.6 can
split a persistent tile loop the same way (`tl.range(..., warp_specialize=True)`, not flattened). This times,
for each compute-bound reference case, the fully fused plan (every pointwise op in the matmul's prologue or
epilogue) on large tiles as: plain, persistent + TMA (flattened loop, as the suite's probe), persistent +
TMA + warp-specialised, persistent + warp-specialised with pointer loads; beside cuBLAS on the bare matmul
and the library plan (PyTorch's matmul and one pointwise kernel). Every variant is validated against the
float64 reference before it is timed; one that fails to compile or validate records why.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/warp_spec_gpu.py --out $OUT
Writes warp_spec.json under --out; prints one line per case and variant, a table last."""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import torch
import triton

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen.runtime import compile_plan
from fusionsearch.costmodel.analytic import fits
from fusionsearch.datasets.workloads import REFERENCE_CASES, case_name
from fusionsearch.errors import failure_reason

TILES = (P.TileConfig(128, 256, 64, 8, 1, 8, 3), P.TileConfig(128, 128, 64, 8, 1, 4, 4))
VARIANTS = {"plain": {}, "persistent + TMA": {"persistent": True, "tma_loads": True},
            "persistent + TMA + WS": {"persistent": True, "tma_loads": True, "warp_specialize": True},
            "persistent + WS": {"persistent": True, "warp_specialize": True}}


def bench(fn: Any) -> float:
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=25, rep=100) * 1e3


def cublas_us() -> float:
    """cuBLAS on a bare 4096^3 bf16 matmul (every single-matmul case's size)."""
    a, b = (torch.randn(4096, 4096, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    return bench(lambda: a @ b)


def timed_plan(plan: Any, g: Any, inputs: list[torch.Tensor], refs: list[torch.Tensor], options: dict) -> dict:
    """Validated against float64, then timed; a failure records its reason."""
    try:
        v = fs.measure.validate(plan, g, inputs, refs=refs, **options)
        if not v.ok:
            return {"error": "invalid: " + v.reason}
        run = compile_plan(plan, **options).module.run
        return {"us": bench(lambda: run(*inputs))}
    except Exception as e:  # one variant's failure is its own
        return {"error": failure_reason(e, 300)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    ap.add_argument("--cases", default="1,2,5,6,7", help="REFERENCE_CASES indices (default: the M4096 ones)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for index in [int(i) for i in args.cases.split(",")]:
        start = time.time()
        case = REFERENCE_CASES[index]
        g = fs.workload(case["workload"], dtype=torch.bfloat16, **case["shape"])
        inputs = fs.random_inputs(g, seed=0, device="cuda")
        refs = fs.reference(g, inputs, float64=True)
        mms = g.nodes_of_kind("template")
        row: dict[str, Any] = {"case": case_name(case), "results": []}
        row["cublas_bare_us"] = cublas_us() if len(mms) == 1 else None
        library = P.build_plan(g, {n: ("group", "pw") for n in g.nodes_of_kind("pointwise")}, library=mms)
        row["library_plan"] = timed_plan(library, g, inputs, refs, {})
        fused = P.fully_fused(g)
        for cfg in TILES:
            if not all(fits(g, mm, cfg) for mm in mms):
                continue
            for label, options in VARIANTS.items():
                r = {"config": cfg.short(), "variant": label, **timed_plan(fused.with_config(cfg), g, inputs, refs,
                                                                           options)}
                row["results"].append(r)
                print(f"{row['case']:<34} {cfg.short():<24} {label:<22} "
                      + (f"{r['us']:8.1f} us" if "us" in r else r["error"][:200]), flush=True)
        row["seconds"] = time.time() - start
        rows.append(row)
        with open(os.path.join(args.out, "warp_spec.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "triton": triton.__version__, "rows": rows}, f,
                      indent=1)
    print("\n| case | cuBLAS bare | library plan | " + " | ".join(f"{c.short()} {v}" for c in TILES for v in VARIANTS)
          + " |")
    print("|---" * (3 + len(TILES) * len(VARIANTS)) + "|")
    for row in rows:
        cells = {(r["config"], r["variant"]): (f"{r['us']:.1f}" if "us" in r else "failed") for r in row["results"]}
        lib = row["library_plan"]
        print(f"| {row['case']} | {row['cublas_bare_us'] or 0:.1f} | {lib.get('us', 0):.1f} | "
              + " | ".join(cells.get((c.short(), v), "") for c in TILES for v in VARIANTS) + " |")


if __name__ == "__main__":
    main()
