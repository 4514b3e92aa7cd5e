"""One learned model for every GPU (issue 54): the hardware profile as features (schema v8), datasets of several
GPUs pooled into one model whose held-out figures are reported per GPU and per family, and the family of a graph
read from the graph itself."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import fusionsearch as fs
from fusionsearch import hardware
from fusionsearch.costmodel.families import graph_family, row_family
from fusionsearch.costmodel.features import (
    FEATURE_NAMES,
    FEATURE_SCHEMA_VERSION,
    HARDWARE_FEATURES,
    plan_features,
    to_matrix,
)
from fusionsearch.costmodel.learned import LearnedCostModel, load, load_default
from fusionsearch.costmodel.targets import fit_target
from fusionsearch.costmodel.train import format_figures, train
from fusionsearch.datasets.measurements import append_rows
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.plan import FP32_DOT

# Two GPUs alike in every figure the roofline reads, the second at half the SM clock: only the hardware
# features can tell a kernel's time on one from the other.
FAST = dataclasses.replace(hardware.H200, name="GPU fast", sm_clock_mhz=1980.0)
SLOW = dataclasses.replace(hardware.H200, name="GPU slow", sm_clock_mhz=990.0)


def _rows(synthetic: SimpleNamespace, hw: hardware.Hardware, graphs: int, seed: int) -> list[dict[str, Any]]:
    """The synthetic GPU's kernel times (conftest) on `hw`, scaled by the clock: 1980 MHz over hw's."""
    rng = np.random.default_rng(seed)
    rows = []
    for name, shape, dtype in synthetic.graphs[:graphs]:
        g = fs.workload(name, dtype=dtype, **shape)
        gid = f"{name}-{dtype}-" + "-".join(f"{k}{v}" for k, v in shape.items())
        for j, plan in enumerate(synthetic.sample_plans(g, rng, count=8)):
            for i, f in enumerate(plan_features(plan, hw)):
                rows.append({"features": f, "schema_version": FEATURE_SCHEMA_VERSION, "graph_id": gid,
                             "plan_id": f"p{j}", "kernel_index": i, "status": "ok",
                             "time_us": synthetic.truth_us(f, rng) * 1980.0 / hw.sm_clock_mhz,
                             "hardware": {"device": hw.name, "profile": hw.to_dict()},
                             "graph": g.to_dict(), "plan": plan.to_dict(), "fp32_dot": FP32_DOT})
    return rows


@pytest.fixture(scope="module")
def two_gpus(tmp_path_factory: pytest.TempPathFactory, synthetic: SimpleNamespace) -> tuple[str, str]:
    folder = tmp_path_factory.mktemp("pooled")
    paths = (str(folder / "fast.jsonl.gz"), str(folder / "slow.jsonl.gz"))
    append_rows(paths[0], _rows(synthetic, FAST, 8, 0))
    append_rows(paths[1], _rows(synthetic, SLOW, 8, 1))
    return paths


def test_the_kernel_features_carry_the_profile() -> None:
    plan = fs.plan.fully_fused(fs.workload("w8_dequant_mm", M=16, K=1024, N=1024))
    h100, h200 = plan_features(plan, hardware.H100)[0], plan_features(plan, hardware.H200)[0]
    assert h100["hw_bandwidth_tbs"] == 3.0 and h200["hw_bandwidth_tbs"] == 4.27
    assert h100["hw_mem_clock_mhz"] == 2619.0 and h200["hw_mem_clock_mhz"] == 3201.0
    assert h200["hw_l2_mib"] == 50.0 and h200["hw_smem_sm_kib"] == 228.0
    moved = h200["bytes_read"] + h200["bytes_written"]
    assert h200["bytes_over_l2"] == pytest.approx(moved / (50 * 2**20))
    unknown = dataclasses.replace(hardware.H200, name="NVIDIA A10", sm_clock_mhz=0.0)
    assert math.isnan(plan_features(plan, unknown)[0]["hw_sm_clock_mhz"])  # 0: unknown, missing to the trees


def test_a_profile_recorded_before_the_new_figures_takes_them_from_the_gpu_it_names() -> None:
    old = {k: v for k, v in hardware.H100.to_dict().items()
           if k not in ("shared_memory_per_sm_bytes", "sm_clock_mhz", "memory_clock_mhz")}
    assert hardware.Hardware.from_dict(old) == hardware.H100
    other = hardware.Hardware.from_dict({**old, "name": "NVIDIA A10"})
    assert (other.sm_clock_mhz, other.memory_clock_mhz, other.shared_memory_per_sm_bytes) == (0.0, 0.0, 0)


def test_the_hardware_features_change_a_prediction_when_the_profile_changes(synthetic: SimpleNamespace) -> None:
    """Trained on both GPUs, the model prices the same plan about twice as slow on the half-clock GPU; the
    roofline reads no clock, so without the hardware features both would be priced alike."""
    rows = _rows(synthetic, FAST, 8, 0) + _rows(synthetic, SLOW, 8, 1)
    X = to_matrix([r["features"] for r in rows])
    model = LearnedCostModel(max_iter=60, n_bags=1, width_split=False).fit(
        X, [r["time_us"] for r in rows], groups=[r["hardware"]["device"] + r["graph_id"] for r in rows])
    plan = fs.plan.heuristic(fs.workload("mm_bias_gelu", M=64, K=512, N=512))
    fast, slow = (model.predict(to_matrix(plan_features(plan, hw))).sum() for hw in (FAST, SLOW))
    assert slow / fast == pytest.approx(2.0, rel=0.15)


def test_pooled_training_reports_each_gpu_and_serves_both(two_gpus: tuple[str, str], tmp_path: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    out = str(tmp_path / "pooled.npz")
    result = train(list(two_gpus), out, folds=3, max_iter=30, n_bags=1)
    cv = result["cv"]
    assert set(cv["by_gpu"]) == {"GPU fast", "GPU slow"}
    assert all(f["graphs"] == 8 for f in cv["by_gpu"].values()) and cv["graphs"] == 16
    assert sum(f["graphs"] for f in cv["by_family"].values()) == 16
    for gpu, f in cv["by_gpu"].items():  # each group's mean is the mean over its own graphs
        taus = [g["kendall_tau"] for g in cv["per_graph"] if g["gpu"] == gpu]
        assert f["kendall_tau"] == pytest.approx(float(np.nanmean(taus)))
    text = format_figures(cv)
    assert "per GPU" in text and "GPU fast" in text and "GPU slow" in text and "per family" in text
    model = load(out)
    assert model.hardware_["gpus"] == ["GPU fast", "GPU slow"]
    assert set(model.hardware_["profiles"]) == {"GPU fast", "GPU slow"}
    for hw, served in ((FAST, True), (SLOW, True), (hardware.H100, False)):
        monkeypatch.setattr(hardware.Hardware, "detect", staticmethod(lambda hw=hw: hw))
        assert (load_default(out) is not None) == served


def test_the_cli_trains_on_several_datasets_and_prints_each_gpu(two_gpus: tuple[str, str], tmp_path: Any,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from fusionsearch.cli import main

    out = str(tmp_path / "m.npz")
    assert main(["costmodel", "train", *two_gpus, "--out", out, "--folds", "2", "--max-iter", "20", "--bags", "1",
                 "--target", "graph"]) == 0
    text = capsys.readouterr().out
    assert "GPU fast" in text and "GPU slow" in text and "16 graphs" in text
    assert load(out).target == "graph"
    assert main(["costmodel", "train", two_gpus[0], str(tmp_path / "missing.jsonl.gz"), "--out", out]) == 2


def test_the_graph_target_ranks_within_graphs_and_the_balanced_one_weighs_graphs_alike() -> None:
    ratio = np.array([1.0, 2.0, 3.0, 10.0, 12.0])
    groups = np.array(["a", "a", "a", "b", "b"])
    target, weight = fit_target(ratio, groups, "graph")
    assert weight is None
    assert np.allclose(target, [-1.0, 0.0, 1.0, -1.0, 1.0] + ratio.mean())  # each graph's own order, one level
    target, weight = fit_target(ratio, groups, "balanced")
    assert np.array_equal(target, ratio) and weight[:3].sum() == pytest.approx(weight[3:].sum())
    assert fit_target(ratio, None, "graph") == (ratio, None)


def _attention() -> OpGraph:
    g = OpGraph()
    q, k, v = g.input("q", [4, 64, 32], "bfloat16"), g.input("k", [4, 32, 64], "bfloat16"), \
        g.input("v", [4, 64, 32], "bfloat16")
    s = g.add("bmm", [q, k])
    p = g.add("exp", [g.add("mul", [s, s])])
    g.set_outputs([g.add("bmm", [p, v])])
    return g


@pytest.mark.parametrize(("graph", "family"), [
    (lambda: fs.workload("moe_ffn"), "experts"),
    (lambda: fs.workload("moe_ffn", T=512, D=1024, H=1408, E=8), "experts"),
    (lambda: fs.workload("w8_dequant_mm", M=16), "decode"),
    (lambda: fs.workload("w8_linear"), "decode"),
    (lambda: fs.workload("w4_dequant_mm"), "decode"),
    (lambda: fs.workload("swiglu", M=16), "decode"),
    (lambda: fs.workload("swiglu", M=2048), "mixed"),
    (lambda: fs.workload("gather_mm"), "mixed"),  # rows of a 2-D table gathered: an embedding, not experts
    (lambda: fs.workload("cast_mm"), "mixed"),
    (_attention, "attention"),
])
def test_the_family_of_each_workload(graph: Any, family: str) -> None:
    assert graph_family(graph()) == family


def test_a_rows_own_family_wins_and_a_row_without_one_is_read_from_its_graph() -> None:
    g = fs.workload("moe_ffn")
    assert row_family({"family": "int8_linear", "graph": g.to_dict()}) == "int8_linear"
    cache: dict[str, str] = {}
    assert row_family({"graph_id": "x", "graph": g.to_dict()}, cache) == "experts" == cache["x"]
    assert row_family({"graph_id": "y"}) == "mixed"
    assert set(HARDWARE_FEATURES) <= set(plan_features(fs.plan.unfused(g), hardware.H100)[0])


def test_a_pooled_file_with_a_damaged_profile_is_refused(tmp_path: Any) -> None:
    from fusionsearch.errors import CostModelError

    X = np.random.default_rng(0).uniform(1, 10, size=(64, len(FEATURE_NAMES)))
    good = {"NVIDIA H100 80GB HBM3": hardware.H100.to_dict(), "NVIDIA H200": hardware.H200.to_dict()}
    model = LearnedCostModel(max_iter=5, n_bags=1).fit(X, np.full(64, 5.0))
    path = str(tmp_path / "pooled.npz")
    model.set_hardware({"name": "NVIDIA H100 80GB HBM3 + NVIDIA H200", "gpus": sorted(good), "profiles": good})
    assert load(model.save(path)).hardware_["profiles"] == good
    bad = {**good, "NVIDIA H200": {**good["NVIDIA H200"], "sm_clock_mhz": -1.0}}
    model.set_hardware({"name": "two", "gpus": sorted(good), "profiles": bad})
    with pytest.raises(CostModelError, match="its hardware profile is refused: .*sm_clock_mhz must be a finite"):
        load(model.save(path))
    model.set_hardware({"name": "two", "gpus": "NVIDIA H200"})
    with pytest.raises(CostModelError, match="gpus is not a list of GPU names"):
        load(model.save(path))
