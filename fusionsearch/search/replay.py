"""Replay a saved plan (a search's --out directory) on this machine: validate it against the reference and,
on a GPU, time it. On a CPU it is validated in Triton's interpreter on the graph as saved and no time is
measured: the interpreter's speed says nothing of a GPU's. What `fusionsearch run` does."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

import fusionsearch.kinds  # noqa: F401  (every kernel kind registered: a saved plan may hold any of them)
from fusionsearch.errors import MeasureError, PlanError, SpecError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.plan import Plan

InputSpec = tuple[tuple[int, ...], torch.dtype | None]  # a shape, and a dtype or None for any


@dataclass(frozen=True)
class Replay:
    """A saved plan run here: whether it validates (worst output's relative error against the float64 reference,
    the tolerance it was held to), and on the gpu backend its median time (µs) with the 20/80th percentiles."""

    backend: str
    ok: bool
    rel_err: float
    tolerance: float
    reason: str
    device: str
    median_us: float | None = None
    p20_us: float | None = None
    p80_us: float | None = None


def load_saved(directory: str) -> tuple[OpGraph, Plan]:
    """The graph and plan a search wrote to `directory` (graph.json, plan.json); SpecError when a file is
    missing or unreadable, PlanError when the plan does not fit the graph. Without a GPU, Triton's interpreter
    is switched on first: the graph's extern ops import Triton."""
    from fusionsearch import settings
    from fusionsearch.graph.spec import load_graph

    settings.interpret_without_gpu()
    if not os.path.isdir(directory):
        raise SpecError(f"{directory}: no such directory; give a search's --out directory")
    missing = [f for f in ("plan.json", "graph.json") if not os.path.isfile(os.path.join(directory, f))]
    if missing:
        raise SpecError(f"{directory}: no {' or '.join(missing)} here; give a search's --out directory")
    graph = load_graph(os.path.join(directory, "graph.json"))
    return graph, read_plan(os.path.join(directory, "plan.json"), graph)


def read_plan(path: str, graph: OpGraph) -> Plan:
    """The plan saved at `path` for `graph`; a SpecError or PlanError that names the file (Plan.from_json reads
    text and cannot name it)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise SpecError(f"{path}: cannot read the plan ({e.strerror})") from None
    except UnicodeDecodeError as e:
        raise SpecError(f"{path}: not a plan (not UTF-8 text: byte {e.object[e.start]:#04x} at offset "
                        f"{e.start})") from None
    try:
        return Plan.from_json(text, graph)
    except PlanError as e:
        raise PlanError(f"{path}: {str(e).removeprefix('plan: ')}") from None
    except SpecError as e:
        raise SpecError(f"{path}: {str(e).removeprefix('plan: ')}") from None


def check_inputs(graph: OpGraph, given: Sequence[InputSpec]) -> None:
    """Refuse inputs described (shape, dtype) unlike the graph's: their count, each shape, each dtype given."""
    if len(given) != len(graph.inputs):
        raise SpecError(f"--inputs gives {len(given)} input(s); the graph takes {len(graph.inputs)}: "
                        + ", ".join(_describe(graph, n) for n in graph.inputs))
    for i, (name, (shape, dtype)) in enumerate(zip(graph.inputs, given, strict=True)):
        node = graph.node(name)
        if tuple(shape) != tuple(node.shape) or (dtype is not None and dtype != node.dtype):
            want = _describe(graph, name)
            got = "x".join(map(str, shape)) + (f":{str(dtype).removeprefix('torch.')}" if dtype else "")
            raise SpecError(f"--inputs {i} is {got}; the graph's input {want}")


def _describe(graph: OpGraph, name: str) -> str:
    node = graph.node(name)
    return f"{name} {'x'.join(map(str, node.shape))}:{str(node.dtype).removeprefix('torch.')}"


