"""The CUDA-graph replay of a compiled step, its bookkeeping checked on the CPU with a stand-in graph (a replay
that calls the captured function again): inputs found where the first call had them are read in place, others
copied into static buffers before each replay and, where the step writes them, copied back after; an input
read in place that moves is copied from then on; outputs are fresh tensors; a capture that fails runs the
step without a graph."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from fusionsearch.dynamo import cudagraph
from fusionsearch.dynamo.cudagraph import GraphedStep


class _Graph:
    def __init__(self, fn: Callable[[], list[torch.Tensor]], outputs: list[torch.Tensor]) -> None:
        self.fn, self.outputs = fn, outputs
        self.replays = 0

    def replay(self) -> None:
        self.replays += 1
        for out, new in zip(self.outputs, self.fn(), strict=True):
            out.copy_(new)


@pytest.fixture
def graphs(monkeypatch: pytest.MonkeyPatch) -> list[_Graph]:
    made: list[_Graph] = []

    def capture(fn: Callable[[], list[torch.Tensor]]) -> tuple[_Graph, list[torch.Tensor]]:
        outputs = fn()  # stand-in: the real capture records launches without running them
        made.append(_Graph(fn, outputs))
        return made[-1], outputs

    monkeypatch.setattr(cudagraph, "capture", capture)
    return made


def _step(x: torch.Tensor, cache: torch.Tensor, pos: torch.Tensor, w: torch.Tensor) -> list[torch.Tensor]:
    """A decode step in miniature: writes x @ w into the cache at pos, returns the cache's row sums."""
    cache.index_copy_(0, pos, x @ w)
    return [cache.sum(1)]


def test_inputs_at_the_same_address_are_read_in_place_and_the_others_copied(graphs: list[_Graph]) -> None:
    cache, w = torch.zeros(6, 3), torch.randn(4, 3)
    eager_cache = cache.clone()
    step = GraphedStep(_step, writes=[1])
    for p in range(4):
        x, pos = torch.randn(1, 4), torch.tensor([p])  # new tensors each step, as a decode loop makes them
        want = _step(x, eager_cache, pos, w)[0]
        got = step(x, cache, pos, w)[0]
        assert torch.allclose(got, want) and torch.allclose(cache, eager_cache)
        if p == 3:
            kept = got
    assert len(graphs) == 1 and graphs[0].replays == 3  # the first call ran as it is, the second captured
    captured = step.captured
    assert captured is not None
    assert captured.static[1] is None and captured.static[3] is None  # cache and weight read in place
    assert captured.static[0] is not None and captured.static[2] is not None
    step(torch.randn(1, 4), cache, torch.tensor([5]), w)
    assert kept.data_ptr() != captured.outputs[0].data_ptr()  # a returned output is not the graph's own


def test_a_written_input_that_moves_is_copied_in_and_back(graphs: list[_Graph]) -> None:
    w = torch.randn(4, 3)
    cache = torch.zeros(6, 3)
    step = GraphedStep(_step, writes=[1])
    step(torch.randn(1, 4), cache, torch.tensor([0]), w)
    step(torch.randn(1, 4), cache, torch.tensor([1]), w)
    other = torch.zeros(6, 3)  # the caller now passes another cache
    x = torch.randn(1, 4)
    got = step(x, other, torch.tensor([2]), w)[0]
    assert len(graphs) == 2 and step.captured is not None and step.captured.static[1] is not None
    assert torch.allclose(other[2], (x @ w)[0]) and torch.allclose(got, other.sum(1))  # written back
    assert torch.equal(cache[2], torch.zeros(3))  # the old cache is left as it was


def test_a_step_that_cannot_be_captured_runs_without_a_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(fn: object) -> None:
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(cudagraph, "capture", refuse)
    cache, w = torch.zeros(6, 3), torch.randn(4, 3)
    step = GraphedStep(_step, writes=[1])
    for p in range(3):
        x = torch.randn(1, 4)
        out = step(x, cache, torch.tensor([p]), w)[0]
        assert torch.allclose(cache[p], (x @ w)[0]) and torch.allclose(out, cache.sum(1))
    assert "not permitted when stream is capturing" in step.disabled
