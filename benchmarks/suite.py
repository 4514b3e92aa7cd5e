"""The benchmark suite (issue 6): every reference case on one GPU, in one process and one run, timed as
eager PyTorch, torch.compile, torch.compile max-autotune (prologue and epilogue fusion on, as the anchors),
the plan fusionsearch's search finds, and cuBLAS on the bare matmuls alone, beside the floor
max(bytes / BW, flops / PEAK) with BW and PEAK measured at the start of the same run, and a copy that moves
the floor's bytes (what a plain stream of that size costs, launch and ramp included).

Each variant is first timed alone with time_callable's median (µs, warmup 25 ms, rep 100 ms, L2 flushed clean
before each call: fusionsearch.measure.l2_flush), which also reads its peak memory; then every variant of the
case is timed again in --rounds interleaved rounds (median, rep 20 ms each; each round starts one variant
further along) and the median over rounds is its figure: the GPU's clock and thermal state drift over a
case's minutes, and one pass met each variant at a different moment. Every compiled output (torch.compile,
max-autotune, the plan) is checked against eager's output with the project's tolerance for its dtype; a
variant that fails the check is reported, one that raises (compile error, OOM) records its reason, and the
suite goes on. Peak memory is the most allocated during one call beyond what was allocated before it
(eager and the plan). The searched plan's kernels are also timed each alone (suite.json: `kernels`), so
that their sum can be read against the whole plan's time.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/suite.py --out $OUT
(--trials 32, --cases 0,3,8 for a subset, --skip-max-autotune when its compile time does not fit.)
Writes suite.json after every case (a run killed by a time limit keeps what it measured), then suite.md and
suite.png; one progress line per case on stderr, the markdown table last on stdout."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

import fusionsearch as fs
from fusionsearch.codegen.runtime import compile_plan
from fusionsearch.costmodel.analytic import fits, least_bytes, matmul_flops
from fusionsearch.datasets.workloads import SUITE_CASES, WORKLOADS, case_name
from fusionsearch.errors import failure_reason
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.measure import TOLERANCE, Timing, rel_error, time_callable
from fusionsearch.measure.bench import kernel_times, measure_ceilings, time_interleaved
from fusionsearch.measure.l2_flush import FLUSH_BYTES
from fusionsearch.plan import TileConfig
from fusionsearch.plan.matmul import Problem, problem
from fusionsearch.search.study import SearchOptions, run_study

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.harness import (  # noqa: E402
    add_out,
    bar_chart,
    case_indices,
    floor_us,
    geomean,
    gpu_state,
    interleaved_medians,
    md_row,
    md_table,
    out_file,
    progress,
    read_json,
    run_facts,
    timing_fields,
    write_json,
    write_markdown,
)

# Variants in the order they are measured, tabled and drawn, with their column labels.
LABELS = {"cublas_bare": "cuBLAS bare", "cublas_per_expert": "cuBLAS per expert", "eager": "eager",
          "torch_compile": "torch.compile",
          "max_autotune": "max-autotune", "fusionsearch": "fusionsearch"}
L2_FLUSH_WORDS = f"clean (a {FLUSH_BYTES >> 20} MB read)"  # how the timer flushes L2 (fusionsearch.measure.l2_flush)
TIMED = "_timed"  # a record's timed callable, held until the case's interleaved rounds (never written out)
MAX_AUTOTUNE_CONFIG = {"prologue_fusion": True, "epilogue_fusion": True}
# The searched plan again under code generator options (column label, options): operand tiles read through
# TMA descriptors; persistent templates (one program per multiprocessor looping over tiles); both; the
# epilogue in two column halves.
CODEGEN_VARIANTS = {"tma_loads": ("same plan, TMA loads", {"tma_loads": True}),
                    "persistent": ("same plan, persistent", {"persistent": True}),
                    "persistent_tma": ("persistent + TMA", {"persistent": True, "tma_loads": True}),
                    "split_epilogue": ("same plan, split epilogue", {"split_epilogue": True})}
# Compute-bound cases (the floor set by flops): the searched plan again on these large tiles (Inductor's and
# Triton's tutorials' Hopper picks), each plain, with a split epilogue and persistent + TMA: does a tile or
# template the search did not pick close the gap to cuBLAS? (Persistent with pointer loads ran 1.7-5.3x slower
# than plain on every probe tile of results/h200-2026-12-03-suite-2; it stays a CODEGEN_VARIANTS column.)
PROBE_CONFIGS = (TileConfig(128, 256, 64, 8, 1, 8, 3), TileConfig(256, 128, 64, 8, 1, 8, 3),
                 TileConfig(128, 128, 64, 8, 1, 4, 4))
PROBE_OPTIONS = {"plain": {}, "split epilogue": {"split_epilogue": True},
                 "persistent + TMA": {"persistent": True, "tma_loads": True}}


# ---- what the floor counts -------------------------------------------------------------------------

def matmul_problems(g: OpGraph) -> list[Problem]:
    """The sizes of every matmul (template node) of the graph, in topological order."""
    return [problem(g, mm) for mm in g.nodes_of_kind("template")]


# ---- the variants ------------------------------------------------------------------------------------

def as_list(out: Any) -> list[torch.Tensor]:
    """A callable's outputs as a list: the PyTorch forms return one tensor, plans a list."""
    return list(out) if isinstance(out, list | tuple) else [out]


