"""The Optuna study: define-by-run over fusion options and tile configs, pruned by the cost model, judged
by the backend (gpu: validate + time; interpret: validate a shrunk copy in Triton's interpreter, rank by the
model; model: the cost model alone). Optuna stays inside this module."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
import torch

from fusionsearch.errors import FusionSearchError, PlanError, SpecError, failure_reason
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.measure.judge import Judgement
from fusionsearch.plan import Plan, TemplateKernel, prologue_bytes_ok
from fusionsearch.search.identity import study_identity
from fusionsearch.search.ranked import PlanRanking
from fusionsearch.search.result import TrialRecord, TuneResult
from fusionsearch.search.slots import Retry, Slots, open_study
from fusionsearch.search.space import Space, enumerate_space, seed_plans
from fusionsearch.search.workers import check_workers, run_workers, worker_count

log = logging.getLogger("fusionsearch.search")

BACKENDS = ("auto", "gpu", "interpret", "model")
SAMPLERS = ("auto", "ranked", "tpe", "brute", "random")
MODEL_FILES = (".npz", ".skops")  # learned cost model files (costmodel.learned.load reads both)


@dataclass(frozen=True)
class SearchOptions:
    """Settings of one search. `prune_margin`: a trial predicted slower than the best measured trial's
    prediction times this factor is pruned without compiling. `bytes_rule`: the prologue bytes factor
    (None lifts the rule so that measurement decides)."""

    trials: int = 64
    backend: str = "auto"
    sampler: str = "auto"  # auto: ranked with a learned cost model, tpe with the analytic one
    storage: str | None = None
    study_name: str | None = None
    seed: int = 0
    timeout: float | None = None
    prune_margin: float = 1.5
    bytes_rule: float | None = 1.1
    max_configs: int = 48
    progress: bool = False
    compile_workers: int | None = None  # gpu backend: parallel compile processes (None: cores - 1, at most 8; 0: none)
    heartbeat_s: int = 10  # RDB storages: a worker silent for 3 heartbeats has its trial failed and retried
    cost_model: str = "auto"  # auto: the shipped learned model when it matches this GPU, else analytic
    refit_every: int = 4  # gpu backend with a learned model: correct it on this search's kernels every N plans
    isolate: bool = True  # gpu backend: measure in a worker process, so a faulting kernel fails only its trial
    trial_timeout_s: float = 300.0  # gpu backend, isolated: a plan not judged within this fails its trial
    workers: int | str = 1  # worker processes on the study: 'auto' = one per visible GPU (search/workers.py)
    worker_tag: str = ""  # set in each worker: recorded on the trials it runs (user attr 'worker')
    # ranked sampler with a learned model: the N plans predicted fastest are compiled for the GPU on the CPU
    # and priced again with their registers, spills and shared memory (0: never, the default: on the reference
    # workloads the blind order was the better one in every replay, README "The live search's ranking")
    compile_ranked: int = 0
    # gpu backend: the N fastest measured plans are timed again side by side (interleaved rounds) at the end
    # and the fastest by that wins: a plan's first figure can be a lucky moment of the GPU (0 or 1: off)
    finalists: int = 3
    # each matmul may also run in PyTorch's own matmul (cuBLAS) where nothing is fused into it, so the search
    # can always fall back to what eager PyTorch runs (False: Triton templates only)
    library: bool = True
    # what the graph is called in the study's records (`fusionsearch studies`, a refused reuse); the CLI names
    # the workload and its shape or the spec file; empty: a summary of the graph's ops
    graph_name: str = ""

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise SpecError(f"backend {self.backend!r} is not one of {', '.join(BACKENDS)}")
        if self.cost_model not in ("auto", "analytic", "learned") and not self.cost_model.endswith(MODEL_FILES):
            raise SpecError(f"cost_model {self.cost_model!r}: use auto, analytic, learned or a model file (.npz, "
                            ".skops)")
        if isinstance(self.compile_ranked, bool) or not isinstance(self.compile_ranked, int) or self.compile_ranked < 0:
            raise SpecError(f"compile_ranked must be a whole number of plans (0: none), got {self.compile_ranked!r}")
        if not isinstance(self.library, bool):
            raise SpecError(f"library must be True or False, got {self.library!r}")
        if isinstance(self.finalists, bool) or not isinstance(self.finalists, int) or self.finalists < 0:
            raise SpecError(f"finalists must be a whole number of plans (0: none), got {self.finalists!r}")
        if isinstance(self.refit_every, bool) or not isinstance(self.refit_every, int) or self.refit_every < 0:
            raise SpecError(f"refit_every must be a whole number of measured plans (0: never), "
                            f"got {self.refit_every!r}")
        if self.sampler not in SAMPLERS:
            raise SpecError(f"sampler {self.sampler!r} is not one of {', '.join(SAMPLERS)}")
        if isinstance(self.trials, bool) or not isinstance(self.trials, int) or self.trials < 1:
            raise SpecError(f"trials must be a positive integer, got {self.trials!r}")
        check_workers(self.workers)
        if not _positive(self.trial_timeout_s):
            raise SpecError(f"trial_timeout_s must be a positive number of seconds, got {self.trial_timeout_s!r}")
        if not _whole(self.seed) or not 0 <= self.seed < 2**32:  # numpy's generators (Optuna's samplers) take these
            raise SpecError(f"seed must be a whole number from 0 to 2**32 - 1, got {self.seed!r}")
        if self.timeout is not None and not _positive(self.timeout):
            raise SpecError(f"timeout must be a positive number of seconds (None: no limit), got {self.timeout!r}")
        if self.bytes_rule is not None and not _positive(self.bytes_rule):
            raise SpecError(f"bytes_rule must be a positive factor (None lifts the rule), got {self.bytes_rule!r}")
        if not _positive(self.prune_margin, finite=False):
            raise SpecError(f"prune_margin must be a positive factor, got {self.prune_margin!r}")
        if not _whole(self.max_configs) or self.max_configs < 1:
            raise SpecError(f"max_configs must be a positive whole number, got {self.max_configs!r}")
        if not _whole(self.heartbeat_s) or self.heartbeat_s < 1:
            raise SpecError(f"heartbeat_s must be a positive whole number of seconds, got {self.heartbeat_s!r}")
        if self.study_name is not None and (not isinstance(self.study_name, str) or not self.study_name.strip()):
            raise SpecError(f"study_name must name a study (None: one per graph and backend), got {self.study_name!r}")
        if self.compile_workers is not None and (not _whole(self.compile_workers) or self.compile_workers < 0):
            raise SpecError(f"compile_workers must be a whole number (0: none; None: automatic), "
                            f"got {self.compile_workers!r}")


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive(value: object, finite: bool = True) -> bool:
    """A number of seconds or a factor: above zero, not NaN, and finite unless `finite` is False."""
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0 and (
        not finite or value < float("inf"))


def _cost_model(choice: str) -> Any:
    """The learned model to prune with, or None for the analytic model."""
    import os

    from fusionsearch.costmodel.hardware import DEFAULT_MODEL_PATH

    if choice == "analytic" or (choice == "auto" and not os.path.exists(DEFAULT_MODEL_PATH)):
        return None  # no shipped model: do not pay scikit-learn's import on every search
    from fusionsearch.costmodel.learned import load, load_default

    if choice.endswith(MODEL_FILES):
        return load(choice)
    model = load_default()
    if model is None and choice == "learned":
        raise FusionSearchError("no shipped learned cost model matches this device; train one "
                                "(fusionsearch costmodel collect/train) and pass its file")
    return model


def _study_refit(model: Any, options: SearchOptions, backend: str, hw: Any) -> Any:
    """The refitter of the learned model when this search measures on the GPU; None otherwise."""
    if model is None or backend != "gpu" or options.refit_every == 0:
        return None
    from fusionsearch.costmodel.refit import StudyRefit

    return StudyRefit(model, hw, options.refit_every)


def resolve_backend(backend: str) -> str:
    if backend == "auto":
        return "gpu" if torch.cuda.is_available() else "interpret"
    if backend == "gpu" and not torch.cuda.is_available():
        raise FusionSearchError("backend 'gpu' needs a CUDA GPU; use --backend interpret or model on this machine")
    return backend


# What opening an RDB storage raises while another worker creates the same schema (PostgreSQL: a row or a
# table created twice); opening again succeeds.
SCHEMA_RACES = ("IntegrityError", "UniqueViolation", "DuplicateTable")


def make_storage(url: str | None, heartbeat_s: int = 10) -> Any:
    """In memory when None; 'journal:PATH' for a journal file; any RDB URL (sqlite:///, postgresql://).

    RDB storages get a heartbeat: a trial whose worker stops beating for 3 heartbeats (killed, machine lost)
    is failed and laid out again (slots.Retry). Journal files have no heartbeat: slots.Slots.recover finds the
    trials of dead workers on this host by the owner each claim records."""
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)  # heartbeat, journal
    if url is None:
        return None
    if url.startswith("journal:"):
        return _journal(url.removeprefix("journal:"))
    if "://" not in url:
        raise SpecError(f"storage {redact(url)!r} is not a URL: use sqlite:///file.db, postgresql://..., "
                        "or journal:file.log")
    for attempt in range(5):
        try:
            sqlite = url.startswith("sqlite")
            kwargs: dict[str, Any] = {"engine_kwargs": {"connect_args": {"timeout": 60}}} if sqlite else {}
            return optuna.storages.RDBStorage(url, heartbeat_interval=heartbeat_s, grace_period=3 * heartbeat_s,
                                              heartbeat_stale_trial_callback=Retry(), **kwargs)
        except Exception as e:  # a bad URL or unreachable server is the user's to fix
            if attempt < 4 and ("sqlite" in url or any(race in repr(e) for race in SCHEMA_RACES)):
                time.sleep(0.5)  # another worker is creating the schema at this moment
                continue
            why = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
            if "DB access module" in why and url.startswith("postgresql"):
                why = "no PostgreSQL driver: pip install 'psycopg[binary]' (or fusionsearch's [postgres] extra)"
            raise SpecError(f"storage {redact(url)} cannot be opened: {why}") from None
    raise AssertionError("unreachable")


def _journal(path: str) -> Any:
    """A journal file's storage; SpecError when the path cannot hold one (a directory, a missing directory) or the
    file is not an Optuna journal (its first line is not a journal record, its text not UTF-8)."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    where = f"storage journal:{path}"
    if not path:
        raise SpecError("storage journal: names no file; write journal:PATH")
    if os.path.isdir(path):
        raise SpecError(f"{where} is a directory; name a journal file (journal:DIR/study.log)")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise SpecError(f"{where}: no such directory {parent!r}")
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 20)
    except FileNotFoundError:
        first = b""
    except OSError as e:
        raise SpecError(f"{where} cannot be read ({e.strerror})") from None
    if first:
        try:
            record = json.loads(first.decode("utf-8"))
        except ValueError:
            record = None
        if not isinstance(record, dict) or "op_code" not in record:
            raise SpecError(f"{where} is not an Optuna journal (its first line is not a journal record); name a "
                            "new file or one a search wrote") from None
    try:
        return JournalStorage(JournalFileBackend(path))
    except OSError as e:
        raise SpecError(f"{where} cannot be opened ({e.strerror})") from None
    except (ValueError, KeyError, TypeError) as e:  # a record that does not replay
        raise SpecError(f"{where} is not a readable Optuna journal ({str(e)[:200] or type(e).__name__})") from None


