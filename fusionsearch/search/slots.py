"""A study's trial slots. A search asked for N trials gives its study N slots (study user attr 'slots'); each slot
is a WAITING trial that exactly one worker claims, so any number of workers on one storage run exactly N trials
between them. Slots are laid out lazily, at most AHEAD waiting at a time and always under one lock, so a search
of 10**9 trials starts and runs like one of 64, and two workers never lay out the same slot.

A slot whose worker died is failed and laid out again as a retry (system attr 'failed_trial', as Optuna's own
heartbeat retry records it): the first retry keeps the dead trial's parameters, a later one draws new ones (the
plan itself may be what kills workers). RDB storages notice a dead worker by its heartbeat; journal files have
none, so each claim records its owner (host, pid namespace, pid and process start time) and a RUNNING trial
whose owner on this host is gone is recovered. Trials of other hosts cannot be checked: one host per journal."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import optuna

from fusionsearch.search.identity import check_identity

log = logging.getLogger("fusionsearch.search")

AHEAD = 64  # waiting slots kept laid out ahead of the workers (bounds the layout's time and memory)
# slots laid out at a time: a slot is a few database writes (tens of ms each on a busy disk's SQLite), so laying
# out AHEAD at once took seconds before the first trial and past a --timeout; the loop tops up between trials
LAYOUT_STEP = 8
OWNER = "fusionsearch:owner"  # system attr of a journal trial: the process that claimed it
WAITING, RUNNING, FAIL = (optuna.trial.TrialState.WAITING, optuna.trial.TrialState.RUNNING,
                          optuna.trial.TrialState.FAIL)


class Retry:
    """Lay a dead worker's trial out again (the RDB heartbeat's callback, and the journal's recovery): the first
    time with its parameters, later with none, so that the study still finishes every one of its slots."""

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        history = [*trial.system_attrs.get("retry_history", []), trial.number]
        first = len(history) == 1
        attrs = {"fixed_params": trial.system_attrs.get("fixed_params", {}) if first else {},
                 "failed_trial": history[0], "retry_history": history}
        study.add_trial(optuna.trial.create_trial(state=WAITING, params=trial.params if first else None,
                                                  distributions=trial.distributions if first else None,
                                                  system_attrs=attrs))


def is_retry(trial: optuna.trial.FrozenTrial) -> bool:
    """A trial laid out again for a dead worker's: it replaces a slot rather than adding one."""
    return "failed_trial" in trial.system_attrs


def laid_out(trials: list[optuna.trial.FrozenTrial]) -> int:
    """How many of a study's slots are laid out (its trials that are not retries)."""
    return sum(not is_retry(t) for t in trials)


# ---- the process that claimed a journal trial -----------------------------------------------------------------

