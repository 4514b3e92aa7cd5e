"""GPU: how close does the grouped matmul kind (issue 27) bring a mixture-of-experts FFN to its floor? For
Mixtral's moe_ffn (dim 4096, hidden 14336, 8 experts, top-2) at 1, 16 and 512 tokens: the heuristic plan with
its three expert bmms run by the grouped kind under a grid of configs (one config for all three, each bmm's
split-K from the kind's rule), every plan compiled in parallel, validated against a float64 expert loop and
timed with do_bench (L2 flushed), each kernel also timed alone; then the plan of each bmm's fastest config.
Beside it: the floor (the touched experts' weights and the activations at the copy bandwidth of the same
run), a device copy of those bytes, a loop of cuBLAS matmuls over the touched experts (tokens gathered before
timing: the grouped matmuls without the gather), eager PyTorch (gpt-fast's formulation; it materialises
w[idx], so not at 512 tokens), and the same plan as the template and decode kinds run it (not at 512 tokens).

Run on the GPU machine:  PYTHONPATH=. python benchmarks/grouped_sweep_gpu.py --out $OUT [--cases 0,1]
Writes sweep.json under --out after every case; prints the summary table last."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import networkx
import torch
import torch.nn.functional as F

import fusionsearch as fs
from fusionsearch.datasets.workloads import WORKLOADS, case_name
from fusionsearch.errors import failure_reason
from fusionsearch.kinds.decode_matmul import DecodeKernel
from fusionsearch.kinds.decode_matmul.configs import KNOWN_GOOD as DECODE_GOOD
from fusionsearch.kinds.grouped_matmul import GroupedConfig, GroupedKernel, expert_routing
from fusionsearch.kinds.grouped_matmul.configs import splits_for
from fusionsearch.measure.bench import measure_ceilings, time_callable
from fusionsearch.measure.isolate import CompilePool
from fusionsearch.plan import FusedMatmulKernel, Plan
from fusionsearch.plan.matmul import problem
from fusionsearch.search.space import enumerate_space

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.decode_sweep_gpu import timed, with_kernel  # noqa: E402
from benchmarks.harness import add_out, case_indices, md_table, out_file, run_facts, write_json  # noqa: E402
from benchmarks.suite import measure_copy, measure_cublas_per_expert  # noqa: E402

SHAPE = {"D": 4096, "H": 14336, "E": 8}
CASES = [{"T": 1, **SHAPE}, {"T": 16, **SHAPE}, {"T": 512, **SHAPE}]
GRID = {  # (block_m, block_n, block_k, warps, stages) by tokens
    "decode": list(itertools.product((16,), (64, 128, 256), (64, 128, 256), ((4, 3), (4, 4), (8, 3)))),
    "prefill": list(itertools.product((32, 64, 128), (64, 128, 256), (64,), ((4, 3), (4, 4), (8, 3), (8, 4)))),
}


def grouped_plan(base: Plan, g: fs.OpGraph, bm: int, bn: int, bk: int, w: int, s: int, pick: int | str) -> Plan:
    """`base` with every fused bmm run grouped on these blocks (split-K: the kind's rule's `pick`-th, or with a
    string pick like "sk2" that split for every bmm)."""
    def grouped(k: FusedMatmulKernel) -> GroupedKernel:
        splits = splits_for(expert_routing(g, k.matmul), problem(g, k.matmul).k, bm, bn, bk)
        split = int(pick[2:]) if isinstance(pick, str) else splits[min(pick, len(splits) - 1)]
        cfg = GroupedConfig(bm, bn, bk, split, w, s)
        return GroupedKernel(k.matmul, k.prologue_a, k.prologue_b, k.epilogue, cfg)
    return with_kernel(base, grouped)


def base_plan(g: fs.OpGraph, a_prologues: bool = True) -> Plan:
    """The search space's plan with every group that can be a prologue fused as one (the expert gathers in B,
    the token rows in A, SiLU*up in the down bmm's A loads) and the rest one kernel a group (the routing-weighted
    sum of the two experts: one pointwise kernel), at the first configs. Without `a_prologues`, a group that
    can only be an A prologue of a bmm fed by another bmm (SiLU*up) runs standalone: it is then computed once,
    not once a column block of the down bmm."""
    space = enumerate_space(g, max_configs=1)
    fed = {f"mm{i}" for i, mm in enumerate(space.matmuls) if any(
        g.node(n).op in ("bmm", "mm") for n in networkx.ancestors(g.nx, mm))}

    def choice(options: tuple[str, ...]) -> str:
        fused = [o for o in options if o.startswith("prologue")]
        if not a_prologues:
            fused = [o for o in fused if not (o.endswith(":A") and o.split(":")[1] in fed)]
        return fused[0] if fused else options[0]
    params = {f"{grp.key}.fusion": choice(grp.options) for grp in space.groups}
    params |= {f"mm{i}.config": space.configs[i][0].short() for i in range(len(space.matmuls))}
    return space.plan(params).check()


def decode_plan(base: Plan) -> Plan:
    """`base` with every fused bmm run by the decode kind on its first known-good dot config."""
    cfg = next(c for c in DECODE_GOOD if c.product != "fma")
    return with_kernel(base, lambda k: DecodeKernel(k.matmul, k.prologue_a, k.prologue_b, k.epilogue, cfg))


def expert_loop_float64(inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The MoE FFN in float64, one expert at a time over the tokens routed to it (never materialising w[idx])."""
    x, idx, rw, w1, w3, w2 = inputs
    out = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    for e in range(w1.shape[0]):
        t, a = (idx == e).nonzero(as_tuple=True)
        if len(t):
            xe = x[t].double()
            h = F.silu(xe @ w1[e].double().T) * (xe @ w3[e].double().T)
            out.index_add_(0, t, (h @ w2[e].double().T) * rw[t, a].double()[:, None])
    return [out]


