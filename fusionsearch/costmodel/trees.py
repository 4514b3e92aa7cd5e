"""Gradient-boosted trees as plain arrays: what a fitted HistGradientBoostingRegressor predicts with, kept as
numpy arrays, predicted with numpy and stored in a `.npz` file read without pickle.

Why: a skops archive of the shipped model took seconds to load and scikit-learn's import besides; these arrays
load in a fraction of a second and predict exactly as scikit-learn does (the same comparisons, the leaves summed
in the same order). A file is untrusted input: every archive member is bounded by its zip header before it is
decompressed, every array's dtype and shape is checked, and every tree must be acyclic (each child stored after
its parent) with its indices in range, so no file can run code, hang the predictor or index outside an array. The
work a prediction costs is bounded too, not only the bytes: a few hundred KB of deep trees compress well and
once took a search 10x the shipped model's time, so a file's trees may cost a row at most MAX_WALK_STEPS steps."""

from __future__ import annotations

import io
import json
import os
import zipfile
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from fusionsearch.errors import CostModelError

__all__ = ["MAX_FILE_BYTES", "MAX_LEVEL_STEPS", "MAX_MEMBER_BYTES", "MAX_TOTAL_BYTES", "MAX_WALK_STEPS", "Trees",
           "check_archive", "check_work", "read", "write"]

MAX_FILE_BYTES = 64 << 20  # a model file larger than this is refused unread (bytes)
MAX_MEMBER_BYTES = 64 << 20  # an archive member whose header declares more is refused undecompressed (bytes)
MAX_TOTAL_BYTES = 256 << 20  # the same for the sum over members (bytes)
MAX_MEMBERS = 100_000  # a legacy skops archive holds about 20,000 members
MAX_DEPTH = 256  # levels of a tree, checked on load: the predictor takes one step a level (31 leaves: 30 at most)
MAX_REGRESSORS = 1024  # per group of a file (a model holds 5 bagged regressors a group)
# What one row's prediction may cost, over every regressor of a file: (row, tree) steps, one per tree level walked
# plus one per tree (numpy's work), and levels walked one numpy call each (Python's). The shipped models take
# 73,600 and 77,500 steps and 440 levels; 4x that leaves room for models trained with more iterations or bags.
MAX_WALK_STEPS = 300_000
MAX_LEVEL_STEPS = 2_000
_CHUNK_CELLS = 1 << 20  # rows x trees walked at once: bounds the predictor's memory (about 8 bytes each)

# The per-node arrays of a Trees and their dtypes: what a file must hold, nothing else.
NODE_ARRAYS = {"feature": np.dtype("<i4"), "threshold": np.dtype("<f8"), "left": np.dtype("<i4"),
               "right": np.dtype("<i4"), "value": np.dtype("<f8"), "missing_left": np.dtype("|b1"),
               "is_leaf": np.dtype("|b1")}
_GROUP_ARRAYS = {"trees": np.dtype("<i8"), "nodes": np.dtype("<i8"), "baseline": np.dtype("<f8"), **NODE_ARRAYS}
_META = "meta"  # the member holding the JSON metadata as UTF-8 bytes