def redact(url: str) -> str:
    """The URL with any password replaced by ***."""
    if "://" in url and "@" in url.split("://", 1)[1]:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}"
    return url


class _BruteForce(optuna.samplers.BruteForceSampler):
    """Exhaustive search that records exhaustion instead of calling study.stop(), which only works inside
    study.optimize(); the claim loop stops on `exhausted`."""

    exhausted = False

    def after_trial(self, study: optuna.Study, trial: Any, state: Any, values: Any) -> None:
        try:
            super().after_trial(study, trial, state, values)
        except RuntimeError:
            self.exhausted = True


def _sampler_name(options: SearchOptions, objective: Objective) -> str:
    if options.sampler != "auto":
        return options.sampler
    return "ranked" if objective.model is not None else "tpe"


def _sampler(name: str, seed: int, objective: Objective) -> optuna.samplers.BaseSampler:
    if name == "brute":
        return _BruteForce(seed=seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "ranked":
        ranking = PlanRanking(objective.space, objective.hw, lambda: objective.model,
                              lambda plan: not objective.bytes_rule_refuses(plan), seed,
                              compile_top=objective.options.compile_ranked, arch=_arch())
        return _RankedSampler(ranking, lambda: objective.model_version, seed)
    return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=8)


def _arch() -> int:
    """The compute capability kernels are compiled for to read their resources: this GPU's, else sm_90."""
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return 10 * major + minor
    return 90