def _where() -> str:
    """This host and pid namespace: where a recorded pid means this process table."""
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        ns = ""
    return f"{socket.gethostname()} {ns}".strip()


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """A process's state letter and start time (clock ticks after boot), from /proc; None without /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode("ascii", "replace")
    except FileNotFoundError:
        return ("X", -1)  # gone since kill() saw it
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()  # after the command name, which may hold spaces and parentheses
    return fields[0], int(fields[19])


def this_process() -> dict[str, Any]:
    """The owner record of this process: where, pid and start time (None where /proc is unavailable)."""
    stat = _proc_stat(os.getpid())
    return {"where": _where(), "pid": os.getpid(), "start": stat[1] if stat else None}


def owner_alive(owner: dict[str, Any]) -> bool | None:
    """Whether the recorded process still runs: None when it is on another host (it cannot be checked here). A
    zombie (killed, not yet reaped) is dead; another process given the same pid since is told by its start time."""
    if owner.get("where") != _where():
        return None
    pid = int(owner.get("pid", 0))
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    stat = _proc_stat(pid)
    if stat is None:
        return True
    state, start = stat
    return state not in ("Z", "X") and (owner.get("start") is None or start == owner["start"])


# ---- locks -----------------------------------------------------------------------------------------------------

class file_lock:
    """An exclusive flock on `path` for the duration (no-op when path is None); the kernel releases it when its
    process dies, so a killed worker never leaves it held. The file may be removed by `remove_lock` (a search
    that ends leaves none behind): a lock taken on a file that is no longer the one at `path` is taken again
    on the new one, so that two processes never hold locks on two different files."""

    def __init__(self, path: str | None) -> None:
        self.path, self.fd = path, -1

    def __enter__(self) -> None:
        if self.path:
            import fcntl

            while True:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    if os.stat(self.path).st_ino == os.fstat(fd).st_ino:
                        self.fd = fd
                        return
                except FileNotFoundError:
                    pass
                os.close(fd)  # removed (and maybe made again) while this process waited for it

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            import fcntl

            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


def remove_lock(path: str | None) -> None:
    """Remove the lock file at `path` (none: nothing), under its lock: a process waiting for it then finds it
    gone and locks a new one (file_lock)."""
    if not path or not os.path.exists(path):
        return
    lock = file_lock(path)
    with lock, contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def lock_path(url: str | None) -> str | None:
    """The lock file beside a SQLite or journal storage: SQLite ignores SELECT ... FOR UPDATE, and a journal
    claim is two records (the claim, its owner), so their claims and layouts take this file lock."""
    if not url:
        return None
    if url.startswith("journal:"):
        return url.removeprefix("journal:") + ".claims.lock"
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///").split("?", 1)[0]
        return None if path in ("", ":memory:") else path + ".claims.lock"
    return None


@contextlib.contextmanager
def _server_lock(storage: Any, name: str) -> Iterator[None]:
    """A lock held on the database server for the duration: PostgreSQL's transaction advisory lock, MySQL's named
    lock; none elsewhere (an in-memory storage has one process)."""
    engine = getattr(storage, "engine", None)
    dialect = engine.dialect.name if engine is not None else ""
    if dialect not in ("postgresql", "mysql"):
        yield
        return
    from sqlalchemy import text

    key = int.from_bytes(hashlib.sha256(f"fusionsearch slots {name}".encode()).digest()[:8], "big", signed=True)
    with engine.begin() as conn:  # postgresql: released when this transaction ends (or its connection drops)
        if dialect == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
            yield
        else:
            conn.execute(text("SELECT GET_LOCK(:k, -1)"), {"k": str(key)})
            try:
                yield
            finally:
                conn.execute(text("SELECT RELEASE_LOCK(:k)"), {"k": str(key)})


# ---- the slots of one study ------------------------------------------------------------------------------------

@dataclass
class Slots:
    """The slots of one study as one process sees them: lays them out, claims them, recovers those of dead
    journal workers. `total` is the study's slot count; `seeds` the parameters of its first slots."""

    study: optuna.Study
    storage: Any  # the storage itself (RDB, journal or in memory), whose claim is atomic
    total: int
    seeds: list[dict[str, str]] = field(default_factory=list)
    url: str | None = None
    full: bool = False  # every slot laid out (seen once; this process's total does not change)
    elsewhere: int = 0  # RUNNING trials last seen whose worker is on another host (journal)

    @property
    def study_id(self) -> int:
        return self.study._study_id

    @property
    def journal(self) -> bool:
        return bool(self.url and self.url.startswith("journal:"))

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """The study's layout lock: a file lock beside SQLite and journal files, a server lock on PostgreSQL."""
        path = lock_path(self.url)
        if path:
            with file_lock(path):
                yield
        else:
            with _server_lock(self.storage, self.study.study_name):
                yield

    def top_up(self) -> int:
        """Lay out up to LAYOUT_STEP slots, so that at most AHEAD wait and at most `total` are laid out; returns how
        many wait now (0 once every slot was seen laid out: a worker that then finds none waiting has nothing left
        to lay out)."""
        if self.full:
            return 0
        with self.lock():
            trials = self.study.get_trials(deepcopy=False)
            laid = laid_out(trials)
            waiting = sum(t.state == WAITING for t in trials)
            add = max(0, min(self.total - laid, AHEAD - waiting, LAYOUT_STEP))
            for k in range(laid, laid + add):
                params = self.seeds[k] if k < len(self.seeds) else {}
                self.study.add_trial(optuna.trial.create_trial(state=WAITING, system_attrs={"fixed_params": params}))
            self.full = laid + add >= self.total
        return waiting + add

    def claim(self) -> tuple[int | None, bool]:
        """Atomically take one waiting slot: (its trial id or None, whether few are left waiting). PostgreSQL/MySQL
        (SELECT ... FOR UPDATE) and journal files refuse a second claimant themselves; SQLite ignores FOR UPDATE,
        so its claims take the file lock. A journal claim records its owner under that lock, so that a RUNNING
        trial without an owner seen under it is one whose claimant died between the two."""
        beats = getattr(self.storage, "heartbeat_interval", None)
        with file_lock(lock_path(self.url)):
            waiting = self.storage.get_all_trials(self.study_id, deepcopy=False, states=(WAITING,))
            for t in waiting:
                if beats:  # before the claim: Optuna never finds a RUNNING trial stale that has no heartbeat yet
                    with contextlib.suppress(Exception):  # another claimant's row (a race on PostgreSQL) will do
                        self.storage.record_heartbeat(t._trial_id)
                try:
                    if self.storage.set_trial_state_values(t._trial_id, state=RUNNING):
                        if self.journal:
                            self.storage.set_trial_system_attr(t._trial_id, OWNER, this_process())
                        return t._trial_id, len(waiting) <= AHEAD // 2
                except optuna.exceptions.UpdateFinishedTrialError:
                    continue  # another worker claimed and finished it since the list was read
        return None, True

    def recover(self) -> int:
        """Journal studies: fail each RUNNING trial whose worker on this host is dead and lay it out again; returns
        how many. Idempotent under the lock: a retry already laid out for a trial is not laid out twice."""
        if not self.journal:
            return 0
        recovered, self.elsewhere = 0, 0
        with file_lock(lock_path(self.url)):
            trials = self.storage.get_all_trials(self.study_id, deepcopy=False)
            retried = {t.system_attrs["retry_history"][-1] for t in trials if is_retry(t)}
            for t in trials:
                if t.state != RUNNING:
                    continue
                owner = t.system_attrs.get(OWNER)
                alive = owner_alive(owner) if owner else False
                if alive is None:
                    self.elsewhere += 1
                if alive is not False:
                    continue
                log.warning("trial %d: its worker (%s) is gone; it is failed and laid out again", t.number,
                            f"pid {owner.get('pid')}" if owner else "killed while claiming it")
                if t.number not in retried:
                    Retry()(self.study, t)
                try:
                    self.storage.set_trial_state_values(t._trial_id, state=FAIL)
                except optuna.exceptions.UpdateFinishedTrialError:
                    pass
                recovered += 1
        return recovered

    def live_here(self) -> int:
        """Journal studies: RUNNING trials of other processes on this host that still run (they may yet die, and
        their trials be recovered: worth waiting for)."""
        if not self.journal:
            return 0
        running = self.storage.get_all_trials(self.study_id, deepcopy=False, states=(RUNNING,))
        owners = [t.system_attrs.get(OWNER) or {} for t in running]
        return sum(o.get("pid") != os.getpid() and owner_alive(o) is True for o in owners)

    def remaining(self) -> int:
        """Slots not run yet: waiting, or not laid out."""
        trials = self.study.get_trials(deepcopy=False)
        return self.total - laid_out(trials) + sum(t.state == WAITING for t in trials)


