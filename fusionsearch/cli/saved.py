"""`fusionsearch explain`, `run` and `studies`: what a search left behind (its --out directory, its Optuna
storage), explained, replayed on this machine, or listed."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from fusionsearch.cli.args import SEED, parse_input_spec
from fusionsearch.errors import SpecError


def add_parsers(sub: Any) -> None:
    p = sub.add_parser("explain", help="explain a saved plan (a search's --out directory or its plan.json)")
    p.add_argument("plan")
    p.add_argument("--graph", default=None, help="the graph spec (default: graph.json beside the plan)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout instead of the text")
    p.set_defaults(func=cmd_explain)
    p = sub.add_parser("studies", help="list the studies in an Optuna storage: graph, trials, best time")
    p.add_argument("--storage", required=True,
                   help="the storage a search used: sqlite:///f.db, postgresql://..., journal:f (never created)")
    p.set_defaults(func=cmd_studies)
    p = sub.add_parser("run", help="validate a saved plan on this machine and time it on a GPU (a search's --out)")
    p.add_argument("plan_dir", help="a search's --out directory (plan.json and graph.json)")
    p.add_argument("--inputs", nargs="+", action="extend", default=None, metavar="SHAPE:DTYPE",
                   help="the inputs you expect, e.g. 16x64:float32 (one per graph input, in order): refused unless "
                        "they are the graph's; values are drawn at random, indices in range")
    p.add_argument("--backend", default="auto",
                   help="gpu (validate and time), interpret (validate in Triton's CPU interpreter, no time), "
                        "auto (gpu when present)")
    p.add_argument("--seed", type=SEED, default=0, help="seed of the random inputs")
    p.set_defaults(func=cmd_run)


def cmd_explain(args: argparse.Namespace) -> int:
    from fusionsearch.costmodel.hardware import Hardware
    from fusionsearch.graph.spec import load_graph
    from fusionsearch.search.facts import learned_kernel_times, plan_facts, recorded_search
    from fusionsearch.search.replay import read_plan

    path = os.path.join(args.plan, "plan.json") if os.path.isdir(args.plan) else args.plan
    if not os.path.isfile(path):
        raise SpecError(f"{args.plan}: no plan here; give a search's --out directory or its plan.json")
    graph_path = args.graph or os.path.join(os.path.dirname(os.path.abspath(path)), "graph.json")
    plan = read_plan(path, load_graph(graph_path))
    hw = Hardware.detect()
    facts = plan_facts(plan, hw, learned_kernel_times(plan, hw))
    facts["search"] = recorded_search(os.path.join(os.path.dirname(os.path.abspath(path)), "result.json"))
    if args.json:
        print(json.dumps(facts, indent=1))
        return 0
    print(plan.describe())
    for k in facts["kernels"]:
        also = f", learned model {k['learned_us']:.1f} us" if "learned_us" in k else ""
        print(f"kernel {k['index']}: {k['bytes_read'] / 1e6:.2f} MB read, {k['bytes_written'] / 1e6:.2f} MB written, "
              f"{k['flops'] / 1e9:.2f} GFLOP; analytic model {k['analytic_us']:.1f} us{also}")
    also = f", learned ({hw.name}) model {facts['learned_us']:.1f} us" if facts["learned_us"] is not None else ""
    print(f"plan: analytic model {facts['analytic_us']:.1f} us{also}")
    print(f"figures {facts['hardware_words']}")
    searched = facts["search"]
    if searched:
        print(f"the search: {searched['best_us']:.1f} us ({searched['how']})")
    return 0


def cmd_studies(args: argparse.Namespace) -> int:
    from fusionsearch.search.studies import format_studies, list_studies
    from fusionsearch.search.study import redact

    summaries = list_studies(args.storage)
    print(format_studies(summaries) if summaries else f"no studies in {redact(args.storage)}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from fusionsearch.errors import MeasureError
    from fusionsearch.search.progress import Steps
    from fusionsearch.search.replay import check_inputs, load_saved, replay, resolve

    specs = [parse_input_spec(t) for t in args.inputs or ()]
    backend = resolve(args.backend)
    graph, plan = load_saved(args.plan_dir)
    if args.inputs:
        check_inputs(graph, specs)
    with Steps(f"run {args.plan_dir}") as steps:  # a full-size plan takes a minute or more in the interpreter
        r = replay(graph, plan, backend, seed=args.seed, say=steps.say)
    if not r.ok:
        raise MeasureError(f"{args.plan_dir}: the plan does not validate on this machine ({r.device}): rel error "
                           f"{r.rel_err:.3g} (tolerance {r.tolerance:g}): {r.reason}")
    kernels = f"{len(plan.kernels)} kernel{'s' if len(plan.kernels) != 1 else ''}"
    print(f"{args.plan_dir}: {kernels} for graph {graph.signature_hash()} ({len(graph)} nodes)")
    print(f"ok: rel error {r.rel_err:.3g} against the float64 reference (tolerance {r.tolerance:g}), on {r.device}")
    if r.median_us is None:
        print("time: none measured on a CPU (the interpreter's speed says nothing of a GPU's); run it where a GPU "
              "is to time it")
    else:
        print(f"time: {r.median_us:.1f} us median (p20 {r.p20_us:.1f}, p80 {r.p80_us:.1f}) on {r.device}")
    return 0
