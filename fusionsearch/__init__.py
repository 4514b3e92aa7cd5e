"""fusionsearch: find how to fuse the pointwise work around matmuls into Triton kernels, and prove it on the GPU.

Public API (see README): workloads, capture, graph specs, the reference executor, plans, measurement.

The names that need torch are imported on first use (PEP 562), so that `fusionsearch --help` and `--version`,
which import this package first, answer without importing torch."""

import importlib
from typing import Any

from fusionsearch.errors import (
    CodegenError,
    CostModelError,
    FusionSearchError,
    GraphError,
    MeasureError,
    PlanError,
    SpecError,
)
from fusionsearch.version import __version__ as __version__

_SUBPACKAGES = ("costmodel", "measure", "plan", "search")
_LAZY = {"compile_plan": "fusionsearch.codegen.runtime", "export_plan": "fusionsearch.codegen.runtime",
         "list_workloads": "fusionsearch.datasets.workloads", "workload": "fusionsearch.datasets.workloads",
         "OpGraph": "fusionsearch.graph", "load_graph": "fusionsearch.graph", "random_inputs": "fusionsearch.graph",
         "reference": "fusionsearch.graph"}


def __getattr__(name: str) -> Any:
    """The public names that need torch: the first read of any of them imports them all, as importing the
    package did before (the kernel kinds register their plan kernels with the plan layer on import)."""
    if name not in _SUBPACKAGES and name not in _LAZY:
        raise AttributeError(f"module 'fusionsearch' has no attribute {name!r}")
    for sub in _SUBPACKAGES:
        globals()[sub] = importlib.import_module(f"fusionsearch.{sub}")
    for attr, module in _LAZY.items():
        globals()[attr] = getattr(importlib.import_module(module), attr)
    return globals()[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *_SUBPACKAGES, *_LAZY})


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
