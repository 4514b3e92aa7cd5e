"""The plan layer: frozen values every later stage reads (kernels, tile configs, codegen options, the plan),
their legality, their JSON, and the reference plans. `from fusionsearch import plan as P; P.heuristic(g)`."""

from fusionsearch.plan.build import Decision, MatmulKernelMaker, build_plan, default_config
from fusionsearch.plan.kernels import (
    ExternKernel,
    FusedMatmulKernel,
    Kernel,
    KernelValue,
    LibraryKernel,
    PointwiseKernel,
    TemplateKernel,
    kernel_types,
    produced,
    register_kernel_type,
    unregister_kernel_type,
)
from fusionsearch.plan.legality import FUSABLE, MAX_FUSED_DEPTH, check_plan, template_operands
from fusionsearch.plan.matmul import Problem, problem
from fusionsearch.plan.options import FP32_DOT, FP32_DOTS, CodegenOptions
from fusionsearch.plan.plan import PLAN_VERSION, Plan
from fusionsearch.plan.reference_plans import fully_fused, fused_decisions, heuristic, prologue_bytes_ok, unfused
from fusionsearch.plan.tile import (
    MAX_BLOCK,
    MAX_GROUP_M,
    MAX_SHARED_MEMORY_BYTES,
    MAX_SPLIT_K,
    MAX_STAGES,
    MAX_WARPS,
    MIN_BLOCK,
    TileConfig,
)

__all__ = [
    "CodegenOptions", "Decision", "ExternKernel", "FP32_DOT", "FP32_DOTS", "FUSABLE", "FusedMatmulKernel",
    "Kernel", "KernelValue",
    "LibraryKernel", "MAX_BLOCK", "MAX_FUSED_DEPTH", "MAX_GROUP_M", "MAX_SHARED_MEMORY_BYTES", "MAX_SPLIT_K",
    "MAX_STAGES", "MAX_WARPS", "MIN_BLOCK", "MatmulKernelMaker", "PLAN_VERSION", "Plan", "PointwiseKernel",
    "Problem", "TemplateKernel", "TileConfig", "build_plan", "check_plan", "default_config", "fully_fused",
    "fused_decisions", "heuristic", "kernel_types", "problem", "produced", "prologue_bytes_ok",
    "register_kernel_type", "template_operands", "unfused", "unregister_kernel_type"
]
