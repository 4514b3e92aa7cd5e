"""How a graph's regions are joined into one step: every region's ops traced into one Inductor graph, the
tuned regions that kept their plan each one call of torch.ops.fusionsearch.region (dynamo/region_op.py), or
the regions called one by one (the interpreter, the eager fallback, or where Inductor cannot compile the
graph); and what the step writes into its inputs in place written back as eager PyTorch writes it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from fusionsearch.dynamo.race import inductor_options
from fusionsearch.dynamo.regions import Region
from fusionsearch.graph.capture import CapturedProgram
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.reference import reference

__all__ = ["RegionStep", "glue", "inductor_whole", "lazy_inductor", "one_by_one", "write_back", "written_inputs"]


@dataclass(frozen=True)
class RegionStep:
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


def glue(region: Region) -> Callable[..., list[torch.Tensor]]:
    """A glue region's ops in eager PyTorch, dense outputs as the matmul regions' plans were searched on.
    With the Inductor fallback the whole graph is compiled around the tuned regions (inductor_whole), these
    ops included; this runs them in the interpreter, with the eager fallback, or when that fails."""
    g = region.graph

    def run(*inputs: torch.Tensor) -> list[torch.Tensor]:
        return [t.contiguous() for t in reference(g, inputs)]

    return run


def lazy_inductor(g: OpGraph, mode: str) -> Callable[..., list[torch.Tensor]]:
    """Inductor's code for a region that a previous process raced, compiled at its first call (compiling the
    whole graph inlines such regions, so it is only needed when that fails or in the interpreter)."""
    from fusionsearch.dynamo.race import inductor_region

    compiled: list[Callable[..., list[torch.Tensor]]] = []

    def run(*tensors: torch.Tensor) -> list[torch.Tensor]:
        if not compiled:
            compiled.append(inductor_region(g, tensors, mode))
        return compiled[0](*tensors)

    return run


def written_inputs(program: CapturedProgram) -> list[int]:
    """Indices of the graph inputs the program writes in place."""
    return [program.graph.inputs.index(name) for name in program.mutated]


def write_back(program: CapturedProgram, args: Sequence[torch.Tensor], outputs: list[torch.Tensor]
                ) -> list[torch.Tensor]:
    """Write each in-place result into its input, as eager PyTorch did; returns what the program returns."""
    for index, value in zip(written_inputs(program), outputs[program.returned:], strict=True):
        if value is not args[index]:
            args[index].copy_(value)
    return outputs[:program.returned]


def one_by_one(program: CapturedProgram, steps: Sequence[RegionStep]) -> Callable[..., list[torch.Tensor]]:
    """The regions called in order, each on the values it reads, in-place results written back at the end."""
    g = program.graph

    def call(*args: torch.Tensor) -> list[torch.Tensor]:
        values = dict(zip(g.inputs, args, strict=True))
        for step in steps:
            values.update(zip(step.outputs, step.run(*[values[i] for i in step.inputs]), strict=True))
        return write_back(program, args, [values[o] for o in g.outputs])

    return call


def inductor_whole(program: CapturedProgram, steps: Sequence[RegionStep], values: list[torch.Tensor],
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
        return write_back(program, args, [known[o] for o in g.outputs])

    with torch._guards.tracing(None), config.patch(inductor_options(mode)):  # outside Dynamo's: see race.py
        traced = make_fx(whole)(*values)
        return compile_fx(traced, values)
