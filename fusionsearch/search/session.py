"""One process's part of a study: open (or join) it on its storage, run its waiting trials here (search/loop.py),
time the finalists again side by side, and return the result over all of the study's trials. A search without
workers is one session; each worker process runs one (search/workers.py), and so does the process that started
them, once they are done, to run whatever a dead worker left."""

from __future__ import annotations

import dataclasses
import logging
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import optuna
import torch

from fusionsearch.errors import FusionSearchError, SpecError, failure_reason
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.plan import Plan
from fusionsearch.search.identity import graph_summary, study_identity
from fusionsearch.search.loop import run_trials, say_unfinished
from fusionsearch.search.objective import Objective, trained_profile
from fusionsearch.search.options import MODEL_FILES, SearchOptions, resolve_backend
from fusionsearch.search.progress import Watch, progress_bar
from fusionsearch.search.result import TrialRecord, TuneResult
from fusionsearch.search.samplers import make_sampler, sampler_name
from fusionsearch.search.slots import Slots, is_retry, lock_path, open_study, remove_lock
from fusionsearch.search.space import Space, enumerate_space, kind_seed_plans, seed_plans
from fusionsearch.search.storage import make_storage, redact

log = logging.getLogger("fusionsearch.search")


def search_space(graph: OpGraph, options: SearchOptions, hw: Any) -> Space:
    """The graph's candidate space under `options` on hardware `hw` (whose shared memory bounds the tiles)."""
    from fusionsearch.costmodel.analytic import fits

    return enumerate_space(graph, lambda g, mm, cfg: fits(g, mm, cfg, hw), options.max_configs,
                           library=options.library)


def possible_plans(space: Space, limit: int = 64) -> int | None:
    """How many distinct legal plans the space holds, counted when it has at most `limit` combinations (else
    None): a space of one plan needs one trial, whatever was asked."""
    if space.size() > limit:
        return None
    return len(space.distinct_plans())


def priced_by(model: Any) -> str:
    """Which cost model prices the trials, in the words results and study records use."""
    return "analytic" if model is None else f"learned ({(model.hardware_ or {}).get('name', 'unknown GPU')})"


@dataclass(frozen=True)
class Setup:
    """What a search runs on: its backend, hardware, candidate space and trial count (1 when the space holds one
    plan, `single`)."""

    backend: str
    hw: Any
    space: Space
    trials: int
    single: bool


def setup(graph: OpGraph, options: SearchOptions, hw: Any = None, judge: Any = None) -> Setup:
    """The backend (gpu with a judge), hardware, space and trial count of a search. The hardware, when None: the
    GPU's profile; on a machine without one, that of the GPU a given model file was trained on (its features
    are priced with that GPU's figures), else the H200's."""
    from fusionsearch.costmodel.hardware import Hardware

    if judge is not None and options.backend not in ("auto", "gpu"):
        raise SpecError(f"a judge measures plans: it needs backend 'gpu' (or 'auto'), not {options.backend!r}")
    backend = "gpu" if judge is not None else resolve_backend(options.backend)
    hw = hw or (trained_profile(options.cost_model) if not torch.cuda.is_available()
                and options.cost_model.endswith(MODEL_FILES) else None) or Hardware.detect()
    space = search_space(graph, options, hw)
    single = possible_plans(space) == 1
    return Setup(backend, hw, space, 1 if single else options.trials, single)  # one plan: judge it once


@dataclass
class Session:
    """One process on one study: its slots (the study within), the objective and the sampler's name."""

    graph: OpGraph
    options: SearchOptions
    setup: Setup
    slots: Slots
    objective: Objective
    sampler: str


