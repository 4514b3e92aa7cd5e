"""Timing on the GPU: triton.testing.do_bench (median, L2 flushed) of the whole compiled plan."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from fusionsearch.errors import MeasureError, failure_reason


@dataclass(frozen=True)
class Timing:
    """Median and 20/80th percentile times (µs) of one call; ok False with a reason when it could not run."""

    median_us: float
    p20_us: float = float("nan")
    p80_us: float = float("nan")
    ok: bool = True
    reason: str = ""
    peak_bytes: int = 0


def time_callable(fn: Callable[[], object], warmup_ms: int = 25, rep_ms: int = 100) -> Timing:
    """Time `fn` with do_bench on the current GPU; raises MeasureError without one."""
    if not torch.cuda.is_available():
        raise MeasureError("timing needs a CUDA GPU; on the CPU use the 'interpret' or 'model' backend")
    import triton.testing

    fn()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    med, p20, p80 = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
    return Timing(med * 1e3, p20 * 1e3, p80 * 1e3, peak_bytes=int(peak))


def benchmark(plan: object, inputs: Sequence[torch.Tensor], warmup_ms: int = 25, rep_ms: int = 100,
              **options: object) -> Timing:
    """Time the plan's compiled callable on `inputs`; a kernel that fails to compile or launch gives a failed
    Timing with the reason instead of raising."""
    try:
        compiled = plan.compile(**options)  # type: ignore[attr-defined]
        run = compiled.module.run
        return time_callable(lambda: run(*inputs), warmup_ms, rep_ms)
    except MeasureError:
        raise
    except Exception as e:
        return Timing(float("inf"), ok=False, reason=failure_reason(e))
