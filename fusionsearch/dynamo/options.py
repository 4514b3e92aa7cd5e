"""The torch.compile backend's options (BackendOptions): what `fusionsearch.backend(...)`, torch.compile's `mode=`
and `options=`, and `fusionsearch tune-model` set. Its search fields are SearchOptions' (their defaults and checks
live in search/options.py, one home per option); the rest are the backend's own."""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any

from fusionsearch.dynamo.race import INDUCTOR_MODES
from fusionsearch.errors import SpecError, check_names
from fusionsearch.search.options import SearchOptions, default, search_options

FALLBACKS = ("inductor", "eager")
# BackendOptions' fields that are search options (its name -> SearchOptions' field): their defaults and checks
# are SearchOptions' (one home per option); `BackendOptions.search` is the SearchOptions they make.
SEARCH_FIELDS = {"trials": "trials", "measure": "measure", "search_backend": "backend", "storage": "storage",
                 "cost_model": "cost_model", "seed": "seed"}
_SEARCH_NAMES = {field: name for name, field in SEARCH_FIELDS.items()}


@dataclass(frozen=True)
class BackendOptions:
    """`trials` per graph; `search_backend` judges candidates as the search does (auto: gpu when present);
    `cache`: plan cache directory (None: $FUSIONSEARCH_CACHE_DIR/plans); `storage`: an Optuna storage URL
    for the searches; `fallback`: what runs a graph the backend does not take ('inductor' or 'eager');
    `inductor`: the mode Inductor compiles in, for its candidate of each region and for the glue
    ('max-autotune' or 'default'); `race`: time Inductor's code for each region beside the searched plan and
    keep the faster (on a GPU); `cudagraphs`: replay each compiled step from a CUDA graph (on a GPU);
    `progress`: a bar on stderr while regions are searched (nothing when every plan comes from the cache);
    `step_race`: time the whole step as built against Inductor's compilation of the whole graph in the
    `inductor` mode and keep the faster (on a GPU; dynamo/step_race.py); `inductor_regions`: every matmul
    region runs Inductor's code, nothing is searched (the control: the step then shows what joining regions
    costs against Inductor's own step); `measure`: where a learned model ranks a region's plans on the GPU, at
    most this many of its trials are run, each measuring one plan. The search fields (SEARCH_FIELDS) take their
    defaults and checks from SearchOptions."""

    trials: int = default("trials")
    measure: int = default("measure")
    search_backend: str = default("backend")
    cache: str | None = None
    storage: str | None = default("storage")
    fallback: str = "inductor"
    cost_model: str = default("cost_model")
    seed: int = default("seed")
    inductor: str = "max-autotune"
    race: bool = True
    cudagraphs: bool = True
    progress: bool = True
    step_race: bool = True
    inductor_regions: bool = False

    def __post_init__(self) -> None:
        if self.fallback not in FALLBACKS:
            raise SpecError(f"fallback {self.fallback!r}: use {' or '.join(FALLBACKS)}")
        self.search  # noqa: B018  the search's own checks of its fields, under the backend's names
        if self.inductor not in INDUCTOR_MODES:
            raise SpecError(f"inductor {self.inductor!r}: use {' or '.join(INDUCTOR_MODES)}")
        for name in ("race", "cudagraphs", "progress", "step_race", "inductor_regions"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"{name} must be True or False, got {getattr(self, name)!r}")

    @cached_property
    def search(self) -> SearchOptions:
        """The SearchOptions each region's search runs with (checked by SearchOptions, under the names here)."""
        return search_options({f: getattr(self, name) for name, f in SEARCH_FIELDS.items()}, _SEARCH_NAMES)

    def search_settings(self) -> dict[str, Any]:
        """What a cached plan depends on besides the graph and device."""
        return {"trials": self.trials, "search_backend": self.search_backend, "cost_model": self.cost_model,
                "seed": self.seed, "measure": self.measure}


OPTION_NAMES = tuple(f.name for f in fields(BackendOptions))


# torch.compile's modes, as far as they apply here: the Inductor mode and whether the step replays from a graph.
MODES = {"default": {"inductor": "default", "cudagraphs": False},
         "reduce-overhead": {"inductor": "default", "cudagraphs": True},
         "max-autotune-no-cudagraphs": {"inductor": "max-autotune", "cudagraphs": False},
         "max-autotune": {"inductor": "max-autotune", "cudagraphs": True}}


def backend_options(mode: str | None = None, options: dict[str, Any] | None = None) -> BackendOptions:
    """BackendOptions from torch.compile's `mode=` (one of MODES) or `options=` (BackendOptions' fields)."""
    if mode is not None and mode not in MODES:
        raise SpecError(f"mode {mode!r}: use one of {', '.join(MODES)}")
    if options is not None and not isinstance(options, dict):
        raise SpecError(f"options must be a dict of fusionsearch.backend() options, got {type(options).__name__}")
    fields = {**(MODES[mode] if mode else {}), **(options or {})}
    check_names(sorted(fields), OPTION_NAMES, "backend option")
    return BackendOptions(**fields)
