"""Replaying a compiled step from a CUDA graph, as torch.compile(mode="reduce-overhead") does: a decode step
launches a few hundred small kernels, and launching them one by one from Python costs more than running them.

The first call runs the step as it is (it compiles and allocates what the step keeps: Triton kernels, split-K
workspaces, cuBLAS handles). The second captures it: an input found at the same address as in the first call
(parameters, buffers, a KV cache written in place) is read where it lies; every other input is copied into a
static buffer before each replay, and, where the step writes it in place, copied back after. Each later call
replays. An input read in place that later arrives elsewhere is copied from then on (one capture more, up
to MAX_GRAPHS); past that, or where capture fails, the step runs without a graph, with the reason logged
once."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from fusionsearch.errors import failure_reason

__all__ = ["GraphedStep", "capture"]

log = logging.getLogger("fusionsearch.backend")

MAX_GRAPHS = 4


class _Captured:
    """One capture: the graph, the static buffers of copied inputs (None where read in place), the outputs."""

    def __init__(self, step: Callable[..., Sequence[torch.Tensor]], args: Sequence[torch.Tensor],
                 in_place: Sequence[bool]) -> None:
        self.static = [None if keep else torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device)
                       for a, keep in zip(args, in_place, strict=True)]
        for buf, a in zip(self.static, args, strict=True):
            if buf is not None:
                buf.copy_(a)
        feed = [a if buf is None else buf for a, buf in zip(args, self.static, strict=True)]
        self.graph, self.outputs = capture(lambda: list(step(*feed)))


def capture(fn: Callable[[], list[torch.Tensor]]) -> tuple[Any, list[torch.Tensor]]:
    """`fn`'s launches recorded in a CUDA graph (nothing runs until the graph is replayed), and the tensors it
    returns, which every replay overwrites."""
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    # thread_local: a CUDA call another thread makes meanwhile (Inductor's compile workers, right after a
    # compile inside the backend) does not invalidate the capture, as it did the step race's ("operation not
    # permitted when stream is capturing"); only this thread's unsafe calls fail it.
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        outputs = fn()
    torch.cuda.synchronize()
    return graph, outputs


class GraphedStep:
    """`step(*args) -> outputs`, replayed from a CUDA graph; `writes` are the indices of the arguments the step
    writes in place. Outputs are returned as fresh tensors (a replay overwrites the graph's own)."""

    def __init__(self, step: Callable[..., Sequence[torch.Tensor]], writes: Sequence[int] = ()) -> None:
        self.step = step
        self.writes = tuple(writes)
        self.captured: _Captured | None = None
        self.captures = 0
        self.first: list[tuple[int, tuple[int, ...]]] | None = None
        self.in_place: set[int] = set()
        self.disabled = ""

    def __call__(self, *args: torch.Tensor) -> list[torch.Tensor]:
        if self.disabled:
            return list(self.step(*args))
        where = [(a.data_ptr(), tuple(a.stride())) for a in args]
        if self.first is None:  # the first call runs as it is
            self.first = where
            return list(self.step(*args))
        if self.captured is None:  # read in place: what the second call finds where the first call had it
            self.in_place = {i for i, w in enumerate(where) if w == self.first[i]}
        moved = {i for i in self.in_place if where[i] != self.first[i]}
        if self.captured is None or moved:
            self.in_place -= moved  # an input that moved is copied from now on
            self.first = where
            if self.captures >= MAX_GRAPHS:
                return self._disable(args, f"inputs read in place moved {MAX_GRAPHS} times")
            self.captured, self.captures = None, self.captures + 1
            try:
                self.captured = _Captured(self.step, args, [i in self.in_place for i in range(len(args))])
            except Exception as e:  # an op that cannot be captured (a host sync, a CPU tensor): run without
                return self._disable(args, failure_reason(e, 300))
        return self._replay(self.captured, args)

    def _replay(self, captured: _Captured, args: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        for buf, a in zip(captured.static, args, strict=True):
            if buf is not None:
                buf.copy_(a)
        captured.graph.replay()
        for i in self.writes:
            buf = captured.static[i]
            if buf is not None:
                args[i].copy_(buf)
        return [o.clone() for o in captured.outputs]

    def _disable(self, args: Sequence[Any], reason: str) -> list[torch.Tensor]:
        self.disabled = reason
        self.captured = None
        log.warning("fusionsearch backend: the step runs without a CUDA graph: %s", reason)
        return list(self.step(*args))
