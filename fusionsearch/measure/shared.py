"""Measuring workers shared by the searches of one process (the torch.compile backend's regions): one
measurement worker, given each search's graph in turn (MeasureWorker.set_graph), and one compile pool, started
once instead of once a search; each start imports torch and sets up the GPU, a large part of a small region's
tuning. A search run inside `shared_workers()` measures through them and leaves them open; the block closes them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch

from fusionsearch.measure.isolate import CompilePool, MeasureWorker


class SharedWorkers:
    """The workers, each started when a search first asks for it."""

    def __init__(self, device: str = "cuda") -> None:
        self.device = device
        self._measure: MeasureWorker | None = None
        self._pools: dict[int | None, CompilePool] = {}

    def measure_worker(self, graph_spec: dict[str, Any], inputs: Sequence[torch.Tensor] | None, seed: int,
                       timeout_s: float) -> MeasureWorker:
        """The measurement worker, set to judge plans of this graph on these inputs (None: drawn from `seed`)."""
        if self._measure is None:
            self._measure = MeasureWorker(device=self.device, timeout_s=timeout_s)
        self._measure.timeout_s = timeout_s
        self._measure.set_graph(graph_spec, inputs, seed)
        return self._measure

    def compile_pool(self, workers: int | None) -> CompilePool:
        """The compile pool of this many workers (None: the pool's default)."""
        if workers not in self._pools:
            self._pools[workers] = CompilePool(workers, device=self.device)
        return self._pools[workers]

    def close(self) -> None:
        measure, pools, self._measure, self._pools = self._measure, list(self._pools.values()), None, {}
        for pool in pools:
            pool.close()
        if measure is not None:
            measure.close()


_CURRENT: ContextVar[SharedWorkers | None] = ContextVar("fusionsearch_shared_workers", default=None)


def current() -> SharedWorkers | None:
    """The workers of the enclosing `shared_workers()` block, if any."""
    return _CURRENT.get()


@contextmanager
def shared_workers(device: str = "cuda") -> Iterator[SharedWorkers]:
    """Searches inside the block share one measurement worker and one compile pool (closed when it ends)."""
    workers = SharedWorkers(device)
    token = _CURRENT.set(workers)
    try:
        yield workers
    finally:
        _CURRENT.reset(token)
        workers.close()
