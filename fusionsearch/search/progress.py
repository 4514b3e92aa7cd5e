"""Progress of long steps on stderr: a redrawn bar (tqdm) where stderr is a terminal; elsewhere (a file, a pipe,
a CI log) plain lines now and then, so that a log holds no carriage returns and no hundreds of redraws.

`Progress` is the bar of one process's trials: how many ended each way and the best value; its total follows
the slots still to run (a trial of a dead worker laid out again adds one). A long step inside a trial (the cost
model ranking the space) reports to a `Watch`, which shows it on the bar as a note and stops it with TimeUp once
the search's deadline (--timeout) has passed: a timeout is held between the pieces of a step, not only between
trials."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

import optuna

PLAIN_EVERY_S = 30.0  # a plain line at least this often while the count moves or a note changes


class PlainBar:
    """The part of tqdm's interface used here, written as whole lines: when the count has moved by a tenth of
    the total, when PLAIN_EVERY_S have passed since the last line, and at the end."""

    def __init__(self, total: int, unit: str, desc: str = "", file: TextIO | None = None) -> None:
        self.total, self.unit, self.desc, self.file = total, unit, desc, file or sys.stderr
        self.postfix, self._n = "", 0
        self._shown, self._shown_n, self._shown_at = "", 0, time.monotonic()

    @property
    def n(self) -> int:
        return self._n

    @n.setter
    def n(self, value: int) -> None:
        self._n = value
        self.refresh()

    def update(self, k: int = 1) -> None:
        self.n = self._n + k

    def set_postfix_str(self, text: str) -> None:
        self.postfix = text

    def refresh(self, force: bool = False) -> None:
        line = f"{self.desc}: " if self.desc else ""
        line += f"{self._n}/{self.total} {self.unit}s" + (f"  {self.postfix}" if self.postfix else "")
        if line == self._shown:
            return
        moved = self._n >= self._shown_n + max(1, self.total // 10) or self._n == self.total
        if force or moved or time.monotonic() - self._shown_at >= PLAIN_EVERY_S:
            print(line, file=self.file, flush=True)
            self._shown, self._shown_n, self._shown_at = line, self._n, time.monotonic()

    def close(self) -> None:
        self.refresh(force=self._n != self._shown_n)


def bar(total: int, unit: str, desc: str = "") -> Any:
    """A bar over `total` units on stderr: tqdm's on a terminal, else a PlainBar."""
    if not sys.stderr.isatty():
        return PlainBar(total, unit, desc)
    from tqdm import tqdm

    return tqdm(total=total, file=sys.stderr, unit=unit, dynamic_ncols=True, desc=desc or None)


@dataclass
class Progress:
    """The progress bar of one process's trials: how many ended each way, and the best value (µs)."""

    total: int
    bar: Any = None
    best: float = float("inf")
    counts: dict[str, int] = field(default_factory=dict)
    note_text: str = ""

    def callback(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        status = trial.user_attrs.get("status", trial.state.name.lower())
        self.counts[status] = self.counts.get(status, 0) + 1
        if trial.state == optuna.trial.TrialState.COMPLETE and trial.value is not None:
            self.best = min(self.best, trial.value)
        self.note_text = ""
        self._postfix()
        self.bar.update(1)

    def expect(self, pending: int) -> None:
        """`pending` trials are still to run here (claimed or waiting): the total is what ended plus them."""
        total = self.bar.n + pending
        if total != self.bar.total:
            self.bar.total = self.total = total
            self.bar.refresh()

    def note(self, text: str) -> None:
        """Show what the running trial is doing (a long step before it is judged)."""
        if text != self.note_text:
            self.note_text = text
            self._postfix()
            self.bar.refresh()

    def _postfix(self) -> None:
        words = [f"best {self.best:.1f} us"] if self.best < float("inf") else []
        words += [" ".join(f"{k} {v}" for k, v in self.counts.items())] if self.counts else []
        words += [self.note_text] if self.note_text else []
        self.bar.set_postfix_str("  ".join(words))

    def close(self) -> None:
        self.bar.close()


def progress_bar(total: int, enabled: bool) -> Progress | None:
    """A bar over `total` trials on stderr when enabled (and there is anything to run)."""
    if not enabled or total == 0:
        return None
    import logging

    logging.getLogger("optuna").setLevel(logging.WARNING)
    return Progress(total, bar(total, "trial", "trials"))


class TimeUp(Exception):
    """The search's deadline passed during a long step of a trial; the trial loop stops (search/loop.py)."""


@dataclass
class Watch:
    """What a long step sees of its search: the deadline (time.time(); None: none) and the trials' bar."""

    deadline: float | None = None
    progress: Progress | None = None

    def check(self, step: str, done: int, total: int) -> None:
        """Between two pieces of `step` (`done` of `total`): show it, and raise TimeUp once the deadline passed."""
        if self.progress is not None:
            self.progress.note(f"{step} {done}/{total}")
        if self.deadline is not None and time.time() >= self.deadline:
            raise TimeUp(f"the time limit passed while {step}")


class Steps:
    """The step a long command is at (`say(text)` as each starts), written on stderr as `prefix: text (N s so
    far)` once the command has run `after` seconds, and again every PLAIN_EVERY_S while one step lasts: a
    command done within `after` seconds says nothing. A context manager: the writer thread ends with it."""

    def __init__(self, prefix: str, after: float = 2.0, file: TextIO | None = None) -> None:
        import threading

        self.prefix, self.after, self.file = prefix, after, file or sys.stderr
        self.step, self.shown, self.shown_at = "", "", 0.0
        self.start = time.monotonic()
        self.lock, self.done = threading.Lock(), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def say(self, text: str) -> None:
        with self.lock:
            self.step = text
        self._show()

    def _show(self) -> None:
        now = time.monotonic()
        with self.lock:
            step = self.step
            if not step or now - self.start < self.after:
                return
            if step == self.shown and now - self.shown_at < PLAIN_EVERY_S:
                return
            again = "still " if step == self.shown else ""
            self.shown, self.shown_at = step, now
        print(f"{self.prefix}: {again}{step} ({now - self.start:.0f} s so far)", file=self.file, flush=True)

    def _run(self) -> None:
        while not self.done.wait(0.5):
            self._show()

    def __enter__(self) -> Steps:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()
