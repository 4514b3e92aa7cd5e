"""The trial loop of one process: claim a waiting slot (search/slots.py), run its trial, tell the study how it
ended, until no slot is left. Any number of processes on one storage run exactly the study's N trials.

Hand-written rather than Optuna's `study.optimize`, because optimize cannot keep these guarantees:
- exactly N trials across workers: optimize's `ask()` creates a new trial whenever none is waiting, so workers
  racing for the last slots would run more than N; here a trial only ever comes from a claimed slot;
- claims in batches: with a compile pool the plans of several trials compile in parallel before each is timed
  (a batch never spans the learned model's next correction: the trials after it follow the corrected model);
- journal files: Optuna has no heartbeat for them; `Slots.recover` finds the trials of dead workers on this host.
What Optuna does do here: the RDB heartbeat's staleness check and retry callback (`fail_stale_trials`, the
storage's `heartbeat_interval`/`grace_period`/`heartbeat_stale_trial_callback`, search/storage.py), `study.tell`.
The heartbeat thread is our own (Heartbeat): Optuna's lives in a private module, runs only inside optimize, and
stops at its first database error, after which a healthy trial would be failed as stale."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from types import TracebackType
from typing import Any

import optuna

from fusionsearch.errors import failure_reason
from fusionsearch.measure.requests import Candidate
from fusionsearch.plan import Plan
from fusionsearch.search.objective import Objective
from fusionsearch.search.outcome import TrialOutcome, tell
from fusionsearch.search.progress import Progress, TimeUp
from fusionsearch.search.slots import Retry, Slots

log = logging.getLogger("fusionsearch.search")
RUNNING = optuna.trial.TrialState.RUNNING


class Heartbeat:
    """Record the running trial's heartbeat every `interval` seconds from a background thread (no storage: none);
    a failed beat is retried at the next one."""

    def __init__(self, storage: Any, trial_id: int, interval: float) -> None:
        self.storage, self.trial_id, self.interval = storage, trial_id, interval
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True) if storage is not None else None

    def _beat(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                self.storage.record_heartbeat(self.trial_id)
            except Exception:  # a finished trial or a transient database error: the next beat retries
                pass

    def __enter__(self) -> None:
        if self.thread is not None:
            self.storage.record_heartbeat(self.trial_id)
            self.thread.start()

    def __exit__(self, kind: type[BaseException] | None = None, error: BaseException | None = None,
                 tb: TracebackType | None = None) -> None:
        if self.thread is not None:
            self.stop.set()
            self.thread.join()


def run_trials(slots: Slots, objective: Objective, deadline: float | None, bar: Progress | None,
               pool: Any = None) -> None:
    """Claim and run waiting slots until none is left (or the deadline passes). With a compile pool, trials are
    claimed in batches: the plans that survive pruning compile in parallel, then are judged in turn.

    Slots are laid out as they are needed; the trials of dead workers are laid out again (RDB: stale heartbeats;
    journal: owners gone from this host), and a worker that finds nothing waiting waits while another worker's
    trial may still be recovered (RDB: 4 grace periods; journal: while its worker on this host runs)."""
    study = slots.study
    heartbeat = getattr(slots.storage, "heartbeat_interval", None)
    waiting_since: float | None = None
    low = True  # few slots waiting: lay out more before claiming
    while deadline is None or time.time() < deadline:
        if getattr(study.sampler, "exhausted", False):
            return
        if heartbeat:
            with slots.lock():  # SQLite: two workers must not both fail (and retry) one stale trial
                optuna.storages.fail_stale_trials(study)  # lays out again the trials of workers that died
        slots.recover()
        if low:
            slots.top_up()
        wide = objective.batch_limit(pool.workers if pool is not None else 1)  # never across a refit
        batch, beats, low = _claim(slots, wide, heartbeat)
        if batch:
            waiting_since = None
            if bar:
                bar.expect(len(batch) + slots.remaining())
            try:
                _run_batch(study, objective, batch, beats, bar, pool)
            except TimeUp as e:
                log.info("study %s: %s; stopping", study.study_name, e)
                return
            continue
        if slots.top_up() or slots.recover():  # slots waiting (laid out by now, here or by another worker)
            continue
        may, waiting_since = _others_may_leave_work(slots, heartbeat, waiting_since)
        if not may:
            return


def _claim(slots: Slots, count: int, heartbeat: int | None) -> tuple[list[optuna.Trial], list[Heartbeat], bool]:
    """Claim up to `count` waiting slots, each beating from its claim on (a worker killed while preparing is
    noticed too): the trials, their heartbeats, and whether few slots are left waiting."""
    batch, beats, low = [], [], True
    for _ in range(count):
        trial_id, low = slots.claim()
        if trial_id is None:
            break
        beat = Heartbeat(slots.storage if heartbeat else None, trial_id, heartbeat or 0)
        beat.__enter__()
        batch.append(optuna.trial.Trial(slots.study, trial_id))
        beats.append(beat)
    return batch, beats, low


def _others_may_leave_work(slots: Slots, heartbeat: int | None,
                           waiting_since: float | None) -> tuple[bool, float | None]:
    """Nothing waits: sleep a moment and say True while another worker's trial may yet be failed and laid out
    again (RDB: until 4 grace periods after this worker first waited on one; journal: while its worker on this
    host runs), else False; and since when this worker waits on another's RDB trial."""
    running = slots.study.get_trials(deepcopy=False, states=(RUNNING,))
    if heartbeat and running:
        waiting_since = waiting_since or time.time()
        grace = getattr(slots.storage, "grace_period", None) or 3 * heartbeat
        if time.time() < waiting_since + 4 * grace:
            time.sleep(min(heartbeat, 1.0))  # another worker's trial: done soon, or stale and retried
            return True, waiting_since
    if slots.live_here():
        time.sleep(0.5)  # another worker on this host runs a trial: done soon, or dead and recovered
        return True, waiting_since
    return False, waiting_since


