"""The torch.compile backend: `torch.compile(model, backend="fusionsearch")`, or `fusionsearch.backend(trials=...)`
for options.

Dynamo hands the backend each captured FX graph with example inputs. The backend traces it to an OpGraph
(ops the registry lacks become extern kernels that PyTorch runs), cuts it into regions (dynamo/regions.py:
each matmul with the pointwise work it may fuse; identical layers give identical regions), searches the best
plan of each matmul region or loads the plan a previous search stored for the same region on the same
device, and returns a callable that runs the regions' generated modules in order.

A graph it cannot take (dynamic shapes, non-tensor inputs or outputs, no matmul, no GPU, a trace failure,
gradients to compute: the kernels are forward-only) runs through Inductor or eager instead, with the reason
logged on the `fusionsearch.backend` logger."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch.utils._pytree import tree_flatten, tree_unflatten

from fusionsearch.dynamo.plan_cache import PlanCache
from fusionsearch.dynamo.regions import Region, partition
from fusionsearch.errors import FusionSearchError, SpecError, failure_reason
from fusionsearch.graph.capture import capture, module_state
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.search.plan import Plan

__all__ = ["BackendOptions", "BackendStats", "backend", "fusionsearch_backend", "tune_model"]

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
    """What the backend did with the graphs Dynamo gave it: matmul regions met, searched, and loaded from the
    plan cache (identical regions after the first included); graphs declined, with the reasons, in order."""

    regions: int = 0
    searched: int = 0
    cached: int = 0
    declined: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Step:
    """One region ready to run: its callable, and the parent graph's values it reads and writes."""

    run: Callable[..., list[torch.Tensor]]
    region: Region

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.region.inputs

    @property
    def outputs(self) -> tuple[str, ...]:
        return self.region.outputs


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
        except Exception as e:  # a search that found nothing valid, a region that fails to compile or run:
            reason = failure_reason(e, 300)  # the model still runs, through the fallback
            log.debug("fusionsearch backend failure", exc_info=True)
        self.stats.declined.append(reason)
        log.warning("fusionsearch backend: graph of %d nodes runs through %s: %s", len(gm.graph.nodes),
                    self.options.fallback, reason)
        if self.options.fallback == "eager":
            return gm.forward
        from torch._inductor.compile_fx import compile_fx

        return compile_fx(gm, example_inputs)

    def _compile(self, gm: fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
        device = _device(example_inputs)
        state = module_state(gm)
        if torch.is_grad_enabled() and any(t.requires_grad for t in [*example_inputs, *state]):
            raise _Decline("gradients are needed: the generated kernels are forward-only (run inference under "
                           "torch.no_grad() or torch.inference_mode())")
        spec = _output_spec(gm)
        g = _traced(gm, example_inputs)
        if len(g.outputs) != spec.num_leaves:
            raise _Decline(f"the graph returns {spec.num_leaves} values, {len(g.outputs)} of them tensors")
        steps = self.regions(g, [*example_inputs, *state], device)
        inputs, outputs = list(g.inputs), list(g.outputs)
        if self.options.fallback == "inductor" and device != "cpu-interpreter":
            try:
                compiled = _inductor_whole(g, steps, [*example_inputs, *state])
                return lambda *args: tree_unflatten(list(compiled(*args, *state)), spec)
            except Exception as e:  # the regions still run, one call each
                log.warning("fusionsearch backend: Inductor could not compile the graph around the tuned regions "
                            "(%s); the regions run one by one", failure_reason(e, 300))

        def call(*args: torch.Tensor) -> Any:
            values = dict(zip(inputs, [*args, *state], strict=True))
            for step in steps:
                values.update(zip(step.outputs, step.run(*[values[i] for i in step.inputs]), strict=True))
            return tree_unflatten([values[o] for o in outputs], spec)

        return call

    def regions(self, g: OpGraph, values: list[torch.Tensor], device: str, progress: bool = False
                ) -> list[_Step]:
        """Each region of `g` ready to run, in order, each matmul region searched
        or loaded from the plan cache; `values` are the example values of g's inputs."""
        regions = partition(g)
        env = dict(zip(g.inputs, values, strict=True))
        bar = None
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=sum(r.tuned for r in regions), unit="region", file=sys.stderr, dynamic_ncols=True)
        steps = []
        for region in regions:
            ins = [env[i] for i in region.inputs] if device != "cpu-interpreter" else None
            run = self._plan(region, device, ins).compile().module.run if region.tuned else self._glue(region)
            if ins is not None:  # the next regions are searched (glue: compiled) on the values this one computes
                env.update(zip(region.outputs, run(*ins), strict=True))
            steps.append(_Step(run, region))
            if bar is not None and region.tuned:
                bar.update(1)
                bar.set_postfix_str(f"searched {self.stats.searched}, cached {self.stats.cached}")
        if bar is not None:
            bar.close()
        return steps

    @staticmethod
    def _glue(region: Region) -> Callable[..., list[torch.Tensor]]:
        """A glue region's ops in eager PyTorch, dense outputs as the matmul regions' plans were searched on.
        With the Inductor fallback the whole graph is compiled around the tuned regions (_inductor_whole),
        these ops included; this runs them in the interpreter, with the eager fallback, or when that fails."""
        from fusionsearch.graph.reference import reference

        g = region.graph

        def run(*inputs: torch.Tensor) -> list[torch.Tensor]:
            return [t.contiguous() for t in reference(g, inputs)]

        return run

    def _plan(self, region: Region, device: str, inputs: list[torch.Tensor] | None) -> Plan:
        """A matmul region's plan from the cache (identical regions share one), else from a search on the
        region's own input values (random ones in the interpreter)."""
        from fusionsearch.search.study import SearchOptions, run_study

        g = region.graph
        self.stats.regions += 1
        key = self.cache.key(g, device, self.options.search_settings())
        plan = self.cache.load(key, g)
        if plan is not None:
            self.stats.cached += 1
            return plan
        res = run_study(g, SearchOptions(trials=self.options.trials, backend=self.options.search_backend,
                                         storage=self.options.storage, seed=self.options.seed,
                                         cost_model=self.options.cost_model), inputs)
        self.cache.store(key, g, res.best, res.best_us, {"device": device, "settings": asdict(self.options)})
        self.stats.searched += 1
        return res.best


