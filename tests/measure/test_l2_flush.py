"""The clean L2 flush: its read kernel (under the interpreter) reads every word of its buffer, writing only one
word a program; the timer flushes before every timed call and times the calls alone (a fake clock stands in
for CUDA events)."""

from __future__ import annotations

import functools

import pytest
import torch

from fusionsearch.measure import l2_flush


@pytest.mark.parametrize("programs", [1, 3, 7])
def test_flush_reads_every_word(programs):
    flush = l2_flush.CleanFlush(nbytes=4 * l2_flush.FLUSH_BLOCK * 5, device="cpu", programs=programs)
    flush.words.copy_(torch.randint(-2**31, 2**31 - 1, flush.words.shape, dtype=torch.int64).to(torch.int32))
    flush()
    want = functools.reduce(lambda a, b: a ^ b, flush.words.tolist())
    got = functools.reduce(lambda a, b: a ^ b, flush.last.tolist())
    assert got == want
    # Each program read its own blocks: a program's xor is the xor of blocks pid, pid + programs, ...
    blocks = flush.words.view(-1, l2_flush.FLUSH_BLOCK)
    for pid in range(programs):
        mine = blocks[pid::programs].flatten().tolist()
        assert flush.last[pid].item() == functools.reduce(lambda a, b: a ^ b, mine, 0)


def test_flush_refuses_a_partial_block():
    with pytest.raises(ValueError, match="whole blocks"):
        l2_flush.CleanFlush(nbytes=4 * l2_flush.FLUSH_BLOCK + 4, device="cpu")


class FakeClock:
    """CUDA events on a fake device clock: the flush takes 3 ms, the timed call 2 ms."""

    def __init__(self):
        self.now, self.log = 0.0, []

    def event(self, enable_timing=True):
        clock = self

        class Event:
            def record(self):
                self.at = clock.now
                clock.log.append("mark")

            def elapsed_time(self, other):
                return other.at - self.at

        return Event()

    def flush(self):
        self.now += 3.0
        self.log.append("flush")

    def fn(self):
        self.now += 2.0
        self.log.append("fn")


def test_every_timed_call_follows_a_flush_and_excludes_it(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(torch.cuda, "Event", clock.event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    times = l2_flush.call_times_ms(clock.fn, warmup_ms=10, rep_ms=50, flush=clock.flush)
    # The estimate counts flush and call (5 ms): 10 warm-up calls, then 10 timed calls of 2 ms each.
    assert times == [2.0] * 10
    assert clock.log[-40:] == ["flush", "mark", "fn", "mark"] * 10


def test_quantiles_interpolate():
    assert l2_flush.quantiles([4.0, 1.0, 3.0, 2.0], [0.5, 0.0, 1.0]) == [2.5, 1.0, 4.0]


def test_time_callable_times_each_call_after_the_clean_flush(monkeypatch):
    """The product's timer (time_callable: the search, the collector and every script) goes through the clean
    flush: every timed call follows one, and the figure is the call's 2 ms alone, not flush and call."""
    from fusionsearch.measure import bench

    clock = FakeClock()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "Event", clock.event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda: None)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: 0)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 0)
    monkeypatch.setattr(l2_flush, "_flush", lambda: clock.flush)
    t = bench.time_callable(clock.fn, warmup_ms=10, rep_ms=50)
    assert (t.median_us, t.p20_us, t.p80_us) == (2000.0, 2000.0, 2000.0)
    assert clock.log[-40:] == ["flush", "mark", "fn", "mark"] * 10
