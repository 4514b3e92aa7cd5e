"""The facts `explain` and `search` print, as plain JSON-able dicts: `--json` prints them and the text is made
from them, so the two never say different things. Also the words naming the hardware a time is for: measured
on a GPU, or estimated for the cost model's hardware profile."""

from __future__ import annotations

from typing import Any

import torch

from fusionsearch.plan import FusedMatmulKernel, LibraryKernel, Plan, prologue_bytes_ok, template_operands


def hardware_words(backend: str, hw_name: str, gpu_here: bool | None = None) -> str:
    """How a time relates to hardware: 'measured on <GPU>' on the gpu backend, else 'estimated for <profile>'
    saying whether the profile is this machine's GPU or stands in for a GPU this machine does not have."""
    if backend == "gpu":
        return f"measured on {hw_name}"
    here = torch.cuda.is_available() if gpu_here is None else gpu_here
    whose = "the cost model's profile of this machine's GPU" if here else \
        "the cost model's hardware profile; this machine has no GPU"
    return f"estimated for {hw_name} ({whose})"


def kernel_facts(plan: Plan, hw: Any, learned: list[float] | None = None,
                 backend: str = "model") -> list[dict[str, Any]]:
    """Per kernel of the plan: what it runs and fuses (and why a prologue is not fused, as the `backend` that
    judged the plan decided it), bytes, flop and its analytic time (µs), with the learned model's time (µs)
    where `learned` gives one per kernel."""
    from fusionsearch.costmodel.analytic import estimate

    g = plan.graph
    out = []
    for i, (k, ke) in enumerate(zip(plan.kernels, estimate(plan, hw).per_kernel, strict=True)):
        facts: dict[str, Any] = {"index": ke.index, "kind": k.kind}
        if isinstance(k, FusedMatmulKernel):
            facts |= {"matmul": k.matmul, "op": g.node(k.matmul).op, "config": k.config.short(),
                      "prologue_a": list(k.prologue_a), "prologue_b": list(k.prologue_b),
                      "epilogue": list(k.epilogue), "not_fused": unfused_operands(plan, k, backend)}
        elif isinstance(k, LibraryKernel):
            facts |= {"matmul": k.matmul, "op": g.node(k.matmul).op, "library": "PyTorch's matmul (cuBLAS)"}
        else:
            facts |= {"nodes": list(k.nodes)}
        facts |= {"bytes_read": ke.bytes_read, "bytes_written": ke.bytes_written, "flops": ke.flops,
                  "analytic_us": ke.time_us,
                  "figure": "library figure (cuBLAS's measured rates)" if isinstance(k, LibraryKernel)
                  else "roofline model"}
        if learned is not None:
            facts["learned_us"] = learned[i]
        out.append(facts)
    return out


def unfused_operands(plan: Plan, k: FusedMatmulKernel, backend: str) -> list[dict[str, str]]:
    """The matmul's operands computed by fusable work that the plan leaves unfused, each with why: the bytes
    rule, or the search's judge (a GPU measures; the interpreter and model backends rank by the cost model)."""
    g = plan.graph
    judged = "the search measured it unfused as faster" if backend == "gpu" else \
        "the cost model ranks it faster unfused"
    out = []
    for side, nodes in (("A", k.prologue_a), ("B", k.prologue_b)):
        root = template_operands(g, k.matmul)[side]
        if not nodes and g.node(root).op != "input" and g.node(root).kind in ("pointwise", "layout", "indexing"):
            why = "the bytes rule refuses it" if not prologue_bytes_ok(g, k.matmul, side, [root]) else judged
            out.append({"side": side, "node": root, "why": why})
    return out


