"""GPU ground truth for pruning: every plan of each reference case's enumerable space (bf16), compiled in
parallel, validated against float64 and timed; one JSON file per case under --out, written as soon as the
case is done. Regret curves for the learned model, the analytic model, TPE and random search replay these
measurements (a search that measures plan p observes exactly the time measured here).

Run on the GPU machine:  PYTHONPATH=. python benchmarks/whole_space_gpu.py --out $OUT [--search]
Single-matmul cases keep --max-configs tile configs per matmul, three-matmul swiglu --swiglu-configs.
--search also runs the real search on each case in the same process, after the whole space: the default
sampler and cost model (on an H200: the shipped learned model, ranked order, refitted as it measures) with a
tenth of the space as its trials; its pick is scored on the whole-space measurements, and again against the
whole-space best with both timed side by side in 5 interleaved rounds. --refit-every 4,0
searches each case once per setting of the search's correction (every 4 measured plans, never), one after
the other on the same measurements: the first is the case file's `search`, all of them its `searches`."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import torch

import fusionsearch as fs
from fusionsearch.codegen.runtime import compile_plan
from fusionsearch.costmodel.analytic import fits
from fusionsearch.datasets.workloads import REFERENCE_CASES, case_name
from fusionsearch.errors import failure_reason
from fusionsearch.measure.isolate import CompilePool
from fusionsearch.plan import Plan
from fusionsearch.search.collect import hardware_signature
from fusionsearch.search.space import enumerate_space
from fusionsearch.search.study import SearchOptions, run_study

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.harness import add_out, case_indices, comma_list, interleaved_medians, out_file, write_json  # noqa: E402


def search(g: fs.OpGraph, max_configs: int, plans: int, inputs: list, rows: list[dict], best: float,
           workers: int, compile_ranked: int = 0, library: bool = False, refit_every: int = 4) -> dict:
    """The product's search on this case with a tenth of the space as trials; its pick is looked up in the
    whole-space timings (same process, same inputs) so that regret compares like with like."""
    trials = math.ceil(plans / 10)
    opts = SearchOptions(trials=trials, backend="gpu", max_configs=max_configs, compile_workers=workers,
                         compile_ranked=compile_ranked, library=library,  # the space measured whole
                         refit_every=refit_every)
    res = run_study(g, opts, inputs=inputs)
    whole = {r["plan"]: r["median_us"] for r in rows}
    pick = whole.get(res.best.to_json())
    measured = [t for t in res.trials if t.status == "measured"]
    best_plan = min((r for r in rows if r["median_us"]), key=lambda r: r["median_us"])["plan"]
    side = side_by_side(g, res.best.to_json(), best_plan, inputs)
    return {"side_by_side": side, "trials": trials, "measured": len(measured),
            "pruned": sum(t.state == "pruned" for t in res.trials),
            "best_live_us": res.best_us, "pick": res.best.to_json(), "pick_whole_space_us": pick or float("nan"),
            "regret": (pick - best) / best if pick else float("nan"), "elapsed_s": res.elapsed_s,
            "refit_every": refit_every, "refits": sum("refitted" in t.refit for t in res.trials),
            "cost_model": res.cost_model,
            "sampler": res.sampler, "finalists": res.extra.get("finalists", []),
            "trial_records": [t.__dict__ for t in res.trials]}


def side_by_side(g: fs.OpGraph, pick_json: str, best_json: str, inputs: list, rounds: int = 5) -> dict:
    """The pick and the whole-space best timed again in interleaved rounds (median over rounds of do_bench
    medians): their regret without the single pass's noise (one plan's figure in one pass can be a lucky or
    unlucky moment of the GPU). Zero regret without timing when the pick is the best."""
    if pick_json == best_json:
        return {"regret": 0.0}
    runs = {}
    for key, pj in (("pick", pick_json), ("best", best_json)):
        run = compile_plan(Plan.from_json(pj, g)).module.run
        runs[key] = (lambda r: lambda: r(*inputs))(run)
    try:
        by_round, medians = interleaved_medians(runs, rounds)
        pick, best = medians["pick"], medians["best"]  # KeyError: one of them raised in every round
    except Exception as e:  # the single pass's regret stands
        return {"error": failure_reason(e, 200)}
    return {"pick_us": pick, "best_us": best, "regret": (pick - best) / best, "rounds_us": by_round}


def main() -> None:
    ap = argparse.ArgumentParser()
    add_out(ap, "one caseN.json per case")
    ap.add_argument("--max-configs", type=int, default=48)
    ap.add_argument("--swiglu-configs", type=int, default=4)
    ap.add_argument("--workers", type=int, default=14)
    ap.add_argument("--rep-ms", type=int, default=40)
    ap.add_argument("--cases", default="", help="comma-separated case indices (default: all)")
    ap.add_argument("--search", action="store_true", help="also search each case with a tenth of its space")
    ap.add_argument("--compile-ranked", type=int, default=0,
                    help="the search's --compile-ranked (default 0: rank with the blind model only)")
    ap.add_argument("--library", action="store_true",
                    help="spaces (and searches) with PyTorch's matmul as one more choice per matmul")
    ap.add_argument("--refit-every", default="4",
                    help="the search's --refit-every; several (4,0) search each case once per setting")
    args = ap.parse_args()
    refits = [int(r) for r in comma_list(args.refit_every)]
    try:
        indices = case_indices(args.cases, len(REFERENCE_CASES))
    except ValueError as e:
        ap.error(str(e))
    pool = CompilePool(args.workers)
    for ci in indices:
        c = REFERENCE_CASES[ci]
        t0 = time.time()
        g = fs.workload(c["workload"], dtype=torch.bfloat16, **c["shape"])
        k = args.swiglu_configs if c["workload"] == "swiglu" else args.max_configs
        space = enumerate_space(g, lambda gg, mm, cfg: fits(gg, mm, cfg), k, library=args.library)
        plans = [plan for _, plan in space.distinct_plans()]
        failures = pool.warm(g.to_dict(), [p.to_json() for p in plans])
        inputs = fs.random_inputs(g, seed=0, device="cuda")
        refs = fs.reference(g, inputs, float64=True)
        rows = []
        for p, failure in zip(plans, failures, strict=True):
            row = {"plan": p.to_json(), "median_us": None, "reason": failure}
            if not failure:
                v = fs.measure.validate(p, g, inputs, refs=refs)
                if not v.ok:
                    row["reason"] = "invalid: " + v.reason
                else:
                    try:
                        t = fs.measure.benchmark(p, inputs, warmup_ms=10, rep_ms=args.rep_ms)
                        row["median_us"], row["reason"] = (t.median_us, "") if t.ok else (None, t.reason)
                    except Exception as e:  # one plan's failure is its own
                        row["reason"] = failure_reason(e, 200)
            rows.append(row)
        ok = [r["median_us"] for r in rows if r["median_us"]]
        name = case_name(c)
        best = min(ok) if ok else float("nan")
        record = {"case": c, "name": name, "space_size": space.size(), "max_configs": k, "library": args.library,
                  "hardware": hardware_signature(), "plans": rows}
        line = f"{name:<40} plans {len(plans):>4}  ok {len(ok):>4}  best {best:8.1f} us  {time.time() - t0:5.0f} s"
        if args.search:
            record["searches"] = [search(g, k, len(plans), inputs, rows, best, args.workers, args.compile_ranked,
                                         args.library, r) for r in refits]
            record["search"] = record["searches"][0]
            for s in record["searches"]:
                line += (f"  search (refit every {s['refit_every']}): {s['measured']} measured, pick "
                         f"{s['pick_whole_space_us']:.1f} us on the whole-space timings (regret "
                         f"{100 * s['regret']:.2f}%; side by side with the best "
                         f"{100 * s['side_by_side'].get('regret', math.nan):.2f}%), {s['elapsed_s']:.0f} s")
        write_json(record, out_file(args.out, f"case{ci}.json"), indent=None)
        print(line, flush=True)
        del inputs, refs
        torch.cuda.empty_cache()
    pool.close()


if __name__ == "__main__":
    main()