@dataclass(frozen=True, eq=False)
class Trees:
    """One fitted boosted regressor: baseline + the sum of one leaf value per tree.

    Node arrays run over every tree, tree t holding nodes starts[t]:starts[t+1]; `left`/`right` index within
    the tree; a row goes left when its feature is <= `threshold`, or when it is NaN and `missing_left`. The
    constructor refuses (CostModelError) anything a predictor could loop on or index outside of."""

    baseline: float
    n_features: int
    starts: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    value: np.ndarray
    missing_left: np.ndarray
    is_leaf: np.ndarray

    def __post_init__(self) -> None:
        _check_trees(self)
        for name in ("starts", *NODE_ARRAYS):  # checked once: no later write may undo the checks
            getattr(self, name).flags.writeable = False

    @property
    def n_trees(self) -> int:
        """How many trees (boosting iterations)."""
        return len(self.starts) - 1

    @cached_property
    def depths(self) -> np.ndarray:
        """Each tree's depth (split levels from its root to its deepest leaf); CostModelError past MAX_DEPTH.
        Read on construction, once children are known to come after their parents."""
        tree_of = np.repeat(np.arange(self.n_trees), np.diff(self.starts))
        depths = np.zeros(self.n_trees, dtype=np.int64)
        frontier, depth = self.starts[:-1], 0  # every tree's roots, then each level's split nodes' children
        while len(frontier := frontier[~self.is_leaf[frontier]]):
            depth += 1
            if depth > MAX_DEPTH:
                raise CostModelError(f"a tree is deeper than {MAX_DEPTH} levels")
            depths[tree_of[frontier]] = depth
            reached = np.zeros(len(self.is_leaf), dtype=bool)  # each child once (a damaged file may share one)
            reached[self._children[2 * frontier]] = reached[self._children[2 * frontier + 1]] = True
            frontier = np.flatnonzero(reached)  # sorted and distinct, as np.unique, without its sort
        return depths

    @property
    def walk_steps(self) -> int:
        """The most (row, tree) steps one row's prediction takes: every tree's levels, and its leaf."""
        return int(self.depths.sum()) + self.n_trees

    @cached_property
    def bounds(self) -> tuple[float, float]:
        """The least and the greatest value `predict` can return for any row: the baseline plus each tree's
        smallest (largest) leaf, summed."""
        roots = self.starts[:-1]  # every tree has a node, so each slice is non-empty
        low = np.minimum.reduceat(np.where(self.is_leaf, self.value, np.inf), roots)
        high = np.maximum.reduceat(np.where(self.is_leaf, self.value, -np.inf), roots)
        return float(self.baseline + low.sum()), float(self.baseline + high.sum())

    @staticmethod
    def from_regressor(model: Any) -> Trees:
        """The arrays of a fitted HistGradientBoostingRegressor with squared-error loss and numeric splits."""
        predictors = getattr(model, "_predictors", None)
        if getattr(model, "n_trees_per_iteration_", None) != 1 or not predictors:
            raise CostModelError(f"not a fitted single-output gradient-boosted regressor: {type(model).__name__}")
        if getattr(model, "loss", None) != "squared_error":  # other losses predict through a link function
            raise CostModelError(f"only squared-error regressors convert to plain trees, not loss={model.loss!r}")
        nodes = [iteration[0].nodes for iteration in predictors]
        if model.is_categorical_ is not None or any(n["is_categorical"].any() for n in nodes):
            raise CostModelError("a regressor with categorical splits cannot be stored as plain trees")
        every = np.concatenate(nodes)
        leaf = every["is_leaf"].astype(bool)
        inner = ~leaf
        return Trees(baseline=float(np.asarray(model._baseline_prediction).ravel()[0]),
                     n_features=int(model.n_features_in_),
                     starts=np.concatenate([[0], np.cumsum([len(n) for n in nodes])]).astype(np.int64),
                     feature=np.where(inner, every["feature_idx"], 0).astype(np.int32),
                     threshold=np.where(inner, every["num_threshold"], 0.0).astype(np.float64),
                     left=np.where(inner, every["left"], 0).astype(np.int32),
                     right=np.where(inner, every["right"], 0).astype(np.int32),
                     value=np.where(leaf, every["value"], 0.0).astype(np.float64),
                     missing_left=inner & every["missing_go_to_left"].astype(bool), is_leaf=leaf)

    def predict(self, X: Any) -> np.ndarray:
        """One prediction per row of `X` (n_features columns; NaN is a missing value), equal to the regressor's."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise CostModelError(f"trees of {self.n_features} features cannot predict rows of shape {X.shape}")
        step = max(1, _CHUNK_CELLS // self.n_trees)
        out = np.empty(len(X))
        for lo in range(0, len(X), step):
            out[lo:lo + step] = self._predict_rows(X[lo:lo + step])
        return out

    def _predict_rows(self, X: np.ndarray) -> np.ndarray:
        """Walk every (row, tree) pair down to its leaf, one level a step: children come after their parents and
        no tree is deeper than MAX_DEPTH (both checked on construction), so this ends within that many steps."""
        n, n_trees = len(X), self.n_trees
        node = np.tile(self.starts[:-1], n)  # pair p = row p // n_trees, tree p % n_trees: its leaf, once there
        pairs = np.flatnonzero(~self.is_leaf[node])  # the pairs still walking, their node, their row's start
        at, row_start = node[pairs], pairs // n_trees * X.shape[1]
        values = np.ascontiguousarray(X).ravel()
        missing = bool(np.isnan(values).any())
        for step in range(MAX_DEPTH + 1):
            x = values[row_start + self.feature[at]]
            go_right = x > self.threshold[at]  # False for NaN: missing values go left unless the node says right
            if missing:
                nan = np.flatnonzero(np.isnan(x))
                go_right[nan] = ~self.missing_left[at[nan]]
            at = self._children[2 * at + go_right]
            if step % 2:  # dropping the pairs at a leaf costs about a step: every other step (a leaf stays put)
                walking = ~self.is_leaf[at]
                node[pairs[~walking]] = at[~walking]
                pairs, at, row_start = pairs[walking], at[walking], row_start[walking]
                if not len(pairs):
                    break
        node[pairs] = at
        # Summed from the baseline in tree order, as scikit-learn adds each tree's values: the same float64 result.
        leaves = np.concatenate([np.full((n, 1), self.baseline), self.value[node].reshape(n, n_trees)], axis=1)
        return np.cumsum(leaves, axis=1)[:, -1]

    @cached_property
    def _children(self) -> np.ndarray:
        """Node i's left child at 2i, its right child at 2i + 1, indexed among all the trees' nodes; a leaf's
        children are itself."""
        first = np.repeat(self.starts[:-1], np.diff(self.starts))
        own = np.arange(len(self.is_leaf))
        return np.stack([np.where(self.is_leaf, own, self.left + first),
                         np.where(self.is_leaf, own, self.right + first)], axis=1).ravel()


def _check_trees(t: Trees) -> None:
    """Refuse arrays a predictor could not walk safely: wrong dtypes or lengths, a child not after its parent
    or past its tree's end, a feature index past n_features, a NaN threshold, a non-finite leaf, a tree deeper
    than MAX_DEPTH levels."""
    if not (isinstance(t.n_features, int) and t.n_features >= 1 and np.isfinite(t.baseline)):
        raise CostModelError(f"trees need a positive feature count and a finite baseline, got {t.n_features!r} "
                             f"and {t.baseline!r}")
    arrays = {"starts": (t.starts, np.dtype("<i8"))} | {k: (getattr(t, k), d) for k, d in NODE_ARRAYS.items()}
    for name, (a, dtype) in arrays.items():
        if not isinstance(a, np.ndarray) or a.dtype != dtype or a.ndim != 1:
            raise CostModelError(f"trees' {name} must be a 1-D {dtype} array")
    n = len(t.feature)
    if any(len(getattr(t, k)) != n for k in NODE_ARRAYS):
        raise CostModelError(f"trees' node arrays differ in length ({', '.join(NODE_ARRAYS)})")
    sizes = np.diff(t.starts)
    if len(t.starts) < 2 or t.starts[0] != 0 or t.starts[-1] != n or np.any(sizes < 1):
        raise CostModelError(f"trees' starts must rise from 0 to the node count {n}, each tree one node at least")
    local = np.arange(n) - np.repeat(t.starts[:-1], sizes)
    size = np.repeat(sizes, sizes)
    inner = ~t.is_leaf
    for side in ("left", "right"):
        child = getattr(t, side)
        bad = np.flatnonzero(inner & ((child <= local) | (child >= size)))
        if len(bad):
            i = bad[0]
            tree = int(np.searchsorted(t.starts, i, side="right") - 1)
            raise CostModelError(f"tree {tree}: node {local[i]}'s {side} child {child[i]} is not after it within "
                                 f"the tree's {size[i]} nodes (a cycle or an index out of range)")
    # every node's, a leaf's too: the predictor reads a feature for each pair still walking, at a leaf or not
    bad = np.flatnonzero((t.feature < 0) | (t.feature >= t.n_features))
    if len(bad):
        raise CostModelError(f"node {bad[0]} names feature {t.feature[bad[0]]}, outside 0..{t.n_features - 1}")
    if np.isnan(t.threshold[inner]).any() or not np.isfinite(t.value[t.is_leaf]).all():
        raise CostModelError("trees hold a NaN threshold or a non-finite leaf value")
    _ = t.depths  # refuses a tree deeper than MAX_DEPTH


# ---- files: one .npz of groups of Trees and a JSON record -------------------------------------------

def write(path: str, meta: dict[str, Any], groups: dict[str, list[Trees]]) -> None:
    """Write `groups` (name -> the Trees of its regressors, each of meta's n_features) and the JSON-able
    `meta` to `path` as a compressed .npz of plain arrays."""
    arrays = {_META: np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8)}
    for name, models in groups.items():
        node_starts, first = [np.zeros(1, dtype=np.int64)], 0
        for m in models:  # every tree's first node among the group's nodes
            node_starts.append(first + m.starts[1:])
            first += len(m.feature)
        arrays[f"{name}.trees"] = np.cumsum([0] + [m.n_trees for m in models]).astype(np.int64)
        arrays[f"{name}.nodes"] = np.concatenate(node_starts).astype(np.int64)
        arrays[f"{name}.baseline"] = np.array([m.baseline for m in models], dtype=np.float64)
        for key, dtype in NODE_ARRAYS.items():
            arrays[f"{name}.{key}"] = np.concatenate([getattr(m, key) for m in models] or [np.zeros(0, dtype)])
    with open(path, "wb") as f:  # a file object: numpy appends no suffix to the name
        np.savez_compressed(f, **arrays)


def read(path: str, groups: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, list[Trees]]]:
    """The JSON record and the named groups of Trees `write` stored; CostModelError names what is wrong with
    a file that is not exactly such an archive."""
    expected = {_META} | {f"{g}.{key}" for g in groups for key in _GROUP_ARRAYS}
    arrays = _read_arrays(path, expected)
    try:
        meta = json.loads(arrays[_META].tobytes().decode())
    except (UnicodeDecodeError, ValueError):
        raise CostModelError(f"{path}: its metadata is not UTF-8 JSON") from None
    except RecursionError:
        raise CostModelError(f"{path}: its metadata is JSON nested too deeply to be a model's record") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("n_features"), int):
        raise CostModelError(f"{path}: its metadata is not a record with n_features")
    out = {}
    for g in groups:
        try:
            out[g] = _unpack({k: arrays[f"{g}.{k}"] for k in _GROUP_ARRAYS}, meta["n_features"])
        except CostModelError as e:
            raise CostModelError(f"{path}: {g}: {e}") from None
    try:
        check_work([m for models in out.values() for m in models])
    except CostModelError as e:
        raise CostModelError(f"{path}: {e}") from None
    return meta, out


def check_work(models: list[Trees]) -> None:
    """Refuse regressors that together cost a row more than MAX_WALK_STEPS (row, tree) steps or MAX_LEVEL_STEPS
    levels to predict: what bounds a search's time spent in a model, whatever its file's size."""
    steps, levels = sum(m.walk_steps for m in models), sum(int(m.depths.max()) + 1 for m in models)
    if steps > MAX_WALK_STEPS or levels > MAX_LEVEL_STEPS:
        raise CostModelError(f"refused, its trees would cost each prediction {steps} tree steps over {levels} levels, "
                             f"over the {MAX_WALK_STEPS} and {MAX_LEVEL_STEPS} allowed (4x the shipped model's): "
                             "train it with fewer iterations (--max-iter), bags (--bags) or shallower trees")


def _unpack(a: dict[str, np.ndarray], n_features: int) -> list[Trees]:
    """Split one group's arrays into the Trees of its regressors (each checked by the Trees constructor)."""
    trees, nodes = a["trees"], a["nodes"]
    n_models, n_trees, n_nodes = len(a["baseline"]), len(nodes) - 1, len(a["feature"])
    if n_models > MAX_REGRESSORS:
        raise CostModelError(f"{n_models} regressors is over the {MAX_REGRESSORS} a group may hold")
    if len(trees) != n_models + 1 or trees[0] != 0 or trees[-1] != n_trees or np.any(np.diff(trees) < 1):
        raise CostModelError(f"its tree offsets do not split {n_trees} trees among {n_models} regressors")
    if len(nodes) < 1 or nodes[0] != 0 or nodes[-1] != n_nodes or np.any(np.diff(nodes) < 1):
        raise CostModelError(f"its node offsets do not split {n_nodes} nodes among {n_trees} trees")
    models = []
    for m in range(n_models):
        first, last = nodes[trees[m]], nodes[trees[m + 1]]
        models.append(Trees(baseline=float(a["baseline"][m]), n_features=n_features,
                            starts=nodes[trees[m]:trees[m + 1] + 1] - first,
                            **{k: a[k][first:last] for k in NODE_ARRAYS}))
    return models


def check_archive(path: str) -> list[zipfile.ZipInfo]:
    """The members of the zip archive at `path` once it is known reading them stays bounded: the file at most
    MAX_FILE_BYTES, each member's declared size (its zip header, before decompressing) at most
    MAX_MEMBER_BYTES and their sum at most MAX_TOTAL_BYTES. A skops file is such an archive too."""
    size = os.path.getsize(path)
    if size > MAX_FILE_BYTES:
        raise CostModelError(f"{path}: refused, {size} bytes is over the {MAX_FILE_BYTES} bytes a model file may be")
    try:
        with zipfile.ZipFile(path) as z:
            infos = z.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError):
        raise CostModelError(f"{path}: not a cost model file (not a zip archive, or truncated)") from None
    if len(infos) > MAX_MEMBERS:
        raise CostModelError(f"{path}: refused, {len(infos)} archive members is over {MAX_MEMBERS}")
    for info in infos:
        if info.file_size > MAX_MEMBER_BYTES:
            raise CostModelError(f"{path}: refused, member {info.filename} would decompress to {info.file_size} "
                                 f"bytes, over the {MAX_MEMBER_BYTES} bytes allowed")
    total = sum(info.file_size for info in infos)
    if total > MAX_TOTAL_BYTES:
        raise CostModelError(f"{path}: refused, its members would decompress to {total} bytes, over the "
                             f"{MAX_TOTAL_BYTES} bytes allowed")
    return infos


