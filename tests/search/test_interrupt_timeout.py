"""Issue 53 items 4, 5 and 8: a study's trials are counted exactly across an interrupt and the resume after it
(the interrupted trial recorded as such and run again, the resumed bar's total right), a study larger than asked
says so, the timeout holds inside the cost model's ranking of the space, progress written to a file is plain
lines, and a search leaves no lock file beside its storage."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import optuna
import pytest

import fusionsearch as fs
from fusionsearch.search.objective import Objective
from fusionsearch.search.studies import list_studies
from fusionsearch.search.study import SearchOptions, make_storage, run_study

G = {"M": 16, "K": 64, "N": 96}
FAIL, WAITING = optuna.trial.TrialState.FAIL, optuna.trial.TrialState.WAITING


def _interrupt_at(monkeypatch: pytest.MonkeyPatch, call: int) -> None:
    """Ctrl-C in the `call`-th trial (from 1), its plan chosen, before it is judged."""
    prepare, calls = Objective.prepare, [0]

    def interrupted(self: Objective, trial: optuna.Trial) -> object:
        calls[0] += 1
        prepared = prepare(self, trial)
        if calls[0] == call:
            raise KeyboardInterrupt
        return prepared

    monkeypatch.setattr(Objective, "prepare", interrupted)


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_an_interrupted_trial_is_recorded_and_run_again_and_the_resumed_bar_counts_right(
        tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: the interrupted trial stayed RUNNING (`studies`: complete 1 failed 0 waiting 63, it nowhere), the
    resumed bar went past its total when the stale trial was retried, and report.md said `fail` with no reason."""
    url = f"sqlite:///{tmp_path / 'i.db'}" if kind == "sqlite" else f"journal:{tmp_path / 'i.log'}"
    g = fs.workload("mm_bias_gelu", **G)
    opts = SearchOptions(trials=6, backend="model", storage=url, study_name="k", progress=True)
    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        _interrupt_at(m, 3)
        run_study(g, opts)
    (summary,) = list_studies(url)
    assert (summary.complete + summary.pruned, summary.failed, summary.waiting) == (2, 1, 4)
    storage = make_storage(url)
    trials = optuna.load_study(study_name="k", storage=storage).get_trials()
    (stopped,) = [t for t in trials if t.state == FAIL]
    assert stopped.user_attrs["status"] == "interrupted" and "interrupted" in stopped.user_attrs["reason"]
    (again,) = [t for t in trials if t.state == WAITING and "failed_trial" in t.system_attrs]
    assert again.system_attrs["failed_trial"] == stopped.number and again.params == stopped.params
    capsys.readouterr()

    res = run_study(g, opts)
    assert "\r" not in capsys.readouterr().err.replace("\r\n", "\n")
    lines = [ln for ln in capsys.readouterr().err.splitlines()]
    assert not lines or lines[-1].startswith("trials: 4/4 trials"), lines  # 6 slots, 2 done: 3 left and the retry
    done = [t for t in res.trials if t.state in ("complete", "pruned")]
    assert len(done) == 6 and len(res.trials) == 7  # every slot run once; the interrupted trial is listed too
    (record,) = [t for t in res.trials if t.state == "fail"]
    assert record.status == "interrupted"
    assert record.reason.endswith(f"run again as trial {again.number}"), record.reason
    assert not list(tmp_path.glob("*.lock"))  # item 8: no claims lock left beside the storage


def test_the_resumed_bar_totals_what_is_left_to_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """The bar over a resumed study's trials ends at its total: 0/4 to 4/4 (before: 0/62, ending at "63trial")."""
    url = f"sqlite:///{tmp_path / 'b.db'}"
    g = fs.workload("mm_bias_gelu", **G)
    with monkeypatch.context() as m, pytest.raises(KeyboardInterrupt):
        _interrupt_at(m, 3)
        run_study(g, SearchOptions(trials=6, backend="model", storage=url, study_name="b"))
    run_study(g, SearchOptions(trials=6, backend="model", storage=url, study_name="b", progress=True))
    err = capsys.readouterr().err
    assert "\r" not in err  # item 8: not a terminal, so plain lines, not a redrawn bar
    last = err.splitlines()[-1]
    assert last.startswith("trials: 4/4 trials  best "), err


def test_a_study_with_more_trials_than_asked_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    g = fs.workload("mm_bias_gelu", **G)
    run_study(g, SearchOptions(trials=5, backend="model", storage=url, study_name="m"))
    with caplog.at_level(logging.WARNING, logger="fusionsearch.search"):
        res = run_study(g, SearchOptions(trials=2, backend="model", storage=url, study_name="m"))
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert line.startswith("study m already has 5 trial slots, more than the 2 asked: it keeps them (0 not run"), line
    assert len(res.trials) == 5


