"""Each candidate is built once: a search through the compile pool and the measurement worker generates each
distinct plan's module once (in the search's process; the workers read it back from the kernel cache by its
content key) and hashes each graph once. The workers run their real loops (measure.isolate.serve) in threads of
this process, so that the counters see what they generate; GPU timing is replaced by one wall-clock call."""

from __future__ import annotations

import threading
import time
from collections import Counter
from multiprocessing.connection import Pipe
from typing import Any

import pytest
import torch

import fusionsearch as fs
from fusionsearch.codegen import runtime
from fusionsearch.codegen.runtime import build, entry_path, load_built
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.measure import bench, isolate
from fusionsearch.measure.bench import Timing
from fusionsearch.measure.isolate import CompilePool, MeasureWorker
from fusionsearch.measure.requests import Candidate
from fusionsearch.plan import Plan, unfused
from fusionsearch.search import session as session_module
from fusionsearch.search.loop import run_trials
from fusionsearch.search.session import open_session, setup
from fusionsearch.search.study import SearchOptions


class ThreadWorker:
    """isolate._Worker's stand-in: the same loop a worker interpreter runs (isolate.serve), in a thread."""

    def __init__(self, role: str, device: str, judge: str = "") -> None:
        self.conn, theirs = Pipe()
        self.thread = threading.Thread(target=isolate.serve, args=(theirs, role, device, judge), daemon=True)
        self.thread.start()

    def stop(self, kill: bool) -> int:
        self.close()
        return 0

    def close(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.thread.join(60)


def _identity(plan: Plan) -> str:
    """What makes a plan's module, without asking the graph for its hash."""
    return repr((plan.kernels, sorted(plan.recompute), plan.options))


def _wall_clock(fn: Any, warmup_ms: int = 0, rep_ms: int = 0) -> Timing:
    start = time.perf_counter()
    fn()
    return Timing((time.perf_counter() - start) * 1e6)


def test_a_search_generates_each_plan_once_and_hashes_each_graph_once(monkeypatch: pytest.MonkeyPatch) -> None:
    generated: Counter[str] = Counter()
    real_generate = runtime.generate_module

    def counting_generate(plan: Plan, **overrides: Any) -> Any:
        generated[_identity(plan.with_options(**overrides))] += 1
        return real_generate(plan, **overrides)

    hashed: Counter[int] = Counter()
    graphs: dict[int, OpGraph] = {}  # held, so that no id is reused by another graph
    real_signature = OpGraph.signature

    def counting_signature(self: OpGraph) -> str:
        hashed[id(self)] += 1
        graphs[id(self)] = self
        return real_signature(self)

    def interleaved(fns: dict[str, Any], rounds: int = 5, **_: Any) -> dict[str, list[float]]:
        return {key: [_wall_clock(fn).median_us] for key, fn in fns.items()}

    monkeypatch.setattr(runtime, "generate_module", counting_generate)
    monkeypatch.setattr(OpGraph, "signature", counting_signature)
    monkeypatch.setattr(isolate, "_Worker", ThreadWorker)
    monkeypatch.setattr(bench, "time_callable", _wall_clock)
    monkeypatch.setattr(bench, "time_interleaved", interleaved)

    g = fs.workload("w8_dequant_mm", dtype=torch.float32, M=16, K=128, N=96)
    inputs = fs.random_inputs(g, seed=0)
    options = SearchOptions(trials=8, backend="gpu", sampler="random", cost_model="analytic", prune_margin=1e9,
                            bytes_rule=None, max_configs=2, finalists=0, compile_workers=1, seed=1)
    judge = MeasureWorker(g.to_dict(), inputs, device="cpu")
    pool = CompilePool(1, device="cpu")
    try:
        session = open_session(g, options, setup(g, options, judge=judge), None)
        session.objective.judge = judge
        run_trials(session.slots, session.objective, None, None, pool)
        study = session.slots.study
        measured = [t for t in study.trials if t.user_attrs.get("status") == "measured"]
        finals = session_module._retime_finalists(study, session.setup.space, judge, 3, session.objective.candidate)
    finally:
        pool.close()
        judge.close()
    monkeypatch.undo()

    judged = [t for t in study.trials if t.user_attrs.get("status") in ("measured", "failed")]
    assert len(measured) == len(judged) >= 4, [(t.user_attrs.get("status"), t.user_attrs.get("reason"))
                                                for t in study.trials]
    for t in measured:  # validated against the float64 reference from the source handed over, then timed
        assert t.user_attrs["rel_err"] <= 1e-5 and t.user_attrs["measured_us"] > 0
    distinct = {t.user_attrs["plan"] for t in judged}
    assert len(judged) > len(distinct), "the draw should repeat a plan (a repeat is not generated again)"
    assert len({f["trial"] for f in finals}) == min(3, len({t.user_attrs["plan"] for t in measured}))
    assert all(f["final_us"] is not None for f in finals)  # timed again from the same sources
    expected = Counter({_identity(Plan.from_json(p, g)): 1 for p in distinct})
    assert generated == expected  # one generation per distinct plan: compile, validate, time and retime share it
    assert hashed and max(hashed.values()) == 1, hashed  # one signature hash per graph (the search's, each worker's)
    assert len(hashed) <= 3


def test_a_worker_runs_only_the_source_that_hashes_to_its_key() -> None:
    """The key crosses to the worker, not the text: an entry replaced since it was built is not run (the worker
    generates the plan again, and the entry gets its text back); a key that is not one is not read."""
    g = fs.workload("w8_dequant_mm", dtype=torch.float32, M=16, K=128, N=96)
    plan = unfused(g)
    built = build(plan)
    assert load_built(built.key) == built
    path = entry_path(built.key)
    with open(path, "w") as f:
        f.write(built.source + "\nraise RuntimeError('the replaced entry ran')\n")
    assert load_built(built.key) is None
    assert load_built("../" + built.key[3:]) is None and load_built("") is None
    w = MeasureWorker(g.to_dict(), fs.random_inputs(g, seed=0), device="cpu")
    try:
        j = w.judge(Candidate(plan.to_json(), built.key))
    finally:
        w.close()
    assert "replaced entry" not in j.reason and "timing needs a CUDA GPU" in j.reason, j
    assert j.rel_err is not None and j.rel_err <= 1e-5
    with open(path) as f:
        assert f.read() == built.source


def test_a_collection_generates_each_plan_once(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """collect builds each sampled plan once and hands its key to the compile worker and to judge_for_dataset,
    whose validation and per-kernel times read that one source back (before: three generations a plan)."""
    from fusionsearch.datasets.measurements import read_rows
    from fusionsearch.graph.spec import graph_from_dict
    from fusionsearch.search.collect import CollectOptions, collect

    generated: Counter[str] = Counter()
    real_generate = runtime.generate_module

    def counting_generate(plan: Plan, **overrides: Any) -> Any:
        generated[_identity(plan.with_options(**overrides))] += 1
        return real_generate(plan, **overrides)

    monkeypatch.setattr(runtime, "generate_module", counting_generate)
    monkeypatch.setattr(isolate, "_Worker", ThreadWorker)
    path = tmp_path / "m.jsonl.gz"
    counts = collect(str(path), CollectOptions(graphs=1, plans_per_graph=3, device="cpu", shape_scale="small",
                                               compile_workers=1, dtypes=("float32",), progress=False))
    monkeypatch.undo()
    rows = read_rows(str(path))
    assert counts == {"ok": len(rows)} and all(r["time_us"] > 0 for r in rows)
    plans = {r["plan_id"]: Plan.from_dict(r["plan"], graph_from_dict(r["graph"]), None) for r in rows}
    assert len(plans) == 3
    assert generated == Counter({_identity(p): 1 for p in plans.values()})  # compile, validate, time: one source
