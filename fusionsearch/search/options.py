"""What one search is asked to do (SearchOptions), checked when it is made so that the API refuses what the
CLI refuses; and the backend a search runs on."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import torch

from fusionsearch.errors import FusionSearchError, SpecError

BACKENDS = ("auto", "gpu", "interpret", "model")
SAMPLERS = ("auto", "ranked", "tpe", "brute", "random")
MODEL_FILES = (".npz", ".skops")  # learned cost model files (costmodel.learned.load reads both)
# Where a learned model ranks the plans a search measures (the ranked sampler on the GPU), the most plans it
# measures: the model ranks the rest (issue 54: measure few). The one default of the API, the CLI and the backend.
MEASURE = 8
TRIALS = 32  # trials of a search (a study; a region under the backend): fs.tune, the CLI and the backend alike


@dataclass(frozen=True)
class SearchOptions:
    """Settings of one search. `prune_margin`: a trial predicted slower than the best measured trial's
    prediction times this factor is pruned without compiling. `bytes_rule`: the prologue bytes factor
    (None lifts the rule so that measurement decides)."""

    trials: int = TRIALS
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
    #                       (the first correction after costmodel.refit.FIRST_REFIT plans)
    # gpu backend, ranked by a learned model: at most this many trials, each measuring one plan (0: `trials`)
    measure: int = MEASURE
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
        for name in RULES:
            check_option(name, getattr(self, name))


class OptionError(SpecError):
    """A search option's value refused, in one sentence: `name` (the field, or the flag or keyword that sets it:
    the CLI's --seed, BackendOptions' search_backend) must be `what`, got `value`. One check, every caller's
    name: the API, the CLI and the backend say the same."""

    def __init__(self, name: str, value: object, what: str) -> None:
        super().__init__(f"{name} must be {what}, got {value!r}")
        self.name, self.value, self.what = name, value, what

    def __reduce__(self) -> tuple[type, tuple[str, object, str]]:  # raised in a worker process, read in another
        return type(self), (self.name, self.value, self.what)


@dataclass(frozen=True)
class Rule:
    """What a search option's value must be: `what` in words, `ok` the test."""

    what: str
    ok: Callable[[Any], bool]


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive(value: object, finite: bool = True) -> bool:
    """A number of seconds or a factor: above zero, not NaN, and finite unless `finite` is False."""
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0 and (
        not finite or value < float("inf"))


def _at_least(low: int) -> Callable[[Any], bool]:
    return lambda v: _whole(v) and v >= low


# Every checked option of SearchOptions, in field order (the first bad one is named). The words never name a
# Python field or None: the CLI's flags say them too.
RULES: dict[str, Rule] = {
    "trials": Rule("a whole number of at least 1", _at_least(1)),
    "backend": Rule(f"one of {', '.join(BACKENDS)}", lambda v: isinstance(v, str) and v in BACKENDS),
    "sampler": Rule(f"one of {', '.join(SAMPLERS)}", lambda v: isinstance(v, str) and v in SAMPLERS),
    "study_name": Rule("a study's name (not blank)", lambda v: v is None or (isinstance(v, str) and bool(v.strip()))),
    # numpy's generators (Optuna's samplers) take 0 .. 2**32 - 1
    "seed": Rule(f"a whole number from 0 to {2**32 - 1}", lambda v: _whole(v) and 0 <= v < 2**32),
    "timeout": Rule("a positive number of seconds", lambda v: v is None or _positive(v)),
    "prune_margin": Rule("a positive factor", lambda v: _positive(v, finite=False)),
    "bytes_rule": Rule("a positive factor", lambda v: v is None or _positive(v)),
    "max_configs": Rule("a positive whole number", _at_least(1)),
    "compile_workers": Rule("a whole number of processes (0: none)", lambda v: v is None or _at_least(0)(v)),
    "heartbeat_s": Rule("a positive whole number of seconds", _at_least(1)),
    "cost_model": Rule(f"auto, analytic, learned or a model file ({', '.join(MODEL_FILES)})",
                       lambda v: isinstance(v, str) and (v in ("auto", "analytic", "learned")
                                                         or v.endswith(MODEL_FILES))),
    "refit_every": Rule("a whole number of measured plans (0: never)", _at_least(0)),
    "measure": Rule("a whole number of plans (0: as many as trials)", _at_least(0)),
    "trial_timeout_s": Rule("a positive number of seconds", _positive),
    "workers": Rule("a positive integer or 'auto'", lambda v: (isinstance(v, str) and v == "auto") or _at_least(1)(v)),
    "compile_ranked": Rule("a whole number of plans (0: none)", _at_least(0)),
    "finalists": Rule("a whole number of plans (0: none)", _at_least(0)),
    "library": Rule("True or False", lambda v: isinstance(v, bool)),
}


def check_option(field: str, value: object, name: str | None = None) -> None:
    """OptionError unless `value` is good for SearchOptions' `field`; the message names it `name` (default: the
    field), so that a flag or another keyword for the same option gets the same sentence. A field without a
    rule (storage: checked when it is opened, naming what was given) passes."""
    rule = RULES.get(field)
    if rule is not None and not rule.ok(value):
        raise OptionError(name or field, value, rule.what)


def default(field: str) -> Any:
    """SearchOptions' default of `field`, read when asked (the CLI's flags and the backend's fields show it)."""
    return next(f.default for f in fields(SearchOptions) if f.name == field)


def search_options(values: Mapping[str, Any], names: Mapping[str, str] | None = None) -> SearchOptions:
    """SearchOptions of `values` (by field) that another holder of them keeps under `names` (field -> its name):
    a bad value is refused with the holder's name for it (BackendOptions' search_backend, not backend)."""
    for field, value in values.items():
        check_option(field, value, (names or {}).get(field, field))
    return SearchOptions(**values)


def check_workers(workers: object) -> None:
    """Refuse a worker count that is neither a positive integer nor 'auto'."""
    check_option("workers", workers)


def resolve_backend(backend: str) -> str:
    """The backend `backend` names on this machine: auto is gpu with a CUDA GPU, else interpret."""
    if backend == "auto":
        return "gpu" if torch.cuda.is_available() else "interpret"
    if backend == "gpu" and not torch.cuda.is_available():
        raise FusionSearchError("backend 'gpu' needs a CUDA GPU; use --backend interpret or model on this machine")
    return backend