def open_session(graph: OpGraph, options: SearchOptions, setup: Setup, url: str | None,
                 shown_url: str = "") -> Session:
    """Create the study on the storage at `url` (None: in memory) or join it; `shown_url` names the storage in a
    refusal (empty: a storage of the search's own)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    storage = make_storage(url, options.heartbeat_s) or optuna.storages.InMemoryStorage()
    name = options.study_name or f"fusionsearch-{graph.signature_hash()}-{setup.backend}"
    objective = Objective(graph, setup.space, options, setup.backend, setup.hw)
    sampler = sampler_name(options, objective)
    # ranked: each other kind's known-good plan (what the model may not tell apart), then the model's order
    first = kind_seed_plans(setup.space) if sampler == "ranked" else seed_plans(setup.space)
    identity = study_identity(graph, options.graph_name, setup.space, setup.backend, priced_by(objective.model),
                              setup.hw)
    trials = trial_count(setup, options, sampler, objective.model)
    if trials < setup.trials:
        log.info("%d trials of %d asked: a learned model ranks the plans, %d are measured (measure)", trials,
                 setup.trials, trials)
    _, slots = open_study(name, storage, make_sampler(sampler, options.seed, objective), trials, first,
                          identity, shown_url, url)
    return Session(graph, options, setup, slots, objective, sampler)


def trial_count(setup: Setup, options: SearchOptions, sampler: str, model: Any) -> int:
    """The study's trials: at most options.measure (when not 0) where a learned model ranks the plans that are
    measured (the ranked sampler on the gpu backend), since each trial measures one plan and the model ranks
    the rest; else as many as asked. Elsewhere a trial measures nothing (interpret, model) or is drawn by a
    sampler that learns only from trials (TPE), and the bound does not apply."""
    if options.measure and sampler == "ranked" and model is not None and setup.backend == "gpu":
        return min(setup.trials, options.measure)
    return setup.trials


def run_here(graph: OpGraph, options: SearchOptions, inputs: Sequence[torch.Tensor] | None = None, hw: Any = None,
             judge: Any = None) -> TuneResult:
    """The whole search in this process (no workers): open or join the study, run its waiting trials, return the
    result over all of them. Its time limit (options.timeout) counts from the study's opening: the trials' time,
    the cost model's ranking of the space included."""
    found = setup(graph, options, hw, judge)
    if found.single:
        log.info("1 possible plan: 1 trial (of %d asked)", options.trials)
    url = options.storage
    session = open_session(graph, options, found, url, redact(url) if url else "")
    res = run_session(session, inputs, judge, time.time(), url)
    if found.single:
        res.extra["possible_plans"] = 1
    return res


def run_session(session: Session, inputs: Sequence[torch.Tensor] | None, judge: Any, start: float,
                storage_url: str | None) -> TuneResult:
    """Run the study's waiting trials in this process, then the result over all of the study's trials."""
    options, objective, slots = session.options, session.objective, session.slots
    backend, space = session.setup.backend, session.setup.space
    study = slots.study
    for t in study.trials:  # a resumed study: its measured trials set the pruning bar
        if t.state == optuna.trial.TrialState.COMPLETE and "predicted_us" in t.user_attrs:
            objective.best_measured_prediction = min(objective.best_measured_prediction, t.user_attrs["predicted_us"])
    bar = progress_bar(slots.remaining(), options.progress)
    objective.watch = Watch(None if options.timeout is None else start + options.timeout, bar)
    pool, shared = None, None
    if backend == "gpu" and judge is None:
        from fusionsearch.measure.shared import current

        shared = current() if options.isolate else None  # the backend's regions: workers started once
        judge = shared.measure_worker(session.graph.to_dict(), inputs, options.seed, options.trial_timeout_s) \
            if shared is not None else _gpu_judge(session.graph, inputs, options)
        if options.compile_workers != 0:
            from fusionsearch.measure.isolate import CompilePool

            pool = shared.compile_pool(options.compile_workers or None) if shared is not None \
                else CompilePool(options.compile_workers or None)
    objective.judge = judge
    finals: list[dict[str, Any]] = []
    try:
        run_trials(slots, objective, None if options.timeout is None else start + options.timeout, bar, pool)
        say_unfinished(slots)
        if backend == "gpu" and options.finalists > 1 and hasattr(judge, "retime"):
            finals = _retime_finalists(study, space, judge, options.finalists, objective.candidate)
    finally:
        if pool is not None and shared is None:
            pool.close()
        if judge is not None and shared is None:
            judge.close()
        objective.watch = Watch()
        if bar:
            bar.close()
        remove_lock(lock_path(storage_url))
    records = [_record(t, retried) for retried in [_retried_as(study.trials)] for t in study.trials]
    best = _best(study, space)
    timed = [f for f in finals if f["final_us"] is not None]
    if len(timed) > 1:  # side by side, the finalists' order is the one to trust
        pick = min(timed, key=lambda f: f["final_us"])
        best = (space.plan(pick["params"]), pick["final_us"])
    return TuneResult(graph=session.graph, space=space, best=best[0], best_us=best[1], trials=records,
                      backend=backend, hardware=session.setup.hw, study_name=study.study_name,
                      elapsed_s=time.time() - start, storage=redact(storage_url) if storage_url else None,
                      cost_model=priced_by(objective.model), sampler=session.sampler,
                      extra={"finalists": finals} if finals else {}, study=study,
                      graph_name=options.graph_name or graph_summary(session.graph))


