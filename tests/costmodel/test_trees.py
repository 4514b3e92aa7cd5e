"""Gradient-boosted trees as plain arrays: they predict exactly as scikit-learn's regressor (NaNs included), a
model saved as .npz loads back to the same predictions, and every malformed or hostile file is refused with a
CostModelError naming what is wrong, quickly: no code run, no loop, no unbounded decompression."""

from __future__ import annotations

import json
import pickle
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from deadline import deadline
from sklearn.ensemble import HistGradientBoostingRegressor

from fusionsearch.costmodel import H200, trees
from fusionsearch.costmodel.features import ANALYTIC_FEATURE, COMPILED_FEATURES, FEATURE_NAMES
from fusionsearch.costmodel.learned import GROUPS, LearnedCostModel, load, without_compiled
from fusionsearch.costmodel.trees import Trees
from fusionsearch.errors import CostModelError


def _random_rows(rng: np.random.Generator, n: int, nan_share: float) -> np.ndarray:
    X = rng.normal(size=(n, 6))
    X[:, 5] = rng.integers(0, 4, n)  # a few distinct values: splits on bin edges
    X[rng.random(X.shape) < nan_share] = np.nan
    return X


def test_trees_predict_exactly_as_the_regressor_on_random_data_with_missing_values() -> None:
    rng = np.random.default_rng(0)
    X = _random_rows(rng, 400, 0.15)
    y = np.nan_to_num(X[:, 0], nan=3.0) * 2 + np.sin(np.nan_to_num(X[:, 1], nan=-2.0)) + rng.normal(0, 0.1, 400)
    model = HistGradientBoostingRegressor(max_iter=40, max_leaf_nodes=15, min_samples_leaf=3,
                                          early_stopping=False, random_state=0).fit(X, y)
    plain = Trees.from_regressor(model)
    assert plain.n_trees == 40 and plain.n_features == 6
    inner = ~plain.is_leaf
    assert plain.missing_left[inner].any() and not plain.missing_left[inner].all()  # NaNs go both ways
    test = _random_rows(np.random.default_rng(1), 500, 0.3)
    test[:7] = np.nan  # rows with every value missing
    test[7:9] = np.inf
    expected = model.predict(test)
    got = plain.predict(test)
    assert np.array_equal(got, expected)  # the same comparisons, summed in the same order: bit for bit
    assert np.max(np.abs(got - expected) / np.abs(expected)) <= 1e-12
    assert np.ptp(got) > 1.0  # a model that learned something, so equality says something
    assert plain.predict(test[:0]).shape == (0,)
    with pytest.raises(CostModelError, match="6 features cannot predict rows of shape \\(3, 5\\)"):
        plain.predict(test[:3, :5])


def test_only_squared_error_regressors_with_numeric_splits_convert() -> None:
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.integers(0, 5, 200), rng.normal(size=200)])
    y = X[:, 0] + rng.random(200)
    categorical = HistGradientBoostingRegressor(max_iter=5, categorical_features=[0]).fit(X, y)
    with pytest.raises(CostModelError, match="categorical splits"):
        Trees.from_regressor(categorical)
    poisson = HistGradientBoostingRegressor(max_iter=5, loss="poisson").fit(X, y)
    with pytest.raises(CostModelError, match="squared-error.*poisson"):
        Trees.from_regressor(poisson)
    with pytest.raises(CostModelError, match="not a fitted"):
        Trees.from_regressor(HistGradientBoostingRegressor())


def _one_tree(**changes: Any) -> dict[str, Any]:
    """A valid tree of three nodes (a split on feature 1 at 0.5, two leaves), with `changes` applied."""
    arrays: dict[str, Any] = dict(
        baseline=0.25, n_features=2, starts=np.array([0, 3], dtype=np.int64),
        feature=np.array([1, 0, 0], dtype=np.int32), threshold=np.array([0.5, 0.0, 0.0]),
        left=np.array([1, 0, 0], dtype=np.int32), right=np.array([2, 0, 0], dtype=np.int32),
        value=np.array([0.0, -1.0, 1.0]), missing_left=np.array([True, False, False]),
        is_leaf=np.array([False, True, True]))
    for key, value in changes.items():
        arrays[key] = value
    return arrays


