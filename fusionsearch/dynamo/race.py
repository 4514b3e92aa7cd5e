"""Inductor's own code for a region, raced against the searched plan: the backend is never slower than PyTorch
region by region, by construction.

For each matmul region the backend compiles the region's ops with Inductor in the mode it is asked for
(`max-autotune` by default: what PyTorch's best mode would run for it, cuBLAS among its choices), times it side
by side with the searched plan on the region's own input values, and keeps the faster. With CUDA graphs on,
both are timed replayed from a CUDA graph, as the compiled step will run them, so that the host cost of
launching neither decides the race."""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from fusionsearch.errors import SpecError, failure_reason
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.reference import reference

__all__ = ["INDUCTOR_MODES", "RegionChoice", "Timer", "inductor_region", "interleaved_timer", "race"]

log = logging.getLogger("fusionsearch.backend")

INDUCTOR_MODES = ("default", "max-autotune")
OURS, INDUCTOR = "fusionsearch", "inductor"

Timer = Callable[[dict[str, Callable[[], object]]], dict[str, float]]
"""Times candidates (name -> zero-argument callable) and returns name -> µs; a candidate left out failed."""


@dataclass(frozen=True)
class RegionChoice:
    """The race of one distinct region: both times (µs, None where that candidate failed, with `reason`),
    which was kept, and the fusion the searched plan decided (one line per kernel)."""

    label: str
    chosen: str
    ours_us: float | None
    inductor_us: float | None
    fusion: str
    mode: str
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: Any) -> RegionChoice | None:
        """The record stored in the plan cache, or None when it is not one (another format, damaged)."""
        try:
            choice = RegionChoice(**d)
        except TypeError:
            return None
        ok = (choice.chosen in (OURS, INDUCTOR)
              and all(isinstance(v, str) for v in (choice.label, choice.fusion, choice.mode, choice.reason))
              and all(t is None or (isinstance(t, int | float) and not isinstance(t, bool))
                      for t in (choice.ours_us, choice.inductor_us)))
        return choice if ok else None


def inductor_options(mode: str, cudagraphs: bool = False) -> dict[str, Any]:
    """Inductor's settings for `mode` as torch.compile(mode=...) sets them, with Inductor's own CUDA graphs
    (cudagraph trees) only where `cudagraphs` asks for them: a region or the backend's step is replayed from a
    graph of the backend's own; Inductor's whole-graph step, raced against it, as torch.compile replays it."""
    if mode not in INDUCTOR_MODES:
        raise SpecError(f"inductor mode {mode!r}: use {' or '.join(INDUCTOR_MODES)}")
    from torch._inductor import list_mode_options

    return {**{k: v for k, v in list_mode_options(mode).items() if k != "triton.cudagraphs"},
            "triton.cudagraphs": cudagraphs}


def inductor_region(g: OpGraph, inputs: Sequence[torch.Tensor], mode: str) -> Callable[..., list[torch.Tensor]]:
    """Inductor's compiled code for the region graph `g` (its ops as eager PyTorch runs them), in `mode`."""
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx
    from torch.fx.experimental.proxy_tensor import make_fx

    def ops(*tensors: torch.Tensor) -> list[torch.Tensor]:
        return list(reference(g, tensors))

    # Traced and compiled outside Dynamo's compile in progress: compile_fx takes the active tracing context's fake
    # mode, whose ShapeEnv is Dynamo's; max-autotune's mm decomposition at M=1 then left a guard on sizes with
    # no source there, and Dynamo failed to build the frame's guards (IndexError in produce_guards, H100 run of
    # 2026-12-07 g). With no context compile_fx makes its own.
    with torch._guards.tracing(None), config.patch(inductor_options(mode)):
        traced = make_fx(ops)(*inputs)
        compiled = compile_fx(traced, list(inputs))
    return lambda *tensors: list(compiled(*tensors))


def race(g: OpGraph, label: str, ours: Callable[..., list[torch.Tensor]] | None, inputs: Sequence[torch.Tensor],
         mode: str, timer: Timer, fusion: str, ours_failed: str = "") -> tuple[RegionChoice, Callable[..., Any] | None]:
    """Time the searched plan's module (`ours`; None where it failed to build, `ours_failed` saying why) against
    Inductor's code for the region; returns the choice and Inductor's compiled callable (None where it failed)."""
    reasons = [f"fusionsearch: {ours_failed}"] if ours_failed else []
    try:
        theirs: Callable[..., Any] | None = inductor_region(g, inputs, mode)
    except Exception as e:  # Inductor cannot compile this region: ours runs it
        theirs = None
        reasons.append(f"inductor: {failure_reason(e, 200)}")
    candidates: dict[str, Callable[[], object]] = {}
    if ours is not None:
        candidates[OURS] = lambda: ours(*inputs)
    if theirs is not None:
        candidates[INDUCTOR] = lambda: theirs(*inputs)
    times = timer(candidates) if candidates else {}
    for name in candidates:
        if name not in times:
            reasons.append(f"{name}: failed when timed")
    if not times:
        raise RuntimeError(f"region {label}: neither the searched plan nor Inductor's code ran ({'; '.join(reasons)})")
    chosen = min(times, key=times.__getitem__)
    choice = RegionChoice(label, chosen, times.get(OURS), times.get(INDUCTOR), fusion, mode, "; ".join(reasons))
    log.info("fusionsearch backend: region %s: fusionsearch %s us, inductor %s us: %s", label,
             us_text(choice.ours_us), us_text(choice.inductor_us), chosen)
    return choice, theirs


def interleaved_timer(graphed: bool, rounds: int = 3) -> Timer:
    """The GPU timer: each candidate replayed from a CUDA graph when `graphed` (else called directly), timed in
    interleaved rounds (fusionsearch.measure.bench.time_interleaved) and summarised by the median of rounds."""
    from fusionsearch.measure.bench import time_interleaved

    def timer(candidates: dict[str, Callable[[], object]]) -> dict[str, float]:
        runnable: dict[str, Callable[[], object]] = {}
        for name, fn in candidates.items():
            try:
                runnable[name] = _graphed(fn) if graphed else _warmed(fn)
            except Exception as e:  # this candidate fails: the other is kept
                log.warning("fusionsearch backend: %s candidate failed: %s", name, failure_reason(e, 200))
        times = time_interleaved(runnable, rounds=rounds)
        return {name: statistics.median(ts) for name, ts in times.items() if ts}

    return timer


def _warmed(fn: Callable[[], object]) -> Callable[[], object]:
    fn()
    torch.cuda.synchronize()
    return fn


def _graphed(fn: Callable[[], object]) -> Callable[[], object]:
    """`fn` captured in a CUDA graph (after one call outside it, which compiles and allocates what it keeps);
    returns the graph's replay."""
    from fusionsearch.dynamo.cudagraph import capture

    fn()
    graph, _ = capture(lambda: [fn()])
    return graph.replay


def us_text(value: float | None) -> str:
    """A time (µs) as the race reports it: one decimal, '-' for a candidate that did not run."""
    return "-" if value is None else f"{value:.1f}"
