"""Search scaling over GPUs (issue 9): the same search with one worker and with one worker per visible GPU
(`workers="auto"`), on a fresh study each: wall time, measured trials per second, the best plan, and a check
that every slot ran exactly once (no trial lost or duplicated). Needs a machine with 2+ GPUs to show scaling.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/workers_gpu.py --out $OUT [--trials 64]
Writes workers.json; prints a table last."""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

import fusionsearch as fs
from fusionsearch.search.study import SearchOptions, run_study
from fusionsearch.search.workers import visible_gpus

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.harness import add_out, md_table, out_file, run_facts, write_json  # noqa: E402


def one(g: fs.OpGraph, trials: int, workers: int | str, storage: str) -> dict:
    start = time.time()
    res = run_study(g, SearchOptions(trials=trials, backend="gpu", workers=workers, storage=storage,
                                     study_name=f"scaling-{workers}", seed=0))
    wall = time.time() - start
    numbers = sorted(t.number for t in res.trials)
    measured = sum(t.status == "measured" for t in res.trials)
    return {"workers": workers, "wall_s": wall, "measured": measured, "measured_per_s": measured / wall,
            "trials": len(res.trials), "counts": res.counts(), "by_worker": res.workers(),
            "each_slot_once": numbers == list(range(len(numbers))), "best_us": res.best_us,
            "best_plan": res.best.describe()}


def main() -> None:
    ap = argparse.ArgumentParser()
    add_out(ap, "workers.json and the two studies' SQLite files")
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--workload", default="w8_dequant_mm")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)  # the studies' SQLite files go there first
    g = fs.workload(args.workload, dtype=torch.bfloat16)
    gpus = visible_gpus()
    rows = [one(g, args.trials, 1, f"sqlite:///{args.out}/one.db"),
            one(g, args.trials, "auto", f"sqlite:///{args.out}/all.db")]
    write_json({**run_facts("device"), "gpus": gpus, "rows": rows}, out_file(args.out, "workers.json"))
    head = [f"workers ({len(gpus)} GPUs)", "wall s", "measured", "measured / s", "each slot once", "best us",
            "by worker"]
    print("\n".join(md_table(head, ([r["workers"], f"{r['wall_s']:.0f}", r["measured"], f"{r['measured_per_s']:.2f}",
                                     r["each_slot_once"], f"{r['best_us']:.1f}", r["by_worker"]] for r in rows))))


if __name__ == "__main__":
    main()
