"""Which tile configs does a small-M fused matmul need? For the bandwidth-bound reference cases, the fully
fused plan under a grid of tile configs much wider than the search's space (block N and K, split-K, warps,
stages), each compiled in parallel, validated against float64 and timed with do_bench (L2 flushed), beside
cuBLAS on the bare matmul and the floor measured in the same run. Then the best five again in the two-kernel
split-K form, to compare with the default one-launch (serial) form, and the best eight with the weight (B
operand, and A) loaded through TMA tensor descriptors instead of pointer loads (codegen's `tma_loads`), to
learn whether codegen should emit descriptors for small M.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/tile_sweep_gpu.py --out $OUT
Writes sweep.json under --out; prints per case the ten best configs, then a summary table last."""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from typing import Any

import torch

import fusionsearch as fs
from fusionsearch.costmodel.analytic import fits, least_bytes, matmul_flops
from fusionsearch.datasets.workloads import case_name
from fusionsearch.errors import failure_reason
from fusionsearch.measure import validate
from fusionsearch.measure.bench import benchmark, measure_ceilings, time_callable
from fusionsearch.measure.isolate import CompilePool
from fusionsearch.plan import Plan, TemplateKernel, TileConfig, fully_fused
from fusionsearch.plan.matmul import problem

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.harness import add_out, floor_us, md_table, out_file, run_facts, write_json  # noqa: E402

CASES = [("mm_bias_gelu", {"M": 16, "K": 4096, "N": 4096}, (16,)),
         ("w8_dequant_mm", {"M": 16, "K": 8192, "N": 8192}, (16,)),
         ("gather_mm", {"M": 64, "K": 4096, "N": 4096, "T": 32000}, (32, 64))]
BLOCK_N = (32, 64, 128)
BLOCK_K = (128, 256, 512)
SPLIT_K = (1, 2, 4, 8, 16)
WARPS_STAGES = ((4, 3), (4, 4), (4, 6), (8, 4))


