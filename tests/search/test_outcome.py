"""TrialOutcome: each way a trial ends becomes one Optuna state and the status and reason the trials record
(pruned and the plan's own failures are PRUNED, so samplers learn from them; a fault of the search is FAIL)."""

from __future__ import annotations

import optuna
import pytest

from fusionsearch.errors import CodegenError
from fusionsearch.search.outcome import TrialOutcome, tell

State = optuna.trial.TrialState


@pytest.mark.parametrize(("outcome", "state", "status"), [
    (TrialOutcome.ok(12.5, "gpu"), State.COMPLETE, "measured"),
    (TrialOutcome.ok(3.0, "model"), State.COMPLETE, "estimated"),
    (TrialOutcome.ok(3.0, "interpret"), State.COMPLETE, "validated"),
    (TrialOutcome.pruned("cost model", "predicted 9.0 us"), State.PRUNED, "cost model"),
    (TrialOutcome.invalid("output 0: rel error 0.5"), State.PRUNED, "invalid"),
    (TrialOutcome.failed("compile failed: out of shared memory"), State.PRUNED, "failed"),
    (TrialOutcome.from_exception(CodegenError("no such op")), State.FAIL, "failed"),
])
def test_each_outcome_is_told_as_one_state_with_its_status_and_reason(outcome: TrialOutcome, state: State,
                                                                      status: str) -> None:
    study = optuna.create_study()
    frozen = tell(study, study.ask(), outcome)
    assert frozen.state == state and frozen.user_attrs["status"] == status
    if outcome.status == "ok":
        assert frozen.value == outcome.time_us and "reason" not in frozen.user_attrs
    else:
        assert frozen.value is None and frozen.user_attrs["reason"] == outcome.reason != ""


def test_an_outcome_is_a_frozen_value() -> None:
    outcome = TrialOutcome.failed("timed out")
    with pytest.raises(AttributeError):
        outcome.reason = "other"  # type: ignore[misc]
    assert outcome == TrialOutcome.failed("timed out") and not outcome.fault
