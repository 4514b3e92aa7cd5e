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
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch.utils._pytree import tree_flatten, tree_unflatten

from fusionsearch import settings
from fusionsearch.codegen.runtime import compile_plan
from fusionsearch.dynamo.cudagraph import GraphedStep
from fusionsearch.dynamo.join import RegionStep, glue, inductor_whole, lazy_inductor, one_by_one, written_inputs
from fusionsearch.dynamo.options import OPTION_NAMES, BackendOptions, backend_options
from fusionsearch.dynamo.plan_cache import PlanCache
from fusionsearch.dynamo.race import (
    INDUCTOR,
    OURS,
    RegionChoice,
    Timer,
    inductor_options,
    interleaved_timer,
    race,
    us_text,
)
from fusionsearch.dynamo.regions import Region, partition
from fusionsearch.dynamo.step_race import StepChoice, inductor_step, race_step
from fusionsearch.errors import FusionSearchError, check_names, failure_reason
from fusionsearch.graph.capture import CapturedProgram, capture_program, module_state
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.measure.shared import shared_workers
from fusionsearch.plan import Plan

# BackendOptions and backend_options live in dynamo/options.py; the backend's names are these
__all__ = ["BackendOptions", "BackendStats", "backend", "backend_options", "fusionsearch_backend", "tune_model"]

log = logging.getLogger("fusionsearch.backend")

@dataclass
class BackendStats:
    """What the backend did with the graphs Dynamo gave it: matmul regions met, searched, and loaded from the
    plan cache (identical regions after the first included); graphs declined, with the reasons, in order;
    each distinct region's race against Inductor (by graph signature); and each compiled graph's step race
    against Inductor's whole graph (dynamo/step_race.py), in order."""

    regions: int = 0
    searched: int = 0
    cached: int = 0
    declined: list[str] = field(default_factory=list)
    choices: dict[str, RegionChoice] = field(default_factory=dict)
    best_us: dict[str, float] = field(default_factory=dict)  # per distinct region: its kept code's µs (or the
    #                                                          search's figure where no race ran)
    steps: list[StepChoice] = field(default_factory=list)
    not_raced: str = ""  # why the regions were not raced against Inductor (no GPU, race=False, ...), when not

    def explain(self) -> str:
        """Each compiled step raced against Inductor's whole graph (which was kept, both times, the profiles),
        then each distinct matmul region raced: which code was kept, both times (µs), the fusion the search
        decided; where no region was raced, why; and each graph declined, with its reason."""
        lines = [s.explain() for s in self.steps]
        for c in self.choices.values():
            times = f"fusionsearch {us_text(c.ours_us)} us, inductor ({c.mode}) {us_text(c.inductor_us)} us"
            lines.append(f"{c.label}: {c.chosen} kept ({times})" + (f"; {c.reason}" if c.reason else ""))
            lines += [f"    {line}" for line in c.fusion.splitlines()]
        if self.regions and not self.choices:
            lines.append(f"{self.regions} matmul regions ({self.searched} searched, {self.cached} from the plan "
                         f"cache), none raced against Inductor: {self.not_raced or 'the race runs on a GPU'}")
        lines += [f"graph declined, run by the fallback: {reason}" for reason in self.declined]
        return "\n".join(lines) or "no graph has reached the backend yet (torch.compile calls it on the first call)"




class _Decline(Exception):
    """The backend does not take this graph; the message says why."""


