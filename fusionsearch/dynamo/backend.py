"""The torch.compile backend: `torch.compile(model, backend="fusionsearch")`, or `fusionsearch.backend(trials=...)`
for options.

Dynamo hands the backend each captured FX graph with example inputs. The backend traces it to an OpGraph
(ops the registry lacks become extern kernels that PyTorch runs), searches the best fusion plan for it, or
loads the plan a previous search stored for the same graph on the same device, and returns the plan's
generated module as the graph's callable. A graph it cannot take (dynamic shapes, non-tensor inputs or
outputs, no matmul, no GPU, a trace failure, gradients to compute: the kernels are forward-only) runs through
Inductor or eager instead, with the reason logged on the `fusionsearch.backend` logger."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch.utils._pytree import tree_flatten, tree_unflatten

from fusionsearch.dynamo.plan_cache import PlanCache
from fusionsearch.errors import FusionSearchError, SpecError

__all__ = ["BackendOptions", "BackendStats", "backend", "fusionsearch_backend"]

log = logging.getLogger("fusionsearch.backend")

FALLBACKS = ("inductor", "eager")


@dataclass(frozen=True)
class BackendOptions:
    """`trials` per graph; `search_backend` judges candidates as the search does (auto: gpu when present);
    `cache`: plan cache directory (None: $FUSIONSEARCH_CACHE_DIR/plans); `storage`: an Optuna storage URL
    for the searches; `fallback`: what runs a graph the backend does not take ('inductor' or 'eager')."""

    trials: int = 32
    search_backend: str = "auto"
    cache: str | None = None
    storage: str | None = None
    fallback: str = "inductor"
    cost_model: str = "auto"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.fallback not in FALLBACKS:
            raise SpecError(f"fallback {self.fallback!r}: use {' or '.join(FALLBACKS)}")
        if isinstance(self.trials, bool) or not isinstance(self.trials, int) or self.trials < 1:
            raise SpecError(f"trials must be a positive integer, got {self.trials!r}")

    def search_settings(self) -> dict[str, Any]:
        """What a cached plan depends on besides the graph and device."""
        return {"trials": self.trials, "search_backend": self.search_backend, "cost_model": self.cost_model,
                "seed": self.seed}


@dataclass
class BackendStats:
    """What the backend did with the graphs Dynamo gave it: searched, loaded from the plan cache, or declined
    (with the reasons, in order)."""

    searched: int = 0
    cached: int = 0
    declined: list[str] = field(default_factory=list)


class _Decline(Exception):
    """The backend does not take this graph; the message says why."""


def backend(**options: Any) -> Callable[[fx.GraphModule, list[torch.Tensor]], Callable[..., Any]]:
    """A torch.compile backend with options (see BackendOptions): torch.compile(m, backend=fs.backend(trials=16)).
    The returned backend's `.stats` counts what it did."""
    return _Compiler(BackendOptions(**options))


def fusionsearch_backend(gm: fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
    """The backend registered as "fusionsearch" (entry point torch_dynamo_backends), with default options."""
    return _Compiler(BackendOptions())(gm, example_inputs)


class _Compiler:
    def __init__(self, options: BackendOptions) -> None:
        self.options = options
        self.cache = PlanCache(options.cache)
        self.stats = BackendStats()

    def __call__(self, gm: fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
        try:
            return self._compile(gm, list(example_inputs))
        except _Decline as e:
            reason = str(e)
        except FusionSearchError as e:  # a search that found nothing valid, a plan that does not generate
            reason = f"{type(e).__name__}: {e}"
        self.stats.declined.append(reason)
        log.warning("fusionsearch backend: graph of %d nodes runs through %s: %s", len(gm.graph.nodes),
                    self.options.fallback, reason)
        if self.options.fallback == "eager":
            return gm.forward
        from torch._inductor.compile_fx import compile_fx

        return compile_fx(gm, example_inputs)

    def _compile(self, gm: fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
        from fusionsearch.graph.capture import capture
        from fusionsearch.search.study import SearchOptions, run_study

        device = _device(example_inputs)
        state = [v for _, v in gm.named_parameters()] + [v for _, v in gm.named_buffers()]
        if torch.is_grad_enabled() and any(t.requires_grad for t in [*example_inputs, *state]):
            raise _Decline("gradients are needed: the generated kernels are forward-only (run inference under "
                           "torch.no_grad() or torch.inference_mode())")
        spec = _output_spec(gm)
        try:
            g = capture(gm, *example_inputs)
        except FusionSearchError as e:
            raise _Decline(f"tracing failed ({e})") from None
        if not g.nodes_of_kind("template"):
            raise _Decline("no matmul to fuse around")
        if len(g.outputs) != spec.num_leaves:
            raise _Decline(f"the graph returns {spec.num_leaves} values, {len(g.outputs)} of them tensors")
        key = self.cache.key(g, device, self.options.search_settings())
        plan = self.cache.load(key, g)
        if plan is None:
            inputs = [*example_inputs, *state] if device != "cpu-interpreter" else None
            res = run_study(g, SearchOptions(trials=self.options.trials, backend=self.options.search_backend,
                                             storage=self.options.storage, seed=self.options.seed,
                                             cost_model=self.options.cost_model), inputs)
            plan = res.best
            self.cache.store(key, g, plan, res.best_us, {"device": device, "settings": asdict(self.options)})
            self.stats.searched += 1
        else:
            self.stats.cached += 1
        run = plan.compile().module.run

        def call(*args: torch.Tensor) -> Any:
            return tree_unflatten(run(*args, *state), spec)

        return call


def _device(example_inputs: Sequence[Any]) -> str:
    """The device the plan will run on, by name; _Decline for what the generated kernels cannot take."""
    if not example_inputs:
        raise _Decline("the graph takes no inputs")
    for i, t in enumerate(example_inputs):
        if not isinstance(t, torch.Tensor):
            raise _Decline(f"input {i} is a {type(t).__name__}, not a tensor (dynamic shapes or Python values)")
        if any(not isinstance(s, int) for s in t.shape):
            raise _Decline(f"input {i} has a dynamic shape {tuple(t.shape)}; compile with dynamic=False")
    devices = {t.device for t in example_inputs}
    if len(devices) != 1:
        raise _Decline(f"inputs on several devices ({', '.join(sorted(map(str, devices)))})")
    (dev,) = devices
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    if dev.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1":
        return "cpu-interpreter"
    raise _Decline(f"inputs on {dev}: the generated Triton kernels run on CUDA GPUs (or in Triton's CPU "
                   "interpreter with TRITON_INTERPRET=1)")


def _output_spec(gm: fx.GraphModule) -> Any:
    """The pytree structure of what the graph returns; _Decline when a returned value is not a graph value."""
    out = next(n for n in gm.graph.nodes if n.op == "output")
    leaves, spec = tree_flatten(out.args[0])
    if not all(isinstance(leaf, fx.Node) for leaf in leaves):
        raise _Decline("the graph returns values that are not tensors")
    return spec