def plan_facts(plan: Plan, hw: Any, learned: list[float] | None = None, backend: str = "model") -> dict[str, Any]:
    """A plan's facts: the plan itself (Plan.to_dict), the hardware its figures are for, totals (bytes, flop,
    analytic µs, learned µs or None) and each kernel's (kernel_facts)."""
    from fusionsearch.costmodel.analytic import estimate

    est = estimate(plan, hw)
    return {"plan": plan.to_dict(), "graph": plan.graph.signature_hash(), "hardware": hw.name,
            "hardware_words": hardware_words(backend, hw.name), "bytes_read": est.bytes_read,
            "bytes_written": est.bytes_written, "flops": est.flops, "analytic_us": est.time_us,
            "learned_us": None if learned is None else sum(learned),
            "kernels": kernel_facts(plan, hw, learned, backend)}


def how_words(backend: str, cost_model: str) -> str:
    """How a search's best time was found: measured, or predicted by which cost model."""
    return "measured" if backend == "gpu" else f"predicted by the {cost_model} cost model"


def search_facts(res: Any, graph_name: str = "", out: str | None = None) -> dict[str, Any]:
    """A finished search (a TuneResult): its graph, best plan and time, how the time was found and for which
    hardware, trial counts (by outcome and by status), the study, and the files written to `out`."""
    import os

    states: dict[str, int] = {}
    for t in res.trials:
        states[t.state] = states.get(t.state, 0) + 1
    hw_name = getattr(res.hardware, "name", str(res.hardware))
    facts = {"graph": {"name": graph_name, "hash": res.graph.signature_hash()},
             "best_plan": res.best.to_dict(), "best_us": res.best_us,
             "how": how_words(res.backend, res.cost_model), "measured": res.backend == "gpu",
             "backend": res.backend, "cost_model": res.cost_model, "sampler": res.sampler,
             "hardware": hw_name, "hardware_words": hardware_words(res.backend, hw_name),
             "trials": {"total": len(res.trials), "complete": states.get("complete", 0),
                        "pruned": states.get("pruned", 0), "failed": states.get("fail", 0),
                        "by_status": dict(sorted(res.counts().items()))},
             "possible_plans": res.extra.get("possible_plans"), "study": res.study_name, "storage": res.storage,
             "elapsed_s": res.elapsed_s, "kernels": kernel_facts(res.best, res.hardware, backend=res.backend),
             "out": out, "files": sorted(os.listdir(out)) if out else []}
    if res.extra.get("finalists"):
        facts["finalists"] = res.extra["finalists"]
    return facts


def learned_kernel_times(plan: Plan, hw: Any) -> list[float] | None:
    """Each kernel's time (µs) by the shipped learned model when one matches this GPU, else None: what `explain`
    prints beside the analytic figure."""
    from fusionsearch.costmodel.learned import load_default
    from fusionsearch.costmodel.pricing import plans_matrix

    model = load_default()
    if model is None:
        return None
    X, _ = plans_matrix([plan], hw)
    return [float(t) for t in model.predict(X)]


def recorded_search(result_path: str) -> dict[str, Any] | None:
    """What the search that wrote a plan recorded of it (its result.json): best time, backend, cost model and
    how the time was found; None where there is no such record or it is not one."""
    import json

    try:
        with open(result_path) as f:
            result = json.load(f)
        best, backend, model = float(result["best_us"]), str(result["backend"]), str(result["cost_model"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    how = "measured on the GPU" if backend == "gpu" else f"{how_words(backend, model)}, backend {backend}"
    return {"best_us": best, "backend": backend, "cost_model": model, "how": how}


def search_setup(g: Any, opts: Any) -> dict[str, Any]:
    """What a search of `g` with SearchOptions `opts` is about to run, for the line the CLI prints first: the
    backend on this machine, whether the space holds a single plan (then one trial) and the worker processes."""
    from fusionsearch.costmodel.hardware import Hardware
    from fusionsearch.search.options import resolve_backend
    from fusionsearch.search.study import possible_plans, search_space
    from fusionsearch.search.workers import worker_count

    backend = resolve_backend(opts.backend)
    single = possible_plans(search_space(g, opts, Hardware.detect())) == 1
    return {"backend": backend, "single": single, "workers": 1 if single else worker_count(opts.workers, backend)}
