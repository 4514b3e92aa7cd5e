"""GPU: where does PyTorch's best mode win a case? Each suite case's max-autotune callable (the suite's Inductor
config) and the plan fusionsearch's search picks (32 trials, seed 0, as the suite) profiled kernel by kernel:
every call follows a clean L2 flush, and the profiler's device time of each kernel (the flush's excluded) is
averaged over the calls. A plan that loses to max-autotune overall shows here which of its kernels loses, and
by how much, against which of Inductor's (the autotuner's picks are in the run's stderr). --variant (repeatable)
re-makes the searched plan's named matmuls with given configs ("up=16x128x128 g8 sk1 w4 s4;y=decode dot_t n64
k32 sk4 w4 s5": a template label, or a decode one, as plans describe them); each variant is checked against
eager and profiled too, and then every callable of the case is timed whole as the suite times it (clean flush,
median over --rounds interleaved rounds).

Run on the GPU machine:  PYTHONPATH=. python benchmarks/compiled_kernels_gpu.py --cases 8 --out $OUT
Writes kernels.json under --out after every case; prints one table per case."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any

import torch

import fusionsearch as fs
from fusionsearch.codegen.runtime import compile_plan
from fusionsearch.datasets.workloads import SUITE_CASES, WORKLOADS, case_name
from fusionsearch.errors import PlanError, failure_reason
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
from fusionsearch.measure.l2_flush import CleanFlush
from fusionsearch.plan import Plan, TileConfig
from fusionsearch.plan.kernels import FusedMatmulKernel, TemplateKernel
from fusionsearch.search.study import SearchOptions, run_study

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.harness import (  # noqa: E402
    add_out,
    case_indices,
    interleaved_medians,
    md_table,
    out_file,
    run_facts,
    write_json,
)
from benchmarks.suite import MAX_AUTOTUNE_CONFIG, as_list, check_outputs  # noqa: E402

FLUSH_KERNEL = "read_words_kernel"  # the L2 flush's kernel, left out of every profile


def kernel_profile(fn: Callable[[], object], calls: int, flush: CleanFlush) -> list[dict[str, Any]]:
    """Mean device time (µs) of each kernel `fn` launches, over `calls` calls each after a clean flush, in the
    order the kernels first ran."""
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(calls):
            flush()
            fn()
        torch.cuda.synchronize()
    totals: dict[str, list[float]] = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA and FLUSH_KERNEL not in ev.name:
            totals.setdefault(ev.name, []).append(ev.device_time_total if hasattr(ev, "device_time_total")
                                                  else ev.cuda_time_total)
    return [{"kernel": name, "launches_per_call": len(ts) / calls, "us_per_call": sum(ts) / calls}
            for name, ts in totals.items()]


def joined(plan: Plan, main: str, other: str) -> Plan:
    """`plan` with matmul `other`'s kernel folded into `main`'s: `other` and its epilogue run in `main`'s K loop
    (plan.matmul.shared_a_matmuls), at the earlier of the two kernels' places (or the later, where that is legal)."""
    at = {k.matmul: i for i, k in enumerate(plan.kernels) if isinstance(k, FusedMatmulKernel)}
    if main not in at or other not in at:
        raise ValueError(f"--variant {main}+{other}: both must be fused matmul kernels of the plan")
    o = plan.kernels[at[other]]
    if o.prologue_a or o.prologue_b:
        raise ValueError(f"--variant {main}+{other}: {other!r} has a prologue; it reads the kernel's A as it is")
    m = plan.kernels[at[main]]
    kernel = dataclasses.replace(m, epilogue=(other, *o.epilogue, *m.epilogue))
    rest = [k for i, k in enumerate(plan.kernels) if i not in (at[main], at[other])]
    for place in (min(at[main], at[other]), max(at[main], at[other]) - 1):
        candidate = dataclasses.replace(plan, kernels=tuple(rest[:place] + [kernel] + rest[place:]))
        try:
            return candidate.check()
        except PlanError as e:
            error = e
    raise error


def with_configs(plan: Plan, variant: str) -> Plan:
    """`plan` with each matmul `variant` names ("mm=label;mm=label") run by the kind and config its label says;
    "main+other=label" also folds `other`'s kernel into `main`'s (joined) after giving `main` the label."""
    configs = dict(item.split("=", 1) for item in variant.split(";") if item.strip())
    joins = [name.split("+", 1) for name in configs if "+" in name]
    configs = {name.split("+", 1)[0]: label for name, label in configs.items()}
    kernels = []
    for k in plan.kernels:
        label = configs.pop(k.matmul, None) if isinstance(k, FusedMatmulKernel) else None
        if label is not None:
            parts = (k.matmul, k.prologue_a, k.prologue_b, k.epilogue)
            k = (DecodeKernel(*parts, DecodeConfig.from_short(label)) if label.startswith("decode")
                 else TemplateKernel(*parts, TileConfig.from_short(label)))
        kernels.append(k)
    if configs:
        raise ValueError(f"--variant names matmuls the plan does not run as fused kernels: {sorted(configs)}")
    plan = dataclasses.replace(plan, kernels=tuple(kernels))
    for main, other in joins:
        plan = joined(plan, main, other)
    return plan.check()


