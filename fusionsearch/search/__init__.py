"""The fusion search: plans, the candidate space, the Optuna study and its results."""

from fusionsearch.search.plan import (
    ExternKernel,
    Plan,
    PointwiseKernel,
    TemplateKernel,
    TileConfig,
    build_plan,
    fully_fused,
    heuristic,
    unfused,
)

__all__ = ["ExternKernel", "Plan", "PointwiseKernel", "TemplateKernel", "TileConfig", "build_plan", "fully_fused",
           "heuristic", "unfused"]
