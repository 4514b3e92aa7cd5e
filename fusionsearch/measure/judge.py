"""Judging one plan on the GPU: validate it against the float64 reference, then time it whole and, for the
learned model's refit, each kernel alone. The same function runs in the search's process or, isolated, in a
measurement worker (measure.isolate.MeasureWorker); its answer is a plain dict so that it crosses a pipe."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from fusionsearch.codegen.runtime import compile_plan
from fusionsearch.errors import MeasureError, failure_reason
from fusionsearch.graph.opgraph import OpGraph


@dataclass(frozen=True)
class Judgement:
    """A plan's verdict. ok: valid and timed (median_us); otherwise `reason` says why ('invalid: ...',
    'failed: ...', 'timed out ...', 'measurement worker died ...'). kernel_us: each kernel alone, when asked
    for and timed; kernel_error says why not."""

    ok: bool
    reason: str = ""
    rel_err: float | None = None
    median_us: float = math.inf
    kernel_us: tuple[float, ...] | None = None
    kernel_error: str = ""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Judgement:
        kernel_us = d.get("kernel_us")
        return cls(ok=bool(d.get("ok")), reason=str(d.get("reason", "")), rel_err=d.get("rel_err"),
                   median_us=float(d.get("median_us", math.inf)),
                   kernel_us=None if kernel_us is None else tuple(float(x) for x in kernel_us),
                   kernel_error=str(d.get("kernel_error", "")))


@dataclass
class MeasureState:
    """What every judgement of one graph shares: the graph, its inputs on the device, the caller's settings
    for the judge, and the float64 reference outputs, computed once on first use."""

    graph: OpGraph
    inputs: Sequence[torch.Tensor]
    seed: int = 0
    settings: dict[str, Any] = field(default_factory=dict)
    _refs: list[torch.Tensor] | None = field(default=None, repr=False)
    _refs_error: str = field(default="", repr=False)

    def refs(self) -> list[torch.Tensor]:
        """The float64 reference outputs. Where they do not fit in memory (the GPU's, then the host's: a MoE
        layer's gathered expert weights at 512 tokens were 481 GB in float64, before the grouped kind's
        replacement), a MeasureError naming the largest value, raised again at once for every later plan
        instead of a minute-long retry each."""
        if self._refs_error:
            raise MeasureError(self._refs_error)
        if self._refs is None:
            from fusionsearch.measure.validate import float64_reference

            try:
                self._refs = float64_reference(self.graph, self.inputs)
            except (torch.OutOfMemoryError, RuntimeError) as e:
                if "memory" not in str(e).lower():
                    raise
                self._refs_error = _reference_too_large(self.graph)
                raise MeasureError(self._refs_error) from None
        return self._refs


def _reference_too_large(g: OpGraph) -> str:
    """Why no plan of `g` can be validated here: the largest value its reference builds, in float64."""
    from fusionsearch.kinds import reference_replacements

    skipped = {n for r in reference_replacements(g).values() for n in r.skips}
    big = max((n for n in g if n.op != "input" and n.name not in skipped), key=lambda n: n.numel)
    gb = big.numel * 8 / 1e9
    return (f"the float64 reference of this graph does not fit in this machine's memory (its largest value, "
            f"{big.name!r} {list(big.shape)}, is {gb:.1f} GB in float64), so no plan can be validated; "
            "search a smaller shape")


def validated(state: MeasureState, plan_json: str) -> tuple[Any, float, dict[str, Any] | None]:
    """The plan given as JSON, its error against the float64 reference, and the judgement when it is invalid
    (None when it may be timed): the first step of every judge."""
    from fusionsearch.measure.validate import validate
    from fusionsearch.plan import Plan

    plan = Plan.from_json(plan_json, state.graph, None)
    v = validate(plan, state.graph, state.inputs, seed=state.seed, refs=state.refs())
    return plan, v.rel_err, None if v.ok else {"ok": False, "rel_err": v.rel_err, "reason": f"invalid: {v.reason}"}


def judge_plan(state: MeasureState, plan_json: str, kernels: bool = False) -> dict[str, Any]:
    """Validate, then time, the plan given as JSON; never raises for a failing kernel (the reason is returned)."""
    from fusionsearch.measure.bench import benchmark, kernel_times

    plan, rel_err, invalid = validated(state, plan_json)
    if invalid is not None:
        return invalid
    try:
        t = benchmark(plan, state.inputs)
    except MeasureError as e:  # no GPU to time on: the plan was still validated
        return {"ok": False, "rel_err": rel_err, "reason": f"failed: {e}"}
    if not t.ok:
        return {"ok": False, "rel_err": rel_err, "reason": f"failed: {t.reason}"}
    out: dict[str, Any] = {"ok": True, "rel_err": rel_err, "median_us": t.median_us}
    if kernels:
        try:
            out["kernel_us"] = kernel_times(plan, state.inputs)
        except Exception as e:  # the plan was measured whole; without its kernels alone it only teaches less
            out["kernel_error"] = failure_reason(e, 200)
    return out


def retime_plans(state: MeasureState, plan_jsons: Sequence[str], rounds: int = 5) -> dict[str, Any]:
    """Time plans already judged valid again, side by side: `rounds` interleaved rounds (every plan once per
    round), each plan's figure the median over rounds. {"us": [...]} in the given order (None for a plan
    that did not compile or run), or {"us": [None, ...], "reason": why} when nothing could be timed."""
    import statistics

    from fusionsearch.measure.bench import time_interleaved
    from fusionsearch.plan import Plan

    calls: dict[str, Any] = {}
    for i, plan_json in enumerate(plan_jsons):
        try:
            run = compile_plan(Plan.from_json(plan_json, state.graph, None)).module.run
        except Exception:  # it compiled when it was judged; whatever stops it now leaves it out
            continue
        calls[str(i)] = (lambda run=run: run(*state.inputs))
    try:
        by_round = time_interleaved(calls, rounds=rounds)
    except Exception as e:
        return {"us": [None] * len(plan_jsons), "reason": failure_reason(e, 200)}
    return {"us": [statistics.median(by_round[str(i)]) if by_round.get(str(i)) else None
                   for i in range(len(plan_jsons))]}


class InProcessJudge:
    """Judges plans in the calling process (SearchOptions.isolate=False): no worker to start, but a kernel
    that faults takes the search with it."""

    def __init__(self, graph: OpGraph, inputs: Sequence[torch.Tensor], seed: int = 0) -> None:
        self.state = MeasureState(graph, inputs, seed)

    def judge(self, plan_json: str, kernels: bool = False) -> Judgement:
        return Judgement.from_dict(judge_plan(self.state, plan_json, kernels))

    def retime(self, plan_jsons: Sequence[str], rounds: int = 5) -> list[float | None]:
        return retime_plans(self.state, plan_jsons, rounds)["us"]

    def close(self) -> None:
        pass
