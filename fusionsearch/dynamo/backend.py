"""The torch.compile backend: `torch.compile(model, backend="fusionsearch")`, or `fusionsearch.backend(trials=...)`
for options (also torch.compile's own `mode=` and `options=`).

Dynamo hands the backend each captured FX graph with example inputs. The backend traces it to an OpGraph
(ops the registry lacks become extern kernels that PyTorch runs; what the graph writes into its inputs in
place, a KV cache, becomes extra outputs), cuts it into regions (dynamo/regions.py: each matmul with the
pointwise work it may fuse; identical layers give identical regions), searches the best plan of each matmul
region or loads the plan a previous search stored for the same region on the same device, races it against
Inductor's own code for the region (dynamo/race.py) and keeps the faster. The whole graph is then compiled by
Inductor around the regions that kept their plan, each one call of a PyTorch operator; the in-place results
are written back as eager PyTorch writes them; and on a GPU the step replays from a CUDA graph
(dynamo/cudagraph.py).

A graph it cannot take (dynamic shapes, non-tensor inputs or outputs, no matmul, no GPU, a trace failure,
gradients to compute: the kernels are forward-only) runs through Inductor or eager instead, with the reason
logged on the `fusionsearch.backend` logger."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch.utils._pytree import tree_flatten, tree_unflatten

from fusionsearch import settings
from fusionsearch.codegen.runtime import compile_plan
from fusionsearch.dynamo.cudagraph import GraphedStep
from fusionsearch.dynamo.plan_cache import PlanCache
from fusionsearch.dynamo.race import (
    INDUCTOR,
    INDUCTOR_MODES,
    RegionChoice,
    Timer,
    inductor_options,
    race,
    us_text,
)
from fusionsearch.dynamo.regions import Region, partition
from fusionsearch.errors import FusionSearchError, SpecError, failure_reason
from fusionsearch.graph.capture import CapturedProgram, capture_program, module_state
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.reference import reference
from fusionsearch.plan import Plan

__all__ = ["BackendOptions", "BackendStats", "backend", "backend_options", "fusionsearch_backend", "tune_model"]

log = logging.getLogger("fusionsearch.backend")

FALLBACKS = ("inductor", "eager")


@dataclass(frozen=True)
class BackendOptions:
    """`trials` per graph; `search_backend` judges candidates as the search does (auto: gpu when present);
    `cache`: plan cache directory (None: $FUSIONSEARCH_CACHE_DIR/plans); `storage`: an Optuna storage URL
    for the searches; `fallback`: what runs a graph the backend does not take ('inductor' or 'eager');
    `inductor`: the mode Inductor compiles in, for its candidate of each region and for the glue
    ('max-autotune' or 'default'); `race`: time Inductor's code for each region beside the searched plan and
    keep the faster (on a GPU); `cudagraphs`: replay each compiled step from a CUDA graph (on a GPU);
    `progress`: a bar on stderr while regions are searched (nothing when every plan comes from the cache)."""

    trials: int = 32
    search_backend: str = "auto"
    cache: str | None = None
    storage: str | None = None
    fallback: str = "inductor"
    cost_model: str = "auto"
    seed: int = 0
    inductor: str = "max-autotune"
    race: bool = True
    cudagraphs: bool = True
    progress: bool = True

    def __post_init__(self) -> None:
        if self.fallback not in FALLBACKS:
            raise SpecError(f"fallback {self.fallback!r}: use {' or '.join(FALLBACKS)}")
        if isinstance(self.trials, bool) or not isinstance(self.trials, int) or self.trials < 1:
            raise SpecError(f"trials must be a positive integer, got {self.trials!r}")
        if self.inductor not in INDUCTOR_MODES:
            raise SpecError(f"inductor {self.inductor!r}: use {' or '.join(INDUCTOR_MODES)}")
        for name in ("race", "cudagraphs", "progress"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"{name} must be True or False, got {getattr(self, name)!r}")

    def search_settings(self) -> dict[str, Any]:
        """What a cached plan depends on besides the graph and device."""
        return {"trials": self.trials, "search_backend": self.search_backend, "cost_model": self.cost_model,
                "seed": self.seed}


@dataclass
class BackendStats:
    """What the backend did with the graphs Dynamo gave it: matmul regions met, searched, and loaded from the
    plan cache (identical regions after the first included); graphs declined, with the reasons, in order; and
    each distinct region's race against Inductor (by graph signature)."""

    regions: int = 0
    searched: int = 0
    cached: int = 0
    declined: list[str] = field(default_factory=list)
    choices: dict[str, RegionChoice] = field(default_factory=dict)
    best_us: dict[str, float] = field(default_factory=dict)  # per distinct region: its kept code's µs (or the
    #                                                          search's figure where no race ran)

    def explain(self) -> str:
        """Each distinct matmul region raced: which code was kept, both times (µs), the fusion the search decided."""
        if not self.choices:
            return "no region was raced against Inductor (the race runs on a GPU)"
        lines = []
        for c in self.choices.values():
            times = f"fusionsearch {us_text(c.ours_us)} us, inductor ({c.mode}) {us_text(c.inductor_us)} us"
            lines.append(f"{c.label}: {c.chosen} kept ({times})" + (f"; {c.reason}" if c.reason else ""))
            lines += [f"    {line}" for line in c.fusion.splitlines()]
        return "\n".join(lines)


