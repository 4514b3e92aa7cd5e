"""One trial = one plan: the plan from the trial's parameters, screened (legality, the prologue bytes rule, the
cost model's prediction against the best measured plan's), then judged by the backend (gpu: validate and time;
interpret: validate a shrunk copy in Triton's interpreter; model: the prediction). Every end is a TrialOutcome;
the trial loop records it (outcome.tell)."""

from __future__ import annotations

import os
from typing import Any

import optuna

from fusionsearch import settings
from fusionsearch.codegen.runtime import build
from fusionsearch.errors import CostModelError, FusionSearchError, PlanError, failure_reason
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.measure.judge import Judgement
from fusionsearch.measure.requests import Candidate
from fusionsearch.plan import FusedMatmulKernel, Plan, prologue_bytes_ok
from fusionsearch.search.options import MODEL_FILES, SearchOptions
from fusionsearch.search.outcome import TrialOutcome
from fusionsearch.search.progress import Watch
from fusionsearch.search.space import Space
from fusionsearch.settings import interpreter


def load_cost_model(choice: str) -> Any:
    """The learned model to prune with, or None for the analytic model."""
    if choice == "analytic" or (choice == "auto" and not os.path.exists(settings.current().model_path)):
        return None  # no shipped model: do not pay scikit-learn's import on every search
    from fusionsearch.costmodel.learned import load_cached, load_default

    if choice.endswith(MODEL_FILES):
        return load_cached(choice)
    model = load_default()
    if model is None and choice == "learned":
        raise FusionSearchError("no shipped learned cost model matches this device; train one "
                                "(fusionsearch costmodel collect/train) and pass its file")
    return model


def trained_profile(path: str) -> Any:
    """The hardware profile of the GPU the model file at `path` was trained on (its rows' features were
    computed with it); None when the file cannot be loaded or names none (loading it again reports why)."""
    from fusionsearch.costmodel.hardware import Hardware
    from fusionsearch.costmodel.learned import load_cached

    try:
        profile = (load_cached(path).hardware_ or {}).get("profile")
        return Hardware.from_dict(profile) if profile else None
    except (CostModelError, ValueError):
        return None


def _study_refit(model: Any, options: SearchOptions, backend: str, hw: Any) -> Any:
    """The refitter of the learned model when this search measures on the GPU; None otherwise. Its first
    correction comes after FIRST_REFIT measured plans (sooner when refit_every is smaller), then every
    refit_every."""
    if model is None or backend != "gpu" or options.refit_every == 0:
        return None
    from fusionsearch.costmodel.refit import FIRST_REFIT, StudyRefit

    return StudyRefit(model, hw, options.refit_every, first=min(FIRST_REFIT, options.refit_every))


