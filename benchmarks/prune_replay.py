"""Regret versus measurements, replayed from whole_space_gpu.py's H200 measurements (CPU; no GPU needed).

A search that measures plan p observes exactly the time measured for p in the whole-space run. Strategies:
learned (measure plans in the shipped model's predicted order, blind to compiled figures), with --compiled
"learned, compiled" (the live search's first ranking: the 2 x budget plans ranked first compiled for sm_90 on
this CPU and priced again with their registers, spills and shared memory), learned+refit (the same, the model corrected
on the plans measured so far every --refit-every plans and the rest re-ranked, as the search's ranked sampler
does; a multi-kernel plan's measured time is split over its kernels in proportion to their predictions, where
the live search times each kernel alone), analytic (the roofline model's order), TPE (Optuna's sampler over
the space's parameters, 5 seeds), random (20 permutations). Regret after n
measurements = (best measured so far − whole-space best) / whole-space best; failed plans count as measured.

    python benchmarks/prune_replay.py benchmarks/results/h200-2026-12-02-whole-space --out DIR"""

from __future__ import annotations

import argparse
import glob
import math
import os
import random
import sys

import numpy as np
import optuna
import torch

import fusionsearch as fs
from fusionsearch.costmodel.analytic import estimate, fits
from fusionsearch.costmodel.hardware import H200
from fusionsearch.costmodel.learned import load
from fusionsearch.costmodel.pricing import per_plan, plan_time_us, plans_matrix
from fusionsearch.costmodel.refit import StudyRefit
from fusionsearch.plan import Plan
from fusionsearch.search.ranked import compile_fastest
from fusionsearch.search.space import enumerate_space
from fusionsearch.settings import SHIPPED_MODEL

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.harness import add_out, out_file, pyplot, read_json, save_figure, write_json  # noqa: E402


def curve(order_times: list[float], best: float) -> list[float]:
    out, seen = [], math.inf
    for t in order_times:
        seen = min(seen, t)
        out.append((seen - best) / best if math.isfinite(seen) else math.inf)
    return out