def test_a_tree_deeper_than_the_predictor_walks_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    n = 9  # a chain: node i splits into leaf i + 1 and node i + 2
    chain = _one_tree(starts=np.array([0, n], dtype=np.int64), feature=np.zeros(n, dtype=np.int32),
                      threshold=np.zeros(n), left=np.where(np.arange(n) % 2, 0, np.arange(n) + 1).astype(np.int32),
                      right=np.where(np.arange(n) % 2, 0, np.arange(n) + 2).astype(np.int32), value=np.ones(n),
                      missing_left=np.zeros(n, dtype=bool), is_leaf=(np.arange(n) % 2 == 1) | (np.arange(n) == n - 1))
    assert Trees(**chain).predict(np.array([[1.0, 0.0]]))[0] == 0.25 + 1.0  # four levels: allowed
    monkeypatch.setattr(trees, "MAX_DEPTH", 3)
    with pytest.raises(CostModelError, match="deeper than 3 levels"):
        Trees(**chain)


def test_a_tree_is_walked_with_its_threshold_and_missing_direction() -> None:
    tree = Trees(**_one_tree())
    got = tree.predict(np.array([[9.0, 0.5], [9.0, 0.6], [9.0, np.nan]]))
    assert list(got) == [0.25 - 1.0, 0.25 + 1.0, 0.25 - 1.0]


@pytest.mark.parametrize(("changes", "match"), [
    ({"left": np.array([0, 0, 0], dtype=np.int32)}, "node 0's left child 0 is not after it"),  # itself: a cycle
    ({"right": np.array([7, 0, 0], dtype=np.int32)}, "node 0's right child 7 is not after it within"),
    ({"right": np.array([-1, 0, 0], dtype=np.int32)}, "right child -1"),
    ({"feature": np.array([2, 0, 0], dtype=np.int32)}, "feature 2, outside 0..1"),
    # a leaf's feature too: the predictor reads one for every pair still walking, those at a leaf included
    ({"feature": np.array([1, -2147480316, 0], dtype=np.int32)}, "node 1 names feature -2147480316"),
    ({"threshold": np.array([np.nan, 0.0, 0.0])}, "NaN threshold"),
    ({"value": np.array([0.0, np.inf, 0.0])}, "non-finite leaf"),
    ({"left": np.array([1, 0, 0], dtype=np.int64)}, "left must be a 1-D int32"),
    ({"is_leaf": np.array([False, True])}, "differ in length"),
    ({"starts": np.array([0, 2], dtype=np.int64)}, "rise from 0 to the node count 3"),
    ({"is_leaf": np.array([False, False, True])}, "node 1's left child 0 is not after it"),
])
def test_a_tree_a_predictor_could_loop_on_or_index_outside_of_is_refused(changes: dict[str, Any],
                                                                          match: str) -> None:
    with pytest.raises(CostModelError, match=match):
        Trees(**_one_tree(**changes))


# ---- model files -------------------------------------------------------------------------------------

