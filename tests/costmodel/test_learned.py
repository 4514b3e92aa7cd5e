"""The learned cost model: feature schema, scikit-learn contract, grouped cross-validation, ranking figures,
safe model files and the `costmodel train|evaluate` commands, on a synthetic dataset of real plans whose
"measured" kernel times are a known distortion of the analytic model."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import skops.io
from sklearn.base import clone

import fusionsearch as fs
from fusionsearch import cli
from fusionsearch import plan as P
from fusionsearch.costmodel import H200, estimate
from fusionsearch.costmodel.features import (
    ANALYTIC_FEATURE,
    FEATURE_NAMES,
    FEATURE_SCHEMA_VERSION,
    kernel_features,
    plan_features,
    to_matrix,
)
from fusionsearch.costmodel.learned import LearnedCostModel, load, load_default, wide_templates
from fusionsearch.costmodel.pricing import plan_time_us
from fusionsearch.costmodel.train import cross_validate, cv_splits, evaluate, load_dataset, train
from fusionsearch.datasets.measurements import append_rows
from fusionsearch.errors import CostModelError


@pytest.fixture(scope="module")
def model(dataset: str) -> LearnedCostModel:
    X, y, _, _ = load_dataset(dataset)
    return LearnedCostModel(max_iter=100).fit(X, y, hardware=H200)


# ---- features ------------------------------------------------------------------------------------

def test_features_are_the_schema_in_order_and_carry_the_analytic_figures() -> None:
    g = fs.workload("w8_dequant_mm", M=16, K=512, N=512)
    for plan in (P.unfused(g), P.fully_fused(g)):
        est = estimate(plan, H200)
        rows = plan_features(plan, H200)
        assert len(rows) == len(plan.kernels)
        for f, k, ke in zip(rows, plan.kernels, est.per_kernel, strict=True):
            assert tuple(f) == FEATURE_NAMES and all(isinstance(v, float) for v in f.values())
            assert f[ANALYTIC_FEATURE] == pytest.approx(ke.time_us)
            assert f["bytes_read"] == ke.bytes_read and f["flops"] == ke.flops
            assert f["kind_template"] + f["kind_pointwise"] + f["kind_extern"] == 1.0
            if k.kind != "template":  # no tile config, no matmul shape
                assert f["block_m"] == f["split_k"] == f["num_stages"] == f["log2_k"] == 0.0
        assert to_matrix(rows).shape == (len(rows), len(FEATURE_NAMES))
    (fused,) = plan_features(P.fully_fused(g), H200)
    # The int8 weight's dequantisation (cast, multiply by the scale) rides in the B load, in bf16.
    assert fused["pro_b_pointwise"] == 2.0 and fused["pro_a_pointwise"] == fused["epi_pointwise"] == 0.0
    assert fused["load_bits_min"] == 8.0 and fused["b_bits"] == 16.0 and fused["out_bits"] == 16.0
    assert fused["block_k"] == P.fully_fused(g).kernels[0].config.block_k
    assert fused["log2_m"] == 4.0 and fused["log2_k"] == 9.0 and fused["log2_n"] == 9.0


def test_upcasts_and_libdevice_ops_are_counted_in_a_gelu_epilogue() -> None:
    g = fs.workload("mm_bias_gelu", M=16, K=256, N=256, dtype="bfloat16")
    (f,) = plan_features(P.fully_fused(g), H200)
    assert f["epi_fp32"] >= 1.0  # gelu calls libdevice
    assert f["upcasts"] >= f["epi_fp32"]  # the epilogue computes its bf16 arithmetic in fp32
    (f32,) = plan_features(P.fully_fused(fs.workload("mm_bias_gelu", M=16, K=256, N=256, dtype="float32")), H200)
    assert f32["upcasts"] == 0.0 and f32["a_bits"] == 32.0


def test_upcasts_follow_the_plans_codegen_options() -> None:
    """The feature counts what the generated code does: an epilogue left in bf16 upcasts only what needs fp32."""
    g = fs.workload("mm_bias_gelu", M=16, K=256, N=256, dtype="bfloat16")
    (upcast,) = plan_features(P.fully_fused(g), H200)
    (native,) = plan_features(P.fully_fused(g).with_options(upcast_epilogue=False), H200)
    assert 1.0 <= native["upcasts"] < upcast["upcasts"]


def test_kernel_features_refuse_an_index_outside_the_plan() -> None:
    with pytest.raises(CostModelError, match="out of range"):
        kernel_features(P.fully_fused(fs.workload("scale_mm", M=64, K=64, N=64)), 3, H200)
    with pytest.raises(CostModelError, match="lacks"):
        to_matrix([{"block_m": 1.0}])


# ---- the scikit-learn contract -------------------------------------------------------------------

def test_fit_returns_self_with_json_params_and_learned_state_ending_in_underscore(dataset: str) -> None:
    X, y, _, _ = load_dataset(dataset)
    est = LearnedCostModel(max_iter=20)
    assert vars(est) == est.get_params()  # __init__ stores hyperparameters only
    assert est.fit(X, y, hardware=H200) is est
    json.dumps(est.get_params())
    learned = set(vars(est)) - set(est.get_params())
    assert learned and all(a.endswith("_") for a in learned)
    assert est.schema_version_ == FEATURE_SCHEMA_VERSION and est.feature_names_ == list(FEATURE_NAMES)
    assert est.hardware_["name"] == H200.name
    assert clone(est).get_params() == est.get_params()
    pred = est.predict(X)
    assert pred.shape == y.shape and np.all(pred > 0)
    with pytest.raises(CostModelError, match="columns"):
        est.predict(X[:, :-1])


def test_the_estimator_contract_holds_without_subclassing_scikit_learn() -> None:
    from sklearn.utils import get_tags

    est = LearnedCostModel(max_iter=7)
    assert repr(est) == "LearnedCostModel(max_iter=7)"
    assert est.set_params(n_bags=2, width_split=False) is est and est.get_params()["n_bags"] == 2
    assert clone(est).get_params() == est.get_params() and clone(est) is not est
    with pytest.raises(CostModelError, match="unknown hyperparameters \\['depth'\\]"):
        est.set_params(depth=3)
    tags = get_tags(est)
    assert tags.estimator_type == "regressor" and tags.input_tags.allow_nan
    with pytest.raises(CostModelError, match="not fitted"):
        est.predict(np.ones((1, len(FEATURE_NAMES))))


def test_plan_time_is_the_sum_of_the_kernel_predictions(model: LearnedCostModel) -> None:
    plan = P.unfused(fs.workload("swiglu", M=16, D=256, H=512))
    per_kernel = model.predict(to_matrix(plan_features(plan, H200)))
    assert len(per_kernel) == len(plan.kernels) > 1
    assert plan_time_us(model, plan, H200) == pytest.approx(per_kernel.sum())


# ---- dataset, cross-validation and figures -------------------------------------------------------

def test_cross_validation_never_puts_a_graph_in_both_train_and_test(dataset: str, synthetic_graphs: list[Any]) -> None:
    _, _, groups, _ = load_dataset(dataset)
    seen = []
    for train_idx, test_idx in cv_splits(groups, folds=5):
        assert not set(groups[train_idx]) & set(groups[test_idx])
        assert len(train_idx) + len(test_idx) == len(groups)
        seen += list(test_idx)
    assert sorted(seen) == list(range(len(groups)))  # every row held out exactly once
    cv = cross_validate(dataset, folds=4, max_iter=50)
    held = [gid for fold in cv["held_out"] for gid in fold]
    assert cv["folds"] == 4 and sorted(held) == sorted(set(groups)) and len(held) == len(synthetic_graphs)


def test_learned_model_ranks_held_out_graphs_better_than_the_analytic_model(dataset: str,
                                                                          synthetic_graphs: list[Any]) -> None:
    cv = cross_validate(dataset, folds=3)  # three fits, not the CLI's five: the held-out claim is the same
    assert cv["graphs"] == len(synthetic_graphs) and cv["plans"] >= 10 * len(synthetic_graphs)
    assert cv["folds"] == 3
    # The synthetic truth reorders tile configs that the roofline prices alike, and only the learned model
    # can pick that up from other graphs.
    assert cv["pairwise_accuracy"] > cv["analytic_pairwise_accuracy"] + 0.05
    assert cv["kendall_tau"] > cv["analytic_kendall_tau"]
    assert cv["top1_regret"] <= cv["analytic_top1_regret"]
    for key in ("kendall_tau", "spearman", "pairwise_accuracy", "top1_regret", "top5_regret"):
        assert np.isfinite(cv[key]) and np.isfinite(cv[f"analytic_{key}_median"])
    assert 0.0 <= cv["top5_regret"] <= cv["top1_regret"]


def _hand_rows(times: dict[str, float], roofline: dict[str, float], graph: str = "g") -> list[dict[str, Any]]:
    base = dict.fromkeys(FEATURE_NAMES, 0.0)
    return [{"features": {**base, ANALYTIC_FEATURE: roofline[p]}, "schema_version": FEATURE_SCHEMA_VERSION,
             "graph_id": graph, "plan_id": p, "kernel_index": 0, "status": "ok", "time_us": t,
             "hardware": H200.to_dict()} for p, t in times.items()]


def test_figures_follow_their_definitions_on_a_hand_made_graph(tmp_path: Path, model: LearnedCostModel) -> None:
    # The analytic model ranks these five plans exactly backwards.
    measured = {"a": 10.0, "b": 20.0, "c": 30.0, "d": 40.0, "e": 50.0}
    roofline = {"a": 5.0, "b": 4.0, "c": 3.0, "d": 2.0, "e": 1.0}
    path = str(tmp_path / "hand.jsonl.gz")
    append_rows(path, _hand_rows(measured, roofline) + _hand_rows(measured, measured, graph="h"))
    fig = evaluate(model, path)
    assert fig["graphs"] == 2 and fig["plans"] == 10 and fig["rows"] == 10
    per = {g["graph_id"]: g for g in fig["per_graph"]}
    assert per["g"]["analytic_kendall_tau"] == pytest.approx(-1.0)
    assert per["g"]["analytic_spearman"] == pytest.approx(-1.0)
    assert per["g"]["analytic_pairwise_accuracy"] == 0.0
    assert per["g"]["analytic_top1_regret"] == pytest.approx((50 - 10) / 10)
    assert per["g"]["analytic_top5_regret"] == 0.0  # five plans: the top 5 contain the best
    assert per["h"]["analytic_kendall_tau"] == pytest.approx(1.0) and per["h"]["analytic_top1_regret"] == 0.0
    assert fig["analytic_pairwise_accuracy"] == pytest.approx(0.5)
    assert fig["analytic_pairwise_accuracy_median"] == pytest.approx(0.5)


def test_dataset_keeps_ok_rows_of_the_current_schema_and_skips_incomplete_plans(tmp_path: Path,
                                                                                 model: LearnedCostModel) -> None:
    path = str(tmp_path / "mixed.jsonl.gz")
    rows = _hand_rows({"a": 10.0, "b": 20.0, "c": 30.0}, {"a": 1.0, "b": 2.0, "c": 3.0})
    failed = {**rows[2], "kernel_index": 1, "status": "compile_failed", "time_us": None}  # plan c is incomplete
    old = {**rows[0], "plan_id": "z", "schema_version": FEATURE_SCHEMA_VERSION - 1}
    append_rows(path, [*rows, failed, old])
    X, y, groups, kept = load_dataset(path)
    assert X.shape == (3, len(FEATURE_NAMES)) and list(y) == [10.0, 20.0, 30.0] and set(groups) == {"g"}
    assert all(r["status"] == "ok" and r["schema_version"] == FEATURE_SCHEMA_VERSION for r in kept)
    assert evaluate(model, path)["plans"] == 2


def test_a_dataset_without_usable_rows_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CostModelError, match="no such dataset"):
        load_dataset(str(tmp_path / "missing.jsonl.gz"))
    path = str(tmp_path / "old.jsonl.gz")
    append_rows(path, [{**r, "schema_version": 0} for r in _hand_rows({"a": 1.0}, {"a": 1.0})])
    with pytest.raises(CostModelError, match=f"schema v{FEATURE_SCHEMA_VERSION}"):
        load_dataset(path)
    path = str(tmp_path / "failed.jsonl.gz")
    append_rows(path, [{**r, "status": "timed_out"} for r in _hand_rows({"a": 1.0}, {"a": 1.0})])
    with pytest.raises(CostModelError, match="no successfully measured"):
        load_dataset(path)


def test_an_unknown_fp32_dot_is_refused_before_the_file_is_read(tmp_path: Path) -> None:
    with pytest.raises(CostModelError, match="fp32_dot must be one of ieee, tf32x3, tf32, got 'fast'"):
        load_dataset(str(tmp_path / "missing.jsonl.gz"), fp32_dot="fast")


# ---- model files ---------------------------------------------------------------------------------

def test_fp32_templates_are_priced_by_the_models_of_all_graphs_and_the_rest_by_those_of_16_bit_graphs(
        dataset: str) -> None:
    X, y, groups, _ = load_dataset(dataset)
    wide = wide_templates(X)
    fp32_graphs = {g for g in groups.tolist() if "-float32-" in g}
    assert set(groups[wide].tolist()) == fp32_graphs and len(fp32_graphs) == 3
    assert np.all(X[wide, FEATURE_NAMES.index("kind_template")] == 1)
    split = LearnedCostModel(max_iter=20).fit(X, y, groups=groups)
    assert split.width_split and len(split.narrow_models_) == split.n_bags
    # References fitted apart: on every graph, and on the 16-bit graphs alone (their pointwise kernels too).
    whole = LearnedCostModel(max_iter=20, width_split=False).fit(X, y, groups=groups)
    narrow = ~np.isin(groups, list(fp32_graphs))
    alone = LearnedCostModel(max_iter=20, width_split=False).fit(X[narrow], y[narrow], groups=groups[narrow])
    predicted = split.predict(X)
    assert np.array_equal(predicted[wide], whole.predict(X[wide]))
    assert np.array_equal(predicted[~wide], alone.predict(X[~wide]))
    assert not np.allclose(alone.predict(X[~wide]), whole.predict(X[~wide]))  # the split changed something
    assert not LearnedCostModel(max_iter=20, width_split=False).fit(X, y, groups=groups).narrow_models_
    # One width only: nothing to split, one set of models.
    assert not LearnedCostModel(max_iter=20).fit(X[narrow], y[narrow], groups=groups[narrow]).narrow_models_


def test_a_model_file_from_before_the_width_split_loads_as_one_set_of_models(tmp_path: Path, dataset: str) -> None:
    X, y, groups, _ = load_dataset(dataset)
    one_set = LearnedCostModel(max_iter=5, n_bags=2, width_split=False).fit(X, y, hardware=H200, groups=groups)
    params = one_set.get_params()
    del params["width_split"]
    record = {"format": "fusionsearch-costmodel", "schema_version": FEATURE_SCHEMA_VERSION,
              "feature_names": list(FEATURE_NAMES), "hardware": one_set.hardware_, "params": params,
              "models": one_set.models_, "compiled_models": one_set.compiled_models_}
    path = str(tmp_path / "before.skops")
    skops.io.dump(record, path)
    back = load(path)
    assert back.width_split is False and back.narrow_models_ == []
    assert np.array_equal(back.predict(X), one_set.predict(X))


def test_a_model_file_with_a_narrow_model_that_is_not_a_regressor_is_refused(tmp_path: Path, dataset: str) -> None:
    X, y, groups, _ = load_dataset(dataset)
    model = LearnedCostModel(max_iter=5, n_bags=1).fit(X, y, groups=groups)
    model.narrow_models_ = [3]
    with pytest.raises(CostModelError, match="not a fusionsearch cost model"):
        load(model.save(str(tmp_path / "m.skops")))


def test_save_and_load_give_identical_predictions(tmp_path: Path, model: LearnedCostModel, dataset: str) -> None:
    X, _, _, _ = load_dataset(dataset)
    path = model.save(str(tmp_path / "m.skops"))
    back = load(path)
    assert np.array_equal(back.predict(X), model.predict(X))
    assert back.get_params() == model.get_params() and back.hardware_ == model.hardware_
    with zipfile.ZipFile(path) as z:  # a skops archive, no pickle inside
        assert "schema.json" in z.namelist()


def test_a_model_of_another_feature_schema_is_refused(tmp_path: Path, dataset: str) -> None:
    X, y, _, _ = load_dataset(dataset)
    old = LearnedCostModel(max_iter=5).fit(X, y)
    old.schema_version_ = FEATURE_SCHEMA_VERSION + 1
    with pytest.raises(CostModelError, match=f"schema v{FEATURE_SCHEMA_VERSION + 1}.*retrain"):
        load(old.save(str(tmp_path / "old.skops")))
    renamed = LearnedCostModel(max_iter=5).fit(X, y)
    renamed.feature_names_ = ["x", *FEATURE_NAMES[1:]]
    with pytest.raises(CostModelError, match="feature names differ"):
        load(renamed.save(str(tmp_path / "renamed.skops")))


class Innocent:
    """A class no cost model holds: loading it would run this module's code."""

    def __init__(self) -> None:
        self.x = 1