def open_study(name: str, storage: Any, sampler: optuna.samplers.BaseSampler, total: int,
               seeds: list[dict[str, str]], identity: dict[str, str] | None = None, where: str = "",
               url: str | None = None) -> tuple[optuna.Study, Slots]:
    """Create the study with `total` slots (the seed plans first), or join an existing one.

    The creator records what the study searches (`identity`), lays out its first slots and then records the slot
    count (user attr 'slots'); a joiner waits for that count, refuses a study recorded for another search
    (check_identity), and a later run asking for a larger total (a resume) raises the count."""
    try:
        study = optuna.create_study(study_name=name, storage=storage, sampler=sampler, direction="minimize")
        slots = 0
        log.info("study %s created", name)
    except optuna.exceptions.DuplicatedStudyError:
        study = optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        deadline = time.time() + 60
        while "slots" not in study.user_attrs and time.time() < deadline:
            time.sleep(0.2)  # the creator is still laying out the first slots (its identity recorded before them)
        recorded = study.user_attrs
        if identity is not None:
            check_identity(name, where, recorded, identity)
        slots = int(recorded.get("slots", laid_out(study.get_trials(deepcopy=False))))
        log.info("study %s resumed: %d trial slots, %d asked", name, slots, total)
        if slots > total:
            log.warning("study %s already has %d trial slots, more than the %d asked: it keeps them (%d not run "
                        "yet), and its result covers them all; a new study name searches afresh", name, slots,
                        total, Slots(study, storage, slots).remaining())
    if identity is not None and "graph" not in study.user_attrs and slots == 0:
        for key, value in identity.items():  # before the slots: a joiner reads them once it sees the slots
            study.set_user_attr(key, value)
    book = Slots(study, storage, max(total, slots), seeds, url)
    if slots == 0 or total > slots:
        book.top_up()
        study.set_user_attr("slots", book.total)
    return study, book
