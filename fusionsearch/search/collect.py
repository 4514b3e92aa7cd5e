"""Collecting measurements for the learned cost model: random graphs, sampled plans and tile configs, each
plan validated and each of its kernels timed alone on the GPU, one dataset row per kernel.

Compilation runs in parallel worker processes; rows are appended per graph (see datasets/measurements), so a
killed collection loses at most the graph in flight and `collect` resumes by skipping measured plans."""

from __future__ import annotations

import dataclasses
import hashlib
import platform
import random
import sys
import time
from dataclasses import dataclass
from typing import Any

import torch

from fusionsearch.datasets.measurements import append_rows, check_appendable, read_rows, rows_for_fp32_dot
from fusionsearch.errors import FusionSearchError, PlanError, failure_reason
from fusionsearch.kinds import compiled_kinds
from fusionsearch.measure.bench import kernel_times
from fusionsearch.measure.requests import Candidate
from fusionsearch.plan import FP32_DOT


def hardware_signature() -> dict[str, Any]:
    """What a measurement depends on beyond the kernel: device, driver/CUDA, torch and triton versions, and
    the cost model's profile of the device (`profile`, Hardware.to_dict), which features are computed with."""
    import triton

    from fusionsearch.costmodel.hardware import Hardware

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or "cpu"
    return {"device": device, "cuda": str(torch.version.cuda), "torch": torch.__version__,
            "triton": triton.__version__, "profile": Hardware.detect().to_dict()}


def plan_id(plan: Any) -> str:
    return hashlib.sha256(plan.to_json().encode()).hexdigest()[:16]


def candidate(plan: Any) -> Candidate:
    """The plan as the compile and measurement workers take it, its module generated here once (issue 55 item 2:
    compiling, validating and timing each kernel read that one source back by its key); a plan whose source
    does not generate goes without a key, and the workers say why it fails."""
    from fusionsearch.codegen.runtime import build

    try:
        return Candidate(plan.to_json(), build(plan).key)
    except Exception:  # noqa: BLE001 - the compile worker generates it again and records the reason
        return Candidate(plan.to_json())


@dataclass(frozen=True)
class CollectOptions:
    """How much to collect: `graphs` random graphs from `seed`, `plans_per_graph` sampled plans each;
    do_bench budgets per kernel in ms (short: thousands of kernels are timed)."""

    graphs: int = 100
    plans_per_graph: int = 12
    seed: int = 0
    warmup_ms: int = 5
    rep_ms: int = 25
    compile_workers: int | None = None
    progress: bool = True
    device: str = "cuda"  # "cpu" runs the pipeline in Triton's interpreter with wall-clock times: for tests only
    shape_scale: str = "real"
    # the random graphs' family (datasets.random_graphs): "experts" for mixture-of-experts; several, comma-separated
    # ("moe,attention") or "all": graph i is of the (i mod n)-th; each row records its graph's (key "family")
    family: str = "mixed"
    dtypes: tuple[str, ...] | None = None  # None: the generator's bf16/fp16/fp32 mix
    plan_timeout_s: float = 300.0  # a plan not validated and timed within this is recorded timed_out
    judge: str = "fusionsearch.search.collect:judge_for_dataset"  # what the measurement worker runs per plan
    # Each template's registers, spills and shared memory (codegen/resources.py, compiled for sm_`arch` on the
    # CPU) in its row and features; None: when measuring on a GPU (on the CPU it costs a child process a plan)
    resources: bool | None = None
    arch: int = 90


def sample_plans(g: Any, n: int, rng: random.Random, hw: Any) -> list[Any]:
    """Up to n distinct legal plans: the reference plans, the heuristic on each other matmul kind's first choice
    (decode, grouped: rows of every kind the search offers), then random fusion options and tile configs."""
    from fusionsearch.costmodel.analytic import fits
    from fusionsearch.plan import fully_fused, heuristic, unfused
    from fusionsearch.search.space import enumerate_space, random_plans, seed_plans

    space = enumerate_space(g, lambda gr, mm, cfg: fits(gr, mm, cfg, hw))
    plans: dict[str, Any] = {}
    for make in (unfused, fully_fused, heuristic):
        try:
            p = make(g)
            plans.setdefault(p.to_json(), p)
        except PlanError:
            pass
    others = {label for i in range(len(space.matmuls)) for label, _ in space._others(i)}
    for params in seed_plans(space):
        if len(plans) < n and others & set(params.values()):
            try:
                p = space.plan(params)
                plans.setdefault(p.to_json(), p)
            except PlanError:
                pass
    return random_plans(space, n, rng, plans)