@pytest.mark.parametrize("payload", ["random", "function", "custom_class", "other_object"])
def test_a_file_that_is_not_a_model_is_refused(tmp_path: Path, payload: str) -> None:
    path = str(tmp_path / "bad.skops")
    if payload == "random":
        Path(path).write_bytes(np.random.default_rng(0).bytes(4096))
        match = "not a cost model file \\(not a zip archive"
    elif payload == "function":
        skops.io.dump({"format": "fusionsearch-costmodel", "model": os.system}, path)
        match = "refused.*system"
    elif payload == "custom_class":
        skops.io.dump({"format": "fusionsearch-costmodel", "model": Innocent()}, path)
        match = "refused.*Innocent"
    else:
        skops.io.dump([1, 2, 3], path)
        match = "not a fusionsearch cost model"
    with pytest.raises(CostModelError, match=match):
        load(path)
    with pytest.raises(CostModelError, match="no such model file"):
        load(str(tmp_path / "missing.skops"))


def test_default_model_only_for_the_gpu_it_was_trained_on(tmp_path: Path, dataset: str) -> None:
    path = str(tmp_path / "costmodel.skops")
    assert load_default(path) is None  # no file: no learned model
    X, y, _, _ = load_dataset(dataset)
    detected = fs.costmodel.Hardware.detect()
    LearnedCostModel(max_iter=5).fit(X, y, hardware=detected).save(path)
    assert isinstance(load_default(path), LearnedCostModel)
    other = {**detected.to_dict(), "name": "some other GPU"}
    LearnedCostModel(max_iter=5).fit(X, y, hardware=other).save(path)
    assert load_default(path) is None
    Path(path).write_bytes(b"not a model")
    with pytest.warns(UserWarning, match="not used"):
        assert load_default(path) is None


