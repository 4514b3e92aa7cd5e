"""What the search itself costs on the CPU: analytic estimates per second, and the study's own overhead per trial
(sampler, storage, plan building; the cost model's share subtracted) with the cost model as the only judge.

    python benchmarks/search_overhead.py [--workload swiglu] [--trials 200] [--seconds 2] [--storage URL]

Estimates a rotating set of distinct plans drawn from the workload's search space for about `--seconds`, then
runs one study of `--trials` trials with backend "model" (in memory unless `--storage` is given) and prints one
table: µs per estimate, estimates/s, the study's wall time per trial, and that time less the mean estimate."""

from __future__ import annotations

import argparse
import random
import time

import torch

import fusionsearch as fs
from fusionsearch.costmodel.analytic import estimate, fits
from fusionsearch.costmodel.hardware import H200
from fusionsearch.plan import Plan
from fusionsearch.search.space import enumerate_space, random_plans
from fusionsearch.search.study import SearchOptions, run_study


def estimates_per_second(plans: list[Plan], seconds: float) -> tuple[int, float]:
    """Estimate plans round-robin for about `seconds`; returns (estimates, wall seconds)."""
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
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--storage", default=None, help="Optuna storage URL for the study (default: in memory)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    g = fs.workload(args.workload)
    space = enumerate_space(g, lambda gg, mm, cfg: fits(gg, mm, cfg, H200))
    plans = random_plans(space, 64, random.Random(0))
    estimates_per_second(plans, 0.2)  # warm imports and caches
    count, elapsed = estimates_per_second(plans, args.seconds)
    est_us = elapsed / count * 1e6

    def timed_study(trials: int) -> tuple[float, object]:
        opts = SearchOptions(trials=trials, backend="model", storage=args.storage,
                             study_name=f"overhead-{time.time_ns()}" if args.storage else None)
        start = time.perf_counter()
        res = run_study(g, opts, hw=H200)
        return time.perf_counter() - start, res

    # Setup (space enumeration, seed plans, study creation) is paid once per search: the per-trial cost is
    # the difference between a long and a one-trial study.
    timed_study(1)  # first use pays imports and caches once per process
    setup, _ = timed_study(1)
    wall, res = timed_study(args.trials)
    per_trial_us = (wall - setup) / (args.trials - 1) * 1e6
    counts = ", ".join(f"{v} {k}" for k, v in sorted(res.counts().items()))  # type: ignore[attr-defined]

    shape = " ".join(f"{n.name}{list(n.shape)}" for n in g if n.op == "input")
    print(f"{args.workload} ({shape}, {space.size():,} combinations), one thread")
    rows = [
        ("analytic estimate", f"{est_us:,.0f} us/plan",
         f"{count / elapsed:,.0f} plans/s ({len(plans)} distinct plans)"),
        ("study setup", f"{setup * 1e3:,.0f} ms", "one-trial study: space, seeds, storage"),
        (f"study, {args.trials} trials", f"{per_trial_us:,.0f} us/trial",
         f"{wall:.2f} s wall, {args.storage or 'in memory'}; {counts}"),
        ("study overhead", f"{per_trial_us - est_us:,.0f} us/trial", "per trial, less one mean estimate"),
    ]
    w0, w1 = max(len(r[0]) for r in rows), max(len(r[1]) for r in rows)
    for a, b, c in rows:
        print(f"  {a:<{w0}}  {b:>{w1}}  {c}")


if __name__ == "__main__":
    main()