def collect(out_path: str, options: CollectOptions) -> dict[str, int]:
    """Measure options.graphs random graphs into `out_path` (appending, resuming); returns row counts by status."""
    if options.device == "cuda" and not torch.cuda.is_available():
        raise FusionSearchError("collect measures kernels on a GPU; none is visible here")
    check_appendable(out_path)  # a file that is not a dataset is refused before anything is measured
    from concurrent.futures.process import BrokenProcessPool

    from fusionsearch.codegen.resources import many_plan_resources, resources_pool
    from fusionsearch.costmodel.features import FEATURE_SCHEMA_VERSION, kernel_features
    from fusionsearch.costmodel.hardware import Hardware
    from fusionsearch.datasets.random_graphs import families_of, random_graph
    from fusionsearch.graph.registry import dtype_from_name
    from fusionsearch.measure.isolate import CompilePool, MeasureWorker

    families = families_of(options.family)  # a bad family is refused before anything starts
    hw = Hardware.detect()
    sig = hardware_signature()
    # A plan with an fp32 matmul measured with another fp32 dot than today's code generator's is measured again
    done = {(r["graph_id"], r["plan_id"]) for r in rows_for_fp32_dot(read_rows(out_path), FP32_DOT)}
    counts: dict[str, int] = {}
    pool = CompilePool(options.compile_workers, device=options.device)
    # One measurement worker for the whole collection: a kernel that faults or hangs costs its own rows
    # (status failed / timed_out), not the collection, and a restart never meets it again.
    worker = MeasureWorker(device=options.device, timeout_s=options.plan_timeout_s,
                           judge=options.judge)
    settings = {"warmup_ms": options.warmup_ms, "rep_ms": options.rep_ms}
    compile_for_gpu = options.resources if options.resources is not None else options.device == "cuda"
    compiler = None  # resources_pool(), started at the first graph with plans to compile (a resumed collection may
    # have none)
    start = time.time()
    try:
        for gi in range(options.graphs):
            extra = {"dtypes": tuple(dtype_from_name(d) for d in options.dtypes)} if options.dtypes else {}
            family = families[gi % len(families)]
            g = random_graph(options.seed + gi, shape_scale=options.shape_scale, family=family, **extra)
            gid = g.signature_hash()
            rng = random.Random(f"{options.seed}-{gi}")
            plans = [p for p in sample_plans(g, options.plans_per_graph, rng, hw) if (gid, plan_id(p)) not in done]
            if not plans:
                continue
            candidates = [candidate(p) for p in plans]
            failures = pool.warm(g.to_dict(), candidates)
            worker.set_graph(g.to_dict(), seed=gi, settings=settings)
            # Each plan's compiled resources; None for a plan that does not compile for the GPU (its measurement
            # then says why)
            found: list[Any] = [None] * len(plans)
            if compile_for_gpu:
                compiler = compiler or resources_pool()
                try:
                    found = many_plan_resources(plans, options.arch, pool=compiler)
                except BrokenProcessPool:  # a compiling process died: these rows keep NaN, the next graph a new pool
                    compiler.shutdown(cancel_futures=True)
                    compiler = None
            rows = []
            for plan, cand, failure, res in zip(plans, candidates, failures, found, strict=True):
                resources = res if res is not None else [None] * len(plan.kernels)
                rows += [{**r, "family": family} for r in _measure_plan(
                    g, gid, plan, cand, failure, worker, hw, sig, FEATURE_SCHEMA_VERSION, kernel_features,
                    resources)]
            append_rows(out_path, rows)
            for r in rows:
                counts[r["status"]] = counts.get(r["status"], 0) + 1
            if options.progress:
                print(f"graph {gi + 1}/{options.graphs}: {len(plans)} plans, {len(rows)} rows; total {counts}; "
                      f"{time.time() - start:.0f} s", file=sys.stderr, flush=True)
    finally:
        pool.close()
        worker.close()
        if compiler is not None:
            compiler.shutdown(cancel_futures=True)
    return counts


def add_resources(in_path: str, out_path: str, arch: int = 90, workers: int | None = None) -> dict[str, int]:
    """Write `in_path`'s rows to `out_path` with each template row's compiled resources (`resources`) and its
    features recomputed in this schema: for datasets measured before the collector recorded them. Plans are
    compiled in parallel (`workers` processes, default every core but one); a plan that does not compile keeps
    NaN. Returns counts of rows by what they got."""
    import os

    from fusionsearch.codegen.resources import many_plan_resources
    from fusionsearch.costmodel.features import recompute_features
    from fusionsearch.graph.spec import graph_from_dict
    from fusionsearch.plan import Plan

    if not os.path.isfile(in_path):
        raise FusionSearchError(f"{in_path}: no such dataset file")
    if os.path.exists(out_path):
        raise FusionSearchError(f"{out_path} exists; add_resources writes a new dataset file")
    rows = read_rows(in_path)
    if not rows:
        raise FusionSearchError(f"{in_path}: no dataset rows in it (not a file `costmodel collect` wrote?)")
    compiled = compiled_kinds()  # the rows of kernels whose compiled figures are features
    plans = {(r["graph_id"], r["plan_id"]): r for r in rows if r.get("kernel_kind") in compiled}
    keys = list(plans)
    graphs = {gid: graph_from_dict(plans[(gid, pid)]["graph"]) for gid, pid in keys}
    measured = [Plan.from_dict(plans[k]["plan"], graphs[k[0]], None) for k in keys]  # whatever tile each ran
    found = dict(zip(keys, many_plan_resources(measured, arch, workers), strict=True))
    counts = {"compiled": 0, "not compiled": 0, "other kernels": 0}
    for r in rows:
        per_kernel = found.get((r["graph_id"], r["plan_id"]))
        res = per_kernel[r["kernel_index"]] if per_kernel is not None else None
        r["resources"] = None if res is None else dataclasses.asdict(res)
        r["schema_version"] = None  # re-featured below, with the resources
        matmul = r.get("kernel_kind") in compiled
        counts["compiled" if res is not None else "not compiled" if matmul else "other kernels"] += 1
    featured, dropped = recompute_features(rows)
    if dropped:
        raise FusionSearchError(f"{in_path}: {dropped} rows could not be re-featured (no graph, plan or profile)")
    append_rows(out_path, featured)
    return counts


