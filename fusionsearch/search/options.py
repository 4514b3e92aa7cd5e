"""What one search is asked to do (SearchOptions), checked when it is made so that the API refuses what the
CLI refuses; and the backend a search runs on."""

from __future__ import annotations

from dataclasses import dataclass

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
        if not _whole(self.measure) or self.measure < 0:
            raise SpecError(f"measure must be a whole number of plans (0: as many as trials), got {self.measure!r}")
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


def check_workers(workers: object) -> None:
    """Refuse a worker count that is neither a positive integer nor 'auto'."""
    if workers != "auto" and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise SpecError(f"workers must be a positive integer or 'auto', got {workers!r}")


def resolve_backend(backend: str) -> str:
    """The backend `backend` names on this machine: auto is gpu with a CUDA GPU, else interpret."""
    if backend == "auto":
        return "gpu" if torch.cuda.is_available() else "interpret"
    if backend == "gpu" and not torch.cuda.is_available():
        raise FusionSearchError("backend 'gpu' needs a CUDA GPU; use --backend interpret or model on this machine")
    return backend
