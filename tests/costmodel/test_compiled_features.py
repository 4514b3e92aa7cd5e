"""Compile-time figures in the learned model (feature schema v3, v4): a template's registers, stack bytes and shared
memory, and its machine code's instructions, loops and spill ops, when it was compiled for the GPU
(codegen/resources.py), NaN when it was not. One model serves both:
every training row that has them is learned again without them, so a search can price a whole space before
compiling anything and rank compiled candidates with more."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen.resources import KernelResources
from fusionsearch.costmodel import H200
from fusionsearch.costmodel.features import (
    COMPILED_FEATURES,
    FEATURE_NAMES,
    FEATURE_SCHEMA_VERSION,
    plan_features,
    recompute_features,
    to_matrix,
)
from fusionsearch.costmodel.learned import LearnedCostModel, without_compiled
from fusionsearch.costmodel.train import cross_validate
from fusionsearch.datasets.measurements import append_rows, read_rows
from fusionsearch.errors import FusionSearchError
from fusionsearch.plan import FP32_DOT
from fusionsearch.search.collect import add_resources


def test_compiled_figures_are_features_of_templates_only() -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=64, K=128, N=64)
    plan = P.unfused(g)  # a template, then pointwise kernels
    spilled = KernelResources(registers=255, stack_bytes=4096, shared_bytes=49152, instructions=5000,
                              loop_instructions=400, loops=1, loop_local_ops=12, other_local_ops=3)
    given = plan_features(plan, H200, [spilled] + [None] * (len(plan.kernels) - 1))
    assert [given[0][n] for n in COMPILED_FEATURES] == [255.0, 4096.0, 48.0, 5000.0, 400.0, 1.0, 12.0, 3.0]
    assert all(f[n] == 0.0 for f in given[1:] for n in COMPILED_FEATURES)  # pointwise kernels: none to have
    unknown = plan_features(plan, H200)
    assert all(math.isnan(unknown[0][n]) for n in COMPILED_FEATURES)
    assert all(unknown[0][n] == given[0][n] for n in FEATURE_NAMES if n not in COMPILED_FEATURES)


def spill_rows(n_graphs: int = 12, plans: int = 8) -> list[dict[str, Any]]:
    """Rows whose template time is set by its stack bytes (spills), which the plan alone cannot show: the
    tile config is the same in every plan of a graph, only the compiled figures differ."""
    rng = np.random.default_rng(0)
    rows = []
    for gi in range(n_graphs):
        g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=32 * (gi + 1), K=256, N=256)
        plan = P.fully_fused(g)
        for pi in range(plans):
            stack = int(rng.choice([0, 0, 2048, 8192]))
            res = KernelResources(registers=255 if stack else 128, stack_bytes=stack, shared_bytes=32768,
                                  instructions=3000, loop_instructions=200, loops=1, loop_local_ops=stack // 256,
                                  other_local_ops=0)
            f = plan_features(plan, H200, [res])[0]
            time = f["roofline_us"] * (1.0 + stack / 512) * float(np.exp(rng.normal(0, 0.01)))
            rows.append({"features": f, "schema_version": FEATURE_SCHEMA_VERSION, "graph_id": f"g{gi}",
                         "plan_id": f"p{pi}", "kernel_index": 0, "status": "ok", "time_us": time,
                         "hardware": {"device": H200.name, "profile": H200.to_dict()}, "fp32_dot": FP32_DOT})
    return rows


def test_one_model_prices_spills_when_compiled_and_still_prices_uncompiled_plans() -> None:
    rows = spill_rows()
    X, y = to_matrix([r["features"] for r in rows]), np.array([r["time_us"] for r in rows])
    model = LearnedCostModel(max_iter=100, n_bags=1).fit(X, y)
    compiled = model.predict(X)
    assert np.corrcoef(np.log(compiled), np.log(y))[0, 1] > 0.95  # the spills are what it learned
    blind = model.predict(without_compiled(X))
    assert np.all(np.isfinite(blind)) and np.all(blind > 0)
    # Without the figures every plan of a graph looks the same: one price per graph, within the range it saw.
    for gi in range(12):
        prices = blind[[i for i, r in enumerate(rows) if r["graph_id"] == f"g{gi}"]]
        assert np.ptp(prices) == 0 and y.min() <= prices[0] <= y.max()


def test_cross_validation_reports_the_model_with_and_without_compiled_figures(tmp_path: Path) -> None:
    path = str(tmp_path / "spills.jsonl.gz")
    append_rows(path, spill_rows())
    fig = cross_validate(path, folds=3, max_iter=100, n_bags=1)
    assert fig["kendall_tau"] > 0.8  # plans differ only in their spills, which the compiled figures show
    assert math.isnan(fig["uncompiled_kendall_tau"]) or fig["uncompiled_kendall_tau"] < 0.5  # all tied without


def test_older_rows_are_refeatured_with_the_resources_they_carry() -> None:
    row = spill_rows(1, 1)[0]
    g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=32, K=256, N=256)
    old = {**row, "schema_version": 2, "features": {}, "graph": g.to_dict(), "plan": P.fully_fused(g).to_dict(),
           "resources": {"registers": 200, "stack_bytes": 64, "shared_bytes": 2048}}
    (new,), dropped = recompute_features([old])
    assert dropped == 0 and [new["features"][n] for n in COMPILED_FEATURES[:3]] == [200.0, 64.0, 2.0]
    assert all(math.isnan(new["features"][n]) for n in COMPILED_FEATURES[3:])  # a v3 record: no SASS figures
    sass = {"instructions": 900, "loop_instructions": 90, "loops": 1, "loop_local_ops": 0, "other_local_ops": 4}
    (full,), _ = recompute_features([{**old, "resources": {**old["resources"], **sass}}])
    assert [full["features"][n] for n in COMPILED_FEATURES] == [200.0, 64.0, 2.0, 900.0, 90.0, 1.0, 0.0, 4.0]
    (bare,), _ = recompute_features([{**old, "resources": None}])
    assert all(math.isnan(bare["features"][n]) for n in COMPILED_FEATURES)


def test_add_resources_compiles_each_template_of_an_older_dataset(tmp_path: Path) -> None:
    """The rows of a dataset measured without compiled figures get them (compiled for sm_90 on the CPU)."""
    g = fs.workload("mm_bias_gelu", dtype=torch.bfloat16, M=64, K=128, N=64)
    rows = []
    for pid, plan in (("fused", P.fully_fused(g)), ("unfused", P.unfused(g))):
        for i, f in enumerate(plan_features(plan, H200)):
            rows.append({"features": f, "schema_version": 2, "graph_id": "g", "plan_id": pid, "kernel_index": i,
                         "kernel_kind": plan.kernels[i].kind, "status": "ok", "time_us": 10.0,
                         "hardware": {"device": H200.name, "profile": H200.to_dict()},
                         "graph": g.to_dict(), "plan": plan.to_dict()})
    src, out = str(tmp_path / "old.jsonl.gz"), str(tmp_path / "new.jsonl.gz")
    append_rows(src, rows)
    counts = add_resources(src, out, workers=1)
    assert counts == {"compiled": 2, "not compiled": 0, "other kernels": len(rows) - 2}
    new = read_rows(out)
    templates = [r for r in new if r["kernel_kind"] == "template"]
    assert len(new) == len(rows) and all(r["schema_version"] == FEATURE_SCHEMA_VERSION for r in new)
    for r in templates:
        assert r["resources"]["registers"] > 0 and r["features"]["registers"] == r["resources"]["registers"]
        assert r["resources"]["shared_bytes"] > 0  # a software pipeline of A and B tiles, whatever the config
    with pytest.raises(FusionSearchError, match="exists"):
        add_resources(src, out)
    with pytest.raises(FusionSearchError, match="no such dataset file"):
        add_resources(str(tmp_path / "nosuch.jsonl.gz"), str(tmp_path / "a.jsonl.gz"))
    (tmp_path / "junk.jsonl.gz").write_text("not a dataset")
    with pytest.raises(FusionSearchError, match="no dataset rows"):
        add_resources(str(tmp_path / "junk.jsonl.gz"), str(tmp_path / "b.jsonl.gz"))
    assert not (tmp_path / "a.jsonl.gz").exists() and not (tmp_path / "b.jsonl.gz").exists()
