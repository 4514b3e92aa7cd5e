"""The learned model and the datasets that ship in the package: one model, pooled over the H100's and the H200's
rows, plain trees that load without pickle or scikit-learn, that names both GPUs and ranks each one's plans better
than the analytic model."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from fusionsearch.costmodel.learned import load
from fusionsearch.costmodel.train import evaluate, load_dataset

DATA_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "fusionsearch", "datasets", "data")
SHIPPED_MODEL_PATH = os.path.join(DATA_DIR, "costmodel.npz")
SHIPPED_DATA_PATH = os.path.join(DATA_DIR, "h200-measurements.jsonl.gz")
H100_DATA_PATH = os.path.join(DATA_DIR, "h100-measurements.jsonl.gz")


def test_shipped_dataset_is_an_h200_measurement_of_at_least_100_graphs() -> None:
    _, y, groups, rows = load_dataset(SHIPPED_DATA_PATH)
    assert len(y) >= 3000 and len(set(groups.tolist())) >= 100
    assert {r["hardware"]["device"] for r in rows} == {"NVIDIA H200"}


def test_shipped_model_is_pooled_over_both_gpus_and_ranks_each_ones_plans_better_than_the_analytic_model() -> None:
    model = load(SHIPPED_MODEL_PATH)
    assert model.hardware_["gpus"] == ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]
    assert model.narrow_models_ and model.narrow_compiled_models_  # 16-bit graphs priced by their own models
    fig = evaluate(model, [H100_DATA_PATH, SHIPPED_DATA_PATH])
    assert fig["graphs"] >= 700 and set(fig["by_gpu"]) == set(model.hardware_["gpus"])
    for per_gpu in fig["by_gpu"].values():
        for m in ("kendall_tau", "pairwise_accuracy"):
            assert per_gpu[m] > per_gpu[f"analytic_{m}"]
        assert per_gpu["top1_regret"] < per_gpu["analytic_top1_regret"]


def test_shipped_model_is_plain_trees_that_load_without_scikit_learn_or_skops(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compact format: a few MB of arrays, the default path, loaded and predicting in a process that never
    imports scikit-learn (whose import alone took longer than this load) nor skops."""
    from fusionsearch import settings
    from fusionsearch.costmodel.trees import Trees

    monkeypatch.undo()  # the default path as shipped, not the tests' stand-in (conftest)
    assert os.path.samefile(settings.current().model_path, SHIPPED_MODEL_PATH)
    assert os.path.getsize(SHIPPED_MODEL_PATH) < 4_000_000
    model = load(SHIPPED_MODEL_PATH)
    for group in (model.models_, model.compiled_models_, model.narrow_models_, model.narrow_compiled_models_):
        assert len(group) == model.n_bags and all(isinstance(m, Trees) and m.n_trees == 300 for m in group)
    script = ("import sys, numpy as np\n"
              "from fusionsearch.costmodel.features import FEATURE_NAMES\n"
              "from fusionsearch.costmodel.learned import load\n"
              f"predicted = load({SHIPPED_MODEL_PATH!r}).predict(np.ones((3, len(FEATURE_NAMES))))\n"
              "assert predicted.shape == (3,) and np.all(predicted > 0)\n"
              "print(sorted(m for m in ('sklearn', 'skops', 'scipy') if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_every_shipped_row_carries_the_graph_and_plan_it_measured() -> None:
    """The provenance that lets a new feature schema re-feature the rows: each row's graph spec hashes to its
    graph id and its plan to its plan id, on the profile of the GPU it names."""
    from fusionsearch.costmodel.hardware import Hardware
    from fusionsearch.datasets.measurements import read_rows
    from fusionsearch.graph.spec import graph_from_dict
    from fusionsearch.plan import Plan
    from fusionsearch.search.collect import plan_id

    rows = read_rows(SHIPPED_DATA_PATH)
    graphs, plans = {}, {}
    for r in rows:
        if r["graph_id"] not in graphs:
            graphs[r["graph_id"]] = graph_from_dict(r["graph"])
            assert graphs[r["graph_id"]].signature_hash() == r["graph_id"]
        key = (r["graph_id"], r["plan_id"])
        if key not in plans:
            plans[key] = Plan.from_dict(r["plan"], graphs[r["graph_id"]])
            assert plan_id(plans[key]) == r["plan_id"]
        assert Hardware.from_dict(r["hardware"]["profile"]).name == r["hardware"]["device"] == "NVIDIA H200"
    assert len(graphs) >= 100 and len(plans) >= 1000


def test_the_h100_dataset_holds_the_decode_and_grouped_kinds_measured_on_that_gpu() -> None:
    """The H100's dataset holds the decode and grouped kinds' kernels (issue 27), measured on that GPU."""
    _, y, groups, rows = load_dataset(H100_DATA_PATH)
    assert {r["hardware"]["device"] for r in rows} == {"NVIDIA H100 80GB HBM3"}
    kinds = {r["kernel_kind"] for r in rows}
    assert {"decode", "grouped", "template", "pointwise"} <= kinds and len(set(groups.tolist())) >= 90


@pytest.mark.parametrize(("device", "served"), [("H100", True), ("H200", True), ("other", False)])
def test_the_default_model_is_the_pooled_one_on_each_gpu_it_was_trained_on(monkeypatch: pytest.MonkeyPatch,
                                                                            device: str, served: bool) -> None:
    import dataclasses

    from fusionsearch import hardware, settings
    from fusionsearch.costmodel import learned

    assert settings.SHIPPED_MODELS == (settings.SHIPPED_MODEL,)  # one file for every GPU
    profile = {"H100": hardware.H100, "H200": hardware.H200,
               "other": dataclasses.replace(hardware.H200, name="NVIDIA A10")}[device]
    monkeypatch.setattr(learned.Hardware, "detect", staticmethod(lambda: profile))
    model = learned.load_default(settings.SHIPPED_MODEL)
    assert (model is not None) == served
    if served:
        assert model is learned.load_cached(SHIPPED_MODEL_PATH) and profile.name in model.hardware_["gpus"]


def test_a_search_without_a_gpu_prices_with_the_profile_its_model_file_was_trained_on(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """A model of one GPU's rows (here the H100's) was featured with that GPU's bandwidth and peaks: a search on
    a CPU that passes its file prices with them (and says so), not with the H200's, which it uses otherwise, the
    pooled shipped model (of several GPUs) included."""
    import numpy as np
    import torch

    import fusionsearch as fs
    from fusionsearch import hardware
    from fusionsearch.costmodel.features import FEATURE_NAMES
    from fusionsearch.costmodel.learned import LearnedCostModel
    from fusionsearch.search.options import SearchOptions
    from fusionsearch.search.session import setup

    h100_model = str(tmp_path / "h100.npz")
    X = np.random.default_rng(0).uniform(1, 10, size=(64, len(FEATURE_NAMES)))
    LearnedCostModel(max_iter=5, n_bags=1).fit(X, np.full(64, 5.0), hardware={
        "name": hardware.H100.name, "profile": hardware.H100.to_dict()}).save(h100_model)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a machine without a GPU, wherever this runs
    g = fs.workload("w8_dequant_mm", M=1, K=256, N=256)
    assert setup(g, SearchOptions(backend="model", cost_model=SHIPPED_MODEL_PATH)).hw == hardware.H200
    priced = setup(g, SearchOptions(backend="model", cost_model=h100_model)).hw
    assert priced.name == "NVIDIA H100 80GB HBM3"
    assert priced.bandwidth_bytes_per_s == hardware.H100.bandwidth_bytes_per_s != hardware.H200.bandwidth_bytes_per_s
    assert setup(g, SearchOptions(backend="model", cost_model="analytic")).hw == hardware.H200
