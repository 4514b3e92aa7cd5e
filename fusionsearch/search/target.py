"""The graph a search is asked for by name: a built-in workload (with its shape and dtype) or a JSON graph spec
file; what `fusionsearch search TARGET` searches. Without a GPU, Triton's interpreter is switched on before
the graph is built: a spec's extern ops import Triton."""

from __future__ import annotations

import os
from collections.abc import Mapping

from fusionsearch import settings
from fusionsearch.errors import SpecError
from fusionsearch.graph.opgraph import OpGraph

DEFAULT_WORKLOAD = "w8_dequant_mm"


def is_spec_file(target: str) -> bool:
    """A target that names a spec file (a .json name or a path), not a built-in workload."""
    return target.endswith(".json") or os.path.sep in target


def load_target(target: str | None, shape: Mapping[str, int] | None = None, dtype: str = "bfloat16") -> OpGraph:
    """A built-in workload by name (`shape` its dimensions, `dtype`) or a JSON spec file; DEFAULT_WORKLOAD when
    `target` is None. SpecError for a name that is neither, or a shape given to a spec file."""
    from fusionsearch.datasets.workloads import WORKLOADS, workload
    from fusionsearch.graph.spec import load_graph

    settings.interpret_without_gpu()
    target = DEFAULT_WORKLOAD if target is None else target
    if is_spec_file(target):
        if shape:
            raise SpecError("--shape applies to built-in workloads; a spec file carries its own shapes")
        return load_graph(target)
    if target not in WORKLOADS:
        raise SpecError(f"{target!r} is neither a built-in workload ({', '.join(WORKLOADS)}) nor a .json spec file")
    return workload(target, dtype=dtype, **(shape or {}))


def target_name(target: str | None, shape_text: str, dtype: str) -> str:
    """The graph as the user named it, recorded in the study: the workload with its shape and dtype, or the
    spec file's name."""
    target = target or DEFAULT_WORKLOAD
    if is_spec_file(target):
        return os.path.basename(target)
    return " ".join(filter(None, (target, shape_text.replace(" ", ""), dtype)))