def checked(run: Callable[..., Any], inputs: list, refs: list) -> float:
    """The largest relative error of `run`'s outputs against eager's (the suite's check); ValueError past its
    dtype's tolerance."""
    check = check_outputs(as_list(run(*inputs)), refs)
    if not check["ok"]:
        raise ValueError(f"output off eager by {check['rel_err']:.2e}")
    return check["rel_err"]


def case_profile(index: int, calls: int, trials: int, variants: list[str], rounds: int) -> dict[str, Any]:
    """Every callable of one suite case profiled, then timed whole; a callable that fails records its reason."""
    case = SUITE_CASES[index]
    g = fs.workload(case["workload"], dtype=torch.bfloat16, **case["shape"])
    inputs = fs.random_inputs(g, seed=0, device="cuda")
    fn = WORKLOADS[case["workload"]].torch_fn
    flush = CleanFlush()
    refs = [r.detach().clone() for r in as_list(fn(*inputs))]
    row: dict[str, Any] = {"index": index, "case": case_name(case), "variants": {}}
    timed: dict[str, Callable[[], object]] = {}
    torch._dynamo.reset()
    try:
        with torch._inductor.config.patch(MAX_AUTOTUNE_CONFIG):
            compiled = torch.compile(fn, mode="max-autotune-no-cudagraphs")
            checked(compiled, inputs, refs)
            row["max_autotune"] = kernel_profile(lambda: compiled(*inputs), calls, flush)
            timed["max_autotune"] = lambda: compiled(*inputs)
    except Exception as e:
        row["max_autotune_error"] = failure_reason(e)
    try:
        res = run_study(g, SearchOptions(trials=trials, backend="gpu", seed=0), inputs)
    except Exception as e:
        row["fusionsearch_error"] = failure_reason(e)
        return row
    row["plan"] = res.best.describe()
    for name, variant in [("fusionsearch", ""), *((v, v) for v in variants)]:
        try:
            plan = with_configs(res.best, variant)
            run = compile_plan(plan).module.run
            entry = {"plan": plan.describe(), "rel_err": checked(run, inputs, refs),
                     "kernels": kernel_profile(lambda run=run: run(*inputs), calls, flush)}
            timed[name] = lambda run=run: run(*inputs)
        except Exception as e:
            entry = {"error": failure_reason(e)}
        row["variants"][name] = entry
    row["rounds"], row["whole_us"] = interleaved_medians(timed, rounds)
    torch._dynamo.reset()
    return row


def table(row: dict[str, Any]) -> list[str]:
    """Each callable's kernels (profiled µs a call), their sum, and the callable timed whole."""
    lines = [f"## [{row['index']}] {row['case']}", f"plan: {row.get('plan', row.get('fusionsearch_error'))}"]
    sides = {"max_autotune": row.get("max_autotune", [])}
    sides.update({name: v.get("kernels", []) for name, v in row.get("variants", {}).items()})
    body = []
    for side, kernels in sides.items():
        body += [[side, k["kernel"][:40], f"{k['launches_per_call']:.2f}", f"{k['us_per_call']:.1f}"] for k in kernels]
        whole = row.get("whole_us", {}).get(side)
        body.append([side, "sum; whole call", "", f"{sum(k['us_per_call'] for k in kernels):.1f}; "
                     + (f"{whole:.1f}" if whole else "-")])
    errors = [f"{side}: {v['error']}" for side, v in row.get("variants", {}).items() if "error" in v]
    return lines + md_table(["callable", "kernel", "launches a call", "µs a call"], body) + errors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="8", help="comma-separated SUITE_CASES indices (default: 8, swiglu M16)")
    ap.add_argument("--calls", type=int, default=200, help="profiled calls per callable")
    ap.add_argument("--trials", type=int, default=32, help="search trials (the suite's default)")
    ap.add_argument("--variant", action="append", default=[], help="the searched plan with these matmul configs "
                    "('mm=config label;mm=config label'), profiled and timed beside it (repeatable)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the whole-call timing")
    add_out(ap, "kernels.json")
    args = ap.parse_args()
    report: dict[str, Any] = {**run_facts("device", "torch", "triton", date="utc"), "calls": args.calls, "rows": []}
    for index in case_indices(args.cases, len(SUITE_CASES)):
        report["rows"].append(case_profile(index, args.calls, args.trials, args.variant, args.rounds))
        write_json(report, out_file(args.out, "kernels.json"))
        print("\n".join(table(report["rows"][-1])), flush=True)


if __name__ == "__main__":
    main()