class Objective:
    """One trial = one plan: suggest, build, estimate, prune or judge. Plain state, no closures."""

    def __init__(self, graph: OpGraph, space: Space, options: SearchOptions, backend: str, hw: Any) -> None:
        from fusionsearch.costmodel.analytic import estimate

        self.graph, self.space, self.options, self.backend, self.hw = graph, space, options, backend, hw
        self.estimate = estimate
        self.model = load_cost_model(options.cost_model)
        self.refit = _study_refit(self.model, options, backend, hw)
        self.measured_plans: list[Plan] = []
        self.judge: Any = None  # the gpu backend's judge (measure.judge.InProcessJudge or isolate.MeasureWorker)
        self.best_measured_prediction = float("inf")
        self.best_value = float("inf")
        self.tag = options.worker_tag  # recorded on every trial this process runs, among several workers
        self.watch = Watch()  # the search's deadline and bar, as a long step of a trial sees them (session.py)
        self._checked: dict[str, TrialOutcome | None] = {}
        self._small: OpGraph | bool | None = None
        self._keys: dict[str, str] = {}  # plan JSON -> its generated module's content key (candidate)

    def suggest(self, trial: optuna.Trial) -> dict[str, str]:
        return self.space.suggest(trial)

    def __call__(self, trial: optuna.Trial) -> TrialOutcome:
        prepared = self.prepare(trial)
        return prepared if isinstance(prepared, TrialOutcome) else self.finish(trial, prepared)

    def prepare(self, trial: optuna.Trial) -> Plan | TrialOutcome:
        """Suggest, build and screen a trial's plan before anything compiles: the plan, or why it is pruned."""
        params = self.suggest(trial)
        if self.tag:
            trial.set_user_attr("worker", self.tag)
        try:
            plan = self.space.plan(params)
        except PlanError as e:
            return TrialOutcome.pruned("illegal", str(e))
        trial.set_user_attr("plan", plan.to_json())
        refused = self.bytes_rule_refuses(plan)
        if refused:
            return TrialOutcome.pruned("bytes rule", refused)
        predicted = self.predict(plan)
        trial.set_user_attr("predicted_us", predicted)
        if predicted > self.best_measured_prediction * self.options.prune_margin:
            trial.report(predicted, 0)  # the pruned trial's value: samplers see how far off it was
            return TrialOutcome.pruned("cost model", f"predicted {predicted:.1f} us, more than "
                                       f"{self.options.prune_margin}x the best measured plan's prediction")
        return plan

    def candidate(self, plan: Plan) -> Candidate:
        """The plan as the compile workers and the judge take it: its JSON and the content key of its module,
        generated here once per distinct plan (kept in the kernel cache, where the workers read it back), so
        that neither worker generates it again; raises what generating raises."""
        plan_json = plan.to_json()
        key = self._keys.get(plan_json)
        if key is None:
            key = self._keys[plan_json] = build(plan).key
        return Candidate(plan_json, key)

    def finish(self, trial: optuna.Trial, plan: Plan, compile_failure: str = "",
               candidate: Candidate | None = None) -> TrialOutcome:
        """Judge a prepared plan by the backend (on the GPU, as `candidate`: built already for the compile
        pool); a compile failure found by a compile worker fails the trial."""
        if compile_failure:
            return TrialOutcome.failed(f"compile failed: {compile_failure}")
        predicted = trial.user_attrs["predicted_us"]
        if self.backend == "model":
            value = predicted
        elif self.backend == "interpret":
            refused = self._check_interpreted(plan)
            if refused is not None:
                return refused
            value = predicted
        else:
            version = self.model_version
            measured = self._measure(trial, plan, candidate)
            if measured.status != "ok":
                return measured
            assert measured.time_us is not None
            value = measured.time_us
            if self.model_version != version:
                predicted = self.best_measured_prediction  # the refitted model's bar, this plan included
        if value < self.best_value:
            self.best_value = value
        self.best_measured_prediction = min(self.best_measured_prediction, predicted)
        return TrialOutcome.ok(value, self.backend)

    def batch_limit(self, wanted: int) -> int:
        """How many trials to draw before any of them is measured, of `wanted`: no more than the measured plans
        until the next refit, so that the plans after a correction are drawn by the corrected model."""
        return wanted if self.refit is None else max(1, min(wanted, self.refit.until_due()))

    @property
    def model_version(self) -> int:
        """How many times the learned model was corrected: the ranked sampler re-ranks when it changes."""
        return self.refit.refits if self.refit is not None else 0

    def bytes_rule_refuses(self, plan: Plan) -> str:
        """Why the bytes rule refuses the plan's prologues ('' when it does not, or is lifted)."""
        if self.options.bytes_rule is None:
            return ""
        for k in plan.kernels:
            if isinstance(k, FusedMatmulKernel):
                for side, nodes in (("A", k.prologue_a), ("B", k.prologue_b)):
                    if nodes and not prologue_bytes_ok(self.graph, k.matmul, side, nodes, self.options.bytes_rule):
                        return (f"prologue {side} of {k.matmul} reads more bytes than the unfused operand "
                                f"(factor > {self.options.bytes_rule})")
        return ""

    def predict(self, plan: Plan) -> float:
        """The plan's predicted time (µs): the learned model where one matches this GPU, else the analytic one."""
        if self.model is not None:
            from fusionsearch.costmodel.pricing import plan_time_us

            return float(plan_time_us(self.model, plan, self.hw))
        return self.estimate(plan, self.hw).time_us

    def _check_interpreted(self, plan: Plan) -> TrialOutcome | None:
        """Validate the plan's decisions on a shrunk graph in the interpreter (cached per plan): None when valid
        (or the graph does not shrink, so nothing is checked), else the invalid outcome."""
        from fusionsearch.graph.shrink import shrink
        from fusionsearch.measure.validate import validate

        key = plan.to_json()
        if key not in self._checked:
            if self._small is None:
                self._small = shrink(self.graph) or False
            if self._small is False:
                self._checked[key] = None
            else:
                assert isinstance(self._small, OpGraph)
                small_plan = Plan(self._small, plan.kernels, plan.recompute)
                with interpreter():
                    v = validate(small_plan, self._small, device="cpu", seed=self.options.seed)
                self._checked[key] = None if v.ok else TrialOutcome.invalid(v.reason)
        return self._checked[key]

    def _measure(self, trial: optuna.Trial, plan: Plan, candidate: Candidate | None = None) -> TrialOutcome:
        """Judge the plan on the GPU: its measured time, or why it failed (wrong numbers are a failure here, as
        a fault or a timeout is: the judge tells them apart only in the reason)."""
        if candidate is None:
            try:
                candidate = self.candidate(plan)
            except Exception as e:  # its source does not generate: the plan fails as a compile worker says
                return TrialOutcome.failed(f"compile failed: {failure_reason(e)}")
        j = self.judge.judge(candidate, kernels=self.refit is not None)
        if j.rel_err is not None:
            trial.set_user_attr("rel_err", j.rel_err)
        if not j.ok:
            return TrialOutcome.failed(j.reason)
        trial.set_user_attr("measured_us", j.median_us)
        if self.refit is not None:
            self._learn(trial, plan, j)
        return TrialOutcome.ok(j.median_us, self.backend)

    def _learn(self, trial: optuna.Trial, plan: Plan, j: Judgement) -> None:
        """Learn from the measured plan's kernels timed alone; refit when due and re-price the measured plans
        under the new model, so the pruning bar stays in one model's units."""
        assert self.refit is not None
        if j.kernel_us is None:  # the plan was measured whole; without its kernels alone it teaches nothing
            trial.set_user_attr("refit", f"kernels not timed alone: {j.kernel_error}")
            return
        kernel_us = list(j.kernel_us)
        trial.set_user_attr("kernel_us", kernel_us)
        self.measured_plans.append(plan)
        if self.refit.add(plan, kernel_us):
            from fusionsearch.costmodel.pricing import plan_times_us

            self.model = self.refit.refit()
            self.best_measured_prediction = min(plan_times_us(self.model, self.measured_plans, self.hw))
            trial.set_user_attr("refit", f"model refitted on {self.refit.measured_kernels} kernels of this search")