def _read_arrays(path: str, expected: set[str]) -> dict[str, np.ndarray]:
    """Every member of the .npz at `path` as a 1-D array of its expected dtype; exactly `expected` members."""
    infos = check_archive(path)
    names = [info.filename.removesuffix(".npy") for info in infos]
    if len(set(names)) != len(names):
        raise CostModelError(f"{path}: not a fusionsearch model archive (a member name repeats)")
    if set(names) != expected:
        missing, extra = sorted(expected - set(names)), sorted(set(names) - expected)
        raise CostModelError(f"{path}: not a fusionsearch model archive (missing {', '.join(missing[:3]) or 'none'}; "
                             f"unexpected {', '.join(extra[:3]) or 'none'})")
    dtypes = {_META: np.dtype("|u1")} | {n: _GROUP_ARRAYS[n.rsplit(".", 1)[1]] for n in expected - {_META}}
    try:
        with zipfile.ZipFile(path) as z:
            return {name: _read_npy(z.read(info), dtypes[name], name)
                    for name, info in zip(names, infos, strict=True)}
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError) as e:
        raise CostModelError(f"{path}: a damaged archive ({type(e).__name__}: {e})") from None
    except CostModelError as e:
        raise CostModelError(f"{path}: {e}") from None


def _read_npy(data: bytes, dtype: np.dtype, name: str) -> np.ndarray:
    """One .npy member's array after its header is checked: the expected dtype, 1-D, exactly as many bytes
    as the member holds (so reading allocates no more than the bounded member), never pickled objects."""
    f = io.BytesIO(data)
    version = np.lib.format.read_magic(f)
    if version not in ((1, 0), (2, 0), (3, 0)):
        raise CostModelError(f"member {name}: unknown .npy version {version}")
    try:  # numpy parses the header as a Python literal: a damaged one raises whatever its tokenizer does
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
            np.lib.format.read_array_header_2_0
        shape, _, found = read_header(f)
    except Exception as e:
        raise CostModelError(f"member {name}: its .npy header does not parse ({type(e).__name__})") from None
    if found.hasobject:
        raise CostModelError(f"member {name}: refused, it holds pickled Python objects")
    if found != dtype or len(shape) != 1 or shape[0] * dtype.itemsize != len(data) - f.tell():
        raise CostModelError(f"member {name}: expected a 1-D {dtype} array filling the member, found {found} of "
                             f"shape {shape}")
    f.seek(0)
    return np.lib.format.read_array(f, allow_pickle=False)
