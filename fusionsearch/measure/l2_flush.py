"""GPU timing with a clean L2 flush between calls. triton.testing.do_bench flushes L2 by zeroing 256 MB, which
leaves L2 full of dirty lines: the timed kernel then pays their write-back, a write it never made. On the H100
a read of a 67 MB int8 weight took 34.6 µs after do_bench's flush and 25.7 µs after a flush that reads 256 MB
(benchmarks/results/h100-2026-12-05e-clean-flush): the dirty flush adds ~9 µs to every weight-streaming
kernel, a third of a decode GEMV. Here L2 is flushed by reading a 256 MB buffer, so each timed call starts with
L2 cold and clean, as a model's decode kernels find it after the kernels before them read their weights."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

FLUSH_BYTES = 256 << 20  # five times the 50 MB L2 of an H100/H200: every line the timed call could hit is evicted
FLUSH_BLOCK = 1024  # int32 words a program reads an iteration
FLUSH_PROGRAMS = 1056  # eight programs an SM on a 132-SM GPU: the flush itself streams at the read bandwidth


def read_words() -> Any:
    """The flush's Triton kernel, imported on first use: importing triton.language before the CLI switches on
    Triton's interpreter (TRITON_INTERPRET, set after fusionsearch is imported) would leave Triton's own library
    functions compiled for the GPU, and every interpreted kernel calling them would fail."""
    from fusionsearch.measure.l2_flush_kernel import read_words_kernel

    return read_words_kernel


class CleanFlush:
    """Reads `nbytes` of device memory on each call (a multiple of FLUSH_BLOCK words); `last` holds the
    programs' xors of the words read, so that a test can see every word was read."""

    def __init__(self, nbytes: int = FLUSH_BYTES, device: str = "cuda", programs: int = FLUSH_PROGRAMS) -> None:
        words = nbytes // 4
        if words % FLUSH_BLOCK:
            raise ValueError(f"the flush reads whole blocks of {FLUSH_BLOCK * 4} bytes; got {nbytes}")
        self.words = torch.zeros(words, dtype=torch.int32, device=device)
        self.last = torch.zeros(programs, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        read_words()[(self.last.numel(),)](self.words, self.last, self.words.numel(), FLUSH_BLOCK)


@functools.cache
def _flush() -> CleanFlush:
    """The timer's flush: one 256 MB buffer a process, made on the first timed call."""
    return CleanFlush()


def call_times_ms(fn: Callable[[], object], warmup_ms: float = 25, rep_ms: float = 100,
                  flush: Callable[[], None] | None = None) -> list[float]:
    """Each timed call's device time (ms), L2 flushed clean before each: the calls repeat for about `rep_ms`
    after `warmup_ms` of warm-up, as do_bench counts them (its estimate includes the flush)."""
    flush = flush or _flush()
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        flush()
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate_ms = max(start.elapsed_time(end) / 5, 1e-3)
    for _ in range(max(1, int(warmup_ms / estimate_ms))):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(max(1, int(rep_ms / estimate_ms)))]
    for begin, done in events:
        flush()
        begin.record()
        fn()
        done.record()
    torch.cuda.synchronize()
    return [begin.elapsed_time(done) for begin, done in events]


def quantiles(times: list[float], qs: list[float]) -> list[float]:
    """The qs-quantiles of `times`, linearly interpolated (0.5: the median)."""
    return torch.quantile(torch.tensor(times, dtype=torch.float64), torch.tensor(qs, dtype=torch.float64)).tolist()
