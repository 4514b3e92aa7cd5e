"""The Optuna study: best plans are legal and correct on every workload and backend; the prologue bytes rule;
exhaustive and TPE search agree; workers on shared storage run an exact total; resume and timeouts; storage
and option errors; TuneResult's explain/report/export and `fusionsearch.tune`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
import torch

import fusionsearch as fs
from fusionsearch.costmodel.analytic import estimate, fits
from fusionsearch.errors import FusionSearchError, SpecError
from fusionsearch.graph.shrink import shrink
from fusionsearch.plan import FusedMatmulKernel, Plan, PointwiseKernel
from fusionsearch.search import identity as I
from fusionsearch.search import samplers
from fusionsearch.search import storage as storage_module
from fusionsearch.search import study as S
from fusionsearch.search.objective import Objective
from fusionsearch.search.result import TuneResult
from fusionsearch.search.slots import AHEAD
from fusionsearch.search.space import enumerate_space, kind_seed_plans
from fusionsearch.search.study import SearchOptions, make_storage, redact, run_study

SMALL = {
    "w8_dequant_mm": {"M": 16, "K": 128, "N": 96},
    "w8_linear": {"M": 1, "K": 128, "N": 96},
    "gather_mm": {"M": 16, "K": 64, "N": 96, "T": 50},
    "mm_bias_gelu": {"M": 16, "K": 64, "N": 96},
    "cast_mm": {"M": 16, "K": 96, "N": 64},
    "scale_mm": {"M": 16, "K": 64, "N": 160},
    "swiglu": {"M": 16, "D": 64, "H": 96},
    "w4_dequant_mm": {"M": 16, "K": 48, "N": 40, "G": 16},  # within shrink's cap: its views tie K to K/2
    "moe_ffn": {"T": 3, "D": 40, "H": 24, "E": 4},  # within shrink's cap: a view ties H to 2H
}
STORAGE_KINDS = ("sqlite", "journal", "postgres")  # postgres: a database of its own (tests/conftest.py)
FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_small_shapes_cover_every_builtin_workload() -> None:
    assert set(SMALL) == set(fs.list_workloads())


def _template(plan: Plan, mm: str) -> FusedMatmulKernel:
    """The kernel that runs matmul `mm` with its fused nodes (the template, or the decode kind at M <= 16)."""
    (k,) = [k for k in plan.kernels if isinstance(k, FusedMatmulKernel) and k.matmul == mm]
    return k


def _check_result(res: TuneResult, trials: int) -> None:
    res.best.check()
    assert len(res.trials) == trials
    assert [t.number for t in res.trials] == list(range(trials))
    values = [t.value_us for t in res.trials if t.state == "complete"]
    assert values and res.best_us == min(values)
    assert res.best_us == pytest.approx(estimate(res.best, res.hardware).time_us)
    assert all(t.state in ("complete", "pruned") for t in res.trials), res.counts()


# ---- every workload, both CPU backends ----------------------------------------------------------

@pytest.mark.parametrize("backend", ["model", "interpret"])
@pytest.mark.parametrize("name", list(SMALL))
def test_best_plan_is_legal_and_validates(name: str, backend: str) -> None:
    g = fs.workload(name, dtype=torch.float32, **SMALL[name])
    res = run_study(g, SearchOptions(trials=10, backend=backend))
    _check_result(res, 10)
    assert res.backend == backend
    done = {"model": "estimated", "interpret": "validated"}[backend]
    assert res.counts().get(done, 0) >= 1
    v = fs.measure.validate(res.best, g, device="cpu")
    assert v.ok, (res.best.describe(), v)


@pytest.mark.parametrize("name", list(SMALL))
def test_bf16_best_plan_validates_on_the_shrunk_graph(name: str) -> None:
    g = fs.workload(name, **SMALL[name])
    res = run_study(g, SearchOptions(trials=8, backend="interpret"))
    _check_result(res, 8)
    small = shrink(g)
    assert small is not None and all(n.dtype != torch.bfloat16 for n in small)
    v = fs.measure.validate(Plan(small, res.best.kernels, res.best.recompute).check(), small, device="cpu")
    assert v.ok, v


def test_float16_best_plan_validates() -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.float16, **SMALL["mm_bias_gelu"])
    res = run_study(g, SearchOptions(trials=8, backend="interpret"))
    assert fs.measure.validate(res.best, g, device="cpu").ok


# ---- the prologue bytes rule ---------------------------------------------------------------------

def _fusion(t: object) -> str:
    return t.params.get("g0.fusion", "")  # type: ignore[attr-defined]


@pytest.mark.parametrize("backend", ["model", "interpret"])
def test_bytes_rule_keeps_the_cast_prologue_out_of_every_judged_trial(backend: str) -> None:
    g = fs.workload("cast_mm", **SMALL["cast_mm"])  # bf16: the fp32 input is twice the operand's bytes
    res = run_study(g, SearchOptions(trials=12, backend=backend, library=False))  # the library: its own test
    judged = [t for t in res.trials if t.status in ("estimated", "validated", "measured")]
    assert judged and not any(_fusion(t) == "prologue:mm0:A" for t in judged)
    proposed = [t for t in res.trials if _fusion(t) == "prologue:mm0:A"]
    assert proposed, "the sampler never proposed the prologue; the test proves nothing"
    assert all(t.state == "pruned" and t.status == "bytes rule" for t in proposed)
    assert all("prologue A" in t.reason for t in proposed)
    assert isinstance(res.best.kernels[0], PointwiseKernel) and _template(res.best, "y").prologue_a == ()


@pytest.mark.parametrize(("name", "side", "nodes"), [("w8_dequant_mm", "prologue_b", ("w_dequant", "w_scaled")),
                                                    ("gather_mm", "prologue_a", ("x_rows",))])
def test_dequant_and_gather_best_plans_fuse_their_prologue(name: str, side: str, nodes: tuple[str, ...]) -> None:
    g = fs.workload(name, **SMALL[name])
    res = run_study(g, SearchOptions(trials=10, backend="model"))
    assert len(res.best.kernels) == 1
    assert getattr(_template(res.best, "y"), side) == nodes
    assert "bytes rule" not in res.counts()


def test_without_the_bytes_rule_the_cast_prologue_is_judged() -> None:
    g = fs.workload("cast_mm", **SMALL["cast_mm"])
    res = run_study(g, SearchOptions(trials=12, backend="model", bytes_rule=None))
    assert "bytes rule" not in res.counts()
    fused = [t for t in res.trials if _fusion(t) == "prologue:mm0:A"]
    assert any(t.state == "complete" and t.status == "estimated" for t in fused)
    # The analytic model prices the fused cast cheaper at this size, so the search picks it once allowed.
    assert _template(res.best, "y").prologue_a == ("x_cast",)


# ---- exhaustive vs TPE -------------------------------------------------------------------------

def _ground_truth(g: fs.OpGraph, max_configs: int) -> tuple[float, list[Plan]]:
    """The best predicted time over every combination of the space, and every plan reaching it."""
    space = enumerate_space(g, lambda gg, mm, cfg: fits(gg, mm, cfg), max_configs)
    priced = []
    for params in space.every_params():
        plan = space.plan(params)
        priced.append((estimate(plan).time_us, plan))
    best = min(t for t, _ in priced)
    return best, [p for t, p in priced if t == best]


EXHAUSTIVE_GRAPH = {"name": "mm_bias_gelu", "M": 16, "K": 64, "N": 96}


def _small_space_graph() -> fs.OpGraph:
    shape = {k: v for k, v in EXHAUSTIVE_GRAPH.items() if k != "name"}
    return fs.workload(str(EXHAUSTIVE_GRAPH["name"]), **shape)  # type: ignore[arg-type]


def test_tpe_finds_the_exhaustive_optimum_of_a_small_space() -> None:
    g = _small_space_graph()
    best_us, best_plans = _ground_truth(g, max_configs=2)
    size = enumerate_space(g, lambda gg, mm, cfg: fits(gg, mm, cfg), 2).size()
    res = run_study(g, SearchOptions(trials=max(16, 3 * size), backend="model", sampler="tpe", seed=3,
                                     max_configs=2, library=False))
    assert res.space.size() == size
    assert res.best_us == best_us
    assert res.best in best_plans


def test_brute_force_and_tpe_agree_on_a_small_space() -> None:
    g = _small_space_graph()
    best_us, best_plans = _ground_truth(g, max_configs=2)
    size = enumerate_space(g, lambda gg, mm, cfg: fits(gg, mm, cfg), 2).size()
    tpe = run_study(g, SearchOptions(trials=max(16, 3 * size), backend="model", sampler="tpe", max_configs=2,
                                     library=False))
    brute = run_study(g, SearchOptions(trials=size, backend="model", sampler="brute", max_configs=2, library=False))
    assert len({tuple(sorted(t.params.items())) for t in brute.trials}) == size  # every combination once
    assert brute.best_us == tpe.best_us == best_us
    assert brute.best == tpe.best or (brute.best in best_plans and tpe.best in best_plans)


def test_brute_force_searches_pytorchs_matmul_as_one_more_choice() -> None:
    g = _small_space_graph()
    space = enumerate_space(g, lambda gg, mm, cfg: fits(gg, mm, cfg), 2, library=True)
    priced = [(estimate(p).time_us, p) for _, p in space.distinct_plans()]
    assert any(k.kind == "library" for _, p in priced for k in p.kernels)
    brute = run_study(g, SearchOptions(trials=space.size(), backend="model", sampler="brute", max_configs=2))
    assert brute.space.size() == space.size()
    assert brute.best_us == min(t for t, _ in priced)
    illegal = [t for t in brute.trials if t.params.get("mm0.config") == "library" and _fusion(t) != "standalone"]
    assert illegal and all(t.state == "pruned" and "nothing can be fused" in t.reason for t in illegal)


def test_the_ranked_sampler_measures_the_cost_models_fastest_plans_first() -> None:
    g = _small_space_graph()
    best_us, best_plans = _ground_truth(g, max_configs=2)
    space = enumerate_space(g, lambda gg, mm, cfg: fits(gg, mm, cfg), 2)
    predicted = sorted(estimate(p).time_us for _, p in space.distinct_plans())
    res = run_study(g, SearchOptions(trials=4, backend="model", sampler="ranked", max_configs=2))
    trials = sorted(res.trials, key=lambda t: t.number)
    # first each other kind's known-good plan (here the decode kind's: the graph has few rows), then the fastest
    # predicted distinct plans, in order
    seeds = kind_seed_plans(space)
    assert len(seeds) == 1 and trials[0].params == seeds[0]
    rest = list(predicted)
    rest.remove(min(rest, key=lambda v: abs(v - trials[0].value_us)))  # the seed is one of the distinct plans
    assert [t.value_us for t in trials[1:]] == pytest.approx(rest[:3])
    assert res.best_us == best_us and res.best in best_plans


def test_auto_sampler_ranks_with_a_learned_model_and_uses_tpe_without(tmp_path: Path) -> None:
    g = _small_space_graph()
    objective = Objective(g, enumerate_space(g, lambda gg, mm, cfg: fits(gg, mm, cfg), 2), SearchOptions(),
                            "model", fs.costmodel.H200)
    assert objective.model is None and samplers.sampler_name(SearchOptions(), objective) == "tpe"
    objective.model = object()  # any learned model
    assert samplers.sampler_name(SearchOptions(), objective) == "ranked"
    assert samplers.sampler_name(SearchOptions(sampler="random"), objective) == "random"


def test_searches_rank_blind_unless_asked_to_compile_their_fastest_candidates() -> None:
    g = _small_space_graph()
    space = enumerate_space(g, lambda gg, mm, cfg: fits(gg, mm, cfg), 2)
    for options, top in ((SearchOptions(trials=10), 0), (SearchOptions(trials=10, compile_ranked=3), 3)):
        for backend in ("gpu", "model"):
            objective = Objective(g, space, options, backend, fs.costmodel.H200)
            assert samplers.make_sampler("ranked", 0, objective).ranking.compile_top == top
    for bad in (-1, 2.5, True, None):
        with pytest.raises(SpecError, match="compile_ranked must be a whole number"):
            SearchOptions(compile_ranked=bad)  # type: ignore[arg-type]


def test_brute_force_short_of_exhausting_tries_distinct_combinations() -> None:
    g = _small_space_graph()
    size = enumerate_space(g, lambda gg, mm, cfg: fits(gg, mm, cfg), 2).size()
    res = run_study(g, SearchOptions(trials=size - 1, backend="model", sampler="brute", max_configs=2))
    combos = [tuple(sorted(t.params.items())) for t in res.trials]
    assert len(set(combos)) == len(combos) == size - 1


def test_max_configs_gives_the_study_a_small_space() -> None:
    g = _small_space_graph()
    res = run_study(g, SearchOptions(trials=4, backend="model", max_configs=5, library=False))
    assert all(len(c) == 5 for c in res.space.configs) and all(len(o) == 5 for o in res.space.others)
    assert res.space.size() == 2 * (5 + 5)  # tile configs and (M = 16) decode configs
    res = run_study(g, SearchOptions(trials=4, backend="model", max_configs=5))  # and PyTorch's matmul
    assert res.space.size() == 2 * (5 + 1 + 5)


# ---- workers on shared storage -----------------------------------------------------------------

WORKER = textwrap.dedent("""
    import os, sys, time
    from fusionsearch.search import study as S
    from fusionsearch.search.objective import Objective
    import fusionsearch as fs

    _suggest = Objective.suggest

    def suggest(self, trial):  # record which process ran the trial; slow trials so both workers get some
        trial.set_user_attr("test_worker_pid", os.getpid())
        time.sleep(0.04)
        return _suggest(self, trial)

    Objective.suggest = suggest
    ready, storage, name = sys.argv[1:4]  # argv[4]: how many workers start together; [5]: trials; [6]: slots ahead
    trials = int(sys.argv[5]) if len(sys.argv) > 5 else 30
    if len(sys.argv) > 6:
        import optuna
        from fusionsearch.search import slots
        slots.AHEAD = int(sys.argv[6])
        _add = optuna.Study.add_trial

        def add_trial(self, trial):  # slow layouts: two workers laying out at once would lay out slots twice
            time.sleep(0.02)
            _add(self, trial)

        optuna.Study.add_trial = add_trial
    open(os.path.join(ready, "ready-%d" % os.getpid()), "w").close()
    deadline = time.time() + 120
    while len(os.listdir(ready)) < int(sys.argv[4]) and time.time() < deadline:
        time.sleep(0.005)
    g = fs.workload("mm_bias_gelu", M=16, K=64, N=96)
    res = S.run_study(g, S.SearchOptions(trials=trials, backend="model", storage=storage, study_name=name))
    print("records", len(res.trials))