def _key(params: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, str(v)) for k, v in params.items()))


class _RankedSampler(optuna.samplers.BaseSampler):
    """Optuna sampler over a PlanRanking: a trial's parameters are those of the fastest-predicted plan not
    yet taken by any trial of the study (re-ranked when `version_of()` changes, i.e. the model was refitted);
    once every candidate is taken, parameters are drawn at random."""

    def __init__(self, ranking: PlanRanking, version_of: Callable[[], int], seed: int = 0) -> None:
        self.ranking, self.version_of = ranking, version_of
        self._order: list[dict[str, str]] | None = None
        self._version: int | None = None
        self._picked: dict[int, dict[str, str] | None] = {}
        self._random = optuna.samplers.RandomSampler(seed=seed)

    def infer_relative_search_space(self, study: optuna.Study, trial: Any) -> dict[str, Any]:
        return {}

    def sample_relative(self, study: optuna.Study, trial: Any, search_space: dict[str, Any]) -> dict[str, Any]:
        return {}

    def sample_independent(self, study: optuna.Study, trial: Any, param_name: str, param_distribution: Any) -> Any:
        if trial.number not in self._picked:
            self._picked[trial.number] = self._next(study)
        params = self._picked[trial.number]
        if params is None or param_name not in params:
            return self._random.sample_independent(study, trial, param_name, param_distribution)
        return params[param_name]

    def _next(self, study: optuna.Study) -> dict[str, str] | None:
        version = self.version_of()
        if self._order is None or version != self._version:
            self._order, self._version = self.ranking.order(), version
        taken = {_key(t.params) for t in study.get_trials(deepcopy=False)}
        taken |= {_key(p) for p in self._picked.values() if p is not None}
        return next((p for p in self._order if _key(p) not in taken), None)