def test_the_timeout_holds_while_the_cost_model_ranks_the_space(tmp_path: Path) -> None:
    """`--timeout 2` took 10.4 s: ranking a large space (swiglu's 2.7 million plans, a sample of 4096 of them)
    ran to its end before the deadline was looked at, the bar at 1/64 meanwhile. It is checked between chunks of
    the ranking; the trial it stopped is recorded as interrupted and waits for the next run."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    g = fs.workload("swiglu", M=16)
    start = time.time()
    res = run_study(g, SearchOptions(trials=64, backend="model", sampler="ranked", cost_model="analytic",
                                     storage=url, study_name="r", timeout=2.0))
    took = time.time() - start
    # 2.0-2.1 s on an idle 2-core machine, 3.3 s with the suite's other worker beside it; 10.4 s before the fix
    # (the whole ranking first): a bound that a loaded CI machine holds and the unchecked ranking does not.
    assert took < 6.0, took
    stopped = [t for t in res.trials if t.status == "interrupted"]
    assert len(stopped) <= 1 and all("the time limit passed while" in t.reason for t in stopped), stopped
    ran = [t for t in res.trials if t.state in ("complete", "pruned")]
    assert 1 <= len(ran) < 64
    (summary,) = list_studies(url)
    assert summary.waiting == 64 - len(ran)


def test_a_ranking_reports_its_steps_and_stops_when_told() -> None:
    """PlanRanking calls its check between chunks of plans; an exception there stops it part way."""
    from fusionsearch.search.ranked import PlanRanking
    from fusionsearch.search.space import enumerate_space

    g = fs.workload("swiglu", M=16)
    space = enumerate_space(g, lambda *a: True, 48)
    seen: list[tuple[str, int, int]] = []

    class Stop(Exception):
        pass

    def check(step: str, done: int, total: int) -> None:
        seen.append((step, done, total))
        if len(seen) == 3:
            raise Stop

    ranking = PlanRanking(space, fs.costmodel.H200, lambda: None, lambda plan: True, check=check)
    assert seen == []  # made, not built: the work belongs to the first trial that asks for it
    with pytest.raises(Stop):
        ranking.order()
    assert seen == [("building the plans to rank", i * 256, 4096) for i in range(3)]


def test_plain_progress_lines_and_no_lock_file_after_a_cli_search(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Item 8: a bar written to a file (stderr not a terminal) was `\\r` redraws; a search left i.db.claims.lock."""
    from fusionsearch.cli import main

    url = f"sqlite:///{tmp_path / 'c.db'}"
    assert main(["search", "mm_bias_gelu", "--shape", "M=16,K=64,N=96", "--backend", "model", "--trials", "20",
                 "--storage", url, "--study", "c"]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and err.splitlines()[-1].startswith("trials: 20/20 trials  best "), err
    assert 2 <= len(err.splitlines()) <= 11  # a line a tenth of the way, not one a trial
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.db"]


def test_a_killed_search_s_trial_says_so_in_the_result_of_the_next_run(tmp_path: Path) -> None:
    """A search killed outright (SIGKILL: nothing runs in it to record the trial) leaves its trial RUNNING; the
    next run fails it and runs it again, and its record (report.md's trial table) says why and as which trial,
    where it said `fail` with an empty reason."""
    import os
    import subprocess
    import sys
    import textwrap

    url = f"journal:{tmp_path / 'k.log'}"
    script = textwrap.dedent(f"""
        import os, signal
        import fusionsearch as fs
        from fusionsearch.search.objective import Objective
        from fusionsearch.search.study import SearchOptions, run_study
        prepare, calls = Objective.prepare, [0]
        def killed(self, trial):
            calls[0] += 1
            out = prepare(self, trial)
            if calls[0] == 2:
                os.kill(os.getpid(), signal.SIGKILL)
            return out
        Objective.prepare = killed
        run_study(fs.workload("mm_bias_gelu", M=16, K=64, N=96),
                  SearchOptions(trials=4, backend="model", storage={url!r}, study_name="k", cost_model="analytic"))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ}, check=False)
    assert proc.returncode == -9, proc.stderr[-2000:]
    res = run_study(fs.workload("mm_bias_gelu", **G),
                    SearchOptions(trials=4, backend="model", storage=url, study_name="k", cost_model="analytic"))
    (record,) = [t for t in res.trials if t.state == "fail"]
    assert record.status == "stopped"
    assert record.reason.startswith("its process stopped before it was judged (killed or lost); run again as "
                                    "trial 4"), record.reason
    assert sum(t.state in ("complete", "pruned") for t in res.trials) == 4
    report = res.report(str(tmp_path / "report.md"))
    assert f"| {record.number} | stopped |" in Path(report).read_text()
