"""Several worker processes on one study (search/workers.py; `--workers`, the Python API's `workers=`): they
run exactly the study's trials between them, each trial records its worker, and a worker killed mid-trial
loses nothing (its trial is failed, on its stale heartbeat or, on a journal file, its process gone, and laid
out again; the rest run by the others or by the process that started them). On the CPU the workers use the
model and interpret backends; one per GPU is the same code with CUDA_VISIBLE_DEVICES set per worker."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
import torch

import fusionsearch as fs
from fusionsearch.errors import SpecError
from fusionsearch.search.study import SearchOptions, make_storage, run_study
from fusionsearch.search.workers import worker_count


def _finished_once(res: fs.TuneResult, total: int) -> None:
    numbers = sorted(t.number for t in res.trials)
    assert numbers == list(range(len(numbers)))  # no trial lost or recorded twice
    done = [t for t in res.trials if t.state in ("complete", "pruned")]
    assert len(done) == total, [(t.number, t.state, t.reason) for t in res.trials if t not in done]


def test_three_workers_run_exactly_the_trials_of_the_study() -> None:
    g = fs.workload("swiglu", M=16, D=256, H=512, dtype=torch.float32)
    res = run_study(g, SearchOptions(trials=24, backend="model", workers=3, cost_model="analytic"))
    _finished_once(res, 24)
    assert len(res.trials) == 24
    tags = res.workers()
    assert sum(tags.values()) == 24 and set(tags) <= {"cpu0", "cpu1", "cpu2", "main"}, tags
    assert any(t.startswith("cpu") for t in tags)
    best = min(t.value_us for t in res.trials if t.state == "complete" and t.value_us is not None)
    assert res.best_us == best
    # Each worker samples from its own seed: they do not propose the same plans to each other.
    assert len({tuple(sorted(t.params.items())) for t in res.trials}) >= 22
    assert "workers:" in res.explain() or len(tags) == 1


def _worker_pids(tag: str, parent: int | None = None) -> list[int]:
    """The processes running `python -m fusionsearch.search.workers TAG` (read from /proc), only those whose
    parent is `parent` when given ('' for any tag)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
                ppid = int((entry / "stat").read_bytes().rpartition(b")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if b"fusionsearch.search.workers" in cmdline and (not tag or tag.encode() in cmdline) \
                    and parent in (None, ppid):
                pids.append(int(entry.name))
    return pids


def _signal(pids: list[int], sig: int) -> None:
    """Send `sig` to each of `pids` that still exists (a process found a moment ago may have exited since)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


@pytest.mark.parametrize("kind", ["sqlite", "journal"])
def test_a_worker_killed_mid_trial_loses_nothing(tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture) -> None:
    """The first worker seen running a trial is SIGKILLed: that trial is failed (a stale heartbeat; a journal
    trial's owner gone) and laid out again, every slot still finishes, and the search reports how the worker
    ended."""
    g = fs.workload("mm_bias_gelu", M=17, K=64, N=64, dtype=torch.float32)
    url = f"sqlite:///{tmp_path / 'study.db'}" if kind == "sqlite" else f"journal:{tmp_path / 'study.log'}"
    # Triton templates only (17 rows: more than the decode kind takes): a library matmul's trial validates in
    # milliseconds, too short to be caught running
    opts = SearchOptions(trials=32, backend="interpret", workers=2, storage=url, study_name="kill", heartbeat_s=1,
                         cost_model="analytic", library=False)
    killed: list[str] = []

    def kill_a_worker_mid_trial() -> None:
        deadline = time.time() + 120
        while time.time() < deadline and not killed:
            for tag in [t for t in running_workers() if t.startswith("cpu")][:1]:
                pids = _worker_pids(tag, os.getpid())
                try:
                    _signal(pids, signal.SIGSTOP)  # frozen first: if its trial is still running now, it dies in it
                    if pids and tag in running_workers():
                        _signal(pids, signal.SIGKILL)
                        killed.append(tag)
                finally:  # never leave a worker frozen (the study would wait for it forever)
                    if not killed:
                        _signal(pids, signal.SIGCONT)
            time.sleep(0.05)

    def running_workers() -> list[str]:
        """The workers of the running trials; [] when the store cannot be read at once. Never waits on SQLite's
        lock: a frozen worker may hold it mid-commit, and a watcher waiting for it (60 s a try) kept that worker
        frozen for ten minutes of a CI run while the other worker died on the lock."""
        try:
            if kind == "sqlite":
                with contextlib.closing(sqlite3.connect(f"file:{tmp_path / 'study.db'}?mode=ro", uri=True,
                                                        timeout=0.2)) as db:
                    rows = db.execute("SELECT a.value_json FROM trials t JOIN studies s ON s.study_id = t.study_id "
                                      "JOIN trial_user_attributes a ON a.trial_id = t.trial_id AND a.key = 'worker' "
                                      "WHERE s.study_name = 'kill' AND t.state = 'RUNNING'").fetchall()
                return [str(json.loads(value)) for (value,) in rows]
            study = optuna.load_study(study_name="kill", storage=make_storage(url, 1))
            return [str(t.user_attrs.get("worker", "")) for t in
                    study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))]
        except Exception:
            return []

    watcher = threading.Thread(target=kill_a_worker_mid_trial)
    watcher.start()
    with caplog.at_level(logging.WARNING, logger="fusionsearch.search"):
        res = run_study(g, opts)
    watcher.join()
    assert killed, "no worker was seen running a trial"
    failed = [t for t in res.trials if t.state == "fail"]
    assert len(failed) == 1 and failed[0].worker == killed[0], [(t.number, t.state, t.worker) for t in res.trials]
    _finished_once(res, 32)  # the failed trial's retry is a new slot: 32 finished, 33 trials in all
    assert len(res.trials) == 33
    assert f"search worker {killed[0]} exited with code -9" in caplog.text


def test_worker_counts() -> None:
    assert worker_count("auto", "interpret") == 1
    assert worker_count(3, "model") == 3
    with pytest.raises(SpecError, match="positive integer or 'auto'"):
        worker_count(0, "model")
    if not torch.cuda.is_available():
        with pytest.raises(SpecError, match="GPU"):
            worker_count(2, "gpu")
    with pytest.raises(SpecError, match="workers must be a positive integer or 'auto'"):
        SearchOptions(workers="many")


@pytest.mark.parametrize("value", ["0", "x", "-2"])
def test_the_cli_refuses_a_bad_worker_count(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    # The CLI's main in this process (`python -m fusionsearch` exits with main's code: tests/test_cli.py)
    from fusionsearch.cli import main

    assert main(["search", "--backend", "model", "--workers", value]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith("fusionsearch: error: --workers must be a positive integer or "
                                                   "'auto'")  # SearchOptions' words (search/options.py RULES)


def test_the_cli_runs_two_workers_and_reports_them_together(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, "-m", "fusionsearch", "search", "mm_bias_gelu", "--shape", "M=16,K=256,N=256",
                        "--backend", "model", "--trials", "12", "--workers", "2", "--quiet", "--out",
                        str(tmp_path / "out")], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("searching mm_bias_gelu (") and ", 12 trials in 2 worker processes, backend model" \
        in p.stdout.splitlines()[0]
    assert "trials: 12 (" in p.stdout
    assert (tmp_path / "out" / "plan.json").is_file()


def test_a_killed_parent_leaves_no_worker_file_and_no_storage_url_on_disk(tmp_path: Path) -> None:
    """Issue 53 item 15: a `--workers` search's parent SIGKILLed left /tmp/fusionsearch-workers-*/worker*.json
    holding the storage URL (with PostgreSQL, its password). The workers get their configuration through a pipe
    and write their stderr to unnamed files: nothing of theirs is on disk, nor the URL on their command line."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    db = tmp_path / "secret-study.db"
    url = f"sqlite:///{db}"
    parent = subprocess.Popen([sys.executable, "-m", "fusionsearch", "search", "mm_bias_gelu", "--shape",
                               "M=16,K=256,N=256", "--backend", "model", "--trials", "5000", "--workers", "2",
                               "--quiet", "--storage", url, "--study", "secret", "--out", str(tmp_path / "out")],
                              env={**os.environ, "TMPDIR": str(tmp)}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    workers: list[int] = []
    try:
        deadline = time.time() + 180
        while time.time() < deadline and parent.poll() is None:
            workers = _worker_pids("", parent.pid)
            if len(workers) == 2 and _worker_trials(db) >= 2:  # both running trials: their configuration read
                break
            time.sleep(0.2)
        assert len(workers) == 2 and _worker_trials(db) >= 2, "the workers did not start running trials"
        for pid in workers:  # nor on the command line or in the environment, which others may read
            assert url.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
            assert url.encode() not in Path(f"/proc/{pid}/environ").read_bytes()
        parent.kill()
        parent.wait()
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        _signal(workers, signal.SIGKILL)
    left = list(tmp.rglob("*"))
    assert not [p for p in left if p.name.startswith("fusionsearch-workers-")], left
    assert not [p for p in left if p.is_file() and url.encode() in p.read_bytes()], left


def _worker_trials(db: Path) -> int:
    """Trials of the study at `db` that a worker process ran (0 while it cannot be read)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.2)) as con:
            return int(con.execute("SELECT COUNT(*) FROM trial_user_attributes WHERE key = 'worker' AND "
                                   "value_json LIKE '%cpu%'").fetchone()[0])
    except sqlite3.Error:
        return 0