class Objective:
    """One trial = one plan: suggest, build, estimate, prune or judge. Plain state, no closures."""

    def __init__(self, graph: OpGraph, space: Space, options: SearchOptions, backend: str, hw: Any) -> None:
        from fusionsearch.costmodel.analytic import estimate

        self.graph, self.space, self.options, self.backend, self.hw = graph, space, options, backend, hw
        self.estimate = estimate
        self.model = _cost_model(options.cost_model)
        self.refit = _study_refit(self.model, options, backend, hw)
        self.measured_plans: list[Plan] = []
        self.judge: Any = None  # the gpu backend's judge (measure.judge.InProcessJudge or isolate.MeasureWorker)
        self.best_measured_prediction = float("inf")
        self.best_value = float("inf")
        self.tag = options.worker_tag  # recorded on every trial this process runs, among several workers
        self._checked: dict[str, tuple[bool, str]] = {}
        self._small = None

    def suggest(self, trial: optuna.Trial) -> dict[str, str]:
        return self.space.suggest(trial)

    def __call__(self, trial: optuna.Trial) -> float:
        return self.finish(trial, self.prepare(trial))

    def prepare(self, trial: optuna.Trial) -> Plan:
        """Suggest, build and screen a trial's plan before anything compiles; raises TrialPruned."""
        params = self.suggest(trial)
        if self.tag:
            trial.set_user_attr("worker", self.tag)
        try:
            plan = self.space.plan(params)
        except PlanError as e:
            return self._prune(trial, "illegal", str(e))
        trial.set_user_attr("plan", plan.to_json())
        refused = self.bytes_rule_refuses(plan)
        if refused:
            return self._prune(trial, "bytes rule", refused)
        predicted = self.predict(plan)
        trial.set_user_attr("predicted_us", predicted)
        if predicted > self.best_measured_prediction * self.options.prune_margin:
            trial.report(predicted, 0)
            return self._prune(trial, "cost model", f"predicted {predicted:.1f} us, more than "
                               f"{self.options.prune_margin}x the best measured plan's prediction")
        return plan

    def finish(self, trial: optuna.Trial, plan: Plan, compile_failure: str = "") -> float:
        """Judge a prepared plan by the backend; a compile failure found by a worker fails the trial."""
        if compile_failure:
            return self._prune(trial, "failed", f"compile failed: {compile_failure}")
        predicted = trial.user_attrs["predicted_us"]
        if self.backend == "model":
            value = predicted
        elif self.backend == "interpret":
            ok, reason = self._check_interpreted(plan)
            if not ok:
                return self._prune(trial, "invalid", reason)
            value = predicted
        else:
            version = self.model_version
            value = self._measure(trial, plan)
            if value == float("inf"):
                return self._prune(trial, "failed", trial.user_attrs.get("reason", ""))
            if self.model_version != version:
                predicted = self.best_measured_prediction  # the refitted model's bar, this plan included
        trial.set_user_attr("status", {"gpu": "measured", "interpret": "validated", "model": "estimated"}[self.backend])
        if value < self.best_value:
            self.best_value = value
        self.best_measured_prediction = min(self.best_measured_prediction, predicted)
        return value

    @property
    def model_version(self) -> int:
        """How many times the learned model was corrected: the ranked sampler re-ranks when it changes."""
        return self.refit.refits if self.refit is not None else 0

    def bytes_rule_refuses(self, plan: Plan) -> str:
        """Why the bytes rule refuses the plan's prologues ('' when it does not, or is lifted)."""
        if self.options.bytes_rule is None:
            return ""
        for k in plan.kernels:
            if isinstance(k, TemplateKernel):
                for side, nodes in (("A", k.prologue_a), ("B", k.prologue_b)):
                    if nodes and not prologue_bytes_ok(self.graph, k.matmul, side, nodes, self.options.bytes_rule):
                        return (f"prologue {side} of {k.matmul} reads more bytes than the unfused operand "
                                f"(factor > {self.options.bytes_rule})")
        return ""

    def predict(self, plan: Plan) -> float:
        """The plan's predicted time (µs): the learned model where one matches this GPU, else the analytic one."""
        if self.model is not None:
            from fusionsearch.costmodel.learned import plan_time_us

            return float(plan_time_us(self.model, plan, self.hw))
        return self.estimate(plan, self.hw).time_us

    def _prune(self, trial: optuna.Trial, status: str, reason: str) -> float:
        trial.set_user_attr("status", status)
        trial.set_user_attr("reason", reason)
        raise optuna.TrialPruned(reason)

    def _check_interpreted(self, plan: Plan) -> tuple[bool, str]:
        """Validate the plan's decisions on a shrunk graph in the interpreter (cached per plan)."""
        from fusionsearch.graph.shrink import shrink
        from fusionsearch.measure.validate import validate

        key = plan.to_json()
        if key not in self._checked:
            if self._small is None:
                self._small = shrink(self.graph) or False
            if self._small is False:
                self._checked[key] = (True, "not checked: the graph does not shrink")
            else:
                small_plan = Plan(self._small, plan.kernels, plan.recompute)
                with interpreter():
                    v = validate(small_plan, self._small, device="cpu", seed=self.options.seed)
                self._checked[key] = (v.ok, v.reason)
        return self._checked[key]

    def _measure(self, trial: optuna.Trial, plan: Plan) -> float:
        j = self.judge.judge(plan.to_json(), kernels=self.refit is not None)
        if j.rel_err is not None:
            trial.set_user_attr("rel_err", j.rel_err)
        if not j.ok:
            trial.set_user_attr("reason", j.reason)
            return float("inf")
        trial.set_user_attr("measured_us", j.median_us)
        if self.refit is not None:
            self._learn(trial, plan, j)
        return j.median_us

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
            from fusionsearch.costmodel.learned import plan_times_us

            self.model = self.refit.refit()
            self.best_measured_prediction = min(plan_times_us(self.model, self.measured_plans, self.hw))
            trial.set_user_attr("refit", f"model refitted on {self.refit.measured_kernels} kernels of this search")