# ---- training and the command line ---------------------------------------------------------------

def test_train_saves_a_model_and_reports_grouped_cross_validation(tmp_path: Path, dataset: str,
                                                                 synthetic_graphs: list[Any]) -> None:
    out = str(tmp_path / "model.skops")
    result = train(dataset, out, folds=3, max_iter=50)
    assert os.path.isfile(out) and result["graphs"] == len(synthetic_graphs)
    assert result["cv"]["folds"] == 3 and result["params"]["max_iter"] == 50
    assert load(out).hardware_["name"] == H200.name
    with pytest.raises(CostModelError, match="unknown hyperparameter"):
        train(dataset, out, max_depth_of_trees=3)


def test_train_on_the_first_graphs_uses_exactly_those_in_collection_order(tmp_path: Path, dataset: str) -> None:
    from fusionsearch.datasets.measurements import read_rows

    order = list(dict.fromkeys(r["graph_id"] for r in read_rows(dataset)))
    out = str(tmp_path / "first.skops")
    result = train(dataset, out, folds=2, first_graphs=2, max_iter=20, n_bags=1)
    assert result["graphs"] == 2
    assert sorted(g for fold in result["cv"]["held_out"] for g in fold) == sorted(order[:2])
    _, _, groups, _ = load_dataset(dataset)
    assert result["rows"] == int(np.isin(groups, order[:2]).sum())
    with pytest.raises(CostModelError, match=f"holds {len(order)}"):
        train(dataset, out, first_graphs=len(order) + 1)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(CostModelError, match="positive whole number"):
            train(dataset, out, first_graphs=bad)  # type: ignore[arg-type]