def configs(g: fs.OpGraph, mm: str, block_ms: tuple[int, ...], k: int) -> list[TileConfig]:
    out = []
    for bm, bn, bk, sk, (w, s) in itertools.product(block_ms, BLOCK_N, BLOCK_K, SPLIT_K, WARPS_STAGES):
        cfg = TileConfig(bm, bn, bk, 8, sk, w, s)
        if sk <= max(1, k // bk // 2) and fits(g, mm, cfg):
            out.append(cfg)
    return out


def tma_probe(plan: Plan, cfg: TileConfig, inputs: list, refs: list, rep_ms: int) -> dict[str, Any]:
    """The config again with codegen's `tma_loads`: operand tiles read through TMA tensor descriptors."""
    v = validate(plan, plan.graph, inputs, refs=refs, tma_loads=True)
    if not v.ok:
        return {"config": cfg.short(), "error": "invalid: " + v.reason}
    t = benchmark(plan, inputs, warmup_ms=5, rep_ms=rep_ms, tma_loads=True)
    return {"config": cfg.short(), "rel_err": v.rel_err, "ok": True, "median_us": t.median_us if t.ok else None,
            "error": t.reason}


def cublas_us(g: fs.OpGraph, mm: str) -> float:
    p = problem(g, mm)
    a = torch.randn(p.m, p.k, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(p.k, p.n, dtype=torch.bfloat16, device="cuda")
    return time_callable(lambda: torch.mm(a, b)).median_us


def main() -> None:
    ap = argparse.ArgumentParser()
    add_out(ap, "sweep.json")
    ap.add_argument("--workers", type=int, default=14)
    ap.add_argument("--rep-ms", type=int, default=20)
    args = ap.parse_args()
    ceilings = measure_ceilings()
    pool = CompilePool(args.workers)
    report: dict[str, Any] = {**run_facts("device"), "ceilings": ceilings, "cases": []}
    summary = []
    for name, shape, block_ms in CASES:
        t0 = time.time()
        g = fs.workload(name, **shape)
        base = fully_fused(g)
        mm = next(k.matmul for k in base.kernels if isinstance(k, TemplateKernel))
        cfgs = configs(g, mm, block_ms, problem(g, mm).k)
        plans = [base.with_config(c) for c in cfgs]
        failures = pool.warm(g.to_dict(), [p.to_json() for p in plans])
        inputs = fs.random_inputs(g, seed=0, device="cuda")
        refs = fs.reference(g, inputs, float64=True)
        rows = []
        for cfg, p, failure in zip(cfgs, plans, failures, strict=True):
            row: dict[str, Any] = {"config": cfg.short(), "median_us": None, "reason": failure}
            if not failure:
                try:
                    v = validate(p, g, inputs, refs=refs)
                    if not v.ok:
                        row["reason"] = "invalid: " + v.reason
                    else:
                        t = benchmark(p, inputs, warmup_ms=5, rep_ms=args.rep_ms)
                        row["median_us"], row["reason"] = (t.median_us, "") if t.ok else (None, t.reason)
                except Exception as e:
                    row["reason"] = failure_reason(e, 200)
            rows.append(row)
        ok = sorted((r for r in rows if r["median_us"]), key=lambda r: r["median_us"])
        by_name = {c.short(): c for c in cfgs}
        two_kernel = []
        for r in ok[:5]:
            cfg = by_name[r["config"]]
            if cfg.split_k > 1:
                t = benchmark(base.with_config(cfg), inputs, warmup_ms=5, rep_ms=args.rep_ms, serial_split_k=False)
                two_kernel.append({"config": r["config"], "serial_us": r["median_us"],
                                   "two_kernel_us": t.median_us if t.ok else None})
        tma = [tma_probe(base.with_config(by_name[r["config"]]), by_name[r["config"]], inputs, refs, args.rep_ms)
               for r in ok[:8]]
        floor = floor_us(least_bytes(g), matmul_flops(g), ceilings)
        cb = cublas_us(g, mm)
        case = {"case": case_name({"workload": name, "shape": shape}), "floor_us": floor, "cublas_bare_us": cb,
                "configs": len(cfgs), "ok": len(ok), "rows": rows, "two_kernel": two_kernel, "tma": tma,
                "seconds": time.time() - t0}
        report["cases"].append(case)
        write_json(report, out_file(args.out, "sweep.json"))
        print(f"{case['case']}: {len(cfgs)} configs, {len(ok)} ok, {case['seconds']:.0f} s; floor {floor:.1f} us, "
              f"cuBLAS bare {cb:.1f} us", flush=True)
        for r in ok[:10]:
            print(f"   {r['median_us']:7.1f} us  {r['median_us'] / floor:5.2f}x floor  {r['config']}", flush=True)
        for t in two_kernel:
            print(f"   split-K {t['config']}: serial {t['serial_us']:.1f} us, two kernels {t['two_kernel_us']}")
        for t in tma:
            print(f"   TMA B loads {t['config']}: {t.get('median_us', t.get('error'))} us, ok {t.get('ok')}")
        reasons: dict[str, int] = {}
        for r in rows:
            if not r["median_us"]:
                reasons[r["reason"][:80]] = reasons.get(r["reason"][:80], 0) + 1
        for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:3]:
            print(f"   {n} failed: {reason}")
        summary.append((case["case"], floor, cb, ok[0]["median_us"] if ok else None, ok[0]["config"] if ok else ""))
        del inputs, refs
        torch.cuda.empty_cache()
    pool.close()
    print("\n".join(md_table(["case", "floor us", "cuBLAS bare us", "best fused us", "x floor", "config"], (
        [c, f"{floor:.1f}", f"{cb:.1f}", *([f"{best:.1f}", f"{best / floor:.2f}"] if best else ["failed", ""]), cfg]
        for c, floor, cb, best, cfg in summary))))


if __name__ == "__main__":
    main()