class interpreter:
    """Run Triton in its CPU interpreter for the duration (the flag is read at launch time)."""

    def __enter__(self) -> None:
        import os

        self._old = os.environ.get("TRITON_INTERPRET")
        os.environ["TRITON_INTERPRET"] = "1"

    def __exit__(self, *exc: object) -> None:
        import os

        if self._old is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = self._old


def run_study(graph: OpGraph, options: SearchOptions, inputs: Sequence[torch.Tensor] | None = None,
              hw: Any = None, judge: Any = None) -> TuneResult:
    """Search the graph's fusion and tile-config space; returns the best plan and every trial. `judge`
    (an object with judge(plan_json, kernels) -> Judgement and close()) replaces the GPU's: the search then
    measures through it whatever the machine has."""
    from fusionsearch.costmodel.hardware import Hardware

    if judge is not None and options.backend not in ("auto", "gpu"):
        raise SpecError(f"a judge measures plans: it needs backend 'gpu' (or 'auto'), not {options.backend!r}")
    backend = "gpu" if judge is not None else resolve_backend(options.backend)
    count = 1 if judge is not None else worker_count(options.workers, backend)
    hw = hw or Hardware.detect()
    space = search_space(graph, options, hw)
    single = possible_plans(space) == 1
    trials = 1 if single else options.trials  # one plan: every further trial would judge it again
    if single:
        count = 1
        log.info("1 possible plan: 1 trial (of %d asked)", options.trials)
    own_storage = None
    if count > 1 and options.storage is None:  # the workers share a study: SQLite, whose heartbeat retries
        own_storage = tempfile.mkdtemp(prefix="fusionsearch-study-")  # the trials of a worker that dies
    url = f"sqlite:///{os.path.join(own_storage, 'study.db')}" if own_storage else options.storage
    try:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        storage = make_storage(url, options.heartbeat_s) or optuna.storages.InMemoryStorage()
        name = options.study_name or f"fusionsearch-{graph.signature_hash()}-{backend}"
        objective = Objective(graph, space, options, backend, hw)
        sampler = _sampler_name(options, objective)
        first = [] if sampler == "ranked" else seed_plans(space)  # ranked: its first trial is the model's best
        identity = study_identity(graph, options.graph_name, space, backend, _priced_by(objective.model), hw)
        _, slots = open_study(name, storage, _sampler(sampler, options.seed, objective), trials, first, identity,
                              redact(url) if url and not own_storage else "", url)
        start = time.time()
        if count > 1:
            shared = dataclasses.replace(options, storage=url, study_name=name, backend=backend, trials=trials)
            exits = run_workers(graph.to_dict(), shared, inputs, count, backend, options.progress)
            for e in exits:
                if e.code != 0:
                    log.warning("search worker %s exited with code %d: %s", e.tag, e.code, e.stderr_tail)
            # Join the study here too: whatever a dead worker left waiting (or retried) is run now.
            objective.tag = "main"
        res = _search(graph, options, inputs, judge, backend, hw, space, slots, objective, sampler, start,
                      None if own_storage else options.storage)
        if single:
            res.extra["possible_plans"] = 1
        return res
    finally:
        if own_storage:
            shutil.rmtree(own_storage, ignore_errors=True)


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


