"""GPU (issue 52, item 4): gpt-fast's int8 weight-only linear, `F.linear(x, w.to(x.dtype)) * scales`, at
Llama-2-7B's shapes, captured as a user's `fs.tune` would capture it: the decode kind under every config the
search offers (`decode_candidates`) and under long-K tiles (a few weight rows, a long contiguous run of K each:
the form of Inductor's split-free reduction at M=1), against Inductor's code for the same graph in max-autotune
(`inductor_region`, what the backend's race compiles), each replayed from a CUDA graph, L2 flushed, timed in
interleaved rounds with the backend's own race timer; beside them the weight bytes at the copy bandwidth of the
same run.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/int8_linear_gpu.py --out $OUT [--rows 1,16]
    [--shapes 4096x12288,11008x4096]
Writes int8_linear.json after every case; prints each case's five best configs, the summary table last."""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from typing import Any

import torch
import torch.nn.functional as F

import fusionsearch as fs
from fusionsearch.errors import PlanError, failure_reason
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
from fusionsearch.kinds.decode_matmul.configs import decode_candidates, splits_for, wave_split
from fusionsearch.measure import validate
from fusionsearch.measure.bench import measure_ceilings, time_callable
from fusionsearch.measure.isolate import CompilePool
from fusionsearch.plan import FusedMatmulKernel, fully_fused
from fusionsearch.plan.matmul import problem

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.decode_sweep_gpu import with_kernel  # noqa: E402
from benchmarks.harness import WoqRewrite, add_out, comma_list, md_table, out_file, run_facts, write_json  # noqa: E402

INDUCTOR, INDUCTOR_NO_WOQ = "inductor max-autotune", "inductor max-autotune no-woq"

SHAPES = ((4096, 12288), (4096, 4096), (4096, 11008), (11008, 4096))  # K x N: wqkv, wo, w1 / w3, w2
LONG_K = (((16, 32, 64), (256, 512)), "fma")  # block_n, block_k of the long-K tiles


