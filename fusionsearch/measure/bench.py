"""Timing on the GPU: medians of timed calls, L2 flushed clean before each (l2_flush), of the whole compiled
plan, or of each of its kernels alone (what the learned cost model is trained on)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from fusionsearch.codegen.runtime import Built, compile_plan, naming_source
from fusionsearch.errors import MeasureError, failure_reason
from fusionsearch.measure import l2_flush
from fusionsearch.measure.l2_flush import quantiles


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
    """Time `fn` on the current GPU (median and 20/80th percentiles, L2 flushed clean before each call);
    raises MeasureError without a GPU."""
    if not torch.cuda.is_available():
        raise MeasureError("timing needs a CUDA GPU; on the CPU use the 'interpret' or 'model' backend")
    fn()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    med, p20, p80 = quantiles(l2_flush.call_times_ms(fn, warmup_ms, rep_ms), [0.5, 0.2, 0.8])
    return Timing(med * 1e3, p20 * 1e3, p80 * 1e3, peak_bytes=int(peak))


def time_interleaved(fns: dict[str, Callable[[], object]], rounds: int = 5, warmup_ms: int = 5,
                     rep_ms: int = 20) -> dict[str, list[float]]:
    """Per callable, its median (µs, L2 flushed clean before each call) in each of `rounds` rounds that time
    every callable once, each round starting one further along: compared callables meet the GPU's clock and
    thermal state alike, where one pass times each at a different moment (the H200 timed one compute-bound
    kernel 206 and 223 µs a minute apart). A callable that raises is left out of the rounds that follow."""
    if not torch.cuda.is_available():
        raise MeasureError("timing needs a CUDA GPU; on the CPU use the 'interpret' or 'model' backend")
    keys = list(fns)
    out: dict[str, list[float]] = {k: [] for k in keys}
    failed: set[str] = set()
    for r in range(rounds if keys else 0):
        shift = r % len(keys)
        for key in keys[shift:] + keys[:shift]:
            if key in failed:
                continue
            try:
                median_ms = quantiles(l2_flush.call_times_ms(fns[key], warmup_ms, rep_ms), [0.5])[0]
            except Exception:
                failed.add(key)
                continue
            out[key].append(float(median_ms) * 1e3)
    return out


def benchmark(plan: object, inputs: Sequence[torch.Tensor], warmup_ms: int = 25, rep_ms: int = 100,
              built: Built | None = None, **options: object) -> Timing:
    """Time the plan's compiled callable on `inputs` (`built`: its module generated already); a kernel that fails
    to compile or launch gives a failed Timing with the reason instead of raising."""
    compiled = None
    try:
        compiled = compile_plan(plan, built, **options)
        run = compiled.module.run
        return time_callable(lambda: run(*inputs), warmup_ms, rep_ms)
    except MeasureError:
        raise
    except Exception as e:
        return Timing(float("inf"), ok=False, reason=naming_source(failure_reason(e), compiled))


def kernel_times(plan: object, inputs: Sequence[torch.Tensor], warmup_ms: int = 5, rep_ms: int = 25,
                 timer: Callable[..., Timing] | None = None, built: Built | None = None) -> list[float]:
    """Median time (µs) of each kernel of the plan run alone, in plan order; raises what compiling or
    launching raises. `timer` replaces time_callable (the collector's CPU stand-in); `built`: the plan's module
    generated already."""
    steps, _ = compile_plan(plan, built).module.steps(*inputs)
    timer = timer or time_callable
    return [timer(step, warmup_ms, rep_ms).median_us for step in steps]


COPY_BYTES = 1 << 30  # the bandwidth probe copies 1 GiB: far beyond L2, long enough to hide launch cost
PEAK_SIZE = 8192  # the compute probe: one PEAK_SIZE^3 bf16 mm


def measure_ceilings() -> dict[str, float]:
    """This GPU's DRAM bandwidth (bytes/s, a device-to-device copy: read + write) and bf16 matmul peak
    (flop/s), timed with the harness every other figure uses, so that a roofline floor is in that run's units."""
    copy, mm = _copy_us(), _mm_us()
    torch.cuda.empty_cache()
    return {"bandwidth_bytes_per_s": 2 * COPY_BYTES / (copy * 1e-6), "copy_us": copy,
            "peak_flops": 2 * PEAK_SIZE**3 / (mm * 1e-6), "mm_us": mm}


def _copy_us() -> float:
    src = torch.empty(COPY_BYTES // 2, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    return time_callable(lambda: dst.copy_(src)).median_us


def _mm_us() -> float:
    a = torch.randn(PEAK_SIZE, PEAK_SIZE, dtype=torch.bfloat16, device="cuda")
    b = torch.randn_like(a)
    return time_callable(lambda: torch.mm(a, b)).median_us