def tune_model(model: torch.nn.Module, *example_inputs: torch.Tensor, progress: bool = True,
               **options: Any) -> BackendStats:
    """Search every matmul region of `model` traced on `example_inputs` (identical regions once) into the plan
    cache that `torch.compile(model, backend=fusionsearch.backend(cache=...))` then reads: what
    `fusionsearch tune-model` runs. FusionSearchError when the model cannot be tuned, saying why."""
    compiler = _Compiler(BackendOptions(**options))
    with torch.no_grad():
        try:
            device = _device(list(example_inputs))
            g = _traced(model, list(example_inputs))
        except _Decline as e:
            raise FusionSearchError(str(e)) from None
        compiler.regions(g, [*example_inputs, *module_state(model)], device, progress)
    return compiler.stats


def _inductor_whole(g: OpGraph, steps: Sequence[_Step], values: list[torch.Tensor]) -> Callable[..., Any]:
    """The whole graph compiled by Inductor: the glue regions' ops traced in, each tuned region one call of
    torch.ops.fusionsearch.region (dynamo/region_op.py). `values` are g's example inputs."""
    from torch._inductor.compile_fx import compile_fx
    from torch.fx.experimental.proxy_tensor import make_fx

    from fusionsearch.dynamo.region_op import region, register_region

    keys = [register_region(step.run, step.region.graph) if step.region.tuned else None for step in steps]

    def whole(*args: torch.Tensor) -> list[torch.Tensor]:
        known = dict(zip(g.inputs, args, strict=True))
        for step, key in zip(steps, keys, strict=True):
            parts = [known[i] for i in step.inputs]
            known.update(zip(step.outputs, step.run(*parts) if key is None else region(key, parts), strict=True))
        return [known[o] for o in g.outputs]

    with torch._guards.tracing(None):  # fresh fake tensors, not those of Dynamo's compile in progress
        traced = make_fx(whole)(*values)
    return compile_fx(traced, values)


def _traced(module: torch.nn.Module, example_inputs: list[torch.Tensor]) -> OpGraph:
    """The module's OpGraph (its parameters and buffers as trailing inputs, see capture.module_state);
    _Decline when it does not trace or holds no matmul."""
    try:
        with torch._guards.tracing(None):  # fresh fake tensors, not Dynamo's symbolic sizes (inside a compile)
            g = capture(module, *example_inputs)
    except FusionSearchError as e:
        raise _Decline(f"tracing failed ({e})") from None
    if not g.nodes_of_kind("template"):
        raise _Decline("no matmul to fuse around")
    return g


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
