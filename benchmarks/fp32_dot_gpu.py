"""GPU: fp32 matmul templates with tl.dot's IEEE fp32 products (FMA units) against tf32x3 and tf32 (tensor cores).

The code generator's `fp32_dot` option sets the dot's input precision for fp32 operands. This times the heuristic
fusion plan of a few fp32 workloads on up to --configs tile configs each (spread over the search's candidate
configs), once per option, checks every output against the float64 reference (relative Frobenius error, the
validator's fp32 tolerance 1e-5), and times eager PyTorch (cuBLAS) on the same inputs at the "highest" fp32
matmul precision (exact fp32) and at "high" (tf32). Times: do_bench medians, L2 flushed.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/fp32_dot_gpu.py --out $OUT [--gate]
Writes fp32_dot.json under --out; prints one line per plan, then a table per case last. With --gate the exit
status is 3 unless every tf32x3 plan validates and tf32x3 is faster than ieee over all configs (geometric mean).
CPU smoke test (the interpreter computes every dot in fp32, so all options agree there):
    TRITON_INTERPRET=1 PYTHONPATH=. python benchmarks/fp32_dot_gpu.py --small --device cpu
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any

import torch

import fusionsearch as fs
from fusionsearch.codegen.runtime import compile_plan
from fusionsearch.costmodel.analytic import fits
from fusionsearch.errors import failure_reason
from fusionsearch.kinds.matmul_template.configs import config_candidates
from fusionsearch.measure.bench import time_callable
from fusionsearch.measure.validate import TOLERANCE, rel_error
from fusionsearch.plan import heuristic

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.harness import add_out, geomean, out_file, run_facts, write_json  # noqa: E402

MODES = ("ieee", "tf32x3", "tf32")
CASES = (  # (label, workload, shape): decode and prefill shapes, a plain matmul, a dequant and a gather prologue
    ("mm_bias_gelu M16", "mm_bias_gelu", {"M": 16}),
    ("mm_bias_gelu M4096", "mm_bias_gelu", {"M": 4096}),
    ("mm_bias_gelu 2048x4096x1536", "mm_bias_gelu", {"M": 2048, "K": 4096, "N": 1536}),
    ("w8_dequant_mm M16", "w8_dequant_mm", {"M": 16}),
    ("w8_dequant_mm M4096", "w8_dequant_mm", {"M": 4096}),
    ("gather_mm M64", "gather_mm", {"M": 64}),
)
SMALL = (("mm_bias_gelu small", "mm_bias_gelu", {"M": 16, "K": 128, "N": 64}),)


def spread(items: tuple[Any, ...], n: int) -> list[Any]:
    """n items evenly spaced over `items` (all when fewer)."""
    if len(items) <= n:
        return list(items)
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)]


def eager_rows(label: str, g: Any, inputs: list[torch.Tensor], ref: list[torch.Tensor], timing: bool
               ) -> list[dict[str, Any]]:
    """Eager PyTorch on the same inputs at fp32 matmul precision "highest" (exact) and "high" (tf32)."""
    rows = []
    before = torch.get_float32_matmul_precision()
    try:
        for precision in ("highest", "high"):
            torch.set_float32_matmul_precision(precision)
            outs = fs.reference(g, inputs)
            row = {"case": label, "kind": f"eager {precision}", "err": max(rel_error(o, r) for o, r in
                                                                           zip(outs, ref, strict=True))}
            if timing:
                row["us"] = time_callable(lambda: fs.reference(g, inputs), 5, 25).median_us
            rows.append(row)
    finally:
        torch.set_float32_matmul_precision(before)
    return rows


def plan_rows(label: str, g: Any, inputs: list[torch.Tensor], ref: list[torch.Tensor], n_configs: int,
              timing: bool) -> list[dict[str, Any]]:
    """The heuristic plan on spread tile configs, compiled with each fp32_dot option: error and time."""
    mm = g.nodes_of_kind("template")[0]
    rows = []
    for cfg in spread(config_candidates(g, mm, fits), n_configs):
        plan = heuristic(g).with_config(cfg)
        for mode in MODES:
            row: dict[str, Any] = {"case": label, "kind": mode, "config": cfg.short(), "plan": plan.describe()}
            try:
                compiled = compile_plan(plan, fp32_dot=mode)
                outs = compiled(*inputs)
                if inputs[0].is_cuda:
                    torch.cuda.synchronize()
                row["err"] = max(rel_error(o, r) for o, r in zip(outs, ref, strict=True))
                row["valid"] = row["err"] <= TOLERANCE[torch.float32]
                if timing:
                    row["us"] = time_callable(lambda c=compiled: c(*inputs), 5, 25).median_us
            except Exception as e:  # one failing kernel is one row's error, not the run's
                row["error"] = failure_reason(e, 300)
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def summary(rows: list[dict[str, Any]]) -> tuple[list[str], bool]:
    """Per case: eager times and errors, each option's best time, worst error, invalid count and its geometric
    mean speed-up over ieee on the same configs. Also whether tf32x3 passes the gate."""
    lines = [f"{'case':30} {'eager fp32':>11} {'eager tf32':>11} {'ieee best':>10} {'tf32x3 best':>11} "
             f"{'tf32 best':>10} {'x3/ieee':>8} {'tf32/ieee':>9}  worst err ieee / tf32x3 / tf32 (invalid)"]
    ok, ratios_all = True, []
    for label in dict.fromkeys(r["case"] for r in rows):
        mine = [r for r in rows if r["case"] == label]
        eager = {r["kind"]: r for r in mine if r["kind"].startswith("eager")}
        by_mode = {m: {r["config"]: r for r in mine if r["kind"] == m} for m in MODES}
        best = {m: min((r["us"] for r in by_mode[m].values() if r.get("valid") and "us" in r), default=float("nan"))
                for m in MODES}
        ratio = {}
        for m in ("tf32x3", "tf32"):
            pairs = [(r["us"], by_mode[m][c]["us"]) for c, r in by_mode["ieee"].items()
                     if "us" in r and "us" in by_mode[m].get(c, {})]
            ratio[m] = geomean([a / b for a, b in pairs])
            if m == "tf32x3":
                ratios_all += [a / b for a, b in pairs]
        errs = " / ".join(f"{max((r.get('err', math.inf) for r in by_mode[m].values()), default=math.nan):.1e} "
                          f"({sum(not r.get('valid') for r in by_mode[m].values())})" for m in MODES)
        ok &= all(r.get("valid") for r in by_mode["tf32x3"].values())

        def us(kind: str, eager: dict[str, Any] = eager) -> str:
            r = eager.get(kind, {})
            return f"{r['us']:.1f}" if "us" in r else "-"
        lines.append(f"{label:30} {us('eager highest'):>11} {us('eager high'):>11} {best['ieee']:>10.1f} "
                     f"{best['tf32x3']:>11.1f} {best['tf32']:>10.1f} {ratio['tf32x3']:>8.2f} {ratio['tf32']:>9.2f}  "
                     f"{errs}")
    speedup = geomean(ratios_all)
    lines.append(f"tf32x3 over ieee, all configs: {speedup:.2f}x geometric mean; every tf32x3 plan valid: {ok}")
    return lines, ok and speedup > 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_out(ap, "fp32_dot.json", default=".")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--configs", type=int, default=8, help="tile configs per case")
    ap.add_argument("--small", action="store_true", help="one tiny case (CPU smoke test)")
    ap.add_argument("--gate", action="store_true", help="exit 3 unless tf32x3 validates everywhere and is faster")
    args = ap.parse_args()
    timing = args.device == "cuda"
    rows: list[dict[str, Any]] = []
    start = time.time()
    for label, name, shape in SMALL if args.small else CASES:
        g = fs.workload(name, dtype=torch.float32, **shape)
        inputs = fs.random_inputs(g, seed=0, device=args.device)
        ref = fs.reference(g, inputs, float64=True)
        rows += eager_rows(label, g, inputs, ref, timing)
        rows += plan_rows(label, g, inputs, ref, args.configs, timing)
    lines, passed = summary(rows)
    meta = {**run_facts("device", "torch", device=args.device), "seconds": round(time.time() - start, 1)}
    write_json({"meta": meta, "rows": rows, "table": lines}, out_file(args.out, "fp32_dot.json"))
    print("\n".join(lines))
    if args.gate and not passed:
        raise SystemExit(3)


if __name__ == "__main__":
    main()