@dataclass(frozen=True)
class _Step:
    """One region ready to run: its callable, the parent graph's values it reads and writes, and what runs
    it: 'plan' (the searched plan's module), 'inductor' (Inductor's code won the race) or 'glue'."""

    run: Callable[..., list[torch.Tensor]]
    region: Region
    kind: str = "plan"

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
    The returned backend's `.stats` counts what it did and `.stats.explain()` lists each region's race."""
    return _Compiler(BackendOptions(**options))


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
    unknown = sorted(set(fields) - set(BackendOptions.__dataclass_fields__))
    if unknown:
        raise SpecError(f"unknown backend option {unknown[0]!r}: use {', '.join(BackendOptions.__dataclass_fields__)}")
    return BackendOptions(**fields)


def fusionsearch_backend(gm: fx.GraphModule, example_inputs: list[torch.Tensor], mode: str | None = None,
                         options: dict[str, Any] | None = None) -> Callable[..., Any]:
    """The backend registered as "fusionsearch" (entry point torch_dynamo_backends): the defaults, or what
    torch.compile's `mode=` or `options=` says."""
    return _Compiler(backend_options(mode, options))(gm, example_inputs)


class _Compiler:
    def __init__(self, options: BackendOptions, timer: Timer | None = None) -> None:
        self.options = options
        self.cache = PlanCache(options.cache)
        self.stats = BackendStats()
        self.timer = timer  # None: the GPU's interleaved timer (a test passes its own)

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
        program = _traced(gm, example_inputs)
        if program.returned != spec.num_leaves:
            raise _Decline(f"the graph returns {spec.num_leaves} values, {program.returned} of them tensors")
        values = [*example_inputs, *state]
        steps = self.regions(program.graph, values, device, self.options.progress)
        run: Callable[..., Sequence[torch.Tensor]] | None = None
        if self.options.fallback == "inductor" and device != "cpu-interpreter":
            try:
                run = _inductor_whole(program, steps, values, self.options.inductor)
            except Exception as e:  # the regions still run, one call each
                log.warning("fusionsearch backend: Inductor could not compile the graph around the tuned regions "
                            "(%s); the regions run one by one", failure_reason(e, 300))
        if run is None:
            run = _one_by_one(program, steps)
        if self.options.cudagraphs and device != "cpu-interpreter":
            run = GraphedStep(run, _written(program))
        step = run
        return lambda *args: tree_unflatten(list(step(*args, *state)), spec)

    def regions(self, g: OpGraph, values: list[torch.Tensor], device: str, progress: bool = False
                ) -> list[_Step]:
        """Each region of `g` ready to run, in order, each matmul region searched or loaded from the plan cache
        and raced against Inductor; `values` are the example values of g's inputs."""
        regions = partition(g)
        env = dict(zip(g.inputs, values, strict=True))
        bar = self._bar(regions, device) if progress else None
        steps = []
        for region in regions:
            ins = [env[i] for i in region.inputs] if device != "cpu-interpreter" or self.timer else None
            step = self._step(region, device, ins) if region.tuned else _Step(_glue(region), region, "glue")
            if ins is not None:  # the next regions are searched (glue: compiled) on the values this one computes
                env.update(zip(region.outputs, step.run(*ins), strict=True))
            steps.append(step)
            if bar is not None and region.tuned:
                bar.update(1)
                sig = region.graph.signature_hash()
                last, best = self.stats.choices.get(sig), self.stats.best_us.get(sig)
                kept = f", last: {last.chosen}" if last is not None else ""
                kept += f" {best:.1f} us" if best is not None and best == best else ""
                bar.set_postfix_str(f"searched {self.stats.searched}, cached {self.stats.cached}{kept}")
        if bar is not None:
            bar.close()
        return steps

    def _bar(self, regions: Sequence[Region], device: str) -> Any:
        """A progress bar over the matmul regions, when at least one of them has no plan in the cache yet (a
        search takes seconds to minutes a region); None when all are cached."""
        tuned = [r for r in regions if r.tuned]
        distinct = {r.graph.signature_hash(): r.graph for r in tuned}  # a 32-layer model: a handful to look up
        missing = [sig for sig, g in distinct.items()
                   if self.cache.load_entry(self.cache.key(g, device, self.options.search_settings()), g) is None]
        if not missing:
            return None
        from tqdm import tqdm

        log.info("fusionsearch backend: %d matmul regions, %d distinct without a cached plan: searching",
                 len(tuned), len(missing))
        return tqdm(total=len(tuned), unit="region", file=sys.stderr, dynamic_ncols=True,
                    desc=f"fusionsearch: {len(missing)} to search")

    def _step(self, region: Region, device: str, inputs: list[torch.Tensor] | None) -> _Step:
        """A matmul region ready to run: its plan from the cache (identical regions share one) or from a search
        on the region's own input values (random ones in the interpreter), raced against Inductor's code for
        it where a timer is at hand (the GPU's, or a test's); the race's outcome is stored with the plan."""
        from fusionsearch.search.study import SearchOptions, run_study

        g = region.graph
        self.stats.regions += 1
        key = self.cache.key(g, device, self.options.search_settings())
        entry = self.cache.load_entry(key, g)
        if entry is not None:
            plan, record = entry
            best_us = record.get("best_us")
            self.stats.cached += 1
        else:
            res = run_study(g, SearchOptions(trials=self.options.trials, backend=self.options.search_backend,
                                             storage=self.options.storage, seed=self.options.seed,
                                             cost_model=self.options.cost_model), inputs)
            plan, best_us, record = res.best, res.best_us, {}
            self.stats.searched += 1
        choice = RegionChoice.from_dict(record.get("race"))
        if choice is not None and choice.mode != self.options.inductor:
            choice = None  # raced against another Inductor mode: race again
        racing = self.options.race and inputs is not None and (self.timer is not None or device != "cpu-interpreter")
        ours, theirs = None, None
        if racing and choice is None:
            ours, failed = _built(plan, inputs)
            choice, theirs = race(g, _label(g), ours, inputs, self.options.inductor, self._timer(), plan.describe(),
                                  failed)
        if entry is None or (choice is not None and record.get("race") != choice.to_dict()):
            self.cache.store(key, g, plan, best_us if best_us is not None else float("nan"),
                             {"device": device, "settings": asdict(self.options),
                              **({"race": choice.to_dict()} if choice is not None else {})})
        if choice is not None:
            self.stats.choices.setdefault(g.signature_hash(), choice)
        kept = None if choice is None else choice.inductor_us if choice.chosen == INDUCTOR else choice.ours_us
        figure = kept if kept is not None else best_us
        if figure is not None:
            self.stats.best_us.setdefault(g.signature_hash(), float(figure))
        if choice is not None and choice.chosen == INDUCTOR:
            return _Step(theirs or _lazy_inductor(g, self.options.inductor), region, "inductor")
        return _Step(ours or compile_plan(plan).module.run, region, "plan")

    def _timer(self) -> Timer:
        if self.timer is None:
            from fusionsearch.dynamo.race import interleaved_timer

            self.timer = interleaved_timer(graphed=self.options.cudagraphs)
        return self.timer