def linear(x: torch.Tensor, w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """gpt-fast's WeightOnlyInt8Linear.forward."""
    return F.linear(x, w.to(x.dtype)) * s


def long_k_configs(g: fs.OpGraph, mm: str) -> list[DecodeConfig]:
    """Few weight rows, a long run of K each: fma tiles of 16-64 columns and 256-512 K, the splits the search
    would take and the unsplit one, 4 or 8 warps, 2-4 stages."""
    (bns, bks), product = LONG_K
    p = problem(g, mm)
    out = []
    for bn, bk, (w, s) in itertools.product(bns, bks, ((4, 2), (4, 3), (8, 3), (8, 4))):
        for sk in dict.fromkeys((1, *splits_for(g, mm, bn, bk), wave_split(p, bn, bk, 4))):
            try:
                out.append(DecodeConfig(bn, bk, sk, w, s, product))
            except PlanError:
                continue
    return out


def main() -> None:
    from fusionsearch.dynamo.race import inductor_region, interleaved_timer

    ap = argparse.ArgumentParser()
    add_out(ap, "int8_linear.json")
    ap.add_argument("--rows", default="1,16")
    ap.add_argument("--shapes", default=",".join(f"{k}x{n}" for k, n in SHAPES), help="KxN, comma-separated")
    ap.add_argument("--workers", type=int, default=14)
    ap.add_argument("--finalists", type=int, default=6, help="configs raced against Inductor in rounds")
    args = ap.parse_args()
    WoqRewrite.install()  # before the first Inductor compile of this process
    ceilings = measure_ceilings()
    pool = CompilePool(args.workers)
    report: dict[str, Any] = {**run_facts("device", "torch", "triton", date="utc"), "ceilings": ceilings, "cases": []}
    race_timer = interleaved_timer(graphed=True, rounds=5)
    summary = []
    for rows, shape in itertools.product(map(int, comma_list(args.rows)), comma_list(args.shapes)):
        k_dim, n_dim = map(int, shape.split("x"))
        t0 = time.time()
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(rows, k_dim, device="cuda", dtype=torch.bfloat16, generator=gen)
        w = torch.randint(-127, 128, (n_dim, k_dim), device="cuda", dtype=torch.int8, generator=gen)
        s = (torch.rand(n_dim, device="cuda", generator=gen) / 512).to(torch.bfloat16)
        inp = (x, w, s)
        g = fs.capture(linear, *inp)
        base = fully_fused(g)
        mm = next(k.matmul for k in base.kernels if isinstance(k, FusedMatmulKernel))
        offered = list(decode_candidates(g, mm))
        cfgs = list(dict.fromkeys([*offered, *(long_k_configs(g, mm) if rows <= 4 else [])]))
        plans = [with_kernel(base, lambda k, c=c: DecodeKernel(k.matmul, k.prologue_a, k.prologue_b, k.epilogue, c))
                 for c in cfgs]
        failures = pool.warm(g.to_dict(), [p.to_json() for p in plans])
        refs = fs.reference(g, list(inp), float64=True)
        rows_out, finalists = [], {}
        for cfg, plan, failure in zip(cfgs, plans, failures, strict=True):
            row: dict[str, Any] = {"config": cfg.short(), "offered": cfg in offered, "median_us": None,
                                   "reason": failure}
            if not failure:  # checked by the search's own rule (poisoned outputs, float64, dtype tolerance)
                v = validate(plan, g, list(inp), refs=refs)
                row["rel_err"] = v.rel_err
                if not v.ok:
                    row["reason"] = "invalid: " + v.reason
                else:
                    try:
                        run = fs.compile_plan(plan)
                        row["median_us"] = time_callable(lambda run=run, inp=inp: run(*inp), 5, 20).median_us
                        finalists[cfg.short()] = run
                    except Exception as e:
                        row["reason"] = failure_reason(e, 200)
            rows_out.append(row)
        ok = sorted((r for r in rows_out if r["median_us"]), key=lambda r: r["median_us"])
        best_offered = next((r for r in ok if r["offered"]), None)
        picked = [r["config"] for r in ok[:args.finalists]]
        if best_offered and best_offered["config"] not in picked:
            picked.append(best_offered["config"])
        candidates = {c: (lambda run=finalists[c], inp=inp: run(*inp)) for c in picked}
        inductor_reason = ""
        # Inductor as max-autotune compiles it and, above one row (where its int8 rewrite to
        # aten._weight_int8pack_mm is not pre-empted), without that rewrite too: the faster is PyTorch's best
        for name, off in [(INDUCTOR, False)] + ([(INDUCTOR_NO_WOQ, True)] if rows > 1 else []):
            WoqRewrite.off = off
            try:
                with WoqRewrite.uncached():
                    theirs = inductor_region(g, [x, w, s], "max-autotune")
                candidates[name] = lambda theirs=theirs, inp=inp: theirs(*inp)
            except Exception as e:
                inductor_reason += f"{name}: {failure_reason(e, 200)} "
            finally:
                WoqRewrite.off = False
        raced = race_timer(candidates)
        copy_us = w.numel() / ceilings["bandwidth_bytes_per_s"] * 1e6  # read + write bytes a second
        case = {"rows": rows, "k": k_dim, "n": n_dim, "weight_bytes": w.numel(), "copy_weight_us": copy_us,
                "configs": len(cfgs), "ok": len(ok), "screened": rows_out, "raced": raced,
                "inductor_reason": inductor_reason, "seconds": time.time() - t0}
        report["cases"].append(case)
        write_json(report, out_file(args.out, "int8_linear.json"))
        ind = min((raced[c] for c in (INDUCTOR, INDUCTOR_NO_WOQ) if c in raced), default=None)
        ours = {c: t for c, t in raced.items() if c not in (INDUCTOR, INDUCTOR_NO_WOQ)}
        best = min(ours, key=ours.__getitem__) if ours else None
        off = best_offered["config"] if best_offered else None
        print(f"M{rows} {k_dim}->{n_dim}: {len(cfgs)} configs, {len(ok)} ok, {case['seconds']:.0f} s; inductor "
              f"{ind}; raced {', '.join(f'{c} {t:.1f}' for c, t in sorted(raced.items(), key=lambda kv: kv[1]))}",
              flush=True)
        summary.append((f"M{rows} {k_dim}->{n_dim}", copy_us, ind, best, ours.get(best) if best else None, off,
                        ours.get(off) if off else None))
    pool.close()

    def f(v: float | None) -> str:
        return "" if v is None else f"{v:.1f}"

    print("\n".join(md_table(["case", "weight at copy bw us", "inductor best us", "best decode", "us", "x inductor",
                              "best offered", "us", "x inductor"], (
        [c, f(cp), f(ind), b or "", f(bt), f(ind / bt) if ind and bt else "", o or "", f(ot),
         f(ind / ot) if ind and ot else ""] for c, cp, ind, b, bt, o, ot in summary))))


if __name__ == "__main__":
    main()