def _priced_by(model: Any) -> str:
    """Which cost model prices the trials, in the words results and study records use."""
    return "analytic" if model is None else f"learned ({(model.hardware_ or {}).get('name', 'unknown GPU')})"


def _search(graph: OpGraph, options: SearchOptions, inputs: Sequence[torch.Tensor] | None, judge: Any,
            backend: str, hw: Any, space: Space, slots: Slots, objective: Objective, sampler: str, start: float,
            storage_url: str | None) -> TuneResult:
    """Run the study's waiting trials in this process, then the result over all of the study's trials."""
    study, name = slots.study, slots.study.study_name
    for t in study.trials:  # a resumed study: its measured trials set the pruning bar
        if t.state == optuna.trial.TrialState.COMPLETE and "predicted_us" in t.user_attrs:
            objective.best_measured_prediction = min(objective.best_measured_prediction, t.user_attrs["predicted_us"])
    bar = _progress(slots.remaining(), options.progress)
    pool = None
    if backend == "gpu" and judge is None:
        judge = _gpu_judge(graph, inputs, options)
        if options.compile_workers != 0:
            from fusionsearch.measure.isolate import CompilePool

            pool = CompilePool(options.compile_workers or None)
    objective.judge = judge
    finals: list[dict[str, Any]] = []
    try:
        _work(slots, objective, None if options.timeout is None else start + options.timeout, bar, pool)
        _say_unfinished(slots)
        if backend == "gpu" and options.finalists > 1 and hasattr(judge, "retime"):
            finals = _retime_finalists(study, space, judge, options.finalists)
    finally:
        if pool is not None:
            pool.close()
        if judge is not None:
            judge.close()
    if bar:
        bar.close()
    records = [TrialRecord.from_trial(t) for t in study.trials]
    best = _best(study, space)
    timed = [f for f in finals if f["final_us"] is not None]
    if len(timed) > 1:  # side by side, the finalists' order is the one to trust
        pick = min(timed, key=lambda f: f["final_us"])
        best = (space.plan(pick["params"]), pick["final_us"])
    priced_by = _priced_by(objective.model)
    return TuneResult(graph=graph, space=space, best=best[0], best_us=best[1], trials=records, backend=backend,
                      hardware=hw, study_name=name, elapsed_s=time.time() - start,
                      storage=redact(storage_url) if storage_url else None, cost_model=priced_by,
                      sampler=sampler, extra={"finalists": finals} if finals else {})


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