""")


def _run_workers(tmp_path: Path, storage_url: str, name: str, n: int, *extra: str) -> list[str]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    ready = tmp_path / "ready"
    ready.mkdir()
    procs = [subprocess.Popen([sys.executable, str(script), str(ready), storage_url, name, str(n), *extra],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(n)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
        outs.append(out)
    return outs


@pytest.mark.parametrize("race, message", [("DuplicateTable", 'relation "studies" already exists'),
                                           ("DuplicateObject", 'type "alembic_version" already exists'),
                                           ("UniqueViolation", "duplicate key value violates unique constraint")])
def test_opening_a_storage_while_another_worker_creates_its_schema_retries(monkeypatch: pytest.MonkeyPatch,
                                                                         race: str, message: str) -> None:
    """PostgreSQL refuses the second of two concurrent schema creations (a table, or its row type, that already
    exists): the storage is opened again instead of failing the worker; any other error is the user's, at once."""
    calls = []
    error = type(race, (Exception,), {})

    def rdb(url: str, **kwargs: object) -> str:
        calls.append(url)
        if len(calls) == 1:
            raise error(message)
        return "storage"

    monkeypatch.setattr(optuna.storages, "RDBStorage", rdb)
    monkeypatch.setattr(storage_module.time, "sleep", lambda s: None)
    assert S.make_storage("postgresql://u@host/db") == "storage" and len(calls) == 2

    def refused(url: str, **kwargs: object) -> str:
        calls.append(url)
        raise ConnectionError("connection refused")

    monkeypatch.setattr(optuna.storages, "RDBStorage", refused)
    with pytest.raises(SpecError, match="cannot be opened: connection refused"):
        S.make_storage("postgresql://u@host/db")
    assert len(calls) == 3