def check_outputs(outs: Sequence[torch.Tensor], refs: Sequence[torch.Tensor] | None) -> dict[str, Any]:
    """rel_err (worst output) against eager's outputs, ok when every output is within its dtype's tolerance;
    both None without an eager reference."""
    if refs is None:
        return {"rel_err": None, "ok": None}
    if len(outs) != len(refs):
        return {"rel_err": math.inf, "ok": False}
    errs = [rel_error(o, r) for o, r in zip(outs, refs, strict=True)]
    ok = all(e <= TOLERANCE.get(o.dtype, 0.0) for e, o in zip(errs, outs, strict=True))
    return {"rel_err": max(errs), "ok": ok}


def timing_record(t: Timing) -> dict[str, Any]:
    """A Timing as JSON fields (median_us, p20_us, p80_us, peak_bytes), with the GPU's state just after it."""
    return {**timing_fields(t), "gpu": gpu_state()}


def timed_call(call: Callable[[], Any]) -> dict[str, Any]:
    """The first-pass timing record of `call`, holding the callable for the case's interleaved rounds."""
    return {**timing_record(time_callable(call)), TIMED: call}


def attempt(measure: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """Run one variant's measurement; whatever it raises (compile error, OOM) becomes its recorded reason, so
    that one variant never ends the case nor one case the run."""
    try:
        record = measure(*args)
        torch.cuda.synchronize()  # an asynchronous fault is this variant's, not the next one's
    except Exception as e:
        record = {"error": failure_reason(e)}
    with contextlib.suppress(Exception):  # after a sticky CUDA fault even this raises; the record says why
        torch.cuda.empty_cache()
    return record


def measure_eager(fn: Callable[..., Any], inputs: Sequence[torch.Tensor]) -> dict[str, Any]:
    """Eager PyTorch's time and peak memory (bytes beyond what was allocated before the call)."""
    return timed_call(lambda: fn(*inputs))


def eager_vs_float64(refs: Sequence[torch.Tensor], g: OpGraph, inputs: Sequence[torch.Tensor]) -> dict[str, Any]:
    """Eager's own error against the float64 reference: the rounding scale within which the other variants
    are judged against eager."""
    exact = fs.reference(g, inputs, float64=True)
    return {"rel_err": max(rel_error(o, r) for o, r in zip(refs, exact, strict=True))}


def measure_cublas(problems: Sequence[Problem]) -> dict[str, Any]:
    """cuBLAS on the graph's matmuls alone, bf16 operands of their sizes, all of them in one timed callable:
    what the matmuls cost before any of the pointwise work around them."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    pairs = []
    for p in problems:
        a_shape = (p.m, p.k) if p.batch == 1 else (p.batch, p.m, p.k)
        b_shape = (p.k, p.n) if p.batch == 1 else (p.batch, p.k, p.n)
        pairs.append(tuple(torch.randn(s, generator=gen, dtype=torch.bfloat16, device="cuda")
                           for s in (a_shape, b_shape)))
    record = timed_call(lambda: [torch.matmul(a, b) for a, b in pairs])
    record["matmuls"] = [dataclasses.asdict(p) for p in problems]
    return record


def measure_cublas_per_expert(inputs: Sequence[torch.Tensor]) -> dict[str, Any]:
    """moe_ffn: what a loop over the experts with cuBLAS runs, its matmuls only: per expert that the router
    picked, its tokens' rows (gathered before timing) against w1[e] and w3[e], then the hidden rows against
    w2[e] (the grouped matmuls without the gather, the routing weights or SiLU)."""
    x, idx, _, w1, w3, w2 = inputs
    work = []
    for e in range(w1.shape[0]):
        tokens = (idx == e).any(dim=1).nonzero().flatten()
        if len(tokens):
            xe = x[tokens].contiguous()
            he = torch.empty(len(tokens), w1.shape[1], dtype=x.dtype, device=x.device).normal_()
            work.append((xe, he, w1[e], w3[e], w2[e]))

    def loop() -> None:
        for xe, he, a, b, c in work:
            torch.mm(xe, a.t())
            torch.mm(xe, b.t())
            torch.mm(he, c.t())

    record = timed_call(loop)
    record["experts"] = len(work)
    return record


def measure_copy(nbytes: int) -> dict[str, Any]:
    """A device-to-device copy that moves the case's floor bytes (half read, half written): the time any
    kernel streaming that many bytes takes on this GPU, launch and ramp included, so a plan's distance from
    the floor splits into what a plain stream of its size already costs and what the plan adds."""
    src = torch.empty(max(1, nbytes // 4), dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    record = timed_call(lambda: dst.copy_(src))
    record["bytes"] = 4 * src.numel()
    return record


def measure_compiled(fn: Callable[..., Any], inputs: Sequence[torch.Tensor], refs: Sequence[torch.Tensor] | None,
                     mode: str | None, config: dict[str, Any]) -> dict[str, Any]:
    """torch.compile(fn, mode) under the Inductor `config`: compile time (s, the first call), agreement with
    eager, then the time of the compiled callable. Dynamo keeps one compiled graph per mode (its guards match
    the backend), so the case's compiled callables stay valid side by side for the interleaved rounds."""
    with torch._inductor.config.patch(config):
        compiled = torch.compile(fn, mode=mode)
        start = time.time()
        outs = as_list(compiled(*inputs))
        torch.cuda.synchronize()
        record: dict[str, Any] = {"compile_s": time.time() - start, **check_outputs(outs, refs)}
        del outs
        record.update(timed_call(lambda: compiled(*inputs)))
    return record


def measure_fusionsearch(g: OpGraph, inputs: Sequence[torch.Tensor], refs: Sequence[torch.Tensor] | None,
                         trials: int, compute_bound: bool) -> dict[str, Any]:
    """The search with its default sampler and cost model (search wall time, trials by status), then its best
    plan checked against eager and timed like every other variant, then under codegen options and (compute
    bound) on the probe's tiles."""
    start = time.time()
    res = run_study(g, SearchOptions(trials=trials, backend="gpu", seed=0), inputs)
    record: dict[str, Any] = {"search_s": time.time() - start, "trials": trials, "counts": res.counts(),
                              "cost_model": res.cost_model, "sampler": res.sampler, "search_best_us": res.best_us,
                              "finalists": res.extra.get("finalists", []), "plan": res.best.describe(),
                              # why each trial that ran and did not count failed (a compile error, a wrong answer)
                              "failures": [{"trial": t.number, "status": t.status, "params": t.params,
                                            "reason": t.reason} for t in res.trials
                                           if t.status in ("failed", "invalid")]}
    record.update(measure_plan(res.best, inputs, refs))
    # Each kernel of the plan timed alone (the plan's `steps`): their sum against the whole plan's time says
    # whether a gap to eager lies in a kernel or between kernels (host time, a cold L2 after the flush).
    record["kernels"] = attempt(kernels_alone, res.best, inputs)
    # The same plan generated with the code generator's options that are not yet search choices: do they pay
    # on this case? (Not where every matmul of the plan runs in the library: nothing to generate differently.)
    # (The decode kind follows TMA loads and the split epilogue, not the persistent loop.)
    kinds = {k.kind for k in res.best.kernels}
    for key, (_, options) in CODEGEN_VARIANTS.items():
        if "template" in kinds or ("decode" in kinds and "persistent" not in options):
            record[key] = attempt(measure_plan, res.best, inputs, refs, options)
    if compute_bound and "template" in kinds:
        record["tile_probe"] = [{"config": cfg.short(), "options": label,
                                 **attempt(measure_plan, res.best.with_config(cfg), inputs, refs, options)}
                                for cfg in PROBE_CONFIGS if all(fits(g, mm, cfg) for mm in g.nodes_of_kind("template"))
                                for label, options in PROBE_OPTIONS.items()]
    return record


def kernels_alone(plan: Any, inputs: Sequence[torch.Tensor]) -> dict[str, Any]:
    """The median time (µs) of each kernel of `plan` run alone over the plan's buffers, and their sum."""
    times = kernel_times(plan, inputs, warmup_ms=25, rep_ms=100)
    return {"kernels_us": times, "sum_us": sum(times)}


def measure_plan(plan: Any, inputs: Sequence[torch.Tensor], refs: Sequence[torch.Tensor] | None,
                 options: dict[str, Any] | None = None) -> dict[str, Any]:
    """One plan compiled with codegen `options`: checked against eager (after a first call, so that the
    checked call is a direct launch like the timed ones), then timed."""
    run = compile_plan(plan, **(options or {})).module.run
    run(*inputs)
    outs = as_list(run(*inputs))
    torch.cuda.synchronize()
    record = check_outputs(outs, refs)
    del outs
    record.update(timed_call(lambda: run(*inputs)))
    return record


def run_case(index: int, case: dict[str, Any], ceilings: dict[str, float], args: argparse.Namespace) -> dict[str, Any]:
    """Every figure of one reference case; a variant that raises records its reason and the others still run."""
    g = fs.workload(case["workload"], dtype=torch.bfloat16, **case["shape"])
    nbytes, flops = least_bytes(g), matmul_flops(g)
    row: dict[str, Any] = {
        "index": index, "case": case_name(case), "workload": case["workload"], "shape": case["shape"],
        "anchor": {k: v for k, v in case.items() if k.endswith("_us")}, "bytes": nbytes, "flops": flops,
        "floor_us": floor_us(nbytes, flops, ceilings),
        "variants": {}}
    variants = row["variants"]
    torch._dynamo.reset()  # each case compiles from a fresh dynamo state
    inputs = fs.random_inputs(g, seed=0, device="cuda")
    fn = WORKLOADS[case["workload"]].torch_fn
    refs: list[torch.Tensor] | None = None
    try:
        refs = [o.detach().clone() for o in as_list(fn(*inputs))]
    except Exception as e:
        row["reference_error"] = failure_reason(e)  # nothing can be checked; every variant is still timed
    row["copy_same_bytes"] = attempt(measure_copy, nbytes)
    variants["cublas_bare"] = attempt(measure_cublas, matmul_problems(g))
    if case["workload"] == "moe_ffn":
        variants["cublas_per_expert"] = attempt(measure_cublas_per_expert, inputs)
    variants["eager"] = attempt(measure_eager, fn, inputs)
    if refs is not None:
        row["eager_vs_float64"] = attempt(eager_vs_float64, refs, g, inputs)
    variants["torch_compile"] = attempt(measure_compiled, fn, inputs, refs, None, {})
    if args.skip_max_autotune:
        variants["max_autotune"] = {"skipped": "--skip-max-autotune"}
    else:
        variants["max_autotune"] = attempt(measure_compiled, fn, inputs, refs, "max-autotune-no-cudagraphs",
                                           MAX_AUTOTUNE_CONFIG)
    compute_bound = flops / ceilings["peak_flops"] > nbytes / ceilings["bandwidth_bytes_per_s"]
    variants["fusionsearch"] = attempt(measure_fusionsearch, g, inputs, refs, args.trials, compute_bound)
    retime_interleaved(row, args.rounds)
    torch._dynamo.reset()  # the compiled callables hold their inputs' memory until dynamo forgets them
    return row


def timed_records(row: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every record of the case that holds its timed callable, by a name that says which it is."""
    fs_rec = row["variants"].get("fusionsearch", {})
    named = {"copy": row.get("copy_same_bytes", {}), **row["variants"],
             **{key: fs_rec.get(key, {}) for key in CODEGEN_VARIANTS},
             **{f"probe {p.get('config')} {p.get('options')}": p for p in fs_rec.get("tile_probe", [])}}
    return {name: rec for name, rec in named.items() if TIMED in rec}


def retime_interleaved(row: dict[str, Any], rounds: int) -> None:
    """Time every variant of the case again in `rounds` interleaved rounds and make the median over rounds
    its figure (the first pass, which checked outputs and peak memory, kept as `first_pass`); then drop the
    callables, so that the row is plain JSON whatever happened."""
    records = timed_records(row)
    try:
        if rounds > 0:
            # time_interleaved by this module's name, so that a test can stand in for the GPU timer
            by_round, medians = interleaved_medians({name: rec[TIMED] for name, rec in records.items()}, rounds,
                                                    timer=time_interleaved)
            row["gpu_after_rounds"] = gpu_state()
            for name, rec in records.items():
                if name in medians:
                    rec["first_pass"] = {k: rec.pop(k) for k in ("median_us", "p20_us", "p80_us", "gpu") if k in rec}
                    rec["rounds_us"] = by_round[name]
                    rec["median_us"] = medians[name]
    except Exception as e:  # the first pass's figures stand
        row["rounds_error"] = failure_reason(e)
    finally:
        for rec in records.values():
            rec.pop(TIMED, None)


# ---- reporting -----------------------------------------------------------------------------------------

def time_of(row: dict[str, Any], variant: str, valid_only: bool = False) -> float | None:
    """The variant's median (µs), None when it raised or was skipped (or, with valid_only, failed the check or
    was unsteady)."""
    rec = row["variants"].get(variant, {})
    if "median_us" not in rec or (valid_only and (rec.get("ok") is False or unsteady(rec))):
        return None
    return float(rec["median_us"])


UNSTEADY_SPREAD, UNSTEADY_DRIFT = 0.25, 1.5


def unsteady(rec: dict[str, Any]) -> bool:
    """Whether a variant's figure is not to be trusted: its interleaved rounds spread over more than a quarter
    of their median (interquartile), or their median is over 1.5x the first pass of the same callable (something
    slowed it after its outputs were checked). Seen on PyTorch's compiled modes of the 16-us cases in several
    runs (mm_bias_gelu M16 max-autotune: rounds 67-131 us after a first pass of 21.4, 2026-12-07 c)."""
    rounds = rec.get("rounds_us") or []
    if len(rounds) < 4 or "median_us" not in rec:
        return False
    q1, _, q3 = statistics.quantiles(rounds, n=4, method="inclusive")
    first = rec.get("first_pass", {}).get("median_us")
    return (q3 - q1) > UNSTEADY_SPREAD * rec["median_us"] or (first is not None
                                                              and rec["median_us"] > UNSTEADY_DRIFT * first)


def timed(rec: dict[str, Any]) -> str:
    """'94.7', '94.7 ✗' when the output was outside tolerance against eager, '94.7 ~' when unsteady."""
    return (f"{rec['median_us']:.1f}" + (" ✗" if rec.get("ok") is False else "")
            + (" ~" if unsteady(rec) else ""))


def time_cell(row: dict[str, Any], variant: str) -> str:
    """timed(...), 'failed' or 'skipped'; blank for a variant the case does not have (cuBLAS per expert)."""
    if variant not in row["variants"]:
        return ""
    rec = row["variants"][variant]
    if "median_us" in rec:
        return timed(rec)
    return "skipped" if "skipped" in rec else "failed"


def option_cell(rec: dict[str, Any]) -> str:
    """The searched plan under a codegen option: timed(...), 'failed', or '' (not measured in that run)."""
    if "median_us" in rec:
        return timed(rec)
    return "failed" if rec else ""


def ratio_cell(num: float | None, den: float | None) -> str:
    return "" if num is None or den is None or den <= 0 else f"{num / den:.2f}"


def speedup_line(rows: Sequence[dict[str, Any]]) -> str:
    """The geometric-mean speedup of the plan over each baseline, over the cases where both are valid (within
    tolerance and steady)."""
    parts = []
    for variant in ("max_autotune", "torch_compile", "eager"):
        pairs = [(time_of(r, variant, True), time_of(r, "fusionsearch", True)) for r in rows]
        speedups = [b / f for b, f in pairs if b is not None and f is not None]
        parts.append(f"{geomean(speedups):.3f}x over {LABELS[variant]} ({len(speedups)} cases)" if speedups
                     else f"n/a over {LABELS[variant]} (no case with both valid)")
    return "Geometric-mean speedup of fusionsearch: " + "; ".join(parts) + "."


def trials_cell(rec: dict[str, Any]) -> str:
    return ", ".join(f"{v} {k}" for k, v in sorted(rec.get("counts", {}).items()))


def timing_words(report: dict[str, Any]) -> str:
    """How the run's figures were timed (runs before the interleaved rounds timed each variant once; runs
    before 2026-12-05 e flushed L2 by zeroing 256 MB, do_bench's flush, and record no `l2_flush`)."""
    flush = report.get("l2_flush", "by zeroing 256 MB (do_bench)")
    if report.get("rounds"):
        return (f"median over {report['rounds']} interleaved rounds of medians (rep 20 ms, L2 flushed {flush}; "
                f"every variant of a case timed once per round)")
    return f"do_bench median (warmup 25 ms, rep 100 ms, L2 flushed {flush}; each variant timed once, in turn)"


def markdown(report: dict[str, Any]) -> str:
    """suite.md: the run's setting, any failures with their reasons, the table (µs), the geomean line."""
    c = report["ceilings"]
    lines = [f"# fusionsearch benchmark suite: {report['device']}", "",
             f"torch {report['torch']}, triton {report['triton']}, {report['date']}; bf16; µs, {timing_words(report)}. "
             f"Floor = max(bytes / {c['bandwidth_bytes_per_s'] / 1e12:.2f} "
             f"TB/s, flops / {c['peak_flops'] / 1e12:.0f} TFLOP/s), both measured in this run. Speedup = baseline "
             f"time / fusionsearch time. ✗: output outside the bf16 tolerance against eager. ~: unsteady (its rounds "
             f"spread over a quarter of their median, or their median is over 1.5x its first pass): the figure "
             f"and its ratio are printed, the geometric means leave it out. "
             f"Search: {report['trials']} trials.", ""]
    if len(report.get("runs", [])) > 1:  # cases split over device calls: each row is its own run's
        lines += ["Cases measured in " + str(len(report["runs"])) + " runs (one process each; every figure of a "
                  "case, its floor included, from the run that measured it): " + "; ".join(
                      f"cases {', '.join(map(str, run['cases']))} on {run['date']} "
                      f"({run['ceilings']['bandwidth_bytes_per_s'] / 1e12:.2f} TB/s, "
                      f"{run['ceilings']['peak_flops'] / 1e12:.0f} TFLOP/s)" for run in report["runs"]) + ".", ""]
    measured = [r for r in report["rows"] if "error" not in r]
    failures = [f"- {r['case']}: {r['error']}" for r in report["rows"] if "error" in r]
    failures += [f"- {r['case']}, {LABELS[v]}: {rec['error']}" for r in measured
                 for v, rec in r["variants"].items() if "error" in rec]
    if failures:
        lines += ["Failures:", "", *failures, ""]
    head = ["case", "floor", "copy of the floor's bytes", *LABELS.values(),
            *(label for label, _ in CODEGEN_VARIANTS.values()), "× eager", "× compile",
            "× max-autotune", "fusionsearch ÷ floor", "fusionsearch ÷ copy", "fusionsearch ÷ cuBLAS",
            "peak MB eager / plan", "search s", "trials"]
    lines += md_table(head)
    for r in measured:
        fs_us = time_of(r, "fusionsearch")
        fs_rec = r["variants"].get("fusionsearch", {})
        peaks = [r["variants"].get(v, {}).get("peak_bytes") for v in ("eager", "fusionsearch")]
        peak_cell = " / ".join("—" if p is None else f"{p / 1e6:.1f}" for p in peaks)
        search_cell = f"{fs_rec['search_s']:.0f}" if "search_s" in fs_rec else ""
        option_cells = [option_cell(fs_rec.get(key, {})) for key in CODEGEN_VARIANTS]
        copy_us = r.get("copy_same_bytes", {}).get("median_us")  # rows of runs before the probe have none
        cells = [r["case"], f"{r['floor_us']:.1f}", "" if copy_us is None else f"{copy_us:.1f}",
                 *(time_cell(r, v) for v in LABELS), *option_cells,
                 *(ratio_cell(time_of(r, v), fs_us) + (" ~" if unsteady(r["variants"].get(v, {})) else "")
                   for v in ("eager", "torch_compile", "max_autotune")),
                 ratio_cell(fs_us, r["floor_us"]), ratio_cell(fs_us, copy_us if bandwidth_bound(r) else None),
                 ratio_cell(fs_us, time_of(r, "cublas_bare")),
                 peak_cell, search_cell, trials_cell(fs_rec)]
        lines.append(md_row(cells))
    return "\n".join([*lines, "", speedup_line(measured), *probe_table(measured)]) + "\n"


def bandwidth_bound(row: dict[str, Any]) -> bool:
    """Whether the case's floor is its bytes (a copy of them takes at least the floor), not its flops: only
    then is the copy a yardstick for the plan."""
    copy_us = row.get("copy_same_bytes", {}).get("median_us")
    return copy_us is not None and copy_us >= row["floor_us"]


def probe_table(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The compute-bound cases' tile probe: per case the searched plan's own time and each probe tile under
    each template option (µs), and the fastest valid one over cuBLAS."""
    probed = [r for r in rows if r["variants"].get("fusionsearch", {}).get("tile_probe")]
    if not probed:
        return []
    head = ["case", "searched plan", *(f"{c.short()} {o}" for c in PROBE_CONFIGS for o in PROBE_OPTIONS),
            "fastest ÷ cuBLAS"]
    lines = ["", "Compute-bound cases, the searched plan's fusion on other tiles and templates (µs; blank: does "
             "not fit shared memory by the analytic check):", "", *md_table(head)]
    for r in probed:
        fs_rec = r["variants"]["fusionsearch"]
        by_key = {(p["config"], p["options"]): p for p in fs_rec["tile_probe"]}
        cells = [option_cell(by_key.get((c.short(), o), {})) for c in PROBE_CONFIGS for o in PROBE_OPTIONS]
        valid = [p["median_us"] for p in fs_rec["tile_probe"] if "median_us" in p and p.get("ok") is not False]
        fastest = min(valid, default=None)
        lines.append(md_row([r["case"], option_cell(fs_rec), *cells, ratio_cell(fastest, time_of(r, "cublas_bare"))]))
    return lines


def plot(report: dict[str, Any], path: str) -> bool:
    """suite.png: per case, each variant's time over the floor (log scale, 1 = the floor); False without
    matplotlib."""
    rows = [r for r in report["rows"] if "error" not in r]
    series = {label: [None if (us := time_of(r, variant)) is None else us / r["floor_us"] for r in rows]
              for variant, label in LABELS.items()}
    return bar_chart(path, [r["case"] for r in rows], series, "time / floor", baseline=1.0,
                     title=f"{report['device']}, bf16: time over the roofline floor (lower is better)")


def progress_line(row: dict[str, Any], elapsed_s: float) -> str:
    figures = "  ".join(f"{LABELS[v]} {time_cell(row, v)}" for v in LABELS)
    return f"[{row['index']}] {row['case']}: floor {row['floor_us']:.1f}  {figures}  ({elapsed_s:.0f} s)"


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Every reference case on this GPU: eager, torch.compile, "
                                 "max-autotune, the searched plan, cuBLAS and the floor.")
    ap.add_argument("--trials", type=int, default=32, help="search trials per case (default 32)")
    ap.add_argument("--cases", default="", help="comma-separated indices into SUITE_CASES: the reference "
                    "cases, then from 10 the decode rows (default: all)")
    add_out(ap, "suite.json, suite.md, suite.png")
    ap.add_argument("--rounds", type=int, default=5,
                    help="interleaved timing rounds per case whose median is each variant's figure (default 5; "
                         "0: one pass, each variant timed once in turn)")
    ap.add_argument("--skip-max-autotune", action="store_true", help="leave out max-autotune (slow to compile)")
    ap.add_argument("--merge", nargs="+", metavar="SUITE_JSON",
                    help="no GPU: combine the rows of several runs' suite.json (cases split over device calls) "
                         "into one suite.json, suite.md and suite.png under --out")
    args = ap.parse_args(argv)
    try:
        args.indices = case_indices(args.cases, len(SUITE_CASES))
    except ValueError as e:
        ap.error(str(e))
    if args.rounds < 0:
        ap.error("--rounds must be 0 or more")
    if args.trials < 1:
        ap.error("--trials must be at least 1")
    return args


def merge(paths: Sequence[str]) -> dict[str, Any]:
    """One report from several runs: every case's row as its run measured it (its floor from that run's own
    ceilings), the first run's header, each run's date and ceilings listed under `runs`."""
    reports = [read_json(path) for path in paths]
    merged = {**reports[0], "rows": sorted((r for rep in reports for r in rep["rows"]), key=lambda r: r["index"]),
              "runs": [{"path": p, "date": rep["date"], "ceilings": rep["ceilings"], "cases": [r["index"] for r in
                                                                                             rep["rows"]]}
                       for p, rep in zip(paths, reports, strict=True)]}
    return merged


def write_report(report: dict[str, Any], out: str) -> str:
    """suite.md and suite.png beside suite.json; returns the markdown."""
    table = markdown(report)
    write_markdown(os.path.join(out, "suite.md"), table)
    if not plot(report, os.path.join(out, "suite.png")):
        progress("matplotlib is not installed: no suite.png")
    return table


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.merge:
        report = merge(args.merge)
        write_json(report, out_file(args.out, "suite.json"))
        print(write_report(report, args.out), end="")
        return
    if not torch.cuda.is_available():
        sys.exit("benchmarks/suite.py needs a CUDA GPU")
    json_path = out_file(args.out, "suite.json")
    report: dict[str, Any] = {
        **run_facts("device", "torch", "triton", date="utc"),
        "trials": args.trials, "rounds": args.rounds, "skip_max_autotune": args.skip_max_autotune,
        "l2_flush": L2_FLUSH_WORDS, "ceilings": measure_ceilings(),
        "rows": []}
    c = report["ceilings"]
    progress(f"ceilings: {c['bandwidth_bytes_per_s'] / 1e12:.2f} TB/s copy, "
             f"{c['peak_flops'] / 1e12:.0f} TFLOP/s bf16 mm")
    write_json(report, json_path)
    for index in args.indices:
        start = time.time()
        case = SUITE_CASES[index]
        try:
            row = run_case(index, case, c, args)
        except Exception as e:  # the graph or its inputs could not be built: the case is reported, not the run
            row = {"index": index, "case": case_name(case), "error": failure_reason(e), "variants": {}}
        report["rows"].append(row)
        write_json(report, json_path)
        progress(f"[{index}] {row['case']}: failed: {row['error']}" if "error" in row
                 else progress_line(row, time.time() - start))
    print(write_report(report, args.out), end="")


if __name__ == "__main__":
    main()