def _glue(region: Region) -> Callable[..., list[torch.Tensor]]:
    """A glue region's ops in eager PyTorch, dense outputs as the matmul regions' plans were searched on.
    With the Inductor fallback the whole graph is compiled around the tuned regions (_inductor_whole), these
    ops included; this runs them in the interpreter, with the eager fallback, or when that fails."""
    g = region.graph

    def run(*inputs: torch.Tensor) -> list[torch.Tensor]:
        return [t.contiguous() for t in reference(g, inputs)]

    return run


def _built(plan: Plan, inputs: list[torch.Tensor]) -> tuple[Callable[..., list[torch.Tensor]] | None, str]:
    """The plan's module run once on the region's inputs (compiling its kernels), or None and why it failed."""
    try:
        run = compile_plan(plan).module.run
        run(*inputs)
        return run, ""
    except Exception as e:  # the plan fails here: Inductor's code runs the region
        return None, failure_reason(e, 200)


def _lazy_inductor(g: OpGraph, mode: str) -> Callable[..., list[torch.Tensor]]:
    """Inductor's code for a region that a previous process raced, compiled at its first call (compiling the
    whole graph inlines such regions, so it is only needed when that fails or in the interpreter)."""
    from fusionsearch.dynamo.race import inductor_region

    compiled: list[Callable[..., list[torch.Tensor]]] = []

    def run(*tensors: torch.Tensor) -> list[torch.Tensor]:
        if not compiled:
            compiled.append(inductor_region(g, tensors, mode))
        return compiled[0](*tensors)

    return run