def _work(slots: Slots, objective: Objective, deadline: float | None, bar: _Progress | None,
          pool: Any = None) -> None:
    """Claim and run waiting slots until none is left (or the deadline passes). With a compile pool, trials are
    claimed in batches: the plans that survive pruning compile in parallel, then are measured in turn.

    Slots are laid out as they are needed; the trials of dead workers are laid out again (RDB: stale heartbeats;
    journal: owners gone from this host), and a worker that finds nothing waiting waits while another worker's
    trial may still be recovered (RDB: 4 grace periods; journal: while its worker on this host runs)."""
    study, storage = slots.study, slots.storage
    batch_size = pool.workers if pool is not None else 1
    heartbeat = getattr(storage, "heartbeat_interval", None)
    waiting_since: float | None = None
    low = True  # few slots waiting: lay out more before claiming
    while deadline is None or time.time() < deadline:
        if getattr(study.sampler, "exhausted", False):
            return
        if heartbeat:
            with slots.lock():  # SQLite: two workers must not both fail (and retry) one stale trial
                optuna.storages.fail_stale_trials(study)  # lays out again the trials of workers that died
        slots.recover()
        if low:
            slots.top_up()
        batch, beats = [], {}
        for _ in range(batch_size):
            trial_id, low = slots.claim()
            if trial_id is None:
                break
            trial = optuna.trial.Trial(study, trial_id)
            beats[trial.number] = _Heartbeat(storage if heartbeat else None, trial_id, heartbeat or 0)
            beats[trial.number].__enter__()  # from the claim on: a worker killed while preparing is noticed too
            batch.append(trial)
        if not batch:
            if slots.top_up() or slots.recover():  # slots waiting (laid out by now, here or by another worker)
                continue
            running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
            if heartbeat and running and time.time() < (waiting_since := waiting_since or time.time()) + 4 * (
                    getattr(storage, "grace_period", None) or 3 * heartbeat):
                time.sleep(min(heartbeat, 1.0))  # another worker's trial: done soon, or stale and retried
                continue
            if slots.live_here():
                time.sleep(0.5)  # another worker on this host runs a trial: done soon, or dead and recovered
                continue
            return
        waiting_since = None
        prepared: list[tuple[optuna.Trial, Plan | None, Any]] = []
        for trial in batch:
            try:
                prepared.append((trial, objective.prepare(trial), None))
            except Exception as e:
                prepared.append((trial, None, e))
        survivors = [(t, p) for t, p, e in prepared if p is not None]
        failures = dict(zip([t.number for t, _ in survivors], pool.warm(objective.graph.to_dict(),
                                                                       [p.to_json() for _, p in survivors]),
                            strict=True)) if pool is not None else {}
        for trial, plan, error in prepared:
            try:
                frozen = _finish(study, objective, trial, plan, error, failures.get(trial.number, ""))
            finally:
                beats[trial.number].__exit__()
            if bar:
                bar.callback(study, frozen)


def _say_unfinished(slots: Slots) -> None:
    """Log the slots this search leaves unfinished (a timeout, trials running in other workers) and how to finish
    them: the same command again."""
    trials = slots.study.get_trials(deepcopy=False)
    running = sum(t.state == optuna.trial.TrialState.RUNNING for t in trials)
    left = slots.remaining()
    if left or running:
        log.info("study %s: %d of %d trial slots not run yet, %d running in other workers%s; the same command "
                 "again runs what is left", slots.study.study_name, left, slots.total, running,
                 f" ({slots.elsewhere} on other hosts, which this one cannot check)" if slots.elsewhere else "")


