"""The reference executor (eager PyTorch, op by op) and realistic random inputs."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
import torch

from fusionsearch.errors import GraphError, MeasureError
from fusionsearch.graph.opgraph import Node, OpGraph
from fusionsearch.graph.registry import get_op

# Ops whose domain is positive reals: inputs that feed them get positive random values.
_POSITIVE_DOMAIN = {"log", "sqrt", "rsqrt", "pow"}


def check_inputs(g: OpGraph, inputs: Sequence[torch.Tensor]) -> None:
    """Refuse inputs whose count, shape or dtype does not match the graph's inputs, naming the first mismatch."""
    names = g.inputs
    if len(inputs) != len(names):
        raise MeasureError(f"the graph takes {len(names)} inputs ({', '.join(names)}), got {len(inputs)}")
    for name, t in zip(names, inputs, strict=True):
        node = g.node(name)
        if not isinstance(t, torch.Tensor):
            raise MeasureError(f"input {name!r} must be a tensor, got {type(t).__name__}")
        if tuple(t.shape) != node.shape or t.dtype != node.dtype:
            raise MeasureError(f"input {name!r} must be {list(node.shape)} {node.dtype}, got {list(t.shape)} {t.dtype}")


@dataclass(frozen=True)
class Replacement:
    """One node's value computed by `compute(values of reads, float64)` instead of by its op, and the nodes
    `skips` never evaluated (they feed only that node): how a pattern whose op-by-op values do not fit in
    memory is evaluated (a mixture-of-experts bmm's gathered expert weights; kinds say which patterns)."""

    reads: tuple[str, ...]
    skips: tuple[str, ...]
    compute: Callable[[Sequence[torch.Tensor], bool], torch.Tensor]


def reference(g: OpGraph, inputs: Sequence[torch.Tensor], float64: bool = False,
              replaced: Mapping[str, Replacement] | None = None) -> list[torch.Tensor]:
    """Run the graph op by op in eager PyTorch; returns the outputs in `g.outputs` order.

    With `float64=True` every floating value is computed in float64 and casts between floating dtypes are
    exact: the ideal result that generated kernels are validated against. Each value is dropped after its
    last use, so the peak is the live values, not the whole graph's (a Mixtral layer's gathered expert weights
    in float64 at 16 tokens: 45 GB all kept, 15 GB at a time). Where the GPU runs out of memory for it (a
    search's process beside a benchmark's: 8 of 8 trials failed so on an H100), it runs on the host and its
    outputs come back to the inputs' device: once per search, slower, never wrong. `replaced`: nodes computed
    otherwise (Replacement), checked to read only what precedes them and to skip only what feeds them alone.
    """
    check_inputs(g, inputs)
    replaced = dict(replaced or {})
    _check_replacements(g, replaced)
    try:
        return _evaluate(g, inputs, float64, replaced)
    except torch.OutOfMemoryError:
        device = accelerator(inputs)
        if device is None:
            raise
    torch.cuda.empty_cache()  # what the failed attempt left cached
    return [out.to(device) for out in _evaluate(g, [t.cpu() for t in inputs], float64, replaced)]


def apply_op(node: Node, args: Sequence[torch.Tensor], float64: bool) -> torch.Tensor:
    """`node`'s op on `args` as the reference computes it: in float64 every floating result is float64 and a
    cast between floating dtypes is exact."""
    if float64 and node.op == "cast" and node.dtype.is_floating_point:
        return args[0].double()
    out: torch.Tensor = get_op(node.op).torch_ref(list(args), node.attrs)
    return out.double() if float64 and out.dtype.is_floating_point else out


def feeds_only(g: OpGraph, n: str, inside: Collection[str]) -> bool:
    """Whether `n`'s value is used by nodes of `inside` alone: not an output, read by nothing else (what a
    replacement may skip)."""
    return n not in g.outputs and set(g.nx.successors(n)) <= set(inside)


def _check_replacements(g: OpGraph, replaced: Mapping[str, Replacement]) -> None:
    for name, r in replaced.items():
        before = nx.ancestors(g.nx, name)
        for n in r.reads:
            if n not in before:
                raise GraphError(f"the reference's replacement of {name!r} reads {n!r}, which does not precede it")
        inside = {*r.skips, name}
        for n in r.skips:
            if n not in before or not feeds_only(g, n, inside):
                others = set(g.nx.successors(n)) - inside
                raise GraphError(f"the reference's replacement of {name!r} skips {n!r}, which feeds "
                                 f"{sorted(others) or 'the outputs'} too")


def accelerator(inputs: Sequence[torch.Tensor]) -> torch.device | None:
    """The device off the host that the inputs live on (None: all on the host, nothing to fall back to)."""
    return next((t.device for t in inputs if t.device.type != "cpu"), None)


