"""One exception hierarchy: every user-facing failure is a FusionSearchError with a sentence saying what to fix."""

from collections.abc import Iterable, Sequence


class FusionSearchError(Exception):
    """Base of every error fusionsearch raises on purpose; the CLI prints it as one line and exits 2."""


class GraphError(FusionSearchError):
    """An op graph is malformed: unknown op, bad shapes or dtypes, cycles, dangling inputs, duplicate names."""


class SpecError(FusionSearchError):
    """A JSON graph spec, plan file or shape argument cannot be read; the message names the field."""


class PlanError(FusionSearchError):
    """A fusion plan is illegal for its graph (a node uncovered, a dependency out of order, a tile that does not
    map)."""


class CodegenError(FusionSearchError):
    """Triton source cannot be generated for a plan kernel."""


class MeasureError(FusionSearchError):
    """A plan cannot be validated or timed (no GPU for a GPU-only request, inputs that do not match the graph)."""


class CostModelError(FusionSearchError):
    """A cost model cannot be loaded, trained or applied (schema mismatch, not a model file)."""


def check_names(given: Iterable[str], valid: Sequence[str], what: str) -> None:
    """SpecError for the first name in `given` that is not in `valid` (`what` says whose: "fs.tune option"),
    with the closest valid name where one is close and every valid one: Python's own TypeError names none."""
    import difflib

    for name in given:
        if name not in valid:
            close = difflib.get_close_matches(str(name), valid, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SpecError(f"unknown {what} {name!r}{hint}; valid: {', '.join(valid)}")


def failure_reason(e: BaseException, limit: int = 500) -> str:
    """A failure as one line for a trial or dataset row: the exception type and its message's last line (where
    Triton puts the cause), or for a CUDA error the line that names it."""
    lines = str(e).strip().splitlines()
    # PyTorch's CUDA errors put the cause first and debugging advice after it.
    cause = next((line for line in lines if "CUDA error" in line), lines[-1] if lines else "")
    return f"{type(e).__name__}: {cause}"[:limit]
