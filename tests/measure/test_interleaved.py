"""time_interleaved: every callable timed once per round, each round starting one further along, so that
compared callables meet the GPU's drifting state alike. The GPU timer is replaced by a clock that drifts: the
test asserts on the order and on the values the drift gives, which a plain one-pass loop would not."""

from __future__ import annotations

import pytest
import torch

from fusionsearch.errors import MeasureError
from fusionsearch.measure import l2_flush
from fusionsearch.measure.bench import time_interleaved


@pytest.fixture
def drifting_gpu(monkeypatch):
    """A fake GPU whose every timing takes 1 ms longer than the one before; records the call order."""
    order: list[str] = []

    def call_times_ms(fn, warmup, rep):
        order.append(fn())
        return [float(len(order))] * 3

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(l2_flush, "call_times_ms", call_times_ms)
    return order


def test_rounds_rotate_the_order(drifting_gpu):
    out = time_interleaved({k: (lambda k=k: k) for k in "abc"}, rounds=3)
    assert drifting_gpu == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    assert out == {"a": [1000.0, 6000.0, 8000.0], "b": [2000.0, 4000.0, 9000.0], "c": [3000.0, 5000.0, 7000.0]}
    # Over the rounds each callable meets the drift alike: equal callables get equal sums.
    assert len({sum(v) for v in out.values()}) == 1


def test_a_callable_that_raises_leaves_the_rounds(drifting_gpu):
    def bad():
        raise RuntimeError("launch failed")

    out = time_interleaved({"ok": lambda: "ok", "bad": bad}, rounds=3)
    assert out["bad"] == [] and len(out["ok"]) == 3
    assert drifting_gpu == ["ok", "ok", "ok"]


def test_no_callables_and_no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert time_interleaved({}, rounds=4) == {}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(MeasureError, match="GPU"):
        time_interleaved({"a": lambda: None})