def _evaluate(g: OpGraph, inputs: Sequence[torch.Tensor], float64: bool,
              replaced: Mapping[str, Replacement]) -> list[torch.Tensor]:
    """reference()'s op-by-op run on the inputs' device."""
    skipped = {n for r in replaced.values() for n in r.skips}

    def reads(node: Node) -> Sequence[str]:
        if node.name in replaced:
            return replaced[node.name].reads
        return () if node.name in skipped else node.inputs

    last_use: dict[str, str] = {}
    for node in g:
        for i in reads(node):
            last_use[i] = node.name
    keep = set(g.outputs)
    values: dict[str, torch.Tensor] = dict(zip(g.inputs, inputs, strict=True))
    # in float64, an input is cast when first read, so that its copy lives from there to its last use only (all
    # cast up front, a full-size swiglu's weights took 1.1 GB of float64 at once beside the inputs themselves)
    uncast = {n for n, t in values.items() if float64 and t.dtype.is_floating_point}
    for node in g:
        if node.op == "input" or node.name in skipped:
            continue
        for i in uncast.intersection(reads(node)):
            values[i] = values[i].double()
            uncast.discard(i)
        args: list[Any] = [values[i] for i in reads(node)]
        if node.name in replaced:
            out = replaced[node.name].compute(args, float64)
        else:
            out = apply_op(node, args, float64)
        values[node.name] = out
        del args, out
        for i in set(reads(node)):
            if last_use[i] == node.name and i not in keep:
                del values[i]
    return [values[o].double() if o in uncast else values[o] for o in g.outputs]


def index_bounds(g: OpGraph) -> dict[str, int]:
    """For each graph input used as gather indices, the number of rows it may index."""
    bounds: dict[str, int] = {}
    for node in g:
        if node.kind == "indexing":
            table, idx = node.inputs[0], node.inputs[1]
            rows = g.node(table).shape[0]
            for src in _input_sources(g, idx):
                bounds[src] = min(bounds.get(src, rows), rows)
    return bounds


def shift_bounds(g: OpGraph) -> dict[str, int]:
    """For each graph input used as a shift amount, the bit width it shifts within: realistic amounts are in
    [0, bits) (an unpack's 0 and 4), where random bytes would mostly shift everything out."""
    bounds: dict[str, int] = {}
    for node in g:
        if node.op in ("bitwise_right_shift", "bitwise_left_shift") and len(node.inputs) == 2:
            bits = node.dtype.itemsize * 8
            for src in _input_sources(g, node.inputs[1]):
                bounds[src] = min(bounds.get(src, bits), bits)
    return bounds


def _input_sources(g: OpGraph, name: str) -> list[str]:
    node = g.node(name)
    if node.op == "input":
        return [name]
    if node.kind == "layout" or node.op == "cast":
        return _input_sources(g, node.inputs[0])
    return []


def _positive_inputs(g: OpGraph) -> set[str]:
    positive: set[str] = set()
    for node in g:
        if node.op in _POSITIVE_DOMAIN or node.op == "div":
            # The base of a pow and a denominator must stay away from zero and negatives.
            src = node.inputs[-1] if node.op == "div" and len(node.inputs) == 2 else node.inputs[0]
            positive |= {a for a in nx.ancestors(g.nx, src) | {src} if g.node(a).op == "input"}
    return positive


def random_inputs(g: OpGraph, seed: int = 0, device: str | torch.device = "cpu") -> list[torch.Tensor]:
    """Valid, realistic inputs: floats ~N(0,1) (positive where the graph takes a log, root or quotient),
    int8 over its full range, gather indices uniform over the rows they index (never all zeros), shift amounts
    within the bit width.
    Drawn on `device` itself (a GPU draws a gigabyte in milliseconds); deterministic per seed and device."""
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed)
    kw = {"generator": gen, "device": device}
    bounds = index_bounds(g)
    shifts = shift_bounds(g)
    positive = _positive_inputs(g)
    out = []
    for name in g.inputs:
        node = g.node(name)
        shape, dt = node.shape, node.dtype
        if name in bounds:
            if bounds[name] <= 0:
                raise GraphError(f"input {name!r} indexes an empty table; give the table at least one row")
            t = torch.randint(0, bounds[name], shape, dtype=torch.int64, **kw).to(dt)
        elif name in shifts:
            t = torch.randint(0, shifts[name], shape, dtype=torch.int64, **kw).to(dt)
        elif dt.is_floating_point:
            t = torch.rand(shape, **kw) + 0.5 if name in positive else torch.randn(shape, **kw)
            t = t.to(dt)
        elif dt == torch.bool:
            t = torch.rand(shape, **kw) < 0.5
        else:
            info = torch.iinfo(dt)
            lo, hi = (info.min, info.max + 1) if dt in (torch.int8, torch.uint8) else (-100, 101)
            t = torch.randint(lo, hi, shape, dtype=torch.int64, **kw).to(dt)
        out.append(_with_strides(t, node.strides))
    return out


def zero_inputs(g: OpGraph, device: str | torch.device = "cpu") -> list[torch.Tensor]:
    """Zeros with the graph's shapes, dtypes and strides (index 0 is always in range): enough to compile
    and launch a plan, at no cost to draw."""
    return [_with_strides(torch.zeros(g.node(n).shape, dtype=g.node(n).dtype, device=device), g.node(n).strides)
            for n in g.inputs]


def _with_strides(t: torch.Tensor, strides: tuple[int, ...]) -> torch.Tensor:
    """Lay `t` out with the graph's strides (a transposed weight stays transposed)."""
    if tuple(t.stride()) == strides or t.numel() == 0:
        return t
    if any(s == 0 for s in strides):  # a broadcast input: keep it dense, the values are the same
        return t
    storage = sum((s - 1) * st for s, st in zip(t.shape, strides, strict=True)) + 1
    buf = torch.empty(storage, dtype=t.dtype, device=t.device)
    view = buf.as_strided(t.shape, strides)
    view.copy_(t)
    return view
