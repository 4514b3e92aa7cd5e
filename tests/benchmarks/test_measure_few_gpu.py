"""benchmarks/measure_few_gpu.py's CPU parts, run dry (a stand-in judge, no GPU): the regret curves against the
best measured plan, the refit replay, the files it writes and the refusals of bad input."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import fusionsearch as fs  # noqa: E402
from benchmarks import measure_few_gpu as mf  # noqa: E402
from fusionsearch.costmodel import H200, fits  # noqa: E402
from fusionsearch.costmodel.features import ANALYTIC_FEATURE, plan_features, to_matrix  # noqa: E402
from fusionsearch.costmodel.learned import LearnedCostModel  # noqa: E402
from fusionsearch.search.space import enumerate_space  # noqa: E402


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    g = fs.workload("mm_bias_gelu", dtype=torch.float16, M=256, K=1024, N=1024)
    space = enumerate_space(g, lambda gg, mm, cfg: fits(gg, mm, cfg, H200), 8, library=True)
    rows = [f for _, p in space.distinct_plans(list(space.every_params())) for f in plan_features(p, H200)]
    model = LearnedCostModel(max_iter=20, n_bags=1).fit(
        to_matrix(rows), [f[ANALYTIC_FEATURE] * (1 + 0.3 * (f["num_warps"] == 8)) for f in rows], hardware=H200)
    return model.save(str(tmp_path_factory.mktemp("mf") / "model.npz"))


def test_regret_of_the_first_k_against_the_best_measured() -> None:
    times = [12.0, 10.0, math.inf, 11.0] + [20.0] * 14 + [9.0]  # the best is the last of 19
    curve = mf.regret_curve(times, list(range(len(times))), 9.0)
    assert curve == pytest.approx({1: 12 / 9 - 1, 2: 10 / 9 - 1, 4: 10 / 9 - 1, 8: 10 / 9 - 1, 16: 10 / 9 - 1})
    assert mf.regret_curve(times, [18, 0], 9.0)[1] == 0.0


def test_seed_ranges_and_bad_input_are_refused_in_one_line() -> None:
    assert mf.seed_range("20000-20002") == [20000, 20001, 20002] and mf.seed_range("7") == [7]
    for bad in ("x", "5-2", "-3"):
        with pytest.raises(SystemExit, match="--seeds"):
            mf.seed_range(bad)
    with pytest.raises(SystemExit, match="--plans must be at least 16"):
        mf.main(["--dry", "--plans", "4"])
    with pytest.raises(SystemExit, match="--cost-model"):
        mf.main(["--dry", "--cost-model", "missing.npz", "--seeds", "20000"])


def test_the_default_seeds_hold_no_shipped_graph() -> None:
    from fusionsearch.datasets.random_graphs import random_graph

    shipped = mf.shipped_graph_ids()
    assert len(shipped) > 500  # both shipped collections were read
    fresh = {random_graph(s).signature_hash() for s in mf.seed_range(mf.DEFAULT_SEEDS)}
    assert len(fresh) == 20 and not fresh & shipped
    assert random_graph(0).signature_hash() in shipped  # the check would see a used seed


def test_a_dry_run_writes_the_curves_the_table_and_the_chart(tmp_path: Path, model_path: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert mf.main(["--dry", "--seeds", "20000", "--plans", "16", "--max-configs", "4", "--cost-model", model_path,
                    "--out", str(out)]) == 0
    record = json.loads((out / "results.json").read_text())
    (row,) = record["graphs"]
    assert record["dry"] and row["seed"] == 20000 and row["search_measured"] <= 8
    finite = [t for t in row["times_us"] if t is not None and math.isfinite(t)]
    assert row["best_us"] == min(finite)
    for order in ("model", "refit"):  # regret is never negative and reaches 0 at k = 16 = --plans
        curve = [row[order][str(k)] for k in mf.KS]
        assert all(r >= 0 for r in curve) and curve == sorted(curve, reverse=True) and curve[-1] == 0.0
    assert row["model"]["1"] == pytest.approx(row["times_us"][0] / row["best_us"] - 1)  # the model's first
    assert row["rank_s"] > 0 and row["search_s"] > 0
    summary = record["summary"]
    assert summary["model"]["16"]["within_1pct"] == 1.0
    assert "| model, k=8 |" in (out / "results.md").read_text()
    assert (out / "regret.png").exists() or (out / "regret.svg").read_text().startswith("<svg")
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1].startswith("search: median") and "| refit, k=16 |" in printed[-2]