def _features(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random feature rows shaped like kernels of 12 graphs (three with fp32 templates), their times (µs)
    and graph ids: enough for every group of regressors a model saves."""
    col = {name: i for i, name in enumerate(FEATURE_NAMES)}
    X = rng.uniform(1, 10, size=(n, len(FEATURE_NAMES)))
    groups = rng.integers(0, 12, n)
    X[:, col["kind_template"]] = rng.random(n) < 0.6
    X[:, col["a_bits"]] = X[:, col["b_bits"]] = np.where(groups < 3, 32.0, 16.0)
    y = X[:, col[ANALYTIC_FEATURE]] * (1 + X[:, col[COMPILED_FEATURES[0]]] / 10) * rng.uniform(0.9, 1.1, n)
    return X, y, groups


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[LearnedCostModel, str, np.ndarray]:
    """A small fitted model (every group of regressors non-empty), its .npz file and rows to predict."""
    X, y, groups = _features(np.random.default_rng(0), 600)
    model = LearnedCostModel(max_iter=15, n_bags=2, min_samples_leaf=5).fit(X, y, hardware=H200, groups=groups)
    path = model.save(str(tmp_path_factory.mktemp("trees") / "model.npz"))
    test, _, _ = _features(np.random.default_rng(1), 300)
    return model, path, np.concatenate([test, without_compiled(test)])


def test_save_and_load_an_npz_model_give_the_same_predictions(saved: tuple[LearnedCostModel, str, np.ndarray]
                                                              ) -> None:
    model, path, X = saved
    assert all(getattr(model, f"{g}_") for g in GROUPS)  # every group is saved and read back
    assert np.isnan(X).any()
    back = load(path)
    assert np.array_equal(back.predict(X), model.predict(X))
    assert back.get_params() == model.get_params() and back.hardware_ == model.hardware_ == H200.to_dict()
    for g in GROUPS:
        assert len(getattr(back, f"{g}_")) == len(getattr(model, f"{g}_")) == 2
        assert all(isinstance(m, Trees) for m in getattr(back, f"{g}_"))
    with np.load(path, allow_pickle=False) as npz:  # numpy's own reader, pickle refused, reads it whole
        assert len(npz.files) == 1 + 10 * len(GROUPS) and all(npz[name].ndim == 1 for name in npz.files)
    again = back.save(path.replace("model.npz", "again"))  # a read model saves again, under any name
    assert Path(again).read_bytes() == Path(path).read_bytes()
    with pytest.raises(CostModelError, match="saves as .npz only"):
        back.save(path.replace("model.npz", "legacy.skops"))


def _rewrite(src: str, dst: Path, change: Callable[[dict[str, np.ndarray]], None]) -> str:
    """`src`'s arrays after `change`, written to `dst` with numpy as a model would be."""
    with np.load(src, allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in npz.files}
    change(arrays)
    with open(dst, "wb") as f:
        np.savez_compressed(f, **arrays)
    return str(dst)


def _meta(change: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, np.ndarray]], None]:
    """An edit of a model file's JSON record."""
    def edit(arrays: dict[str, np.ndarray]) -> None:
        meta = json.loads(arrays["meta"].tobytes())
        change(meta)
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    return edit


def _rewrite_member(src: str, dst: Path, member: str, change: Callable[[bytes], bytes]) -> str:
    """`src` with the raw bytes of archive member `member` (its .npy header included) changed."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            zout.writestr(info.filename, change(data) if info.filename == member else data)
    return str(dst)


def _chain(depth: int, n_features: int) -> dict[str, Any]:
    """One tree of `depth` levels that every row walks to the bottom: node 2i splits into leaf 2i + 1 and, on
    the right (any feature value is above -1e308), node 2i + 2."""
    n = 2 * depth + 1
    i = np.arange(n)
    leaf = (i % 2 == 1) | (i == n - 1)
    return dict(n_features=n_features, feature=np.zeros(n, np.int32), threshold=np.where(leaf, 0.0, -1e308),
                left=np.where(leaf, 0, i + 1).astype(np.int32), right=np.where(leaf, 0, i + 2).astype(np.int32),
                value=np.where(leaf, 1e-6, 0.0), missing_left=np.zeros(n, bool), is_leaf=leaf)


def _tiled(tree: dict[str, Any], count: int) -> Trees:
    """`count` copies of one tree as one regressor."""
    nodes = len(tree["feature"])
    return Trees(baseline=0.0, n_features=tree["n_features"], starts=np.arange(count + 1, dtype=np.int64) * nodes,
                 **{k: np.tile(v, count) for k, v in tree.items() if k != "n_features"})


def _first_split(arrays: dict[str, np.ndarray]) -> int:
    """The first split node of the first tree of the first blind regressor (its root)."""
    return int(np.flatnonzero(~arrays["models.is_leaf"])[0])


def _set(key: str, value: Callable[[dict[str, np.ndarray]], Any]) -> Callable[[dict[str, np.ndarray]], None]:
    def change(arrays: dict[str, np.ndarray]) -> None:
        arrays[key] = arrays[key].copy()
        arrays[key][_first_split(arrays)] = value(arrays)
    return change


def _declare_size(src: str, dst: Path, member: str, size: int) -> str:
    """`src` with `member`'s uncompressed size in the zip's central directory set to `size` (bytes)."""
    data = bytearray(Path(src).read_bytes())
    at = data.index(b"PK\x01\x02")  # the central directory's first entry, then one entry after another
    while True:
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", data, at + 28)
        if data[at + 46:at + 46 + name_len] == member.encode():
            struct.pack_into("<I", data, at + 24, size)
            break
        at += 46 + name_len + extra_len + comment_len
    dst.write_bytes(bytes(data))
    with zipfile.ZipFile(dst) as z:
        assert z.getinfo(member).file_size == size
    return str(dst)


class Marker:
    """Unpickling this creates a file: proof that a load ran code from the file."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