def test_cli_train_and_evaluate_print_learned_vs_analytic(tmp_path: Path, dataset: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "cli.skops")
    assert cli.main(["costmodel", "train", dataset, "--out", out, "--folds", "3", "--max-iter", "50"]) == 0
    text = capsys.readouterr().out
    assert "learned" in text and "analytic" in text and "pairwise_accuracy" in text and out in text
    assert cli.main(["costmodel", "evaluate", out, dataset]) == 0
    text = capsys.readouterr().out
    for key in ("kendall_tau", "spearman", "pairwise_accuracy", "top1_regret", "top5_regret"):
        assert key in text


def test_cli_errors_exit_2_with_one_line(tmp_path: Path, dataset: str, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "missing.jsonl.gz")
    assert cli.main(["costmodel", "train", missing, "--out", str(tmp_path / "m.skops")]) == 2
    err = capsys.readouterr().err
    assert "no such dataset file" in err and len(err.strip().splitlines()) == 1
    bogus = tmp_path / "bogus.skops"
    bogus.write_bytes(b"\x00" * 64)
    assert cli.main(["costmodel", "evaluate", str(bogus), dataset]) == 2
    err = capsys.readouterr().err
    assert "not a zip archive" in err and len(err.strip().splitlines()) == 1


def test_the_search_prunes_with_a_given_learned_model(tmp_path: Path, model: LearnedCostModel) -> None:
    from fusionsearch.costmodel.pricing import plan_time_us
    from fusionsearch.plan import Plan
    from fusionsearch.search.study import SearchOptions, run_study

    path = model.save(str(tmp_path / "m.skops"))
    g = fs.workload("mm_bias_gelu", M=16, K=256, N=256)
    res = run_study(g, SearchOptions(trials=8, backend="model", cost_model=path))
    hw = res.hardware
    for t in res.trials:
        if t.predicted_us is not None and t.status == "estimated":
            plan = res.space.plan(t.params)
            assert t.predicted_us == pytest.approx(plan_time_us(model, plan, hw))
            assert t.predicted_us != pytest.approx(fs.costmodel.estimate(plan, hw).time_us)
    assert isinstance(res.best, Plan)
