"""Issue 55 item 2 in the backend: each distinct region's plan is parsed from the plan cache once and compiled
once, however many identical regions share it, whatever the progress bar looked up, and whether or not the
race against Inductor compiled it first (Triton's interpreter runs the kernels; a test timer races them)."""

from __future__ import annotations

import importlib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

import fusionsearch.codegen.runtime as runtime
from fusionsearch.plan import Plan
from tests.dynamo.test_models import _Block  # x + down(gelu(up(x))), 32 -> 48 -> 32


def _counted(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts of compile_plan (as the backend calls it), build (each code generation) and Plan.from_dict (each
    plan parsed; Plan.from_json goes through it)."""
    backend = importlib.import_module("fusionsearch.dynamo.backend")  # the package names a function so
    counts: Counter[str] = Counter()

    def counting(tag: str, fn: Any) -> Any:
        return lambda *a, **k: counts.update([tag]) or fn(*a, **k)

    monkeypatch.setattr(backend, "compile_plan", counting("compile_plan", backend.compile_plan))
    monkeypatch.setattr(runtime, "build", counting("build", runtime.build))
    monkeypatch.setattr(Plan, "from_dict", staticmethod(counting("from_dict", Plan.from_dict)))
    return counts


def _compiled(cache: Path, timer: Any) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """Three identical blocks (6 regions, 2 distinct) through the backend: its output, eager's, the compiler."""
    from fusionsearch.dynamo.backend import BackendOptions, _Compiler

    torch.manual_seed(0)
    model = torch.nn.Sequential(_Block(), _Block(), _Block()).eval()
    compiler = _Compiler(BackendOptions(trials=2, fallback="eager", cache=str(cache), search_backend="model",
                                        inductor="default", step_race=False, progress=True), timer=timer)
    x = torch.randn(8, 32)
    with torch.no_grad():
        return torch.compile(model, backend=compiler, dynamic=False)(x), model(x), compiler


def test_each_distinct_region_is_parsed_once_and_compiled_once(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    def timer(candidates: dict) -> dict[str, float]:  # ours 10x faster: the raced module is the one kept
        for fn in candidates.values():
            fn()
        return {name: 1.0 if name == "fusionsearch" else 10.0 for name in candidates}

    counts = _counted(monkeypatch)
    out, ref, compiler = _compiled(tmp_path, timer)  # searched and raced: nothing to parse, 2 plans compiled
    assert (compiler.stats.regions, compiler.stats.searched, compiler.stats.cached) == (6, 2, 4)
    assert len(compiler.stats.choices) == 2 and compiler.stats.declined == []
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-5)
    assert (counts["compile_plan"], counts["build"], counts["from_dict"]) == (2, 2, 0), counts

    counts.clear()  # a second process: every plan from the cache, each parsed once (the bar's look-up included)
    out, ref, compiler = _compiled(tmp_path, None)
    assert (compiler.stats.regions, compiler.stats.searched, compiler.stats.cached) == (6, 0, 6)
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-5)
    assert (counts["compile_plan"], counts["build"], counts["from_dict"]) == (2, 2, 2), counts