@pytest.mark.parametrize(("case", "match"), [
    ("self_child", r"models: tree 0: node 0's left child 0 is not after it .*a cycle"),
    ("child_out_of_range", r"models: tree 0: node 0's right child 100000 is not after it within the tree's"),
    ("feature_out_of_range", rf"models: node 0 names feature {len(FEATURE_NAMES)}, outside"),
    ("wrong_dtype", r"member models.left: expected a 1-D int32 array .* found int64"),
    ("bad_offsets", r"compiled_models: its node offsets do not split"),
    ("missing_member", r"not a fusionsearch model archive \(missing narrow_models.value; unexpected none\)"),
    ("pickle_inside", r"member models.value: refused, it holds pickled Python objects"),
    ("bad_meta", r"its metadata is not UTF-8 JSON"),
    ("other_schema", r"made for feature schema v0"),
    ("truncated", r"not a cost model file \(not a zip archive, or truncated\)"),
    ("not_zip", r"not a cost model file \(not a zip archive, or truncated\)"),
    ("pickle_file", r"not a cost model file \(not a zip archive, or truncated\)"),
    ("other_zip", r"not a fusionsearch model archive \(missing .*; unexpected notes.txt\)"),
    ("member_too_large", r"member models.value.npy would decompress to 4294967280 bytes, over the 67108864"),
    # issue 53 items 11 and 18: files that ended in tracebacks, absurd times or a search past 180 s
    ("deep_meta", r"its metadata is JSON nested too deeply to be a model's record"),
    ("npy_header_unparsable", r"member models.value: its .npy header does not parse \(TokenError\)"),
    ("hardware_nan", r"its hardware profile is refused: .*bandwidth_bytes_per_s must be a positive number, got nan"),
    ("hardware_launch_nan", r"its hardware profile is refused: .*launch_us must be a finite number >= 0, got nan"),
    ("huge_leaves", r"refused, its trees predict log times from 1.5e\+301 to 1.5e\+301, beyond the ±50"),
    ("leaves_times_ten", r"refused, its trees predict log times from .*, beyond the ±50 of any kernel's time"),
    ("params_wrong_type", r"its hyperparameter baseline is 'yes', not a bool"),
    ("deep_trees", r"refused, its trees would cost each prediction 1608000 tree steps over 1608 levels, over the "
                   r"300000 and 2000 allowed"),
])
def test_a_malformed_or_hostile_model_file_is_refused_quickly(tmp_path: Path, case: str, match: str,
                                                              saved: tuple[LearnedCostModel, str, np.ndarray]
                                                              ) -> None:
    _, good, X = saved
    marker = tmp_path / "code-ran"
    bad = tmp_path / "bad.npz"
    if case == "self_child":
        path = _rewrite(good, bad, _set("models.left", lambda a: 0))
    elif case == "child_out_of_range":
        path = _rewrite(good, bad, _set("models.right", lambda a: 100_000))
    elif case == "feature_out_of_range":
        path = _rewrite(good, bad, _set("models.feature", lambda a: len(FEATURE_NAMES)))
    elif case == "wrong_dtype":
        path = _rewrite(good, bad, lambda a: a.update({"models.left": a["models.left"].astype(np.int64)}))
    elif case == "bad_offsets":
        path = _rewrite(good, bad, lambda a: a.update({"compiled_models.nodes": a["compiled_models.nodes"][::-1]}))
    elif case == "missing_member":
        path = _rewrite(good, bad, lambda a: a.pop("narrow_models.value"))
    elif case == "pickle_inside":
        path = str(bad)
        with np.load(good, allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
        arrays["models.value"] = np.array([Marker(str(marker))], dtype=object)
        np.savez(path, **arrays)  # numpy pickles an object array
    elif case == "bad_meta":
        path = _rewrite(good, bad, lambda a: a.update({"meta": np.frombuffer(b"\xff{", dtype=np.uint8)}))
    elif case == "other_schema":
        def old_schema(a: dict[str, np.ndarray]) -> None:
            meta = a["meta"].tobytes().replace(b'"schema_version": ', b'"schema_version": 0, "was": ')
            a["meta"] = np.frombuffer(meta, dtype=np.uint8)
        path = _rewrite(good, bad, old_schema)
    elif case == "truncated":
        data = Path(good).read_bytes()
        bad.write_bytes(data[: len(data) // 2])
        path = str(bad)
    elif case == "not_zip":
        bad.write_text("this is a model, honest\n")
        path = str(bad)
    elif case == "pickle_file":
        bad.write_bytes(pickle.dumps(Marker(str(marker))))
        path = str(bad)
    elif case == "other_zip":
        with zipfile.ZipFile(bad, "w") as z:
            z.writestr("notes.txt", "hello")
        path = str(bad)
    elif case == "member_too_large":  # the central directory declares 4 GB for one member; its data stays small
        path = _declare_size(good, bad, "models.value.npy", 0xFFFFFFF0)
    elif case == "deep_meta":
        path = _rewrite(good, bad, lambda a: a.update({"meta": np.frombuffer(b"[" * 100_000 + b"]" * 100_000,
                                                                             dtype=np.uint8)}))
    elif case == "npy_header_unparsable":
        path = _rewrite_member(good, bad, "models.value.npy", lambda data: data.replace(b"'shape': (", b"'shape': ((("))
    elif case in ("hardware_nan", "hardware_launch_nan"):
        field = "bandwidth_bytes_per_s" if case == "hardware_nan" else "launch_us"
        path = _rewrite(good, bad, _meta(lambda m: m["hardware"].update(profile={**H200.to_dict(), field: "nan"})))
    elif case in ("huge_leaves", "leaves_times_ten"):
        def leaves(a: dict[str, np.ndarray]) -> None:
            for g in GROUPS:
                leaf, value = a[f"{g}.is_leaf"], a[f"{g}.value"].copy()
                value[leaf] = 1e300 if case == "huge_leaves" else value[leaf] * 10 + np.sign(value[leaf]) * 5
                a[f"{g}.value"] = value
        path = _rewrite(good, bad, leaves)
    elif case == "params_wrong_type":
        path = _rewrite(good, bad, _meta(lambda m: m["params"].update(baseline="yes")))
    else:  # deep_trees: chains 200 levels deep, small once compressed, 5x the work the shipped model costs a row
        with np.load(good, allow_pickle=False) as npz:
            meta = json.loads(npz["meta"].tobytes())
        chain = _chain(200, len(FEATURE_NAMES))
        trees.write(str(bad), meta, {g: [_tiled(chain, 1000)] * 2 for g in GROUPS})
        assert bad.stat().st_size < 500_000  # the was 663 KB
        path = str(bad)
    with deadline(20), pytest.raises(CostModelError, match=match):
        load(path).predict(X)
    assert not marker.exists()  # nothing in the file ran


def test_the_search_refuses_a_model_of_absurd_times_in_one_line(tmp_path: Path,
                                                               saved: tuple[LearnedCostModel, str, np.ndarray],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 53 item 11: leaves of 1e300 were accepted and `search` reported "best plan: inf us" with exit 0."""
    from fusionsearch.cli import main

    def huge(a: dict[str, np.ndarray]) -> None:
        value = a["narrow_models.value"].copy()
        value[a["narrow_models.is_leaf"]] = 1e300
        a["narrow_models.value"] = value

    path = _rewrite(saved[1], tmp_path / "huge.npz", huge)
    assert main(["search", "swiglu", "--shape", "M=16,D=64,H=64", "--backend", "model", "--trials", "2",
                 "--cost-model", path, "--quiet", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"fusionsearch: error: {path}: refused, its trees predict log times")
    assert not (tmp_path / "out").exists()


def test_a_model_predicting_a_time_that_is_not_finite_and_positive_refuses_to_rank() -> None:
    """What the files' checks make unreachable for a loaded model, `predict` refuses too: never inf or NaN."""
    X, y, groups = _features(np.random.default_rng(0), 200)
    model = LearnedCostModel(max_iter=3, n_bags=1, width_split=False).fit(X, y, groups=groups)
    model.models_ = [Trees(**{**_one_tree(value=np.array([0.0, 800.0, 800.0])), "n_features": len(FEATURE_NAMES)})]
    model.compiled_models_ = []
    with pytest.raises(CostModelError, match="predicted inf us for a kernel, not a finite, positive time"):
        model.predict(X)


def test_the_shipped_models_are_within_the_work_and_value_bounds() -> None:
    """The bounds are set against the shipped model's scale (4x its work a row, 3.7x its log range: the pooled
    model of both GPUs' rows reaches -7.4 to 13.8, where each GPU's own reached -5.7 to 11.1)."""
    from fusionsearch import settings
    from fusionsearch.costmodel.learned import MAX_LOG_PREDICTION

    for path in settings.SHIPPED_MODELS:
        model = load(path)
        regressors = [r for g in GROUPS for r in getattr(model, f"{g}_")]
        assert trees.MAX_WALK_STEPS / 4.2 < sum(r.walk_steps for r in regressors) < trees.MAX_WALK_STEPS / 3.5
        assert sum(int(r.depths.max()) + 1 for r in regressors) < trees.MAX_LEVEL_STEPS / 4
        assert all(MAX_LOG_PREDICTION / 10 < max(map(abs, r.bounds)) < MAX_LOG_PREDICTION / 3.5 for r in regressors)


def test_a_file_or_archive_over_the_size_limits_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   saved: tuple[LearnedCostModel, str, np.ndarray]
                                                                   ) -> None:
    _, good, _ = saved
    size = Path(good).stat().st_size
    monkeypatch.setattr(trees, "MAX_FILE_BYTES", size - 1)
    with pytest.raises(CostModelError, match=f"refused, {size} bytes is over the {size - 1} bytes"):
        load(good)
    monkeypatch.setattr(trees, "MAX_FILE_BYTES", size)
    assert load(good).models_
    with zipfile.ZipFile(good) as z:
        total = sum(info.file_size for info in z.infolist())
    monkeypatch.setattr(trees, "MAX_TOTAL_BYTES", total - 1)
    with pytest.raises(CostModelError, match=f"its members would decompress to {total} bytes, over the {total - 1}"):
        load(good)


def test_a_legacy_skops_archive_is_bounded_too(tmp_path: Path, saved: tuple[LearnedCostModel, str, np.ndarray]
                                               ) -> None:
    model, _, X = saved
    legacy = model.save(str(tmp_path / "m.skops"))  # the fitted model holds scikit-learn regressors
    assert np.array_equal(load(legacy).predict(X), model.predict(X))
    with zipfile.ZipFile(legacy) as z:
        member = next(i.filename for i in z.infolist() if i.filename.endswith(".npy"))
    bomb = _declare_size(legacy, tmp_path / "bomb.skops", member, 0xFFFFFFF0)
    with pytest.raises(CostModelError, match=f"member {member} would decompress to 4294967280 bytes"):
        load(bomb)
