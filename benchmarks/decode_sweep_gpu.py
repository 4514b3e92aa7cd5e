"""GPU: which decode-matmul configs (issue 27) reach the memory floor? For the decode-shaped cases, the fully
fused plan with its matmul run by the decode kind under a grid much wider than the search's space (the three
inner-product forms, block N and K, split-K, warps, stages), every config compiled in parallel, validated
against float64 and timed with do_bench (L2 flushed); beside the floor (least bytes at the copy bandwidth
measured in the same run), a device copy of the floor's bytes, cuBLAS on the bare matmul, and the template's
own best small-M configs on the same plan.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/decode_sweep_gpu.py --out $OUT [--cases 0,2]
    [--words --pairs-only]  (int4: the pairs configs and their words forms)
Writes sweep.json under --out after every case; prints per case the ten best configs, the summary table last."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import sys
import time
from typing import Any

import torch

import fusionsearch as fs
from fusionsearch.costmodel.analytic import least_bytes, matmul_flops
from fusionsearch.datasets.workloads import case_name
from fusionsearch.errors import failure_reason
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
from fusionsearch.kinds.decode_matmul.configs import reads_words, splits_for, unpacks_pairs
from fusionsearch.kinds.decode_matmul.kernel import pairs_fit
from fusionsearch.kinds.matmul_template.configs import KNOWN_GOOD_SMALL_M
from fusionsearch.measure import validate
from fusionsearch.measure.bench import benchmark, kernel_times, measure_ceilings
from fusionsearch.measure.isolate import CompilePool
from fusionsearch.plan import FusedMatmulKernel, Plan, fully_fused
from fusionsearch.plan.matmul import problem

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.harness import add_out, case_indices, floor_us, md_table, out_file, run_facts, write_json  # noqa: E402
from benchmarks.suite import measure_copy  # noqa: E402
from benchmarks.tile_sweep_gpu import cublas_us  # noqa: E402

CASES = [("w8_dequant_mm", {"M": 1, "K": 8192, "N": 8192}), ("w8_dequant_mm", {"M": 4, "K": 8192, "N": 8192}),
         ("w8_dequant_mm", {"M": 16, "K": 8192, "N": 8192}),
         ("w4_dequant_mm", {"M": 1, "K": 4096, "N": 11008, "G": 128}),
         ("w4_dequant_mm", {"M": 16, "K": 4096, "N": 11008, "G": 128}),
         ("mm_bias_gelu", {"M": 16, "K": 4096, "N": 4096}),
         ("w4_dequant_mm", {"M": 4, "K": 4096, "N": 11008, "G": 128}),
         # swiglu M16's projections (the suite's case 8) as single matmuls: gate/up, then down
         ("mm_bias_gelu", {"M": 16, "K": 4096, "N": 11008}), ("mm_bias_gelu", {"M": 16, "K": 11008, "N": 4096}),
         # gate and up as one matmul (their weights side by side): what one kernel for both would take
         ("mm_bias_gelu", {"M": 16, "K": 4096, "N": 22016})]
GRID = {"dot": ((64, 128, 256), (32, 64, 128, 256)), "dot_t": ((64, 128, 256), (32, 64, 128, 256)),
        "fma": ((128, 256, 512, 1024), (16, 32, 64)), "fma_acc": ((64, 128, 256), (32, 64, 128))}
WARPS_STAGES = {"dot": ((4, 3), (4, 5), (8, 4)), "dot_t": ((4, 3), (4, 5), (8, 4)),
                "fma": ((4, 1), (8, 1), (16, 1), (8, 2), (8, 4)), "fma_acc": ((4, 3), (8, 3), (8, 4))}


def configs(g: fs.OpGraph, mm: str, words: bool = False, pairs_only: bool = False) -> list[DecodeConfig]:
    """The grid, and where B's K is unpacked from pairs (int4) each config's pairs form that fits; with `words`
    also each pairs config's words form (where the bytes can be read as words); `pairs_only`: only those."""
    p = problem(g, mm)
    m, pairs = p.m, unpacks_pairs(g, mm)
    as_words = words and pairs and reads_words(g, mm)
    out = []
    for product, (bns, bks) in GRID.items():
        if product.startswith("fma") and m > 4:
            continue
        for bn, bk, (w, s) in itertools.product(bns, bks, WARPS_STAGES[product]):
            for sk in splits_for(g, mm, bn, bk):
                cfg = DecodeConfig(bn, bk, sk, w, s, product)
                if cfg.shared_memory_bytes(2) <= 220 * 1024 and cfg.accumulator_per_thread(m) <= 128:
                    if not pairs_only:
                        out.append(cfg)
                    if pairs and pairs_fit(p, bk, sk) and bk >= 32:
                        out.append(dataclasses.replace(cfg, pairs=True))
                        if as_words and (cfg.on_cuda_cores or bn >= 64):
                            out.append(dataclasses.replace(cfg, pairs=True, words=True))
    return list(dict.fromkeys(out))


