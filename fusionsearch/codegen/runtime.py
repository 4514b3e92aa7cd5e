"""Compiling and running generated plans: the on-disk source cache (keyed by content hash), module loading,
the in-process executor and `export`. Triton's launch lives here and in measure/."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from fusionsearch.codegen.module import PlanModule, generate_module
from fusionsearch.errors import CodegenError
from fusionsearch.graph.ops_extern import _call as call_extern
from fusionsearch.graph.reference import check_inputs


def cache_root() -> str:
    """Where fusionsearch keeps what it builds (kernels/, plans/): $FUSIONSEARCH_CACHE_DIR, else
    ~/.cache/fusionsearch."""
    return os.environ.get("FUSIONSEARCH_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "fusionsearch")


def cache_dir() -> str:
    """Where generated sources live: <cache_root>/kernels."""
    return os.path.join(cache_root(), "kernels")


def source_key(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:24]


def _write_atomic(path: str, text: str) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def load_source(source: str) -> ModuleType:
    """Import generated source through the cache; an entry whose content does not match its key is rebuilt."""
    key = source_key(source)
    directory = cache_dir()
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"fs_{key}.py")
    try:
        with open(path) as f:
            ok = source_key(f.read()) == key
    except OSError:
        ok = False
    if not ok:
        _write_atomic(path, source)
    mod_name = f"fusionsearch_generated_{key}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_file_location(mod_name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # a syntax error here is our bug: name the cache key to reproduce it
        raise CodegenError(f"generated source {path} does not load: {e}") from e
    sys.modules[mod_name] = module
    return module


@dataclass
class CompiledPlan:
    """A plan ready to run: call it with the graph's inputs; `poison=True` fills outputs with NaN first."""

    plan: Any
    generated: PlanModule
    module: ModuleType

    @property
    def source(self) -> str:
        return self.generated.source

    @property
    def cache_key(self) -> str:
        return source_key(self.generated.source)

    def source_path(self) -> str:
        """The generated source's file in the cache: what a failure names, to reproduce it."""
        return os.path.join(cache_dir(), f"fs_{self.cache_key}.py")

    def __call__(self, *inputs: torch.Tensor, poison: bool = False) -> list[torch.Tensor]:
        check_inputs(self.plan.graph, inputs)
        return self.module.run(*inputs, poison=poison)


def naming_source(reason: str, compiled: CompiledPlan | None) -> str:
    """A failure reason with the generated source it came from (when the plan got that far)."""
    return reason if compiled is None else f"{reason} [generated source: {compiled.source_path()}]"


def _extern_callables(plan: Any) -> list[Any]:
    g = plan.graph
    out = []
    for k in plan.kernels:
        if k.kind == "extern":
            attrs = g.node(k.node).attrs
            out.append(lambda *t, _a=attrs: call_extern(t, _a))
    return out


def compile_plan(plan: Any, **options: Any) -> CompiledPlan:
    """Generate, cache and import the plan's module; externs are bound to the registry's torch calls."""
    generated = generate_module(plan, **options)
    module = load_source(generated.source)
    module.EXTERNS[:] = _extern_callables(plan)
    return CompiledPlan(plan, generated, module)


def export_plan(plan: Any, directory: str, **options: Any) -> str:
    """Write `fusionsearch_plan.py` (kernels + run), `plan.json` and, with externs, `externs.json`."""
    generated = generate_module(plan, **options)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "fusionsearch_plan.py")
    _write_atomic(path, generated.source)
    _write_atomic(os.path.join(directory, "plan.json"), plan.to_json() + "\n")
    if generated.externs:
        _write_atomic(os.path.join(directory, "externs.json"), json.dumps(generated.externs, indent=1) + "\n")
    return path


def run_plan(plan: Any, inputs: Sequence[torch.Tensor], **options: Any) -> list[torch.Tensor]:
    return compile_plan(plan, **options)(*inputs)
