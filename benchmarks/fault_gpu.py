"""A deliberately faulting kernel fails only its own trial (issue 7), on the GPU.

A search of one reference workload measures through a measurement worker whose judge, for about a quarter of
the plans (chosen by a hash of the plan, so the same plans every run), first launches a Triton kernel that
stores far outside its buffer: an illegal address, which poisons that process's CUDA context. Those trials
must fail with the CUDA error as their reason and a fresh worker must judge the next plan; every other plan
is validated and timed as usual, and the search ends with all its trials. Writes fault.json under --out and
prints a per-trial table last.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/fault_gpu.py --out $OUT"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from typing import Any

import torch
import triton
import triton.language as tl

import fusionsearch as fs
from fusionsearch.measure.isolate import MeasureWorker
from fusionsearch.measure.judge import MeasureState, judge_plan
from fusionsearch.search.study import SearchOptions, run_study

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.harness import add_out, md_table, out_file, run_facts, write_json  # noqa: E402


@triton.jit
def _store_far_away(ptr, offset):
    tl.store(ptr + offset, 1.0)


def faults(plan_json: str) -> bool:
    return hashlib.sha256(plan_json.encode()).digest()[0] % 4 == 0


def faulty_judge(state: MeasureState, plan_json: str, kernels: bool) -> dict[str, Any]:
    """The real judge, after an illegal store for the plans `faults` picks."""
    if faults(plan_json):
        buf = torch.empty(16, device="cuda")
        _store_far_away[(1,)](buf, 1 << 40)
        torch.cuda.synchronize()  # raises: an illegal memory access was encountered
    return judge_plan(state, plan_json, kernels)


def main() -> None:
    ap = argparse.ArgumentParser()
    add_out(ap, "fault.json")
    ap.add_argument("--trials", type=int, default=16)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("benchmarks/fault_gpu.py needs a CUDA GPU")
    g = fs.workload("mm_bias_gelu", M=16, K=4096, N=4096)
    worker = MeasureWorker(g.to_dict(), device="cuda", seed=0, timeout_s=120,
                           judge="benchmarks.fault_gpu:faulty_judge")
    start = time.time()
    res = run_study(g, SearchOptions(trials=args.trials, backend="gpu", sampler="random", prune_margin=1e9,
                                     refit_every=0, seed=0), judge=worker)
    wall = time.time() - start
    rows = []
    for t in res.trials:
        plan_json = res.space.plan(t.params).to_json() if t.status in ("measured", "failed") else ""
        rows.append({"number": t.number, "status": t.status, "measured_us": t.measured_us,
                     "picked_to_fault": bool(plan_json) and faults(plan_json), "reason": t.reason})
    # The search's process never touched the faulting context: it still runs work on the GPU.
    alive = float((torch.ones(4, device="cuda") * 2).sum().item()) == 8.0
    report = {**run_facts("device", "torch", "triton"), "trials": args.trials, "wall_s": wall,
              "workers_started": worker.started,
              "search_process_gpu_ok": alive, "counts": res.counts(), "best_us": res.best_us,
              "best_plan": res.best.describe(), "rows": rows}
    write_json(report, out_file(args.out, "fault.json"))
    print("\n".join(md_table(["trial", "status", "picked to fault", "measured us", "reason"], (
        [r["number"], r["status"], "yes" if r["picked_to_fault"] else "",
         "" if r["measured_us"] is None else f"{r['measured_us']:.1f}", r["reason"][:150]] for r in rows))))
    print(f"\n{len(rows)} trials {res.counts()} in {wall:.0f} s; measurement workers started: {worker.started}; "
          f"search process GPU ok after: {alive}; best {res.best_us:.1f} us")


if __name__ == "__main__":
    main()
