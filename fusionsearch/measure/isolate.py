"""Compiling candidate plans in worker processes, in parallel across CPU cores.

Triton compiles a kernel at its first launch and keeps the binary in its on-disk cache; a worker that builds
and launches a plan once leaves it there, so the measuring process then loads it without compiling. Workers
are spawned (never forked: a forked CUDA context is unusable) and a failing compile is returned as a reason."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
from collections.abc import Sequence
from typing import Any


def _warm(spec: dict[str, Any], plan_json: str, device: str) -> str:
    """In a worker: build the graph and plan, run the plan once (compiling its kernels); '' or the reason."""
    try:
        import torch

        from fusionsearch.graph.reference import zero_inputs
        from fusionsearch.graph.spec import graph_from_dict
        from fusionsearch.search.plan import Plan

        g = graph_from_dict(spec)
        plan = Plan.from_json(plan_json, g)
        inputs = zero_inputs(g, device=device)
        plan.compile()(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        return ""
    except Exception as e:  # the reason travels back; the trial fails, not the search
        from fusionsearch.errors import failure_reason

        return failure_reason(e)


class CompilePool:
    """A pool of spawned worker processes warming Triton's cache for batches of plans."""

    def __init__(self, workers: int | None = None, device: str = "cuda", timeout_s: float = 300.0) -> None:
        self.workers = workers or max(1, min(8, (os.cpu_count() or 2) - 1))
        self.device, self.timeout_s = device, timeout_s
        self._pool: cf.ProcessPoolExecutor | None = None

    def _executor(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            self._pool = cf.ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"))
        return self._pool

    def warm(self, spec: dict[str, Any], plans_json: Sequence[str]) -> list[str]:
        """Compile each plan in a worker; per plan '' (ready) or why it failed (compile error, timeout, crash)."""
        if not plans_json:
            return []
        futures = [self._executor().submit(_warm, spec, p, self.device) for p in plans_json]
        out = []
        for f in futures:
            try:
                out.append(f.result(timeout=self.timeout_s))
            except cf.TimeoutError:
                out.append(f"compile timed out after {self.timeout_s:.0f} s")
            except Exception as e:  # a worker that died (segfault, illegal address) is replaced next batch
                out.append(f"compile worker failed: {type(e).__name__}: {e}"[:500])
                self.close()
        return out

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