def touched_bytes(inputs: Sequence[torch.Tensor]) -> int:
    """The floor's bytes: the weights of the experts the router picked, the activations, the output."""
    x, idx, rw, w1, w3, w2 = inputs
    experts = len(torch.unique(idx))
    weights = experts * (w1[0].nbytes + w3[0].nbytes + w2[0].nbytes)
    return weights + x.nbytes * 2 + idx.nbytes + rw.nbytes


def main() -> None:
    ap = argparse.ArgumentParser()
    add_out(ap, "sweep.json")
    ap.add_argument("--workers", type=int, default=14)
    ap.add_argument("--rep-ms", type=int, default=20)
    ap.add_argument("--cases", default="", help="comma-separated case indices (default: all)")
    ap.add_argument("--configs", default="", help="semicolon-separated block configs 'bm,bn,bk,warps,stages' in "
                    "place of the grid (e.g. '128,256,64,8,3;256,128,64,8,3')")
    ap.add_argument("--silu-standalone", action="store_true", help="SiLU*up in its own kernel in every plan, not "
                    "in the down bmm's A loads (computed once instead of once a column block)")
    ap.add_argument("--splits", default="", help="comma-separated split-K to try on every config besides the "
                    "kind's rule's two (T512's down bmm: does split-K's workspace cost more than it gives?)")
    args = ap.parse_args()
    ceilings = measure_ceilings()
    pool = CompilePool(args.workers)
    report: dict[str, Any] = {**run_facts("device"), "ceilings": ceilings, "cases": []}
    summary = []
    for index in case_indices(args.cases, len(CASES)):
        shape, t0 = CASES[index], time.time()
        g = fs.workload("moe_ffn", **shape, dtype=torch.bfloat16)
        base = base_plan(g, a_prologues=not args.silu_standalone)
        decode = shape["T"] <= 16
        grid = GRID["decode" if decode else "prefill"]
        if args.configs:
            grid = [(bm, bn, bk, (w, s)) for bm, bn, bk, w, s in (
                map(int, c.split(",")) for c in args.configs.split(";") if c.strip())]
        labels, plans = [], []
        extra = [f"sk{int(v)}" for v in args.splits.split(",") if v.strip()]
        picks: list[int | str] = [0, 1, *extra]
        for (bm, bn, bk, (w, s)), pick in itertools.product(grid, picks):
            try:
                plans.append(grouped_plan(base, g, bm, bn, bk, w, s, pick))
                labels.append(f"m{bm} n{bn} k{bk} w{w} s{s} " + (pick if isinstance(pick, str) else f"split#{pick}"))
            except Exception as e:  # a config the plan refuses (shared memory)
                print(f"   skipped m{bm} n{bn} k{bk} w{w} s{s}: {failure_reason(e, 120)}")
        unique = dict(zip([p.to_json() for p in plans], zip(labels, plans, strict=True), strict=True))
        labels, plans = [lb for lb, _ in unique.values()], [p for _, p in unique.values()]
        failures = pool.warm(g.to_dict(), [p.to_json() for p in plans])
        inputs = fs.random_inputs(g, seed=0, device="cuda")
        refs = expert_loop_float64(inputs)
        rows = []
        for label, p, failure in zip(labels, plans, failures, strict=True):
            row = {"config": label, "plan": p.to_json(), "median_us": None, "reason": failure}
            if not failure:
                row.update(timed(p, g, inputs, refs, args.rep_ms, per_kernel=True))
            rows.append(row)
        ok = sorted((r for r in rows if r["median_us"]), key=lambda r: r["median_us"])
        # Each bmm on its own fastest config (kernel times: [route, matmul] per bmm, then the pointwise tail).
        best_mix = None
        if ok:
            mm_kernels = [i for i, k in enumerate(plans[0].kernels) if isinstance(k, FusedMatmulKernel)]
            mixed = list(base.kernels)
            for i in mm_kernels:
                # the plan's steps are per plan kernel: step i runs kernel i's launches
                fastest = min((r for r in rows if r.get("kernels_us")), key=lambda r: r["kernels_us"][i])
                mixed[i] = Plan.from_json(fastest["plan"], g).kernels[i]
            best_mix = dataclasses.replace(base, kernels=tuple(mixed)).check()
            row = {"config": "each bmm on its fastest config", "plan": best_mix.to_json()}
            row.update(timed(best_mix, g, inputs, refs, args.rep_ms, per_kernel=True))
            rows.append(row)
        others = {}
        # SiLU*up once, standalone, instead of in every column block's A loads (with --silu-standalone the mix
        # above already is that plan)
        if best_mix is not None and not args.silu_standalone:
            standalone = base_plan(g, a_prologues=False)
            mix = {k.matmul: k for k in best_mix.kernels if isinstance(k, FusedMatmulKernel)}
            kernels = tuple(type(mix[k.matmul])(k.matmul, k.prologue_a, k.prologue_b, k.epilogue, mix[k.matmul].config)
                            if isinstance(k, FusedMatmulKernel) else k for k in standalone.kernels)
            try:
                mixed_standalone = dataclasses.replace(standalone, kernels=kernels).check()
                others["fastest, SiLU*up standalone"] = timed(mixed_standalone, g, inputs, refs, args.rep_ms,
                                                             per_kernel=True)
                others["fastest, SiLU*up standalone"]["plan"] = mixed_standalone.to_json()
            except Exception as e:
                others["fastest, SiLU*up standalone"] = {"median_us": None, "reason": failure_reason(e, 200)}
        if decode:
            for label, p in (("template", base), ("decode", decode_plan(base))):
                others[label] = timed(p, g, inputs, refs, args.rep_ms, per_kernel=True)
            try:
                eager = functools.partial(WORKLOADS["moe_ffn"].torch_fn, *inputs)
                others["eager"] = {"median_us": time_callable(eager).median_us}
            except Exception as e:
                others["eager"] = {"median_us": None, "reason": failure_reason(e, 200)}
        nbytes = touched_bytes(inputs)
        floor = nbytes / ceilings["bandwidth_bytes_per_s"] * 1e6
        copy, loop = measure_copy(nbytes)["median_us"], measure_cublas_per_expert(inputs)["median_us"]
        case = {"case": case_name({"workload": "moe_ffn", "shape": shape}), "floor_us": floor, "floor_bytes": nbytes,
                "experts_touched": len(torch.unique(inputs[1])), "copy_same_bytes_us": copy,
                "cublas_per_expert_us": loop, "others": others, "configs": len(plans), "ok": len(ok), "rows": rows,
                "seconds": time.time() - t0}
        report["cases"].append(case)
        write_json(report, out_file(args.out, "sweep.json"))
        print(f"{case['case']}: {len(plans)} grouped plans, {len(ok)} ok, {case['seconds']:.0f} s; "
              f"{case['experts_touched']} experts touched; floor {floor:.1f} us, copy {copy:.1f} us, cuBLAS per "
              f"expert {loop:.1f} us", flush=True)
        for r in ok[:8]:
            ks = " ".join(f"{x:.1f}" for x in r.get("kernels_us", []))
            print(f"   {r['median_us']:8.1f} us  {r['median_us'] / floor:5.2f}x floor  {r['config']}  [{ks}]",
                  flush=True)
        mix = rows[-1] if best_mix is not None else {}
        if mix.get("median_us"):
            print(f"   {mix['median_us']:8.1f} us  each bmm on its fastest config", flush=True)
        for label, r in others.items():
            print(f"   {label}: {r['median_us'] if r['median_us'] else r.get('reason')}", flush=True)
        reasons: dict[str, int] = {}
        for r in rows:
            if not r.get("median_us"):
                reasons[str(r.get("reason"))[:100]] = reasons.get(str(r.get("reason"))[:100], 0) + 1
        for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:3]:
            print(f"   {n} failed: {reason}")
        best = min([r for r in ok] + ([mix] if mix.get("median_us") else []), key=lambda r: r["median_us"],
                   default=None)
        summary.append((case["case"], floor, copy, loop, best, others))
        del inputs, refs
        torch.cuda.empty_cache()
    pool.close()

    def us(r: dict[str, Any] | None) -> str:
        return f"{r['median_us']:.1f}" if r and r.get("median_us") else "-"
    print("\n".join(md_table(["case", "floor us", "copy us", "cuBLAS per expert us", "best grouped us", "x floor",
                              "x cuBLAS loop", "template us", "decode us", "eager us"], (
        [c, f"{floor:.1f}", f"{copy:.1f}", f"{loop:.1f}", us(best),
         f"{best['median_us'] / floor:.2f}" if best else "", f"{loop / best['median_us']:.2f}" if best else "",
         us(o.get("template")), us(o.get("decode")), us(o.get("eager"))]
        for c, floor, copy, loop, best, o in summary))))


if __name__ == "__main__":
    main()