def judge_for_dataset(state: Any, plan_json: str, kernels: bool) -> dict[str, Any]:
    """In the measurement worker: validate the plan against the float64 reference, then time each kernel
    alone (what a dataset row holds; kernel_us, ok), both from the one source handed with the request.
    Wall-clock times on the CPU, for tests."""
    from fusionsearch.measure.bench import time_callable
    from fusionsearch.measure.judge import validated

    plan, rel_err, invalid = validated(state, plan_json)
    if invalid is not None:
        return invalid
    timer = time_callable if state.inputs[0].is_cuda else _wall_clock
    try:
        times = kernel_times(plan, state.inputs, state.settings.get("warmup_ms", 5), state.settings.get("rep_ms", 25),
                             timer, built=state.built(plan, plan_json))
    except Exception as e:  # a launch failure marks this plan, the collection goes on
        return {"ok": False, "rel_err": rel_err, "reason": f"failed to launch: {failure_reason(e, 300)}"}
    return {"ok": True, "rel_err": rel_err, "kernel_us": times, "median_us": sum(times)}


def _wall_clock(fn: Any, warmup_ms: int = 0, rep_ms: int = 0) -> Any:
    """One wall-clock run (µs): the CPU stand-in for do_bench, so tests can run the whole pipeline."""
    from fusionsearch.measure.bench import Timing

    t = time.perf_counter()
    fn()
    return Timing((time.perf_counter() - t) * 1e6)


def _status(failure: str, judgement: Any) -> tuple[str, str]:
    """A plan's dataset status and reason, from its compile worker's failure or its judgement."""
    if failure.startswith("failed: "):
        return "failed", failure.removeprefix("failed: ")
    if failure:
        return ("timed_out" if "timed out" in failure else "compile_failed"), failure
    if judgement.ok:
        return "ok", ""
    reason = judgement.reason
    if reason.startswith("invalid: "):
        return "invalid", reason.removeprefix("invalid: ")
    if reason.startswith("timed out"):
        return "timed_out", reason
    if reason.startswith("failed to launch: "):
        return "compile_failed", reason.removeprefix("failed to launch: ")
    return "failed", reason


def _measure_plan(g: Any, gid: str, plan: Any, cand: Candidate, failure: str, worker: Any, hw: Any,
                  sig: dict[str, Any], schema: int, kernel_features: Any, resources: list[Any]) -> list[dict[str, Any]]:
    """One row per kernel of the plan (judged as `cand`): status, measured µs (ok rows), compiled resources,
    features."""
    pid = plan_id(plan)
    # The graph spec and the plan travel with the measurement, so a later feature schema recomputes the
    # features of these rows instead of discarding what was measured.
    base = {"graph_id": gid, "plan_id": pid, "schema_version": schema, "hardware": sig, "graph": g.to_dict(),
            "plan": plan.to_dict(), "fp32_dot": FP32_DOT}
    try:
        judgement = None if failure else worker.judge(cand, kernels=True)
    except FusionSearchError as e:  # the worker could not even set up this graph: its plans fail, the rest go on
        failure = f"failed: {e}"
        judgement = None
    status, reason = _status(failure, judgement)
    rel_err = judgement.rel_err if judgement is not None else None  # the plan's error against float64
    times = list(judgement.kernel_us) if status == "ok" and judgement is not None and judgement.kernel_us else \
        [float("nan")] * len(plan.kernels)
    rows = []
    for i in range(len(plan.kernels)):
        res = resources[i]
        rows.append({**base, "kernel_index": i, "kernel_kind": plan.kernels[i].kind, "status": status,
                     "reason": reason, "time_us": times[i], "rel_err": rel_err,
                     "resources": None if res is None else dataclasses.asdict(res),
                     "features": kernel_features(plan, i, hw, resources=res)})
    return rows