def with_kernel(base: Plan, make: Any) -> Plan:
    """`base` with every fused matmul kernel replaced by `make(kernel)`."""
    kernels = tuple(make(k) if isinstance(k, FusedMatmulKernel) else k for k in base.kernels)
    return dataclasses.replace(base, kernels=kernels).check()


def timed(plan: Plan, g: fs.OpGraph, inputs: list, refs: list, rep_ms: int, per_kernel: bool = False
          ) -> dict[str, Any]:
    """`plan` validated against `refs`, then timed (µs); with `per_kernel` each of its kernels also alone."""
    try:
        v = validate(plan, g, inputs, refs=refs)
        if not v.ok:
            return {"median_us": None, "reason": "invalid: " + v.reason}
        t = benchmark(plan, inputs, warmup_ms=5, rep_ms=rep_ms)
        row = {"median_us": t.median_us if t.ok else None, "reason": t.reason, "rel_err": v.rel_err}
        if per_kernel and t.ok:
            row["kernels_us"] = kernel_times(plan, inputs, rep_ms=rep_ms)
        return row
    except Exception as e:
        return {"median_us": None, "reason": failure_reason(e, 200)}


MAX_CLOCK_HZ = 1.98e9  # H100/H200 SXM boost clock: the issue figure below is a lower bound on time