class _Heartbeat:
    """Record the running trial's heartbeat every `interval` seconds from a background thread."""

    def __init__(self, storage: Any, trial_id: int, interval: float) -> None:
        import threading

        self.storage, self.trial_id, self.interval = storage, trial_id, interval
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True) if storage is not None else None

    def _beat(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                self.storage.record_heartbeat(self.trial_id)
            except Exception:  # a finished trial or a transient database error: the next beat retries
                pass

    def __enter__(self) -> None:
        if self.thread is not None:
            self.storage.record_heartbeat(self.trial_id)
            self.thread.start()

    def __exit__(self, *exc: object) -> None:
        if self.thread is not None:
            self.stop.set()
            self.thread.join()


def _finish(study: optuna.Study, objective: Objective, trial: optuna.Trial, plan: Plan | None,
            error: BaseException | None, compile_failure: str) -> optuna.trial.FrozenTrial:
    """Judge one prepared trial and tell the study its outcome; a fault fails this trial only, with its reason."""
    try:
        if error is not None:
            raise error
        assert plan is not None
        state, value = optuna.trial.TrialState.COMPLETE, objective.finish(trial, plan, compile_failure)
    except optuna.TrialPruned:
        state, value = optuna.trial.TrialState.PRUNED, None
    except Exception as e:
        trial.set_user_attr("status", "failed")
        trial.set_user_attr("reason", failure_reason(e, 300))
        state, value = optuna.trial.TrialState.FAIL, None
    frozen = study.tell(trial, value, state=state)
    log.debug("trial %d %s%s %s", trial.number, frozen.user_attrs.get("status", state.name.lower()),
              "" if value is None else f" {value:.2f} us", frozen.user_attrs.get("reason", ""))
    return frozen


def _retime_finalists(study: optuna.Study, space: Space, judge: Any, count: int) -> list[dict[str, Any]]:
    """The `count` fastest measured plans (distinct), timed again side by side by the judge: per plan its
    trial number and parameters, first figure and final figure (None where it could not be timed again)."""
    complete = sorted((t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None),
                      key=lambda t: t.value)
    chosen: dict[str, Any] = {}
    for t in complete:
        chosen.setdefault(space.plan(t.params).to_json(), t)
        if len(chosen) == count:
            break
    if len(chosen) < 2:
        return []
    try:
        final = judge.retime(list(chosen), 5)
    except Exception as e:  # the first figures stand
        log.warning("re-timing the finalists failed: %s", failure_reason(e, 200))
        return []
    return [{"trial": t.number, "params": dict(t.params), "first_us": float(t.value), "final_us": us}
            for t, us in zip(chosen.values(), final, strict=True)]


def _best(study: optuna.Study, space: Space) -> tuple[Plan, float]:
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None]
    if not complete:
        raise FusionSearchError("no trial produced a valid plan; see the trials' reasons (fusionsearch explain)")
    best = min(complete, key=lambda t: t.value)
    return space.plan(best.params), float(best.value)


@dataclass
class _Progress:
    total: int
    bar: Any = None
    best: float = float("inf")
    counts: dict[str, int] = field(default_factory=dict)

    def callback(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        status = trial.user_attrs.get("status", trial.state.name.lower())
        self.counts[status] = self.counts.get(status, 0) + 1
        if trial.state == optuna.trial.TrialState.COMPLETE and trial.value is not None:
            self.best = min(self.best, trial.value)
        self.bar.set_postfix_str(f"best {self.best:.1f} us  " + " ".join(f"{k} {v}" for k, v in self.counts.items()))
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def _progress(total: int, enabled: bool) -> _Progress | None:
    if not enabled or total == 0:
        return None
    from tqdm import tqdm

    logging.getLogger("optuna").setLevel(logging.WARNING)
    return _Progress(total, tqdm(total=total, file=sys.stderr, unit="trial", dynamic_ncols=True))


def tune(fn_or_graph: Any, *example_inputs: torch.Tensor, trials: int = 64, backend: str = "auto",
         storage: str | None = None, study_name: str | None = None, seed: int = 0, timeout: float | None = None,
         **options: Any) -> TuneResult:
    """Search the best fusion plan for a graph, or for a PyTorch function/module traced on `example_inputs`.

    >>> import fusionsearch as fs
    >>> res = fs.tune(fs.workload("mm_bias_gelu", M=16, K=256, N=256), trials=8, backend="model")
    >>> res.best.kernels[0].epilogue
    ('y_bias', 'out')
    """
    signature = None
    if isinstance(fn_or_graph, OpGraph):
        graph = fn_or_graph
    elif callable(fn_or_graph):
        from fusionsearch.graph.capture import capture_program

        program = capture_program(fn_or_graph, *example_inputs)
        if program.mutated:
            raise SpecError(f"the function writes its input {program.mutated[0]!r} in place (copy_, index_put_, "
                            "slice assignment); tune a function that returns the new value instead")
        graph, signature = program.graph, program.signature
    else:
        raise SpecError(f"tune needs an OpGraph or a PyTorch function/module, got {type(fn_or_graph).__name__}")
    opts = SearchOptions(trials=trials, backend=backend, storage=storage, study_name=study_name, seed=seed,
                         timeout=timeout, **options)
    given = list(example_inputs) if signature is None else signature.inputs(example_inputs, {})
    inputs = given if given and all(isinstance(t, torch.Tensor) and t.is_cuda for t in given) else None
    if inputs is not None and len(inputs) != len(graph.inputs):
        inputs = None
    res = run_study(graph, opts, inputs)
    res.signature = signature  # res.compile() is then called as the function (the module) itself
    return res
