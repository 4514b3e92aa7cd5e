"""One exception hierarchy: every user-facing failure is a FusionSearchError with a sentence saying what to fix."""


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


def failure_reason(e: BaseException, limit: int = 500) -> str:
    """A failure as one line for a trial or dataset row: the exception type and its message's last line (where
    Triton and CUDA put the cause)."""
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[-1] if lines else ''}"[:limit]