def _run_batch(study: optuna.Study, objective: Objective, batch: list[optuna.Trial], beats: list[Heartbeat],
               bar: Progress | None, pool: Any) -> None:
    """Prepare every claimed trial, compile the survivors in the pool, then judge each and tell the study. Stopped
part way (Ctrl-C, the deadline passing in a long step: TimeUp), the trials not told yet are abandoned."""
    told: set[int] = set()
    try:
        prepared: list[Plan | TrialOutcome] = []
        for trial in batch:
            try:
                prepared.append(objective.prepare(trial))
            except TimeUp:
                raise
            except Exception as e:
                prepared.append(TrialOutcome.from_exception(e))
        built: dict[int, Candidate] = {}  # each survivor generated once, here: the pool and the judge take it
        if pool is not None:
            for i, (trial, plan) in enumerate(zip(batch, prepared, strict=True)):
                if isinstance(plan, Plan):
                    try:
                        built[trial.number] = objective.candidate(plan)
                    except Exception as e:  # its source does not generate: nothing to compile
                        prepared[i] = TrialOutcome.failed(f"compile failed: {failure_reason(e)}")
        failures = dict(zip(built, pool.warm(objective.graph.to_dict(), list(built.values())),
                            strict=True)) if built else {}
        for trial, plan, beat in zip(batch, prepared, beats, strict=True):
            try:
                frozen = tell(study, trial, _judge(objective, trial, plan, failures.get(trial.number, ""),
                                                   built.get(trial.number)))
                told.add(trial.number)
            finally:
                beat.__exit__()
            if bar:
                bar.callback(study, frozen)
    except BaseException as e:
        for beat in beats:
            beat.__exit__()
        for trial in batch:
            if trial.number not in told:
                abandon(study, trial, e)
        raise


def abandon(study: optuna.Study, trial: optuna.Trial, why: BaseException) -> None:
    """End a claimed trial this process stops before judging it (Ctrl-C, the deadline in a long step): FAIL with
    the status 'interrupted' and the reason, and its slot laid out again with its parameters (slots.Retry, as
    for a dead worker's), so that the next run of the same command runs it and the study still holds exactly
    its N slots. A trial already ended (the interruption came as it was told) is left as it is."""
    reason = str(why) if isinstance(why, TimeUp) else f"interrupted ({type(why).__name__}) before it was judged"
    with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError, ValueError, RuntimeError):
        frozen = tell(study, trial, TrialOutcome.interrupted(f"{reason}; its slot is laid out again"))
        Retry()(study, frozen)


def _judge(objective: Objective, trial: optuna.Trial, prepared: Plan | TrialOutcome,
           compile_failure: str, candidate: Candidate | None) -> TrialOutcome:
    """The outcome of one prepared trial; an exception fails this trial only, with its reason."""
    if isinstance(prepared, TrialOutcome):
        return prepared
    try:
        return objective.finish(trial, prepared, compile_failure, candidate)
    except TimeUp:
        raise
    except Exception as e:
        return TrialOutcome.from_exception(e)


def say_unfinished(slots: Slots) -> None:
    """Log the slots this search leaves unfinished (a timeout, trials running in other workers) and how to finish
    them: the same command again."""
    trials = slots.study.get_trials(deepcopy=False)
    running = sum(t.state == RUNNING for t in trials)
    left = slots.remaining()
    if left or running:
        log.info("study %s: %d of %d trial slots not run yet, %d running in other workers%s; the same command "
                 "again runs what is left", slots.study.study_name, left, slots.total, running,
                 f" ({slots.elsewhere} on other hosts, which this one cannot check)" if slots.elsewhere else "")