def _retried_as(trials: Sequence[optuna.trial.FrozenTrial]) -> dict[int, int]:
    """The trials laid out again (slots.Retry), by number: the number of the trial that runs them again."""
    return {t.system_attrs["retry_history"][-1]: t.number for t in trials if is_retry(t)}


def _record(t: optuna.trial.FrozenTrial, retried_as: dict[int, int]) -> TrialRecord:
    """The trial as the result and report.md show it: a trial failed because its process stopped (killed, its
    heartbeat stale; or interrupted) says so and which trial runs it again, where Optuna recorded no reason."""
    record = TrialRecord.from_trial(t)
    if t.state != optuna.trial.TrialState.FAIL or t.number not in retried_as:
        return record
    again = f"run again as trial {retried_as[t.number]}"
    if record.reason:
        return dataclasses.replace(record, reason=record.reason.replace("its slot is laid out again", again))
    return dataclasses.replace(record, status="stopped",
                               reason=f"its process stopped before it was judged (killed or lost); {again}")


def _gpu_judge(graph: OpGraph, inputs: Sequence[torch.Tensor] | None, options: SearchOptions) -> Any:
    """The GPU's judge: a measurement worker (options.isolate) or this process; inputs None: random ones
    drawn from the search's seed."""
    if options.isolate:
        from fusionsearch.measure.isolate import MeasureWorker

        return MeasureWorker(graph.to_dict(), inputs, device="cuda", seed=options.seed,
                             timeout_s=options.trial_timeout_s)
    from fusionsearch.graph.reference import random_inputs
    from fusionsearch.measure.judge import InProcessJudge

    if inputs is None:
        inputs = random_inputs(graph, seed=options.seed, device="cuda")
    return InProcessJudge(graph, inputs, options.seed)


def _retime_finalists(study: optuna.Study, space: Space, judge: Any, count: int,
                      candidate: Callable[[Plan], Any]) -> list[dict[str, Any]]:
    """The `count` fastest measured plans (distinct), timed again side by side by the judge (as `candidate`
    gives them: built when they were measured): per plan its trial number and parameters, first figure and
    final figure (None where it could not be timed again)."""
    complete = sorted((t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None),
                      key=lambda t: t.value)
    chosen: dict[str, Any] = {}
    plans: list[Plan] = []
    for t in complete:
        plan = space.plan(t.params)
        if chosen.setdefault(plan.to_json(), t) is t:
            plans.append(plan)
        if len(chosen) == count:
            break
    if len(chosen) < 2:
        return []
    try:
        final = judge.retime([candidate(p) for p in plans], 5)
    except Exception as e:  # the first figures stand
        log.warning("re-timing the finalists failed: %s", failure_reason(e, 200))
        return []
    return [{"trial": t.number, "params": dict(t.params), "first_us": float(t.value), "final_us": us}
            for t, us in zip(chosen.values(), final, strict=True)]


def _best(study: optuna.Study, space: Space) -> tuple[Plan, float]:
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None]
    if not complete:
        raise FusionSearchError("no trial produced a valid plan; the commonest reasons: "
                                f"{commonest_reasons(study.trials)} (every trial's: fusionsearch explain)")
    best = min(complete, key=lambda t: t.value)
    return space.plan(best.params), float(best.value)


def commonest_reasons(trials: Sequence[optuna.trial.FrozenTrial], top: int = 3) -> str:
    """The `top` commonest trial reasons with their counts, for an error that must say why without a second
    command (a suite row keeps only the error's text)."""
    counts = Counter((t.user_attrs.get("reason") or str(t.state.name).lower())[:160] for t in trials)
    return "; ".join(f"{n}x {reason}" for reason, n in counts.most_common(top)) or "no trial ran"
