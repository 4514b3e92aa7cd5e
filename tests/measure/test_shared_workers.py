"""The searches of one process share their measuring workers inside `shared_workers()` (the backend's regions):
one measurement worker started once and given each search's graph in turn, one compile pool; every measured plan
still validated against its own graph's float64 reference; outside the block each search starts and closes its
own. The workers run their real loops in threads (tests/measure/test_build_once.ThreadWorker); GPU timing is
one wall-clock call."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import fusionsearch as fs
from fusionsearch.measure import bench, isolate
from fusionsearch.measure.shared import current, shared_workers
from fusionsearch.search import session as session_module
from fusionsearch.search.options import SearchOptions
from tests.measure.test_build_once import ThreadWorker, _wall_clock

STARTS: dict[str, int] = {}


class CountedWorker(ThreadWorker):
    def __init__(self, role: str, device: str, judge: str = "") -> None:
        STARTS[role] = STARTS.get(role, 0) + 1
        super().__init__(role, "cpu", judge)  # the searches' own workers ask for cuda


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> Any:
    STARTS.clear()
    monkeypatch.setattr(isolate, "_Worker", CountedWorker)
    monkeypatch.setattr(bench, "time_callable", _wall_clock)
    monkeypatch.setattr(session_module, "resolve_backend", lambda backend: "gpu")
    options = SearchOptions(trials=4, backend="gpu", sampler="random", cost_model="analytic", prune_margin=1e9,
                            bytes_rule=None, max_configs=2, finalists=0, compile_workers=1, seed=1)
    graphs = [fs.workload("w8_dequant_mm", dtype=torch.float32, M=4, K=64, N=48),
              fs.workload("mm_bias_gelu", dtype=torch.float32, M=4, K=32, N=40)]

    def run() -> list[Any]:
        return [session_module.run_here(g, options, fs.random_inputs(g, seed=0)) for g in graphs]
    return run


def _measured(res: Any) -> list[Any]:
    return [t for t in res.study.trials if t.user_attrs.get("status") == "measured"]


def test_two_searches_inside_the_block_share_one_measurement_worker_and_one_compile_pool(searches: Any) -> None:
    with shared_workers(device="cpu") as workers:
        assert current() is workers
        results = searches()
        assert STARTS == {"measure": 1, "compile": 1}, STARTS
    assert current() is None and workers._measure is None and not workers._pools  # closed with the block
    for res in results:  # each judged against its own graph: the worker was given each graph in turn
        assert _measured(res) and all(t.user_attrs["rel_err"] <= 1e-5 for t in _measured(res))


def test_outside_the_block_each_search_starts_its_own(searches: Any) -> None:
    results = searches()
    assert STARTS == {"measure": 2, "compile": 2}, STARTS
    assert all(_measured(res) for res in results)
