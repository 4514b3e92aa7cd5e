"""Measure few (issue 54 item 4): how close the best of the learned model's first k plans comes to the best of
128 measured, on fresh random graphs, and how long a search's part of a region takes with 8 measured.

Per graph (random_graph(seed), seeds the shipped data does not hold: refused otherwise):
- the live search with its defaults (SearchOptions: `measure` plans measured, the refit): its seconds (the
  ranking alone, and the whole search: ranking, compiling, measuring, correcting, finalists) against the 5 s goal;
- up to 128 plans measured (the model's first 128, or the whole space when smaller), each with its kernels alone;
- for k in 1, 2, 4, 8, 16: the regret of the best of the model's first k against the best of the 128, in the
  model's order ("model") and in the order the search follows ("refit": corrected on the measured kernels
  after FIRST_REFIT plans, then every refit_every, the rest re-ranked; replayed on the 128 measured plans, so a
  plan the corrected model would take from outside them is not counted).

`--dry` runs the CPU parts without a GPU: a stand-in judge times each kernel as the model predicts it times a
fixed factor per plan and kernel (no kernel runs), to check the script (tests/benchmarks/test_measure_few_gpu.py).

    python benchmarks/measure_few_gpu.py --out $OUT                   # 20 graphs, seeds 20000-20019
    python benchmarks/measure_few_gpu.py --dry --seeds 20000-20001 --plans 24 --out /tmp/mf
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import math
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.harness import (  # noqa: E402
    add_out,
    md_table,
    out_file,
    progress,
    pyplot,
    run_facts,
    save_figure,
    write_json,
    write_markdown,
)

KS = (1, 2, 4, 8, 16)
DEFAULT_SEEDS = "20000-20019"  # shipped collections used 0-299, 5000-9599 (docs/costmodel.md); checked below
GRAPH_ID = re.compile(r'"graph_id": ?"([^"]*)"')
WITHIN = 0.01  # the goal: within 1% of the 128-plan best on at least 90% of the graphs with 8 measured


def seed_range(text: str) -> list[int]:
    """'20000-20019' or '7' -> the seeds; SystemExit naming the form otherwise."""
    try:
        lo, _, hi = text.partition("-")
        seeds = list(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        seeds = []
    if not seeds or seeds[0] < 0:
        raise SystemExit(f"--seeds takes A-B (0 <= A <= B) or one seed, got {text!r}")
    return seeds


def shipped_graph_ids() -> set[str]:
    """The graph ids of every shipped measurement file (fusionsearch/datasets/data/*.jsonl.gz)."""
    from fusionsearch import settings

    ids: set[str] = set()
    data = os.path.dirname(settings.SHIPPED_MODEL)
    for name in sorted(os.listdir(data)):
        if name.endswith(".jsonl.gz"):
            with gzip.open(os.path.join(data, name), "rt") as f:  # each row's first graph_id (rows are large)
                ids.update(m.group(1) for line in f if (m := GRAPH_ID.search(line)))
    return ids


class StandIn:
    """The dry run's judge: each kernel the model's prediction times a fixed factor (0.6-1.6) per plan and
    kernel, so the model's order is right only roughly, as on a GPU it was not trained on."""

    def __init__(self, g: Any, model: Any, hw: Any) -> None:
        self.g, self.model, self.hw = g, model, hw

    def kernel_us(self, plan_json: str) -> list[float]:
        from fusionsearch.costmodel.features import plan_features, to_matrix
        from fusionsearch.plan import Plan

        plan = Plan.from_json(plan_json, self.g)
        pred = self.model.predict(to_matrix(plan_features(plan, self.hw)))
        return [float(us) * (0.6 + int(hashlib.sha1(f"{i}{plan_json}".encode()).hexdigest()[:6], 16) / 2**24)
                for i, us in enumerate(pred)]

    def judge(self, plan: Any, kernels: bool = False) -> Any:
        """A plan's judgement; `plan` as the search hands it (a Candidate) or as this script does (its JSON)."""
        from fusionsearch.measure.judge import Judgement
        from fusionsearch.measure.requests import Candidate

        us = self.kernel_us(Candidate.of(plan).plan_json)
        return Judgement(True, rel_err=0.0, median_us=sum(us), kernel_us=tuple(us) if kernels else None)

    def close(self) -> None:
        pass


def regret_curve(times: list[float], order: list[int], best: float) -> dict[int, float]:
    """For each k, the best of the first k of `order` (indices into `times`) over `best`, minus 1."""
    return {k: min((times[i] for i in order[:k]), default=math.inf) / best - 1 for k in KS}


def refit_order(plans: list[Any], kernel_us: list[list[float] | None], model: Any, hw: Any, every: int,
                count: int) -> list[int]:
    """The first `count` of `plans` the search would measure: the model's fastest untaken first, corrected on
    the measured kernels when StudyRefit says (after FIRST_REFIT, then every `every`), the rest re-ranked."""
    from fusionsearch.costmodel.pricing import plan_times_us
    from fusionsearch.costmodel.refit import FIRST_REFIT, StudyRefit

    refit = StudyRefit(model, hw, every, first=min(FIRST_REFIT, every))
    predicted = plan_times_us(model, plans, hw)
    taken: list[int] = []
    while len(taken) < min(count, len(plans)):
        i = min((j for j in range(len(plans)) if j not in taken), key=lambda j: predicted[j])
        taken.append(i)
        if kernel_us[i] is not None and refit.add(plans[i], kernel_us[i]):
            predicted = plan_times_us(refit.refit(), plans, hw)
    return taken


def one_graph(seed: int, args: argparse.Namespace, model: Any, hw: Any) -> dict[str, Any]:
    """The live search's seconds and pick, the measured plans and the regret curves of one graph."""
    from fusionsearch.datasets.random_graphs import random_graph
    from fusionsearch.search.objective import Objective
    from fusionsearch.search.ranked import PlanRanking
    from fusionsearch.search.study import SearchOptions, run_study, search_space

    g = random_graph(seed, family=args.family)
    options = SearchOptions(backend="gpu", cost_model=args.cost_model, seed=seed, progress=False,
                            max_configs=args.max_configs)
    judge = StandIn(g, model, hw) if args.dry else None
    res = run_study(g, options, judge=judge)  # the live search: its defaults, `measure` plans measured
    measured_live = sum(t.status == "measured" for t in res.trials)
    space = search_space(g, options, hw)
    screen = Objective(g, space, options, "model", hw)
    start = time.perf_counter()
    ranking = PlanRanking(space, hw, lambda: model, lambda p: not screen.bytes_rule_refuses(p), seed)
    order = ranking.order()[:args.plans]
    rank_s = time.perf_counter() - start
    plans = [space.plan(p) for p in order]
    jsons = [p.to_json() for p in plans]
    times, kernels = measure(g, jsons, judge, seed)
    ok = [t for t in times if math.isfinite(t)]
    row: dict[str, Any] = {"seed": seed, "graph": g.signature_hash(), "nodes": len(g), "space": space.size(),
                           "ranked": len(ranking), "plans": len(plans), "valid": len(ok),
                           "search_s": round(res.elapsed_s, 3), "rank_s": round(rank_s, 3),
                           "search_measured": measured_live, "search_best_us": res.best_us}
    if not ok:
        return {**row, "error": "no measured plan was valid"}
    best = min(ok)
    model_curve = regret_curve(times, list(range(len(plans))), best)
    refit_curve = regret_curve(times, refit_order(plans, kernels, model, hw, options.refit_every, max(KS)), best)
    return {**row, "best_us": best, "times_us": times, "model": model_curve, "refit": refit_curve,
            "search_regret": res.best_us / best - 1}


def measure(g: Any, jsons: list[str], judge: Any, seed: int) -> tuple[list[float], list[list[float] | None]]:
    """Each plan's time (inf where it failed) and its kernels' times (None where not timed alone), compiled
    in parallel first on the GPU."""
    pool = None
    if judge is None:
        from fusionsearch.measure.isolate import CompilePool, MeasureWorker

        pool, judge = CompilePool(), MeasureWorker(g.to_dict(), None, device="cuda", seed=seed)
    try:
        failures = pool.warm(g.to_dict(), jsons) if pool is not None else [""] * len(jsons)
        times: list[float] = []
        kernels: list[list[float] | None] = []
        for plan_json, failure in zip(jsons, failures, strict=True):
            j = None if failure else judge.judge(plan_json, kernels=True)
            times.append(j.median_us if j is not None and j.ok else math.inf)
            kernels.append(list(j.kernel_us) if j is not None and j.ok and j.kernel_us else None)
        return times, kernels
    finally:
        if pool is not None:
            pool.close()
        judge.close()


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per k and order: mean and median regret, and the share of graphs within 1% of the 128-plan best; the
    search's seconds (median, worst) and the share within 5 s."""
    done = [r for r in rows if "model" in r]
    out: dict[str, Any] = {"graphs": len(rows), "scored": len(done)}
    for name in ("model", "refit"):
        out[name] = {str(k): {"mean": statistics.fmean(r[name][k] for r in done),
                              "median": statistics.median(r[name][k] for r in done),
                              "within_1pct": sum(r[name][k] <= WITHIN for r in done) / len(done)}
                     for k in KS} if done else {}
    seconds = [r["search_s"] for r in rows]
    out["search_s"] = {"median": statistics.median(seconds), "max": max(seconds),
                       "within_5s": sum(s <= 5.0 for s in seconds) / len(seconds)} if seconds else {}
    return out


def table(s: dict[str, Any]) -> list[str]:
    rows = [[f"{name}, k={k}", f"{v['mean']:.2%}", f"{v['median']:.2%}", f"{v['within_1pct']:.0%}"]
            for name in ("model", "refit") for k, v in s.get(name, {}).items()]
    return md_table(["order, plans measured", "mean regret", "median regret", "within 1%"], rows)


def chart(s: dict[str, Any], out: str) -> str:
    """regret.png (matplotlib) or regret.svg (written here): mean regret and share within 1% against k."""
    series = {name: [s[name][str(k)]["mean"] * 100 for k in KS] for name in ("model", "refit") if s.get(name)}
    plt = pyplot()
    if plt is not None:
        fig, ax = plt.subplots(figsize=(6, 4))
        for name, ys in series.items():
            ax.plot(KS, ys, marker="o", label=name)
        ax.set_xscale("log", base=2)
        ax.set_xticks(KS, [str(k) for k in KS])
        ax.set_xlabel("plans measured (k)")
        ax.set_ylabel("mean regret against the 128-plan best (%)")
        ax.legend()
        path = out_file(out, "regret.png")
        save_figure(fig, path)
        return path
    w, h, pad = 480, 300, 40
    top = max([1e-9, *(y for ys in series.values() for y in ys)])
    lines = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}">',
             f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>',
             f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>',
             f'<text x="{pad}" y="{pad - 10}">mean regret (%), top {top:.2f}</text>']
    for i, k in enumerate(KS):
        lines.append(f'<text x="{pad + i * (w - 2 * pad) / (len(KS) - 1) - 4}" y="{h - pad + 16}">{k}</text>')
    for (name, ys), color in zip(series.items(), ("blue", "red"), strict=False):
        points = " ".join(f"{pad + i * (w - 2 * pad) / (len(KS) - 1):.1f},{h - pad - y / top * (h - 2 * pad):.1f}"
                          for i, y in enumerate(ys))
        lines.append(f'<polyline points="{points}" fill="none" stroke="{color}"/>')
        lines.append(f'<text x="{w - pad - 60}" y="{pad + 16 * (1 + list(series).index(name))}" '
                     f'fill="{color}">{name}</text>')
    path = out_file(out, "regret.svg")
    write_markdown(path, "\n".join([*lines, "</svg>"]))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default=DEFAULT_SEEDS, help=f"seed range A-B of the random graphs ({DEFAULT_SEEDS})")
    ap.add_argument("--family", default="mixed", help="the random graphs' family (datasets.random_graphs)")
    ap.add_argument("--plans", type=int, default=128, help="plans measured per graph (the model's first N)")
    ap.add_argument("--max-configs", type=int, default=48, help="tile configs per matmul (the search's, 48)")
    ap.add_argument("--cost-model", default="auto", help="auto (the model of this GPU) or a model file")
    ap.add_argument("--dry", action="store_true", help="no GPU: a stand-in judge, nothing runs (checks the script)")
    add_out(ap, "results.json, results.md and the chart")
    args = ap.parse_args(argv)
    seeds = seed_range(args.seeds)
    if args.plans < max(KS):
        raise SystemExit(f"--plans must be at least {max(KS)}, got {args.plans}")
    import torch

    from fusionsearch import settings
    from fusionsearch.costmodel.hardware import Hardware
    from fusionsearch.datasets.random_graphs import random_graph
    from fusionsearch.search.objective import load_cost_model, trained_profile

    if not args.dry and not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU here: run on a GPU, or pass --dry (a stand-in judge) to check the script")
    if args.dry and args.cost_model == "auto":
        args.cost_model = settings.SHIPPED_MODEL  # no GPU to match: the shipped model and its GPU's profile
    from fusionsearch.errors import FusionSearchError

    try:
        model = load_cost_model(args.cost_model)
    except FusionSearchError as e:
        raise SystemExit(f"--cost-model: {e}") from None
    if model is None:
        raise SystemExit("no learned model matches this GPU: pass --cost-model FILE")
    hw = (trained_profile(args.cost_model) if args.dry else None) or Hardware.detect()  # as the search takes it
    shipped = shipped_graph_ids()
    used = [s for s in seeds if random_graph(s, family=args.family).signature_hash() in shipped]
    if used:
        raise SystemExit(f"--seeds: the shipped data holds the graphs of seeds {used[:5]}: pick fresh ones")
    rows = []
    for seed in seeds:
        rows.append(one_graph(seed, args, model, hw))
        r = rows[-1]
        progress(f"seed {seed}: {r['plans']} plans, search {r['search_s']:.1f} s ({r['search_measured']} measured), "
                 f"regret at 8: model {r.get('model', {}).get(8, math.nan):.2%}, "
                 f"refit {r.get('refit', {}).get(8, math.nan):.2%}")
        s = summary(rows)
        write_json({**run_facts("device", "torch", "triton", device="cpu" if args.dry else "cuda", date="utc"),
                    "dry": args.dry, "seeds": args.seeds, "family": args.family, "cost_model": args.cost_model,
                    "summary": s, "graphs": rows}, out_file(args.out, "results.json"))
    lines = ["# Measure few: regret against the best of the measured plans", "",
             f"{len(rows)} graphs (seeds {args.seeds}, family {args.family}), up to {args.plans} plans measured "
             f"each{' (dry: a stand-in judge)' if args.dry else ''}.", "", *table(s), "",
             f"search seconds: median {s['search_s']['median']:.2f}, worst {s['search_s']['max']:.2f}, "
             f"{s['search_s']['within_5s']:.0%} within 5 s", ""]
    write_markdown(out_file(args.out, "results.md"), "\n".join(lines))
    print(f"chart: {chart(s, args.out)}")
    print("\n".join(table(s)))
    print(f"search: median {s['search_s']['median']:.2f} s, worst {s['search_s']['max']:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