def _label(g: OpGraph) -> str:
    """A region named by its matmuls (op and output shape) and the count of its other ops."""
    mms = g.nodes_of_kind("template")
    others = sum(1 for n in g if n.op != "input") - len(mms)
    return ", ".join(f"{g.node(m).op} {'x'.join(map(str, g.node(m).shape))}" for m in mms) + f" (+{others} ops)"


def tune_model(model: torch.nn.Module, *example_inputs: torch.Tensor, progress: bool = True,
               **options: Any) -> BackendStats:
    """Search every matmul region of `model` traced on `example_inputs` (identical regions once) into the plan
    cache that `torch.compile(model, backend=fusionsearch.backend(cache=...))` then reads, racing each against
    Inductor on a GPU: what `fusionsearch tune-model` runs. FusionSearchError when the model cannot be tuned."""
    compiler = _Compiler(BackendOptions(**options))
    with torch.no_grad():
        try:
            device = _device(list(example_inputs))
            g = _traced(model, list(example_inputs)).graph
        except _Decline as e:
            raise FusionSearchError(str(e)) from None
        compiler.regions(g, [*example_inputs, *module_state(model)], device, progress)
    return compiler.stats


def _written(program: CapturedProgram) -> list[int]:
    """Indices of the graph inputs the program writes in place."""
    return [program.graph.inputs.index(name) for name in program.mutated]


def _write_back(program: CapturedProgram, args: Sequence[torch.Tensor], outputs: list[torch.Tensor]
                ) -> list[torch.Tensor]:
    """Write each in-place result into its input, as eager PyTorch did; returns what the program returns."""
    for index, value in zip(_written(program), outputs[program.returned:], strict=True):
        if value is not args[index]:
            args[index].copy_(value)
    return outputs[:program.returned]


def _one_by_one(program: CapturedProgram, steps: Sequence[_Step]) -> Callable[..., list[torch.Tensor]]:
    """The regions called in order, each on the values it reads, in-place results written back at the end."""
    g = program.graph

    def call(*args: torch.Tensor) -> list[torch.Tensor]:
        values = dict(zip(g.inputs, args, strict=True))
        for step in steps:
            values.update(zip(step.outputs, step.run(*[values[i] for i in step.inputs]), strict=True))
        return _write_back(program, args, [values[o] for o in g.outputs])

    return call


def _inductor_whole(program: CapturedProgram, steps: Sequence[_Step], values: list[torch.Tensor],
                    mode: str = "default") -> Callable[..., Any]:
    """The whole graph compiled by Inductor in `mode`: glue and the regions whose race Inductor won traced in
    as eager PyTorch runs them (so Inductor fuses across them), each region that kept its plan one call of
    torch.ops.fusionsearch.region (dynamo/region_op.py); in-place results are written back inside the graph,
    where Inductor turns a functional scatter into a cache and its write-back into one in-place scatter."""
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx
    from torch.fx.experimental.proxy_tensor import make_fx

    from fusionsearch.dynamo.region_op import region, register_region

    g = program.graph
    keys = [register_region(step.run, step.region.graph) if step.kind == "plan" else None for step in steps]

    def whole(*args: torch.Tensor) -> list[torch.Tensor]:
        known = dict(zip(g.inputs, args, strict=True))
        for step, key in zip(steps, keys, strict=True):
            parts = [known[i] for i in step.inputs]
            outs = reference(step.region.graph, parts) if key is None else region(key, parts)
            known.update(zip(step.outputs, outs, strict=True))
        return _write_back(program, args, [known[o] for o in g.outputs])

    with torch._guards.tracing(None):  # fresh fake tensors, not those of Dynamo's compile in progress
        traced = make_fx(whole)(*values)
    with config.patch(inductor_options(mode)):
        return compile_fx(traced, values)


def _traced(module: torch.nn.Module, example_inputs: list[torch.Tensor]) -> CapturedProgram:
    """The module's program (its parameters and buffers as trailing inputs, see capture.module_state; what it
    writes into its inputs as extra outputs); _Decline when it does not trace or holds no matmul."""
    try:
        with torch._guards.tracing(None):  # fresh fake tensors, not Dynamo's symbolic sizes (inside a compile)
            program = capture_program(module, *example_inputs)
    except FusionSearchError as e:
        raise _Decline(f"tracing failed ({e})") from None
    if not program.graph.nodes_of_kind("template"):
        raise _Decline("no matmul to fuse around")
    return program


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
    if dev.type == "cpu" and settings.current().interpret:
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
