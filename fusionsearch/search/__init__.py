"""The fusion search: plans, the candidate space, the Optuna study and its results."""

from fusionsearch.plan import (
    ExternKernel,
    LibraryKernel,
    Plan,
    PointwiseKernel,
    TemplateKernel,
    TileConfig,
    build_plan,
    fully_fused,
    heuristic,
    unfused,
)

__all__ = ["ExternKernel", "LibraryKernel", "Plan", "PointwiseKernel", "TemplateKernel", "TileConfig", "build_plan",
           "fully_fused", "heuristic", "unfused"]