def backend(**options: Any) -> Callable[[fx.GraphModule, list[torch.Tensor]], Callable[..., Any]]:
    """A torch.compile backend with options (see BackendOptions): torch.compile(m, backend=fs.backend(trials=16)).
    The returned backend's `.stats` counts what it did and `.stats.explain()` lists each region's race."""
    check_names(options, OPTION_NAMES, "fusionsearch.backend option")
    return _Compiler(BackendOptions(**options))


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
        # by plan cache key, so that each distinct region's plan is parsed once and compiled once, whatever the
        # number of identical regions, the progress bar's look-ups and the race
        self._entries: dict[str, tuple[Plan, dict[str, Any]] | None] = {}  # cache entries read or written here
        self._runs: dict[str, Callable[..., list[torch.Tensor]]] = {}  # each plan's compiled module's run

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
        return self._inductor_fallback(gm, list(example_inputs))

    def _inductor_fallback(self, gm: fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
        """On a GPU, Inductor's compilation of the whole graph in the backend's `inductor` mode with Inductor's own
        CUDA graphs where the backend uses them: what torch.compile(mode=...) runs (Inductor's defaults sent
        gpt-fast's int8 linears to aten._weight_int8pack_mm on an H100: 6.8 ms a step against 0.56). On a CPU,
        Inductor's defaults (max-autotune's tuning took a tiny decoder's first call to 38 s)."""
        from torch._inductor import config
        from torch._inductor.compile_fx import compile_fx

        on_gpu = any(isinstance(t, torch.Tensor) and t.is_cuda for t in example_inputs)
        options = inductor_options(self.options.inductor, cudagraphs=self.options.cudagraphs) if on_gpu else \
            inductor_options("default")
        with config.patch(options):
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
        racing = self.options.step_race and not self.options.inductor_regions and (
            self.timer is not None or device != "cpu-interpreter")
        step_key = self.cache.key(program.graph, device, self._step_settings()) if racing else ""
        cached = StepChoice.from_dict(self.cache.load_step(step_key, program.graph)) if racing else None
        graphed = self.options.cudagraphs and device != "cpu-interpreter"
        if cached is not None and cached.chosen == INDUCTOR:  # a previous process found Inductor's step faster
            self.stats.steps.append(cached)
            whole = inductor_step(gm, example_inputs, self.options.inductor, graphed)
            return lambda *args: tree_unflatten(list(whole(*args)), spec)
        ours = self._ours(program, values, device)
        mine = lambda *args: tree_unflatten(list(ours(*args, *state)), spec)  # noqa: E731
        if not racing:
            return mine
        if cached is not None:
            self.stats.steps.append(cached)
            return mine
        choice, theirs = self._race_step(gm, example_inputs, program, ours, values, device, graphed)
        self.stats.steps.append(choice)
        self.cache.store_step(step_key, program.graph, choice.to_dict())
        if choice.chosen == INDUCTOR and theirs is not None:
            return lambda *args: tree_unflatten(list(theirs(*args)), spec)
        return mine

    def _step_settings(self) -> dict[str, Any]:
        """What a step race's outcome depends on besides the graph and device: the regions' search settings and
        how both steps are compiled and replayed."""
        return {**self.options.search_settings(), "step_race": True, "inductor": self.options.inductor,
                "cudagraphs": self.options.cudagraphs, "race": self.options.race}

    def _race_step(self, gm: fx.GraphModule, example_inputs: list[torch.Tensor], program: CapturedProgram,
                   ours: Callable[..., Sequence[torch.Tensor]], values: list[torch.Tensor], device: str,
                   graphed: bool) -> tuple[StepChoice, Callable[..., list[torch.Tensor]] | None]:
        """The step as built against Inductor's whole graph on the compile's example inputs (the state the step
        writes restored after), the outcome and Inductor's step (None where it failed to compile)."""
        reasons = []
        try:
            theirs: Callable[..., list[torch.Tensor]] | None = inductor_step(gm, example_inputs,
                                                                             self.options.inductor, graphed)
        except Exception as e:  # Inductor cannot compile the whole graph: ours runs it
            theirs = None
            reasons.append(f"inductor: {failure_reason(e, 200)}")
        candidates: dict[str, Callable[[], object]] = {OURS: lambda: ours(*values)}
        if theirs is not None:
            candidates[INDUCTOR] = lambda: theirs(*example_inputs)
        label = f"step ({len(gm.graph.nodes)} FX nodes, {len(program.graph.nodes_of_kind('template'))} matmuls)"
        written = [values[i] for i in written_inputs(program)]
        timer = self.timer if self.timer is not None else interleaved_timer(graphed=False)  # each step graphed
        choice = race_step(label, candidates, timer, self.options.inductor, written,
                           profile=device != "cpu-interpreter", reasons=reasons)
        return choice, theirs

    def _ours(self, program: CapturedProgram, values: list[torch.Tensor], device: str
              ) -> Callable[..., Sequence[torch.Tensor]]:
        """The step as the backend builds it: the regions searched (or loaded) and raced, joined inside one
        Inductor graph where it compiles (else called one by one), replayed from a CUDA graph on a GPU."""
        steps = self.regions(program.graph, values, device, self.options.progress)
        run: Callable[..., Sequence[torch.Tensor]] | None = None
        if self.options.fallback == "inductor" and device != "cpu-interpreter":
            try:
                run = inductor_whole(program, steps, values, self.options.inductor)
            except Exception as e:  # the regions still run, one call each
                log.warning("fusionsearch backend: Inductor could not compile the graph around the tuned regions "
                            "(%s); the regions run one by one", failure_reason(e, 300))
        if run is None:
            run = one_by_one(program, steps)
        if self.options.cudagraphs and device != "cpu-interpreter":
            run = GraphedStep(run, written_inputs(program))
        return run

    def regions(self, g: OpGraph, values: list[torch.Tensor], device: str, progress: bool = False
                ) -> list[RegionStep]:
        """Each region of `g` ready to run, in order, each matmul region searched or loaded from the plan cache
        and raced against Inductor; `values` are the example values of g's inputs."""
        regions = partition(g)
        env = dict(zip(g.inputs, values, strict=True))
        control = self.options.inductor_regions  # nothing searched: no region's inputs are needed
        if device == "cpu-interpreter" and not control:
            _no_bf16_interpreted(regions)
        self.stats.not_raced = self._why_not_raced(device)
        bar = self._bar(regions, device) if progress and not control else None
        steps = []
        with shared_workers():  # the regions' searches measure through one worker and one compile pool
            for region in regions:
                ins = [env[i] for i in region.inputs] if not control and (device != "cpu-interpreter" or self.timer) \
                    else None
                step = self._step(region, device, ins) if region.tuned else RegionStep(glue(region), region, "glue")
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

    def _why_not_raced(self, device: str) -> str:
        """Why this backend's regions are not raced against Inductor's code; empty where they are."""
        if self.options.inductor_regions:
            return "inductor_regions=True: every region runs Inductor's code, nothing is searched"
        if not self.options.race:
            return "race=False: each region keeps the plan its search chose"
        if device == "cpu-interpreter" and self.timer is None:
            return ("no GPU here: Triton's CPU interpreter runs the kernels, and its times say nothing of a GPU's, "
                    "so each region keeps the plan its search chose (ranked by the cost model)")
        return ""

    def _bar(self, regions: Sequence[Region], device: str) -> Any:
        """A progress bar over the matmul regions, when at least one of them has no plan in the cache yet (a
        search takes seconds to minutes a region); None when all are cached."""
        tuned = [r for r in regions if r.tuned]
        distinct = {r.graph.signature_hash(): r.graph for r in tuned}  # a 32-layer model: a handful to look up
        missing = [sig for sig, g in distinct.items()
                   if self._entry(self.cache.key(g, device, self.options.search_settings()), g) is None]
        if not missing:
            return None
        from fusionsearch.search.progress import bar

        log.info("fusionsearch backend: %d matmul regions, %d distinct without a cached plan: searching",
                 len(tuned), len(missing))
        # the bar counts regions, as its total does: identical regions share one search
        return bar(len(tuned), "region", f"fusionsearch: {len(tuned)} regions, {len(missing)} distinct to search")

    def _step(self, region: Region, device: str, inputs: list[torch.Tensor] | None) -> RegionStep:
        """A matmul region ready to run: its plan from the cache (identical regions share one) or from a search
        on the region's own input values (random ones in the interpreter), raced against Inductor's code for
        it where a timer is at hand (the GPU's, or a test's); the race's outcome is stored with the plan."""
        from fusionsearch.search.study import run_study

        g = region.graph
        self.stats.regions += 1
        if self.options.inductor_regions:  # the control: Inductor's code, traced into the whole graph
            return RegionStep(lazy_inductor(g, self.options.inductor), region, "inductor")
        key = self.cache.key(g, device, self.options.search_settings())
        entry = self._entry(key, g)
        if entry is not None:
            plan, record = entry
            best_us = record.get("best_us")
            self.stats.cached += 1
        else:
            res = run_study(g, self.options.search, inputs)
            plan, best_us, record = res.best, res.best_us, {}
            self.stats.searched += 1
        choice = RegionChoice.from_dict(record.get("race"))
        if choice is not None and choice.mode != self.options.inductor:
            choice = None  # raced against another Inductor mode: race again
        racing = self.options.race and inputs is not None and (self.timer is not None or device != "cpu-interpreter")
        ours, theirs = None, None
        if racing and choice is None:
            ours, failed = (self._runs[key], "") if key in self._runs else _built(plan, inputs)
            if ours is not None:
                self._runs[key] = ours
            choice, theirs = race(g, _label(g), ours, inputs, self.options.inductor, self._timer(), plan.describe(),
                                  failed)
        if entry is None or (choice is not None and record.get("race") != choice.to_dict()):
            extra = {"device": device, "settings": asdict(self.options),
                     **({"race": choice.to_dict()} if choice is not None else {})}
            stored = best_us if best_us is not None else float("nan")
            self.cache.store(key, g, plan, stored, extra)
            self._entries[key] = plan, {"best_us": stored, **extra}
        if choice is not None:
            self.stats.choices.setdefault(g.signature_hash(), choice)
        kept = None if choice is None else choice.inductor_us if choice.chosen == INDUCTOR else choice.ours_us
        figure = kept if kept is not None else best_us
        if figure is not None:
            self.stats.best_us.setdefault(g.signature_hash(), float(figure))
        if choice is not None and choice.chosen == INDUCTOR:
            return RegionStep(theirs or lazy_inductor(g, self.options.inductor), region, "inductor")
        if ours is None:
            ours = self._runs[key] = self._runs.get(key) or compile_plan(plan).module.run
        return RegionStep(ours, region, "plan")

    def _entry(self, key: str, g: OpGraph) -> tuple[Plan, dict[str, Any]] | None:
        """The plan cache's entry `key` for `g` (None: none), read from disk once by this backend."""
        if key not in self._entries:
            self._entries[key] = self.cache.load_entry(key, g)
        return self._entries[key]

    def _timer(self) -> Timer:
        if self.timer is None:
            from fusionsearch.dynamo.race import interleaved_timer

            self.timer = interleaved_timer(graphed=self.options.cudagraphs)
        return self.timer


def _built(plan: Plan, inputs: list[torch.Tensor]) -> tuple[Callable[..., list[torch.Tensor]] | None, str]:
    """The plan's module run once on the region's inputs (compiling its kernels), or None and why it failed."""
    try:
        run = compile_plan(plan).module.run
        run(*inputs)
        return run, ""
    except Exception as e:  # the plan fails here: Inductor's code runs the region
        return None, failure_reason(e, 200)


def _no_bf16_interpreted(regions: Sequence[Region]) -> None:
    """_Decline, before anything is searched, where a matmul region computes in bfloat16 on the CPU: Triton's
    interpreter miscomputes bfloat16, so its plans' generated modules refuse to run there (codegen/module.py)
    and the model's first call would fail instead of falling back."""
    for r in (r for r in regions if r.tuned):
        g = r.graph
        if any(g.node(n).dtype == torch.bfloat16 for n in g.topo_order()):
            raise _Decline(f"bfloat16 on the CPU (the region of {_label(g)}): Triton's interpreter "
                           "miscomputes bfloat16, so the tuned kernels cannot run here; compile on a GPU, or a "
                           "float32 copy of the model on the CPU")


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
    check_names(options, OPTION_NAMES, "tune_model option")
    settings.interpret_without_gpu()  # as the CLI: no GPU, Triton's interpreter (before the trace imports Triton)
    compiler = _Compiler(BackendOptions(**options))
    with torch.no_grad():
        try:
            device = _device(list(example_inputs))
            g = _traced(model, list(example_inputs)).graph
            compiler.regions(g, [*example_inputs, *module_state(model)], device, progress)
        except _Decline as e:
            raise FusionSearchError(str(e)) from None
    return compiler.stats


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