def issue_bound(plan: Plan, g: fs.OpGraph, mm: str, cfg: DecodeConfig) -> dict[str, float]:
    """What instruction issue alone costs the plan's decode kernel: its sm_90 SASS K-loop instructions (per
    thread per K step, codegen.resources), per weight element, and the time every warp's loop takes at one
    warp-instruction per cycle per SM sub-partition (4 a multiprocessor) and the boost clock."""
    from fusionsearch.codegen.resources import plan_resources

    res = next(r for r in plan_resources(plan) if r is not None)
    p = problem(g, mm)
    steps = -(-p.k // cfg.block_k) * -(-p.n // cfg.block_n) * p.batch  # CTA K steps over the whole grid
    warp_instructions = res.loop_instructions * cfg.num_warps * steps
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return {"loop_instructions": res.loop_instructions, "registers": res.registers,
            "instructions_per_element": res.loop_instructions * 32 * cfg.num_warps / (cfg.block_k * cfg.block_n),
            "issue_us": warp_instructions / (4 * sms * MAX_CLOCK_HZ) * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser()
    add_out(ap, "sweep.json")
    ap.add_argument("--workers", type=int, default=14)
    ap.add_argument("--rep-ms", type=int, default=20)
    ap.add_argument("--cases", default="", help="comma-separated case indices (default: all)")
    ap.add_argument("--tma", action="store_true", help="also each config with the weight read through TMA")
    ap.add_argument("--words", action="store_true", help="also each pairs config in its words form")
    ap.add_argument("--pairs-only", action="store_true", help="only the pairs (and words) forms where B has pairs")
    args = ap.parse_args()
    ceilings = measure_ceilings()
    pool = CompilePool(args.workers)
    report: dict[str, Any] = {**run_facts("device"), "ceilings": ceilings, "cases": []}
    summary = []
    for index in case_indices(args.cases, len(CASES)):
        name, shape = CASES[index]
        t0 = time.time()
        g = fs.workload(name, **shape)
        base = fully_fused(g)
        mm = next(k.matmul for k in base.kernels if isinstance(k, FusedMatmulKernel))
        cfgs = configs(g, mm, args.words, args.pairs_only)
        plans = [with_kernel(base, lambda k, c=c: DecodeKernel(k.matmul, k.prologue_a, k.prologue_b, k.epilogue, c))
                 for c in cfgs]
        labels = [c.short() for c in cfgs]
        if args.tma:  # the same configs, the weight's tiles through a tensor descriptor (boxes of <= 256)
            tma = [i for i, c in enumerate(cfgs) if not c.pairs and c.block_n <= 256 and c.block_k <= 256]
            plans += [dataclasses.replace(plans[i], options=dataclasses.replace(plans[i].options, tma_loads=True))
                      for i in tma]
            labels += [labels[i] + " tma" for i in tma]
            cfgs = cfgs + [cfgs[i] for i in tma]
        templates = [c for c in KNOWN_GOOD_SMALL_M if c.block_m == 16]
        template_plans = [base.with_config(c) for c in templates]
        failures = pool.warm(g.to_dict(), [p.to_json() for p in plans + template_plans])
        inputs = fs.random_inputs(g, seed=0, device="cuda")
        refs = fs.reference(g, inputs, float64=True)
        rows = []
        for label, p, failure in zip(labels + [c.short() for c in templates], plans + template_plans, failures,
                                     strict=True):
            row = {"config": label, "median_us": None, "reason": failure}
            if not failure:
                row.update(timed(p, g, inputs, refs, args.rep_ms))
            rows.append(row)
        decode_ok = sorted((r for r in rows[:len(cfgs)] if r["median_us"]), key=lambda r: r["median_us"])
        template_ok = sorted((r for r in rows[len(cfgs):] if r["median_us"]), key=lambda r: r["median_us"])
        nbytes = least_bytes(g)
        floor = floor_us(nbytes, matmul_flops(g), ceilings)
        copy, cb = measure_copy(nbytes)["median_us"], cublas_us(g, mm)
        case = {"case": case_name({"workload": name, "shape": shape}), "floor_us": floor, "floor_bytes": nbytes,
                "copy_same_bytes_us": copy, "cublas_bare_us": cb, "configs": len(cfgs), "ok": len(decode_ok),
                "rows": rows, "seconds": time.time() - t0}
        report["cases"].append(case)
        write_json(report, out_file(args.out, "sweep.json"))
        print(f"{case['case']}: {len(cfgs)} decode configs, {len(decode_ok)} ok, {case['seconds']:.0f} s; floor "
              f"{floor:.1f} us, copy {copy:.1f} us, cuBLAS bare {cb:.1f} us", flush=True)
        for r in decode_ok[:10]:
            gbs = nbytes / (r["median_us"] * 1e-6) / 1e9
            print(f"   {r['median_us']:7.1f} us  {r['median_us'] / floor:5.2f}x floor  {gbs:6.0f} GB/s  {r['config']}",
                  flush=True)
        for r in template_ok[:2]:
            print(f"   template {r['median_us']:7.1f} us  {r['config']}", flush=True)
        reasons: dict[str, int] = {}
        for r in rows:
            if not r["median_us"]:
                reasons[r["reason"][:100]] = reasons.get(r["reason"][:100], 0) + 1
        for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:3]:
            print(f"   {n} failed: {reason}")
        best = decode_ok[0] if decode_ok else None
        if best:
            at = labels.index(best["config"])
            cfg = cfgs[at]
            try:
                case["best_issue"] = issue_bound(plans[at], g, mm, cfg)
                best["issue"] = case["best_issue"]
                write_json(report, out_file(args.out, "sweep.json"))
            except Exception as e:
                case["best_issue"] = {"reason": failure_reason(e, 200)}
            print(f"   best's issue bound: {case['best_issue']}", flush=True)
        summary.append((case["case"], floor, copy, cb, best, template_ok[0] if template_ok else None))
        del inputs, refs
        torch.cuda.empty_cache()
    pool.close()
    print("\n".join(md_table(["case", "floor us", "copy us", "cuBLAS bare us", "best decode us", "x floor",
                              "best template us", "decode config", "instr/elt", "issue us"], (
        [c, f"{floor:.1f}", f"{copy:.1f}", f"{cb:.1f}",
         *([f"{best['median_us']:.1f}", f"{best['median_us'] / floor:.2f}"] if best else ["failed", ""]),
         f"{tb['median_us']:.1f}" if tb else "", best["config"] if best else "",
         *([f"{best['issue']['instructions_per_element']:.1f}", f"{best['issue']['issue_us']:.1f}"]
           if best and "issue" in best else ["", ""])]
        for c, floor, copy, cb, best, tb in summary))))


if __name__ == "__main__":
    main()