def tpe_curve(space: object, times: dict[str, float], best: float, n: int, seed: int) -> list[float]:
    def objective(trial: optuna.Trial) -> float:
        try:
            t = times.get(space.plan(space.suggest(trial)).to_json(), math.inf)
        except Exception:
            t = math.inf
        return t if math.isfinite(t) else 1e12

    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(10, n // 2)))
    study.optimize(objective, n_trials=n)
    return curve([t.value if t.value < 1e12 else math.inf for t in study.trials], best)


def refit_order(model: object, plans: dict[str, Plan], times: dict[str, float], steps: int, every: int) -> list[str]:
    """The order in which a ranked search that refits its model every `every` measured plans measures the
    plans: refitted for the first `steps` plans, the rest in the last model's order."""
    refit = StudyRefit(model, H200, every)
    keys = list(plans)
    X, starts = plans_matrix([plans[k] for k in keys], H200)
    current, order, left = model, [], set(keys)
    while left:
        kernel_pred = current.predict(X)
        predicted = dict(zip(keys, per_plan(kernel_pred, starts), strict=True))
        ranked = sorted(left, key=lambda k: predicted[k])
        if len(order) >= steps:
            return order + ranked
        pick = ranked[0]
        order.append(pick)
        left.remove(pick)
        if math.isfinite(times[pick]):
            i = keys.index(pick)
            lo, hi = (starts[i - 1] if i else 0), (starts[i] if i < len(starts) else len(kernel_pred))
            share = kernel_pred[lo:hi] / kernel_pred[lo:hi].sum()
            if refit.add(plans[pick], list(times[pick] * share)):
                current = refit.refit()
    return order


def compiled_order(model: object, plans: dict[str, Plan], top: int) -> list[str]:
    """The live search's first ranking: the `top` plans the blind model puts first compiled for sm_90 (on this
    CPU) and priced again with their compiled figures, then every plan in predicted order."""
    keys = list(plans)
    ranked = [plans[k] for k in keys]
    X, starts = plans_matrix(ranked, H200)
    compile_fastest(model, ranked, X, starts, H200, top)
    predicted = per_plan(model.predict(X), starts)
    return [keys[i] for i in np.argsort(predicted, kind="stable")]


def mean_curves(curves: list[list[float]]) -> list[float]:
    return [sum(c[i] for c in curves) / len(curves) for i in range(len(curves[0]))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    add_out(ap, "prune-replay.json, prune-replay.png")
    ap.add_argument("--model", default=SHIPPED_MODEL)
    ap.add_argument("--refit-every", type=int, default=4)
    ap.add_argument("--compiled", action="store_true",
                    help="also the live search's ranking: the 2 x budget plans ranked first compiled for sm_90 "
                         "(on this CPU, ~1 s a plan) and priced again")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    model = load(args.model)
    report = []
    found = glob.glob(os.path.join(args.results, "case*.json")) + glob.glob(os.path.join(args.results, "case*.json.gz"))
    paths = {p.removesuffix(".gz") for p in found}  # read_json reads a case kept gzipped
    for path in sorted(paths, key=lambda p: int(os.path.basename(p)[4:-5])):
        data = read_json(path)
        c = data["case"]
        g = fs.workload(c["workload"], dtype=torch.bfloat16, **c["shape"])
        space = enumerate_space(g, lambda gg, mm, cfg: fits(gg, mm, cfg), data["max_configs"],
                                library=data.get("library", False))
        times = {r["plan"]: (r["median_us"] if r["median_us"] else math.inf) for r in data["plans"]}
        plans = {pj: Plan.from_json(pj, g) for pj in times}
        best = min(times.values())
        n = math.ceil(len(times) / 10)
        learned = sorted(times, key=lambda pj: plan_time_us(model, plans[pj], H200))
        compiled = compiled_order(model, plans, 2 * n) if args.compiled else None
        analytic = sorted(times, key=lambda pj: estimate(plans[pj], H200).time_us)
        refitted = refit_order(model, plans, times, n, args.refit_every)
        curves = {"learned": curve([times[p] for p in learned], best),
                  **({"learned, compiled": curve([times[p] for p in compiled], best)} if compiled else {}),
                  "learned+refit": curve([times[p] for p in refitted], best),
                  "analytic": curve([times[p] for p in analytic], best)}
        rng = random.Random(0)
        perms = [rng.sample(list(times), len(times)) for _ in range(20)]
        curves["random"] = mean_curves([curve([times[p] for p in perm], best) for perm in perms])
        curves["tpe"] = mean_curves([tpe_curve(space, times, best, len(times), s) for s in range(5)])
        report.append({"case": data["name"], "space": len(times), "budget": n, "best_us": best,
                       "regret_at_budget": {k: v[n - 1] for k, v in curves.items()}, "curves": curves})
        r = report[-1]["regret_at_budget"]
        print(f"{data['name']:<34} space {len(times):>4} n {n:>3} best {best:7.1f} us  " +
              "  ".join(f"{k} {100 * v:6.2f}%" for k, v in r.items()), flush=True)
    geo = {k: math.exp(sum(math.log1p(r["regret_at_budget"][k]) for r in report) / len(report)) - 1
           for k in report[0]["regret_at_budget"]}
    worst = {k: max(r["regret_at_budget"][k] for r in report) for k in geo}
    print("geomean regret at a tenth of the space: " + "  ".join(f"{k} {100 * v:.2f}%" for k, v in geo.items()))
    print("worst case:                             " + "  ".join(f"{k} {100 * v:.2f}%" for k, v in worst.items()))
    write_json({"cases": report, "geomean_regret": geo, "worst_regret": worst}, out_file(args.out, "prune-replay.json"))
    if not _plot(report, out_file(args.out, "prune-replay.png")):
        print("matplotlib is not installed: no prune-replay.png")


def _plot(report: list[dict], path: str) -> bool:
    """One panel per case: regret against plans measured, per strategy; False without matplotlib."""
    plt = pyplot()
    if plt is None:
        return False
    cols = 5
    rows = math.ceil(len(report) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows))
    for ax, r in zip(axes.flat, report, strict=False):
        for k, v in r["curves"].items():
            ax.plot(range(1, len(v) + 1), [100 * min(x, 1.0) for x in v], label=k, ls="--" if "refit" in k else "-")
        ax.axvline(r["budget"], color="grey", lw=0.8, ls="--")
        ax.set_title(r["case"], fontsize=8)
        ax.set_xscale("log")
        ax.set_xlabel("plans measured")
        ax.set_ylabel("regret % (capped at 100)")
    axes.flat[0].legend(fontsize=7)
    save_figure(fig, path, dpi=90)
    return True


if __name__ == "__main__":
    main()
