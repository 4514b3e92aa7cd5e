"""Judging one plan on the GPU: validate it against the float64 reference, then time it whole and, for the
learned model's refit, each kernel alone. The same function runs in the search's process or, isolated, in a
measurement worker (measure.isolate.MeasureWorker); its answer is a plain dict (what any judge function
returns; the worker sends it back as a Judgement)."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from fusionsearch.codegen.runtime import Built, build, compile_plan, load_built
from fusionsearch.errors import MeasureError, failure_reason
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.measure.requests import Candidate

log = logging.getLogger("fusionsearch.measure")


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


def handed(candidate: Candidate) -> Built | None:
    """The candidate's source, read back from the kernel cache by its key (only a text that still hashes to
    it); None without a key, or (logged) when the entry is missing or changed: the plan is then generated."""
    if not candidate.key:
        return None
    found = load_built(candidate.key)
    if found is None:
        log.warning("the kernel cache entry fs_%s.py is missing or changed; its plan is generated again",
                    candidate.key)
    return found


@dataclass
class MeasureState:
    """What every judgement of one graph shares: the graph, its inputs on the device, the caller's settings
    for the judge, and the float64 reference outputs, computed once on first use; and the generated modules
    of the request being answered (by plan JSON), so that validating, timing and timing each kernel alone
    compile one source, generated once."""

    graph: OpGraph
    inputs: Sequence[torch.Tensor]
    seed: int = 0
    settings: dict[str, Any] = field(default_factory=dict)
    _refs: list[torch.Tensor] | None = field(default=None, repr=False)
    _refs_error: str = field(default="", repr=False)
    _builds: dict[str, Built] = field(default_factory=dict, repr=False)

    def hand(self, candidates: Sequence[Candidate]) -> None:
        """The candidates of the next request: their sources as `handed` finds them; one without is generated
        when first needed."""
        self._builds = {c.plan_json: found for c in candidates if (found := handed(c)) is not None}

    def built(self, plan: Any, plan_json: str) -> Built:
        """The plan's generated module: the one handed with the request, else generated now (kept for the
        request's other steps)."""
        found = self._builds.get(plan_json)
        if found is None:
            found = self._builds[plan_json] = build(plan)
        return found

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
    refs = state.refs()
    try:
        built = state.built(plan, plan_json)
    except Exception as e:  # the plan's source does not generate: invalid, as validate says of what fails to run
        return plan, math.inf, {"ok": False, "rel_err": math.inf, "reason": f"invalid: {failure_reason(e)}"}
    v = validate(plan, state.graph, state.inputs, seed=state.seed, refs=refs, built=built)
    return plan, v.rel_err, None if v.ok else {"ok": False, "rel_err": v.rel_err, "reason": f"invalid: {v.reason}"}


def judge_plan(state: MeasureState, plan_json: str, kernels: bool = False) -> dict[str, Any]:
    """Validate, then time, the plan given as JSON; never raises for a failing kernel (the reason is returned)."""
    from fusionsearch.measure.bench import benchmark, kernel_times

    plan, rel_err, invalid = validated(state, plan_json)
    if invalid is not None:
        return invalid
    built = state.built(plan, plan_json)
    try:
        t = benchmark(plan, state.inputs, built=built)
    except MeasureError as e:  # no GPU to time on: the plan was still validated
        return {"ok": False, "rel_err": rel_err, "reason": f"failed: {e}"}
    if not t.ok:
        return {"ok": False, "rel_err": rel_err, "reason": f"failed: {t.reason}"}
    out: dict[str, Any] = {"ok": True, "rel_err": rel_err, "median_us": t.median_us}
    if kernels:
        try:
            out["kernel_us"] = kernel_times(plan, state.inputs, built=built)
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
            plan = Plan.from_json(plan_json, state.graph, None)
            run = compile_plan(plan, state.built(plan, plan_json)).module.run
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

    def judge(self, plan: Candidate | str, kernels: bool = False) -> Judgement:
        candidate = Candidate.of(plan)
        self.state.hand([candidate])
        return Judgement.from_dict(judge_plan(self.state, candidate.plan_json, kernels))

    def retime(self, plans: Sequence[Candidate | str], rounds: int = 5) -> list[float | None]:
        candidates = [Candidate.of(p) for p in plans]
        self.state.hand(candidates)
        return retime_plans(self.state, [c.plan_json for c in candidates], rounds)["us"]

    def close(self) -> None:
        pass
