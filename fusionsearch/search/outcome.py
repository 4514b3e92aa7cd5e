"""How one trial ended, as one frozen value: the objective returns it, `tell` records it. Pruned, invalid and the
plan's own failures (it does not compile, it faults or times out on the GPU) become Optuna's PRUNED, so that
samplers learn from them and do not propose the plan again; only a fault of the search itself (an exception
while running the trial) is Optuna's FAIL."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

import optuna

from fusionsearch.errors import failure_reason

log = logging.getLogger("fusionsearch.search")

Status = Literal["ok", "pruned", "invalid", "failed"]
# what an ok trial records as its status (user attr 'status'), by backend
JUDGED = {"gpu": "measured", "interpret": "validated", "model": "estimated"}


@dataclass(frozen=True)
class TrialOutcome:
    """One trial's end. `status`: ok, pruned (before anything compiled: illegal, bytes rule, cost model),
    invalid (wrong numbers) or failed; `time_us`: the trial's value where ok (measured or predicted, µs);
    `reason`: why, where not ok; `label`: the status the trial records ('measured', 'cost model', 'failed');
    `fault`: failed by an exception of the search rather than by the plan (Optuna FAIL, not PRUNED)."""

    status: Status
    label: str
    time_us: float | None = None
    reason: str = ""
    fault: bool = False

    @classmethod
    def ok(cls, time_us: float, backend: str) -> TrialOutcome:
        """A judged plan: its time (µs) on `backend` (gpu: measured; interpret, model: predicted)."""
        return cls("ok", JUDGED[backend], float(time_us))

    @classmethod
    def pruned(cls, label: str, reason: str) -> TrialOutcome:
        """Refused before compiling: `label` says by what ('illegal', 'bytes rule', 'cost model')."""
        return cls("pruned", label, reason=reason)

    @classmethod
    def invalid(cls, reason: str) -> TrialOutcome:
        """The plan computes wrong numbers."""
        return cls("invalid", "invalid", reason=reason)

    @classmethod
    def failed(cls, reason: str) -> TrialOutcome:
        """The plan failed to compile, to launch or to finish in time."""
        return cls("failed", "failed", reason=reason)

    @classmethod
    def interrupted(cls, reason: str) -> TrialOutcome:
        """The search stopped before judging the trial (Ctrl-C, its deadline): Optuna's FAIL, recorded as
        'interrupted' with the reason (search/loop.py lays its slot out again)."""
        return cls("failed", "interrupted", reason=reason, fault=True)

    @classmethod
    def from_exception(cls, error: BaseException) -> TrialOutcome:
        """The search raised while running the trial: that trial fails, with the error as its reason."""
        return cls("failed", "failed", reason=failure_reason(error, 300), fault=True)

    @property
    def state(self) -> optuna.trial.TrialState:
        """Optuna's state for this outcome."""
        if self.status == "ok":
            return optuna.trial.TrialState.COMPLETE
        return optuna.trial.TrialState.FAIL if self.fault else optuna.trial.TrialState.PRUNED


def tell(study: optuna.Study, trial: optuna.Trial, outcome: TrialOutcome) -> optuna.trial.FrozenTrial:
    """Record the outcome on the trial (user attrs 'status' and 'reason') and finish it in the study: the one
    place an outcome becomes Optuna's state."""
    trial.set_user_attr("status", outcome.label)
    if outcome.status != "ok":
        trial.set_user_attr("reason", outcome.reason)
    frozen = study.tell(trial, outcome.time_us if outcome.status == "ok" else None, state=outcome.state)
    log.debug("trial %d %s%s %s", trial.number, outcome.label,
              "" if outcome.time_us is None else f" {outcome.time_us:.2f} us", outcome.reason)
    return frozen