@pytest.mark.parametrize("kind", STORAGE_KINDS)
def test_three_workers_on_one_storage_run_exactly_the_total(tmp_path: Path, kind: str,
                                                            storage_url: Callable[[str], str]) -> None:
    url = storage_url(kind)
    outs = _run_workers(tmp_path, url, "shared", 3)
    assert all("records 30" in o for o in outs), outs
    study = optuna.load_study(study_name="shared", storage=make_storage(url))
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == 30
    assert sorted(t.number for t in trials) == list(range(30))
    assert all(t.state in FINISHED for t in trials), [t.state for t in trials]
    assert any(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    by_worker: dict[int, int] = {}
    for t in trials:
        pid = t.user_attrs["test_worker_pid"]
        by_worker[pid] = by_worker.get(pid, 0) + 1
    assert len(by_worker) == 3 and min(by_worker.values()) >= 1, by_worker


@pytest.mark.parametrize("kind", STORAGE_KINDS)
def test_workers_laying_out_slots_as_they_go_run_exactly_the_total(tmp_path: Path, kind: str,
                                                                    storage_url: Callable[[str], str]) -> None:
    """Issue 24: slots are laid out a bounded number ahead of the workers (here 4), by whichever worker finds few
    waiting, under one lock: three workers still run exactly the 40 trials asked, each number once."""
    url = storage_url(kind)
    outs = _run_workers(tmp_path, url, "lazy", 3, "40", "4")
    assert all("records 40" in o for o in outs), outs
    trials = _states(url, "lazy")
    assert sorted(t.number for t in trials) == list(range(40)), len(trials)
    assert all(t.state in FINISHED for t in trials), [t.state for t in trials]
    assert optuna.load_study(study_name="lazy", storage=make_storage(url)).user_attrs["slots"] == 40


def test_a_search_of_a_huge_total_lays_out_a_bounded_number_of_slots(tmp_path: Path) -> None:
    """Issue 24: `--trials 100000 --timeout 60` laid out every slot before the timeout started (7 trials in 120 s;
    10**30 grew to ~10 GB). Now a few slots are laid out ahead of the trials, whatever the total."""
    g = fs.workload("mm_bias_gelu", **SMALL["mm_bias_gelu"])
    for url in (None, f"sqlite:///{tmp_path / 'h.db'}", f"journal:{tmp_path / 'h.log'}"):
        start = time.time()
        try:
            res = run_study(g, SearchOptions(trials=10**30, backend="model", storage=url, study_name="h", timeout=2.0,
                                             cost_model="analytic"))
        except FusionSearchError as e:  # a busy machine: not one trial in the time given
            assert "no trial" in str(e)
            continue
        assert time.time() - start < 30, url
        ran = sum(t.state != "waiting" for t in res.trials)
        assert ran >= 1 and len(res.trials) <= ran + 2 * AHEAD, (url, ran, len(res.trials))
    study = optuna.load_study(study_name="h", storage=make_storage(f"sqlite:///{tmp_path / 'h.db'}"))
    assert study.user_attrs["slots"] == 10**30 and len(study.trials) <= 4 * AHEAD


# ---- resume and timeouts -----------------------------------------------------------------------

def _states(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=make_storage(url)).get_trials(deepcopy=False)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_larger_total_resumes_the_study_keeping_its_trials(kind: str, storage_url: Callable[[str], str]) -> None:
    url = storage_url(kind)
    g = fs.workload("swiglu", **SMALL["swiglu"])
    first = run_study(g, SearchOptions(trials=10, backend="model", storage=url, study_name="r"))
    before = [(t.number, t.params, t.value, t.state) for t in _states(url, "r")]
    assert len(before) == 10 and len(first.trials) == 10
    second = run_study(g, SearchOptions(trials=16, backend="model", storage=url, study_name="r"))
    after = _states(url, "r")
    assert len(after) == 16 and len(second.trials) == 16
    assert [(t.number, t.params, t.value, t.state) for t in after[:10]] == before
    assert all(t.state in FINISHED for t in after)
    assert second.best_us <= first.best_us
    assert second.storage == redact(url)
    # Asking for the same total again runs nothing new.
    third = run_study(g, SearchOptions(trials=16, backend="model", storage=url, study_name="r"))
    assert len(third.trials) == 16 and len(_states(url, "r")) == 16


def _slow_suggest(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    original = Objective.suggest

    def suggest(self: Objective, trial: optuna.Trial) -> dict[str, str]:
        time.sleep(seconds)
        return original(self, trial)

    monkeypatch.setattr(Objective, "suggest", suggest)


def test_a_timeout_stops_early_and_a_later_run_completes_the_slots(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    g = fs.workload("mm_bias_gelu", **SMALL["mm_bias_gelu"])
    _slow_suggest(monkeypatch, 0.2)  # 40 trials take 8 s; the deadline leaves room for the first on a busy CI
    start = time.time()
    res = run_study(g, SearchOptions(trials=40, backend="model", storage=url, study_name="t", timeout=1.0,
                                     cost_model="analytic"))  # undo() below lifts conftest's no-shipped-model
    assert time.time() - start < 10
    states = [t.state for t in _states(url, "t")]
    ran = sum(s in FINISHED for s in states)
    assert len(states) <= 40 and 1 <= ran < 40  # slots are laid out a few at a time, as the trials need them
    assert states.count(optuna.trial.TrialState.WAITING) == len(states) - ran
    from fusionsearch.search.studies import list_studies

    assert list_studies(url)[0].waiting == 40 - ran
    assert len([t for t in res.trials if t.state != "waiting"]) == ran
    monkeypatch.undo()
    done = run_study(g, SearchOptions(trials=40, backend="model", storage=url, study_name="t", cost_model="analytic"))
    assert all(t.state in FINISHED for t in _states(url, "t"))
    assert len(done.trials) == 40


def test_a_timeout_before_the_first_trial_runs_none_and_leaves_every_slot_waiting(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'z.db'}"
    g = fs.workload("mm_bias_gelu", **SMALL["mm_bias_gelu"])
    with pytest.raises(SpecError, match="timeout must be a positive number"):  # 0: as good as no search
        SearchOptions(trials=6, backend="model", storage=url, study_name="z", timeout=0.0)
    try:
        run_study(g, SearchOptions(trials=6, backend="model", storage=url, study_name="z", timeout=1e-9))
    except FusionSearchError as e:  # no trial completed, so there is no best plan
        assert "no trial" in str(e)
    states = [t.state for t in _states(url, "z")]
    assert states == [optuna.trial.TrialState.WAITING] * 6
    res = run_study(g, SearchOptions(trials=6, backend="model", storage=url, study_name="z"))
    assert len(res.trials) == 6 and all(t.state in ("complete", "pruned") for t in res.trials)
    assert all(t.state in FINISHED for t in _states(url, "z"))


def test_two_runs_in_one_process_without_storage_are_independent() -> None:
    g = fs.workload("mm_bias_gelu", **SMALL["mm_bias_gelu"])
    a = run_study(g, SearchOptions(trials=6, backend="model"))
    b = run_study(g, SearchOptions(trials=6, backend="model"))
    assert len(a.trials) == len(b.trials) == 6
    assert [t.params for t in a.trials] == [t.params for t in b.trials]  # same seed, same study


# ---- storage and option errors -----------------------------------------------------------------

@pytest.mark.parametrize("url", ["not-a-url", "sqlite.db", ""])
def test_a_storage_that_is_not_a_url_is_a_spec_error(url: str) -> None:
    if url == "":
        assert make_storage(None) is None
    with pytest.raises(SpecError, match="not a URL|cannot be opened"):
        make_storage(url)


def test_an_unopenable_storage_is_a_spec_error_without_the_password(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as exc:
        make_storage(f"sqlite:///{tmp_path}/no/such/dir/x.db")
    assert "cannot be opened" in str(exc.value)
    with pytest.raises(SpecError) as exc:
        make_storage("nosuchdialect://user:hunter2@localhost/db")
    assert "hunter2" not in str(exc.value)


def test_redact_hides_the_password() -> None:
    out = redact("postgresql://user:secret@host/db")
    assert "secret" not in out and "user" in out and "host/db" in out
    assert redact("postgresql://u:p@ss@host:5432/db").endswith("@host:5432/db")
    assert "p@ss" not in redact("postgresql://u:p@ss@host:5432/db")
    assert redact("sqlite:///x.db") == "sqlite:///x.db"
    assert redact("journal:x.log") == "journal:x.log"


@pytest.mark.parametrize("bad", [{"backend": "cuda"}, {"sampler": "x"}, {"trials": 0}, {"trials": -3},
                                 {"trials": 2.5}, {"trials": True}, {"seed": -1}, {"seed": 2**32}, {"seed": 1.5},
                                 {"timeout": 0}, {"timeout": -1.0}, {"timeout": float("nan")},
                                 {"timeout": float("inf")}, {"bytes_rule": 0.0}, {"bytes_rule": float("nan")},
                                 {"bytes_rule": -1.1}, {"prune_margin": float("nan")}, {"prune_margin": 0},
                                 {"max_configs": 0}, {"heartbeat_s": 0}, {"compile_workers": -1},
                                 {"study_name": ""}, {"study_name": "  "}, {"trial_timeout_s": float("nan")}])
def test_bad_search_options_are_spec_errors(bad: dict[str, object]) -> None:
    """The API refuses what the CLI refuses (issue 24: --seed -1 was a numpy traceback, --timeout nan and
    --bytes-rule 0 were accepted)."""
    with pytest.raises(SpecError, match=next(iter(bad))):
        SearchOptions(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_the_result_of_a_storage_run_carries_the_redacted_url(kind: str, storage_url: Callable[[str], str],
                                                              tmp_path: Path) -> None:
    url = storage_url(kind)
    res = run_study(fs.workload("mm_bias_gelu", **SMALL["mm_bias_gelu"]),
                    SearchOptions(trials=3, backend="model", storage=url))
    assert res.storage == redact(url) and res.study_name.startswith("fusionsearch-")
    if kind == "postgres":  # the password is in the URL; it never reaches what the search writes
        password = url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
        assert password not in res.storage and password not in res.explain()
        res.report(str(tmp_path / "report.md"))
        assert password not in (tmp_path / "report.md").read_text()
        out = subprocess.run([sys.executable, "-m", "fusionsearch", "search", "mm_bias_gelu", "--shape",
                              "M=16,K=64,N=96", "--backend", "model", "--trials", "3", "--storage", url,
                              "--cost-model", "analytic",  # as the run above (conftest: no shipped model)
                              "--quiet"], capture_output=True, text=True, timeout=240)
        assert out.returncode == 0, out.stderr[-2000:]
        assert password not in out.stdout + out.stderr and "***" in out.stdout, out.stdout


# ---- TuneResult and fs.tune ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def swiglu_result() -> TuneResult:
    g = fs.workload("swiglu", dtype=torch.float32, **SMALL["swiglu"])
    return run_study(g, SearchOptions(trials=12, backend="model"))


def test_explain_names_every_kernel_and_the_counts(swiglu_result: TuneResult) -> None:
    res = swiglu_result
    text = res.explain()
    assert text.startswith("best plan:")
    for i, k in enumerate(res.best.kernels):
        assert f"kernel {i}: {k.kind}" in text
        for n in k.nodes:
            assert n in text
    for status, count in res.counts().items():
        assert f"{count} {status}" in text
    assert f"trials: {len(res.trials)} (" in text
    assert sum(res.counts().values()) == len(res.trials)


def test_report_writes_markdown_with_the_plan_and_a_trials_table(swiglu_result: TuneResult, tmp_path: Path) -> None:
    path = tmp_path / "sub" / "report.md"
    assert swiglu_result.report(str(path)) == str(path)
    text = path.read_text()
    assert swiglu_result.best.describe() in text
    assert "| # | status | predicted us | value us | reason |" in text
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and ln.split("|")[1].strip().isdigit()]
    assert len(rows) == len(swiglu_result.trials)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    png = tmp_path / "sub" / "report_history.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![history](report_history.png)" in text


def test_export_writes_the_module_plan_graph_and_report(swiglu_result: TuneResult, tmp_path: Path) -> None:
    out = tmp_path / "exp"
    path = swiglu_result.export(str(out))
    assert Path(path) == out / "fusionsearch_plan.py"
    for name in ("fusionsearch_plan.py", "plan.json", "graph.json", "report.md"):
        assert (out / name).stat().st_size > 0, name
    g = fs.load_graph(str(out / "graph.json"))
    plan = Plan.from_json((out / "plan.json").read_text(), g)
    assert plan == swiglu_result.best
    compile(Path(path).read_text(), path, "exec")
    json.dumps(swiglu_result.to_dict(), default=str)


def test_exported_module_runs_and_matches_the_reference(swiglu_result: TuneResult, tmp_path: Path) -> None:
    import importlib.util

    path = swiglu_result.export(str(tmp_path / "run"))
    spec = importlib.util.spec_from_file_location("fs_exported_plan", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    inputs = fs.random_inputs(swiglu_result.graph, seed=1)
    outs = mod.run(*inputs)
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    for o, r in zip(outs, fs.reference(swiglu_result.graph, inputs), strict=True):
        torch.testing.assert_close(o, r, rtol=1e-4, atol=1e-4)


def test_tune_on_a_graph_returns_a_tune_result() -> None:
    g = fs.workload("mm_bias_gelu", **SMALL["mm_bias_gelu"])
    res = fs.tune(g, trials=6, backend="model")
    assert isinstance(res, TuneResult) and len(res.trials) == 6 and res.backend == "model"
    assert res.graph is g
    assert _template(res.best, "y").epilogue == ("y_bias", "out")


def test_tune_captures_a_torch_function_first() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x @ w + b)

    x, w, b = torch.randn(16, 64), torch.randn(64, 96), torch.randn(96)
    res = fs.tune(fn, x, w, b, trials=6, backend="model")
    assert isinstance(res, TuneResult) and len(res.trials) == 6
    assert len(res.graph.inputs) == 3 and len(res.graph.nodes_of_kind("template")) == 1
    (mm,) = res.graph.nodes_of_kind("template")
    assert res.graph.node(mm).shape == (16, 96)
    assert fs.measure.validate(res.best, res.graph, device="cpu").ok


def test_tune_refuses_something_that_is_neither_graph_nor_function() -> None:
    with pytest.raises(SpecError):
        fs.tune(42, trials=2, backend="model")


def test_a_journal_study_is_resumable_too(tmp_path: Path) -> None:
    url = f"journal:{tmp_path / 'j.log'}"
    g = fs.workload("w8_dequant_mm", **SMALL["w8_dequant_mm"])
    run_study(g, SearchOptions(trials=5, backend="model", storage=url, study_name="j"))
    res = run_study(g, SearchOptions(trials=8, backend="model", storage=url, study_name="j"))
    assert len(res.trials) == 8 and all(t.state in ("complete", "pruned") for t in res.trials)
    assert os.path.getsize(tmp_path / "j.log") > 0


KILLED_WORKER = textwrap.dedent("""
    import os, sys, time
    from fusionsearch.search import study as S
    from fusionsearch.search.objective import Objective
    import fusionsearch as fs

    _suggest = Objective.suggest

    def suggest(self, trial):  # hang in trial 3 until killed
        if trial.number == 3:
            open(sys.argv[2], "w").close()
            time.sleep(120)
        return _suggest(self, trial)

    Objective.suggest = suggest
    g = fs.workload("mm_bias_gelu", M=16, K=64, N=96)
    S.run_study(g, S.SearchOptions(trials=6, backend="model", storage=sys.argv[1], study_name="k",
                                   cost_model="analytic"))  # as the test's own run (conftest: no shipped model)
""")


@pytest.mark.parametrize("kind", ["sqlite", "journal", "postgres"])
def test_a_resumed_study_reruns_the_trial_of_a_sigkilled_worker(tmp_path: Path, kind: str,
                                                                 storage_url: Callable[[str], str]) -> None:
    url = storage_url(kind)
    script, flag = tmp_path / "killed.py", tmp_path / "in_trial_3"
    script.write_text(KILLED_WORKER)
    proc = subprocess.Popen([sys.executable, str(script), url, str(flag)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not flag.exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert flag.exists(), "the worker never reached trial 3"
    finally:
        proc.kill()
        proc.wait()
    assert [t.state for t in _states(url, "k")].count(optuna.trial.TrialState.RUNNING) == 1
    g = fs.workload("mm_bias_gelu", **SMALL["mm_bias_gelu"])
    res = run_study(g, SearchOptions(trials=6, backend="model", storage=url, study_name="k", heartbeat_s=1))
    states = _states(url, "k")
    assert all(t.state in (*FINISHED, optuna.trial.TrialState.FAIL) for t in states), [
        (t.number, t.state.name) for t in states]
    # The killed worker's trial failed (a stale heartbeat; a journal trial's owner gone) and was laid out again.
    assert [t.state for t in states].count(optuna.trial.TrialState.FAIL) == 1
    assert len(res.trials) == 7 and sum(t.state != "fail" for t in res.trials) == 6
    assert states[-1].system_attrs["failed_trial"] == 3  # trial 3 laid out again


KILLED_CLAIMING = textwrap.dedent("""
    import os, signal, sys
    import optuna
    from fusionsearch.search import study as S
    import fusionsearch as fs

    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    if sys.argv[1].startswith("journal:"):  # between the claim and the record of its owner
        _set = optuna.storages.JournalStorage.set_trial_system_attr

        def set_attr(self, trial_id, key, value):
            if key == "fusionsearch:owner":
                die()
            _set(self, trial_id, key, value)

        optuna.storages.JournalStorage.set_trial_system_attr = set_attr
    else:  # between the claim and the trial's first heartbeat
        from fusionsearch.search import loop
        loop.Heartbeat.__enter__ = die
    g = fs.workload("mm_bias_gelu", M=16, K=64, N=96)
    S.run_study(g, S.SearchOptions(trials=4, backend="model", storage=sys.argv[1], study_name="c", heartbeat_s=1,
                                   cost_model="analytic"))
""")


@pytest.mark.parametrize("kind", STORAGE_KINDS)
def test_a_worker_killed_right_after_its_claim_loses_nothing(tmp_path: Path, kind: str,
                                                            storage_url: Callable[[str], str]) -> None:
    """A worker killed between claiming a trial and its first heartbeat (RDB) or the record of its owner
    (journal) left a RUNNING trial that nothing would ever find stale; the next run recovers it too."""
    url = storage_url(kind)
    script = tmp_path / "claiming.py"
    script.write_text(KILLED_CLAIMING)
    proc = subprocess.run([sys.executable, str(script), url], capture_output=True, text=True, timeout=240)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert [t.state for t in _states(url, "c")].count(optuna.trial.TrialState.RUNNING) == 1
    g = fs.workload("mm_bias_gelu", **SMALL["mm_bias_gelu"])
    run_study(g, SearchOptions(trials=4, backend="model", storage=url, study_name="c", heartbeat_s=1))
    states = [t.state for t in _states(url, "c")]
    assert sum(s in FINISHED for s in states) == 4 and states.count(optuna.trial.TrialState.FAIL) == 1, states


VICTIM_WORKERS = textwrap.dedent("""
    import os, sys, time
    from fusionsearch.search import study as S
    from fusionsearch.search.objective import Objective
    import fusionsearch as fs

    ready, storage, flag, victim = sys.argv[1:5]
    _suggest = Objective.suggest

    def suggest(self, trial):  # the victim hangs in its first trial until killed; the others are slow
        if victim == "1":
            open(flag, "w").close()
            time.sleep(120)
        time.sleep(0.05)
        return _suggest(self, trial)

    Objective.suggest = suggest
    open(os.path.join(ready, "ready-%d" % os.getpid()), "w").close()
    deadline = time.time() + 120
    while len(os.listdir(ready)) < 3 and time.time() < deadline:
        time.sleep(0.005)
    g = fs.workload("mm_bias_gelu", M=16, K=64, N=96)
    res = S.run_study(g, S.SearchOptions(trials=20, backend="model", storage=storage, study_name="v",
                                         cost_model="analytic"))
    print("records", len(res.trials))
""")


def test_a_journal_worker_sigkilled_mid_trial_is_recovered_by_the_others(tmp_path: Path) -> None:
    """Issue 24: journal files have no heartbeat; a worker SIGKILLed while it holds a RUNNING trial left it
    RUNNING for ever and the others finished one short. Now the others see its process gone, fail the trial and
    lay it out again: 20 trials finish, none is left running."""
    url = f"journal:{tmp_path / 'j.log'}"
    script, ready, flag = tmp_path / "victim.py", tmp_path / "ready", tmp_path / "victim_in_trial"
    script.write_text(VICTIM_WORKERS)
    ready.mkdir()
    procs = [subprocess.Popen([sys.executable, str(script), str(ready), url, str(flag), str(int(i == 0))],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    try:
        deadline = time.time() + 120
        while not flag.exists() and time.time() < deadline and procs[0].poll() is None:
            time.sleep(0.05)
        assert flag.exists(), procs[0].communicate()[1][-2000:]
        running = [t for t in _states(url, "v") if t.state == optuna.trial.TrialState.RUNNING]
        assert running, "the victim holds no RUNNING trial"
    finally:
        procs[0].kill()
        procs[0].wait()
    for p in procs[1:]:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
    states = _states(url, "v")
    assert not [t for t in states if t.state in (optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)]
    assert sum(t.state in FINISHED for t in states) == 20, [(t.number, t.state.name) for t in states]
    assert [t.state for t in states].count(optuna.trial.TrialState.FAIL) == 1 and len(states) == 21


# ---- what a study searches: recorded when created, refused when another search reuses it ------------------

def test_a_study_records_what_it_searches(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    g = fs.workload("mm_bias_gelu", **SMALL["mm_bias_gelu"])
    res = run_study(g, SearchOptions(trials=3, backend="model", storage=url, study_name="demo", graph_name="mine"))
    attrs = optuna.load_study(study_name="demo", storage=make_storage(url)).user_attrs
    assert attrs["graph"] == g.signature_hash() and attrs["graph_name"] == "mine"
    assert attrs["backend"] == "model" and attrs["cost_model"] == res.cost_model == "analytic"
    assert attrs["hardware"] == res.hardware.name and len(attrs["space"]) == 16 and attrs["slots"] == 3
    run_study(g, SearchOptions(trials=3, backend="model", storage=url, study_name="plain"))
    assert optuna.load_study(study_name="plain", storage=make_storage(url)).user_attrs["graph_name"] == \
        "mm add gelu 16x64x96 bfloat16"  # no name given: the graph's ops and its matmul's size


@pytest.mark.parametrize("kind", ["sqlite", "journal", "postgres"])
def test_a_study_reused_for_another_graph_is_refused_and_left_as_it_was(kind: str,
                                                                        storage_url: Callable[[str], str]) -> None:
    """Issue 24: `--study demo` first for mm_bias_gelu, then for swiglu, reported the first graph's best time
    beside the second graph's plan; now the second search is refused before any trial, naming both graphs."""
    url = storage_url(kind)
    first = fs.workload("mm_bias_gelu", **SMALL["mm_bias_gelu"])
    other = fs.workload("swiglu", **SMALL["swiglu"])
    run_study(first, SearchOptions(trials=4, backend="model", storage=url, study_name="demo",
                                   graph_name="mm_bias_gelu small"))
    before = [(t.number, t.params, t.value) for t in _states(url, "demo")]
    with pytest.raises(SpecError) as exc:
        run_study(other, SearchOptions(trials=6, backend="model", storage=url, study_name="demo",
                                       graph_name="swiglu small"))
    msg = str(exc.value)
    assert "'demo'" in msg and "mm_bias_gelu small" in msg and "swiglu small" in msg, msg
    assert first.signature_hash() in msg and other.signature_hash() in msg and "another study name" in msg
    assert [(t.number, t.params, t.value) for t in _states(url, "demo")] == before  # no slot added, none run
    # The same graph resumes as before.
    res = run_study(first, SearchOptions(trials=6, backend="model", storage=url, study_name="demo"))
    assert len(res.trials) == 6 and len(_states(url, "demo")) == 6


@pytest.mark.parametrize(("change", "words"), [({"library": False}, "candidate space"),
                                               ({"backend": "interpret"}, "backend model"),
                                               ({"max_configs": 4}, "candidate space")])
def test_a_study_refuses_a_search_whose_trials_would_not_compare(tmp_path: Path, change: dict[str, object],
                                                                 words: str) -> None:
    """Another backend mixes predicted with measured times; another space gives parameters the study's trials
    do not have (Optuna would fail every trial on the changed choice set)."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    g = fs.workload("mm_bias_gelu", **SMALL["mm_bias_gelu"])
    run_study(g, SearchOptions(trials=3, backend="model", storage=url, study_name="s"))
    with pytest.raises(SpecError, match=words):
        run_study(g, SearchOptions(trials=5, storage=url, study_name="s", **{"backend": "model", **change}))
    assert len(_states(url, "s")) == 3


def test_another_cost_model_is_refused_where_it_gives_the_trials_values() -> None:
    """On the model and interpret backends a trial's value is the cost model's prediction; on the gpu backend it
    is measured, and the cost model only orders and prunes the trials."""
    g = fs.workload("mm_bias_gelu", **SMALL["mm_bias_gelu"])
    space = enumerate_space(g, None, 4)
    for backend in ("model", "interpret", "gpu"):
        recorded = I.study_identity(g, "", space, backend, "analytic", fs.costmodel.H200)
        now = I.study_identity(g, "", space, backend, "learned (NVIDIA H200)", fs.costmodel.H200)
        I.check_identity("s", "", recorded, recorded)
        if backend == "gpu":
            I.check_identity("s", "", recorded, now)
        else:
            with pytest.raises(SpecError, match="the analytic cost model, this search has the learned"):
                I.check_identity("s", "", recorded, now)


def test_a_study_made_before_studies_recorded_their_search_is_resumed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    g = fs.workload("mm_bias_gelu", **SMALL["mm_bias_gelu"])
    run_study(g, SearchOptions(trials=3, backend="model", storage=url, study_name="old"))
    from sqlalchemy import create_engine, text

    with create_engine(url).begin() as conn:  # as an older fusionsearch left it: the slot count only
        conn.execute(text("DELETE FROM study_user_attributes WHERE key != 'slots'"))
    assert set(optuna.load_study(study_name="old", storage=make_storage(url)).user_attrs) == {"slots"}
    res = run_study(fs.workload("swiglu", **SMALL["swiglu"]),
                    SearchOptions(trials=3, backend="model", storage=url, study_name="old"))
    assert len(res.trials) == 3


# ---- a space of one plan -------------------------------------------------------------------------

def _pointwise_graph() -> fs.OpGraph:
    g = fs.OpGraph()
    g.set_outputs([g.add("gelu", [g.input("x", [16, 64], "float32")])])
    return g


def _lone_mm() -> fs.OpGraph:
    """One matmul of 17 rows: more than the decode kind takes, so only tile configs (and the library)."""
    g = fs.OpGraph()
    g.set_outputs([g.add("mm", [g.input("a", [17, 64], "float32"), g.input("b", [64, 32], "float32")])])
    return g


@pytest.mark.parametrize(("graph", "options"), [(_pointwise_graph, {}),
                                                (_lone_mm, {"max_configs": 1, "library": False})])
def test_a_space_of_one_plan_runs_one_trial(graph: Callable[[], fs.OpGraph], options: dict[str, object],
                                            caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="fusionsearch.search"):
        res = run_study(graph(), SearchOptions(trials=8, backend="interpret", **options))  # type: ignore[arg-type]
    assert S.possible_plans(res.space) == 1
    assert len(res.trials) == 1 and res.trials[0].status == "validated"
    assert res.extra["possible_plans"] == 1
    assert "1 possible plan: 1 trial (of 8 asked)" in caplog.text


def test_a_space_of_two_plans_runs_the_trials_asked() -> None:
    res = run_study(_lone_mm(), SearchOptions(trials=3, backend="model", max_configs=1))  # a config or PyTorch's
    assert S.possible_plans(res.space) == 2 and len(res.trials) == 3 and "possible_plans" not in res.extra
    assert S.possible_plans(enumerate_space(fs.workload("swiglu", **SMALL["swiglu"]), None, 48)) is None


def test_a_search_with_no_valid_plan_says_its_commonest_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    """The error must say why without a second command: a suite row keeps only its text."""
    from fusionsearch.search.outcome import TrialOutcome

    monkeypatch.setattr(Objective, "_check_interpreted", lambda self, plan: TrialOutcome.invalid("numbers off (x)"))
    g = fs.workload("mm_bias_gelu", **SMALL["mm_bias_gelu"])
    with pytest.raises(FusionSearchError) as e:
        run_study(g, SearchOptions(trials=5, backend="interpret", bytes_rule=None))
    assert "no trial produced a valid plan" in str(e.value)
    assert re.search(r"reasons: [1-5]x numbers off \(x\)", str(e.value)), str(e.value)


@pytest.mark.parametrize(("backend", "why"), [("gpu", "the search measured it unfused as faster"),
                                              ("interpret", "the cost model ranks it faster unfused"),
                                              ("model", "the cost model ranks it faster unfused")])
def test_an_unfused_prologue_is_explained_by_what_judged_the_plan(backend: str, why: str) -> None:
    """Only a GPU measures: the interpreter and model backends must not claim a measurement."""
    from fusionsearch.plan import unfused
    from fusionsearch.search.facts import kernel_facts, unfused_operands

    g = fs.workload("scale_mm", **SMALL["scale_mm"])
    plan = unfused(g)
    mm = next(k for k in plan.kernels if isinstance(k, FusedMatmulKernel))
    (a,) = unfused_operands(plan, mm, backend)
    assert a["side"] == "A" and a["why"] == why
    facts = kernel_facts(plan, fs.costmodel.H200, backend=backend)
    assert [f["not_fused"] for f in facts if "not_fused" in f] == [[a]]
    cast = fs.workload("cast_mm", **SMALL["cast_mm"])  # fp32 read for a bf16 operand: more bytes than unfused
    cast_plan = unfused(cast)
    cmm = next(k for k in cast_plan.kernels if isinstance(k, FusedMatmulKernel))
    assert [u["why"] for u in unfused_operands(cast_plan, cmm, backend)] == ["the bytes rule refuses it"]
