"""fusionsearch: find how to fuse the pointwise work around matmuls into Triton kernels, and prove it on the GPU.

Public API (see README): workloads, capture, graph specs, the reference executor, plans, measurement."""

from fusionsearch import costmodel, measure, plan, search
from fusionsearch.codegen.runtime import compile_plan, export_plan
from fusionsearch.datasets.workloads import list_workloads, workload
from fusionsearch.errors import (
    CodegenError,
    CostModelError,
    FusionSearchError,
    GraphError,
    MeasureError,
    PlanError,
    SpecError,
)
from fusionsearch.graph import OpGraph, load_graph, random_inputs, reference
from fusionsearch.version import __version__ as __version__


def capture(fn_or_module, *example_inputs, **example_kwargs):  # type: ignore[no-untyped-def]
    """Trace a PyTorch function or nn.Module into an OpGraph; unsupported aten ops become extern nodes. Tensor
    arguments (positional or keyword) become inputs; Python numbers and defaults are constants of the trace."""
    from fusionsearch.graph.capture import capture as _capture

    return _capture(fn_or_module, *example_inputs, **example_kwargs)


def backend(**options):  # type: ignore[no-untyped-def]
    """A torch.compile backend with options: torch.compile(model, backend=fusionsearch.backend(trials=16)).
    Plain torch.compile(model, backend="fusionsearch") uses the defaults (see fusionsearch.dynamo)."""
    from fusionsearch.dynamo.backend import backend as _backend

    return _backend(**options)


def tune(fn_or_graph, *example_inputs, **options):  # type: ignore[no-untyped-def]
    """Search the best fusion plan (see fusionsearch.search.study.tune); returns a TuneResult."""
    from fusionsearch.search.study import tune as _tune

    return _tune(fn_or_graph, *example_inputs, **options)


__all__ = [
    "CodegenError", "CostModelError", "FusionSearchError", "GraphError", "MeasureError", "OpGraph", "PlanError",
    "SpecError", "backend", "capture", "compile_plan", "costmodel", "export_plan", "list_workloads", "load_graph",
    "measure", "plan", "random_inputs", "reference", "search", "tune", "workload",
]