def resolve(backend: str) -> str:
    """'auto' is gpu with a CUDA GPU, else interpret; gpu without one is refused."""
    if backend not in ("auto", "gpu", "interpret"):
        raise SpecError(f"--backend {backend!r}: use gpu, interpret or auto")
    if backend == "auto":
        return "gpu" if torch.cuda.is_available() else "interpret"
    if backend == "gpu" and not torch.cuda.is_available():
        raise SpecError("--backend gpu needs a CUDA GPU; this machine has none (use --backend interpret)")
    return backend


def replay(graph: OpGraph, plan: Plan, backend: str = "auto", seed: int = 0,
           say: Callable[[str], None] | None = None) -> Replay:
    """Validate the plan on random inputs (fusionsearch.random_inputs: indices in range) and, on the gpu backend,
    time it (fusionsearch.measure.benchmark). Never raises for a plan that fails: `ok` and `reason` say.
    `say` is told each step as it starts (a full-size graph takes a minute or more in the interpreter)."""
    from fusionsearch.graph.reference import random_inputs
    from fusionsearch.measure.bench import benchmark
    from fusionsearch.measure.validate import float64_reference, output_tolerances, validate
    from fusionsearch.settings import interpreter

    backend = resolve(backend)
    device = "cuda" if backend == "gpu" else "cpu"
    step = say or (lambda text: None)
    where = torch.cuda.get_device_name() if backend == "gpu" else "cpu (Triton's interpreter)"
    if backend == "interpret" and any(graph.node(n).dtype == torch.bfloat16 for n in graph.topo_order()):
        graph, plan = _float32_copy(graph, plan)  # the interpreter miscomputes bf16; the plan is the same
        where += ", on a float32 copy of the bfloat16 graph (the interpreter miscomputes bfloat16)"
    size = sum(graph.node(n).dtype.itemsize * math.prod(graph.node(n).shape) for n in graph.inputs)
    step(f"drawing {len(graph.inputs)} random inputs ({size / 1e6:.0f} MB)")
    inputs = random_inputs(graph, seed=seed, device=device)
    tolerance = max(output_tolerances(graph), default=0.0)
    step("computing the float64 reference")
    refs = float64_reference(graph, inputs)
    kernels = f"{len(plan.kernels)} kernel{'s' if len(plan.kernels) != 1 else ''}"
    if backend == "interpret":
        step(f"running the plan's {kernels} in Triton's interpreter (minutes for a full-size graph)")
        with interpreter():
            v = validate(plan, graph, inputs, seed=seed, refs=refs)
        return Replay(backend, v.ok, v.rel_err, tolerance, v.reason, where)
    step(f"validating the plan's {kernels}")
    v = validate(plan, graph, inputs, seed=seed, refs=refs)
    if not v.ok:
        return Replay(backend, False, v.rel_err, tolerance, v.reason, where)
    step("timing it")
    t = benchmark(plan, inputs)
    if not t.ok:
        raise MeasureError(f"the plan validated but could not be timed: {t.reason}")
    return Replay(backend, True, v.rel_err, tolerance, "", where, t.median_us, t.p20_us, t.p80_us)


def _float32_copy(graph: OpGraph, plan: Plan) -> tuple[OpGraph, Plan]:
    """The graph with bfloat16 as float32 (same sizes) and the same plan on it. float32, not float16: bfloat16
    has float32's range, and a float16 copy of a full-size graph overflows where the bf16 one does not (swiglu
    at D 4096, H 11008: its down projection's sums pass 65504 on random inputs)."""
    from fusionsearch.graph.shrink import shrink

    copy = shrink(graph, cap=max((s for n in graph for s in n.shape), default=1), bf16_as="float32")
    if copy is None:
        raise SpecError("this bfloat16 plan cannot be checked on a CPU (no float32 copy of its graph); run it on a GPU")
    return copy, Plan(copy, plan.kernels, plan.recompute).check()  # the same node names: the same kernels
