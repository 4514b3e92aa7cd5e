"""Work the CLI used to do itself, now in the search's stages (issue 55 item 5): the graph a search names
(search/target.py), the setup line's facts, a saved search's record and the learned model's kernel times
(search/facts.py), and Triton's interpreter switched on by what loads a graph (a saved one: search/replay.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import fusionsearch as fs
from fusionsearch.errors import FusionSearchError, SpecError
from fusionsearch.search.facts import learned_kernel_times, recorded_search, search_setup
from fusionsearch.search.options import SearchOptions
from fusionsearch.search.target import DEFAULT_WORKLOAD, load_target, target_name

NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter is switched on only without a GPU")


@NO_GPU
def test_loading_a_target_switches_the_interpreter_on_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    g = load_target("mm_bias_gelu", {"M": 16, "K": 64, "N": 32}, "float32")
    assert os.environ["TRITON_INTERPRET"] == "1"
    assert g.signature_hash() == fs.workload("mm_bias_gelu", M=16, K=64, N=32, dtype=torch.float32).signature_hash()


def test_a_target_is_a_workload_or_a_spec_file(tmp_path: Path) -> None:
    g = fs.workload("mm_bias_gelu", M=16, K=64, N=32)
    g.save(str(tmp_path / "g.json"))
    assert load_target(str(tmp_path / "g.json")).signature_hash() == g.signature_hash()
    assert load_target(None).signature_hash() == fs.workload(DEFAULT_WORKLOAD).signature_hash()
    with pytest.raises(SpecError, match="neither a built-in workload"):
        load_target("no_such_workload")
    with pytest.raises(SpecError, match="--shape applies to built-in workloads"):
        load_target(str(tmp_path / "g.json"), {"M": 8})
    assert target_name(None, "M=16, K=64", "float16") == f"{DEFAULT_WORKLOAD} M=16,K=64 float16"
    assert target_name(str(tmp_path / "g.json"), "", "bfloat16") == "g.json"


@NO_GPU
def test_loading_a_saved_search_switches_the_interpreter_on_without_a_gpu(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from fusionsearch.search.replay import load_saved

    g = fs.workload("mm_bias_gelu", M=16, K=64, N=32)
    g.save(str(tmp_path / "graph.json"))
    (tmp_path / "plan.json").write_text(fs.plan.unfused(g).to_json())
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    graph, plan = load_saved(str(tmp_path))
    assert os.environ["TRITON_INTERPRET"] == "1"
    assert graph.signature_hash() == g.signature_hash() and len(plan.kernels) == len(fs.plan.unfused(g).kernels)


def test_the_setup_says_the_backend_the_workers_and_a_single_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    import fusionsearch.search.study as study

    g = fs.workload("mm_bias_gelu", M=16, K=64, N=32)
    assert search_setup(g, SearchOptions(backend="model", workers=2)) == {"backend": "model", "single": False,
                                                                          "workers": 2}
    monkeypatch.setattr(study, "possible_plans", lambda space: 1)
    assert search_setup(g, SearchOptions(backend="model", workers=2)) == {"backend": "model", "single": True,
                                                                          "workers": 1}
    if not torch.cuda.is_available():
        with pytest.raises(FusionSearchError, match="needs a CUDA GPU"):
            search_setup(g, SearchOptions(backend="gpu"))


def test_a_saved_searchs_record_is_read_or_none(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_text(json.dumps({"best_us": 12.5, "backend": "interpret", "cost_model": "analytic"}))
    assert recorded_search(str(path)) == {"best_us": 12.5, "backend": "interpret", "cost_model": "analytic",
                                          "how": "predicted by the analytic cost model, backend interpret"}
    path.write_text(json.dumps({"best_us": 3, "backend": "gpu", "cost_model": "learned"}))
    assert recorded_search(str(path))["how"] == "measured on the GPU"  # type: ignore[index]
    path.write_text('{"best_us": "fast"}')
    assert recorded_search(str(path)) is None
    assert recorded_search(str(tmp_path / "missing.json")) is None


def test_learned_kernel_times_are_the_models_prediction_per_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    import fusionsearch.costmodel.learned as learned

    class Model:
        def predict(self, X: np.ndarray) -> np.ndarray:
            return np.arange(len(X)) + 0.5

    plan = fs.plan.unfused(fs.workload("mm_bias_gelu", M=16, K=64, N=32))
    hw = fs.costmodel.H200
    monkeypatch.setattr(learned, "load_default", lambda: None)
    assert learned_kernel_times(plan, hw) is None
    monkeypatch.setattr(learned, "load_default", lambda: Model())
    assert learned_kernel_times(plan, hw) == [i + 0.5 for i in range(len(plan.kernels))]
