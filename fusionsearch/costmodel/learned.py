"""The learned cost model: a scikit-learn regressor of measured kernel time (µs) over the feature schema.

It predicts log(time_us) as log(analytic roofline time) plus a gradient-boosted correction, so it keeps the
analytic model's scaling across problem sizes and learns what the roofline misses (tile shapes, split-K,
upcasts). The correction is the mean of a few models, each fitted on a random share of the training graphs
(bagging): a search ranks plans that differ by a few percent, and one model's quirks decide those ties
(held out, bagging ranked as well as one model; on the reference cases it lowered the regret). Each bag is
fitted twice when the data has templates' compile-time figures (registers, spills, shared memory; feature
schema v3): once blind to them, for plans not compiled yet, once reading them, for templates that carry them.
With `width_split` (the default) the bags are fitted once more on the graphs whose matmuls all have 16-bit (or
narrower) operands, and those price every kernel but the fp32-operand templates: fp32 matmuls run Triton's IEEE
dot on the FMA units, erratically by tile config, and learning them beside tensor-core matmuls cost the
16-bit graphs' rankings (the 16-bit graphs of 236 held out: pairwise 0.896 -> 0.902 with compiled figures,
top-1 regret 0.069 -> 0.040 blind).

Model files are `.npz` archives of plain arrays (costmodel/trees.py) and one JSON record: loading one runs no
code from the file, needs no pickle and no scikit-learn, and takes a fraction of a second where the skops archive
it replaced took seconds. Files bounded in size, with every tree checked acyclic and in range, are the only ones
read; down to their values: the trees' work a row (trees.check_work), the range of log times they can predict
(MAX_LOG_PREDICTION) and the hardware profile, so that a file loads as a model whose every prediction is a
finite, positive time, or is refused in one line. Older skops archives still load (their list of trusted types
refuses any other; their regressors are read as plain trees, checked alike), and a path ending in .skops still
writes one."""

from __future__ import annotations

import inspect
import math
import os
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from fusionsearch import settings
from fusionsearch.costmodel import legacy_skops, trees
from fusionsearch.costmodel.features import (
    ANALYTIC_FEATURE,
    COMPILED_FEATURES,
    FEATURE_NAMES,
    FEATURE_SCHEMA_VERSION,
    library_rows,
)
from fusionsearch.costmodel.gpus import checked_hardware, trained_on
from fusionsearch.costmodel.hardware import Hardware
from fusionsearch.costmodel.targets import TARGETS, fit_target
from fusionsearch.errors import CostModelError

if TYPE_CHECKING:  # scikit-learn is imported where a model is fitted or a legacy file read, not to predict
    from sklearn.ensemble import HistGradientBoostingRegressor

__all__ = ["FILE_FORMAT", "TARGETS", "LearnedCostModel", "blind_to_compiled", "library_priced", "load",
           "load_default", "trained_on", "wide_templates", "without_compiled"]

FILE_FORMAT = "fusionsearch-costmodel"
FORMAT_VERSION = 1  # of the .npz files; a file of another version is refused
LEGACY_SUFFIX = ".skops"  # a path ending so is written (and read) as a skops archive; every other path as .npz
GROUPS = ("models", "compiled_models", "narrow_models", "narrow_compiled_models")  # the regressor lists saved


# Beyond skops's built-in trusted types (builtins, numpy arrays, sklearn's loss objects), a saved model holds
# only these; checked with skops.io.get_untrusted_types on files this module writes (scikit-learn 1.9).
TRUSTED_TYPES = ["sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor"]

_MIN_US = 1e-3  # floor of a time before its log is taken (µs)
# The most any regressor may predict, either way, in log units (of the time over the roofline's, or of the time in
# µs without `baseline`): e^50 is 5e21, past any kernel; the shipped models' trees reach -5.7 to 11.1 at most.
MAX_LOG_PREDICTION = 50.0
_COMPILED_COLUMNS = [FEATURE_NAMES.index(name) for name in COMPILED_FEATURES]


class LearnedCostModel:
    """Predicts one kernel's time (µs) from its FEATURE_NAMES vector.

    Hyperparameters are those of the wrapped HistGradientBoostingRegressor; `baseline=True` learns a
    correction of the analytic roofline time (log ratio) instead of the log time itself; `n_bags` models each
    fit `bag_fraction` of the graphs (of the rows when fit is given no groups); n_bags=1 fits one on all;
    `width_split` fits a second set on the graphs without fp32-operand templates, which prices every kernel but
    those templates (`wide_templates`); `target`: what the trees fit (costmodel/targets.py: the kernel's log
    ratio to the roofline, or that ratio less its graph's mean). It keeps scikit-learn's estimator contract
    (get_params, set_params, clone, tags) without subclassing its BaseEstimator, so that a loaded model
    predicts without importing it.

    >>> import numpy as np
    >>> from fusionsearch.costmodel.features import FEATURE_NAMES
    >>> X = np.random.default_rng(0).uniform(1, 10, size=(64, len(FEATURE_NAMES)))
    >>> model = LearnedCostModel(max_iter=20, baseline=False).fit(X, np.full(64, 5.0))
    >>> bool(np.allclose(model.predict(X[:2]), 5.0))
    True
    """

    def __init__(self, learning_rate: float = 0.1, max_iter: int = 300, max_leaf_nodes: int = 31,
                 min_samples_leaf: int = 10, l2_regularization: float = 0.0, baseline: bool = True,
                 n_bags: int = 5, bag_fraction: float = 0.8, width_split: bool = True,
                 random_state: int = 0, target: str = "kernel") -> None:
        self.learning_rate = learning_rate
        self.max_iter = max_iter
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.l2_regularization = l2_regularization
        self.baseline = baseline
        self.n_bags = n_bags
        self.bag_fraction = bag_fraction
        self.width_split = width_split
        self.random_state = random_state
        self.target = target

    # ---- scikit-learn's estimator contract -------------------------------------------------------
    @classmethod
    def _param_names(cls) -> list[str]:
        return sorted(name for name in inspect.signature(cls.__init__).parameters if name != "self")

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The hyperparameters, a JSON-able record (`deep` is scikit-learn's argument: nothing is nested)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> LearnedCostModel:
        """Set hyperparameters by name; returns self."""
        unknown = sorted(set(params) - set(self._param_names()))
        if unknown:
            raise CostModelError(f"unknown hyperparameters {unknown}; known: {', '.join(self._param_names())}")
        for name, value in params.items():
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        defaults = LearnedCostModel().get_params()
        changed = [f"{k}={v!r}" for k, v in self.get_params().items() if v != defaults.get(k)]
        return f"{type(self).__name__}({', '.join(changed)})"

    def __sklearn_tags__(self) -> Any:
        """scikit-learn's tags of a regressor that accepts NaN features (read by its model-selection tools)."""
        from sklearn.utils import InputTags, RegressorTags, Tags, TargetTags

        return Tags(estimator_type="regressor", target_tags=TargetTags(required=True),
                    regressor_tags=RegressorTags(), input_tags=InputTags(allow_nan=True))

    def score(self, X: Any, y: Any) -> float:
        """R² of the predicted times (µs) against measured times `y` (µs), as scikit-learn's regressors score."""
        from sklearn.metrics import r2_score

        return float(r2_score(np.asarray(y, dtype=np.float64).ravel(), self.predict(X)))

    def _check_fitted(self) -> None:
        if not hasattr(self, "models_"):
            raise CostModelError("this cost model is not fitted: call fit, or load a saved model")

    # ---- fitting and predicting ----------------------------------------------------------------
    def fit(self, X: Any, y: Any, hardware: Hardware | dict[str, Any] | None = None,
            groups: Any = None) -> LearnedCostModel:
        """Fit on feature rows `X` (FEATURE_NAMES columns) and measured kernel times `y` (µs); returns self.

        `hardware` names the GPU the times were measured on (else what `set_hardware` set, if anything);
        `groups` (a graph id per row) makes each bag a share of the graphs rather than of the rows."""
        X = self._check_X(X)
        y = np.asarray(y, dtype=np.float64).ravel()
        if len(y) != len(X):
            raise CostModelError(f"{len(X)} feature rows but {len(y)} times; pass one time (µs) per row")
        if len(y) == 0 or not np.all(np.isfinite(y)) or np.any(y <= 0):
            raise CostModelError("kernel times must be positive, finite numbers of µs (and at least one given)")
        if not (isinstance(self.n_bags, int) and self.n_bags >= 1 and 0 < self.bag_fraction <= 1):
            raise CostModelError(f"n_bags must be a positive integer and bag_fraction in (0, 1], got "
                                 f"{self.n_bags!r} and {self.bag_fraction!r}")
        if self.target not in TARGETS:
            raise CostModelError(f"target must be one of {', '.join(TARGETS)}, got {self.target!r}")
        target, weight = fit_target(np.log(y) - self._offset(X), groups, self.target)
        self.models_, self.compiled_models_ = self._fit_bags(X, target, groups, weight)
        self.narrow_models_: list[HistGradientBoostingRegressor] = []
        self.narrow_compiled_models_: list[HistGradientBoostingRegressor] = []
        narrow = _narrow_graph_rows(X, groups)
        if self.width_split and narrow.any() and not narrow.all():
            self.narrow_models_, self.narrow_compiled_models_ = self._fit_bags(
                X[narrow], target[narrow], None if groups is None else np.asarray(groups)[narrow],
                None if weight is None else weight[narrow])
        self.schema_version_ = FEATURE_SCHEMA_VERSION
        self.feature_names_ = list(FEATURE_NAMES)
        self.n_features_in_ = len(FEATURE_NAMES)
        if hardware is not None:
            self.set_hardware(hardware)
        elif not hasattr(self, "hardware_"):
            self.hardware_: dict[str, Any] | None = None
        return self

    def predict(self, X: Any) -> np.ndarray:
        """Predicted kernel times (µs), one per feature row: templates with their compiled figures by the models
        that read them (when the training data had them), every other row by the models blind to them."""
        self._check_fitted()
        X = self._check_X(X)
        log_ratio = np.empty(len(X))
        wide = wide_templates(X) if getattr(self, "narrow_models_", None) else np.ones(len(X), dtype=bool)
        for rows, models, compiled_models in (
                (wide, self.models_, getattr(self, "compiled_models_", [])),
                (~wide, getattr(self, "narrow_models_", []), getattr(self, "narrow_compiled_models_", []))):
            if rows.any():
                log_ratio[rows] = _bagged_log_ratio(X[rows], models, compiled_models)
        with np.errstate(over="ignore", invalid="ignore"):  # what overflows is refused, in one line, just below
            times = np.exp(log_ratio + self._offset(X))
        return _positive_times(library_priced(X, times))

    def _fit_bags(self, X: np.ndarray, target: np.ndarray, groups: Any, weight: np.ndarray | None = None
                  ) -> tuple[list[HistGradientBoostingRegressor], list[HistGradientBoostingRegressor]]:
        """Two sets of bagged models of `target` (rows weighted by `weight`, if given): one blind to the compiled
        figures (what a search pricing a whole space has), one that reads them, fitted when rows have them (what
        a search has for the plans it compiled; else empty)."""
        bags = self._bags(len(target), groups)
        blind = blind_to_compiled(X)

        def w(rows: np.ndarray) -> np.ndarray | None:
            return None if weight is None else weight[rows]

        models = [self._regressor().fit(blind[rows], target[rows], sample_weight=w(rows)) for rows in bags]
        compiled = [self._regressor().fit(X[rows], target[rows], sample_weight=w(rows)) for rows in bags] \
            if _compiled(X).any() else []
        return models, compiled

    def _regressor(self) -> HistGradientBoostingRegressor:
        from sklearn.ensemble import HistGradientBoostingRegressor

        return HistGradientBoostingRegressor(
            learning_rate=self.learning_rate, max_iter=self.max_iter, max_leaf_nodes=self.max_leaf_nodes,
            min_samples_leaf=self.min_samples_leaf, l2_regularization=self.l2_regularization,
            early_stopping=False, random_state=self.random_state)

    def _bags(self, n: int, groups: Any) -> list[np.ndarray]:
        """Row indices of each bag: all rows for one bag, else a seeded `bag_fraction` of the graphs (rows)."""
        if self.n_bags == 1:
            return [np.arange(n)]
        rng = np.random.default_rng(self.random_state)
        if groups is None:
            return [np.sort(rng.choice(n, max(1, round(n * self.bag_fraction)), replace=False))
                    for _ in range(self.n_bags)]
        groups = np.asarray(groups)
        if len(groups) != n:
            raise CostModelError(f"{n} feature rows but {len(groups)} group ids; pass one graph id per row")
        names = np.unique(groups)
        bags = []
        for _ in range(self.n_bags):
            keep = rng.choice(names, max(1, round(len(names) * self.bag_fraction)), replace=False)
            bags.append(np.flatnonzero(np.isin(groups, keep)))
        return bags

    def set_hardware(self, hardware: Hardware | dict[str, Any]) -> LearnedCostModel:
        """Record the GPU the training times come from (a Hardware or its `to_dict()`); returns self."""
        record = hardware.to_dict() if isinstance(hardware, Hardware) else dict(hardware)
        if not isinstance(record.get("name"), str):
            raise CostModelError("hardware must be a Hardware or its to_dict() record (with a 'name')")
        self.hardware_ = record
        return self

    def _offset(self, X: np.ndarray) -> np.ndarray:
        if not self.baseline:
            return np.zeros(len(X))
        return np.log(np.maximum(X[:, FEATURE_NAMES.index(ANALYTIC_FEATURE)], _MIN_US))

    @staticmethod
    def _check_X(X: Any) -> np.ndarray:
        try:
            X = np.asarray(X, dtype=np.float64)
        except (TypeError, ValueError):
            raise CostModelError("features must be numbers; build them with costmodel.features.to_matrix") from None
        if X.ndim != 2 or X.shape[1] != len(FEATURE_NAMES):
            raise CostModelError(f"features must be a 2-D array with {len(FEATURE_NAMES)} columns (FEATURE_NAMES, "
                                 f"schema v{FEATURE_SCHEMA_VERSION}), got shape {X.shape}")
        return X

    # ---- files ---------------------------------------------------------------------------------
    def save(self, path: str) -> str:
        """Write the fitted model to `path`, an .npz of plain arrays (a .skops archive when the path ends so, for
        fusionsearch versions before the .npz files); returns the path."""
        self._check_fitted()
        models = {name: list(getattr(self, f"{name}_", [])) for name in GROUPS}
        record = {"format": FILE_FORMAT, "schema_version": int(self.schema_version_),
                  "feature_names": list(self.feature_names_), "hardware": self.hardware_, "params": self.get_params()}
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = f"{path}.tmp{os.getpid()}"
        if path.endswith(LEGACY_SUFFIX):
            if any(isinstance(m, trees.Trees) for group in models.values() for m in group):
                raise CostModelError(f"{path}: a model read from an .npz file saves as .npz only (it holds plain "
                                     "trees, not scikit-learn regressors)")
            legacy_skops.write({**record, **models}, tmp)
        else:
            groups = {name: [_as_trees(m) for m in group] for name, group in models.items()}
            _check_trees_values(path, sum(groups.values(), []))  # a file that `load` would refuse is not written
            trees.write(tmp, {**record, "format_version": FORMAT_VERSION, "n_features": len(FEATURE_NAMES)}, groups)
        os.replace(tmp, path)
        return path


def _as_trees(model: Any) -> trees.Trees:
    return model if isinstance(model, trees.Trees) else trees.Trees.from_regressor(model)


def _check_trees_values(path: str, regressors: list[trees.Trees]) -> None:
    """Refuse regressors that cost a row too much work (trees.check_work) or can predict a log time beyond
    MAX_LOG_PREDICTION (whose exponential is no kernel's time, or no finite number)."""
    try:
        trees.check_work(regressors)
    except CostModelError as e:
        raise CostModelError(f"{path}: {e}") from None
    for r in regressors:
        low, high = r.bounds
        if not -MAX_LOG_PREDICTION <= low <= high <= MAX_LOG_PREDICTION:
            raise CostModelError(f"{path}: refused, its trees predict log times from {low:.3g} to {high:.3g}, "
                                 f"beyond the ±{MAX_LOG_PREDICTION:g} of any kernel's time (damaged leaf values)")


def _positive_times(times: np.ndarray) -> np.ndarray:
    """`times` (µs) when each is a finite, positive number; else a CostModelError (a model must never rank
    plans by inf or NaN: the loaded files' checks make this unreachable for them)."""
    bad = ~(np.isfinite(times) & (times > 0))
    if bad.any():
        raise CostModelError(f"the learned cost model predicted {float(times[bad][0])!r} us for a kernel, not a "
                             "finite, positive time: retrain it, or search with --cost-model analytic")
    return times


def without_compiled(X: np.ndarray) -> np.ndarray:
    """X with every template's COMPILED_FEATURES unknown (NaN): how a search prices plans it has not compiled."""
    X = np.array(X, dtype=np.float64)
    X[np.ix_(X[:, FEATURE_NAMES.index("kind_template")] == 1, _COMPILED_COLUMNS)] = np.nan
    return X


def blind_to_compiled(X: np.ndarray) -> np.ndarray:
    """X as the models blind to compiled figures see it: those columns constant."""
    X = np.array(X, dtype=np.float64)
    X[:, _COMPILED_COLUMNS] = 0.0
    return X


def _compiled(X: np.ndarray) -> np.ndarray:
    """Which rows are templates with their compiled figures."""
    return (X[:, FEATURE_NAMES.index("kind_template")] == 1) & np.isfinite(X[:, _COMPILED_COLUMNS]).all(axis=1)


def wide_templates(X: np.ndarray) -> np.ndarray:
    """Which rows are matmul templates with an operand wider than 16 bits (fp32: the FMA path)."""
    widest = np.maximum(X[:, FEATURE_NAMES.index("a_bits")], X[:, FEATURE_NAMES.index("b_bits")])
    return (X[:, FEATURE_NAMES.index("kind_template")] == 1) & (widest > 16)


def _narrow_graph_rows(X: np.ndarray, groups: Any) -> np.ndarray:
    """Which rows belong to graphs (rows, without groups) that have no wide template: the narrow models'
    training rows."""
    wide = wide_templates(X)
    if groups is None:
        return ~wide
    groups = np.asarray(groups)
    return ~np.isin(groups, groups[wide])


def _bagged_log_ratio(X: np.ndarray, models: list, compiled_models: list) -> np.ndarray:
    """The mean prediction of `models` (blind to compiled figures), and of `compiled_models` for the rows that
    carry those figures when there are such models."""
    out = np.mean([m.predict(blind_to_compiled(X)) for m in models], axis=0)
    compiled = _compiled(X) if compiled_models else np.zeros(len(X), dtype=bool)
    if compiled.any():
        out[compiled] = np.mean([m.predict(X[compiled]) for m in compiled_models], axis=0)
    return out


def load(path: str) -> LearnedCostModel:
    """Read a model written by `LearnedCostModel.save` (an .npz, or a legacy skops archive). A CostModelError
    says why a file is refused: missing, too large, not a model, holding types or trees a model never holds, or
    made for another feature schema."""
    if not os.path.isfile(path):
        raise CostModelError(f"{path}: no such model file")
    members = trees.check_archive(path)
    if any(info.filename == "schema.json" for info in members):  # skops writes this member, numpy never
        record = legacy_skops.read(path, TRUSTED_TYPES)
    else:
        meta, groups = trees.read(path, GROUPS)
        if meta.get("format") == FILE_FORMAT and meta.get("format_version") != FORMAT_VERSION:
            raise CostModelError(f"{path}: a model file of format version {meta.get('format_version')!r}, this "
                                 f"fusionsearch reads version {FORMAT_VERSION}")
        if meta.get("n_features") != len(FEATURE_NAMES):
            raise CostModelError(f"{path}: its trees read {meta.get('n_features')} features, this fusionsearch's "
                                 f"schema v{FEATURE_SCHEMA_VERSION} has {len(FEATURE_NAMES)}")
        record = {**meta, **groups}
    return _from_record(path, record)


def _from_record(path: str, record: dict[str, Any]) -> LearnedCostModel:
    """The model a file's record describes, after checking it is one for this feature schema."""
    if record.get("format") != FILE_FORMAT:
        raise CostModelError(f"{path}: not a fusionsearch cost model (an archive of something else)")
    if record.get("schema_version") != FEATURE_SCHEMA_VERSION:
        raise CostModelError(f"{path}: made for feature schema v{record.get('schema_version')}, this fusionsearch "
                             f"computes v{FEATURE_SCHEMA_VERSION}; retrain it with `fusionsearch costmodel train`")
    if record.get("feature_names") != list(FEATURE_NAMES):
        raise CostModelError(f"{path}: its feature names differ from this fusionsearch's schema "
                             f"v{FEATURE_SCHEMA_VERSION}; retrain it with `fusionsearch costmodel train`")
    params, inner = record.get("params"), record.get("models")
    extra = [record.get(key, []) for key in GROUPS[1:]]
    if not isinstance(params, dict) or not isinstance(inner, list) or not inner \
            or not all(isinstance(models, list) for models in extra) \
            or not _regressors([*inner, *sum(extra, [])]) or (extra[2] and not extra[1]):
        raise CostModelError(f"{path}: not a fusionsearch cost model (its parameters or regressor are missing)")
    try:  # files from before the width split have no such parameter and no second set of models
        model = LearnedCostModel(**{"width_split": False, **params})
    except TypeError:
        raise CostModelError(f"{path}: its hyperparameters {sorted(params)} do not fit this fusionsearch") from None
    _check_params(path, model)
    try:  # a legacy file's scikit-learn regressors predict exactly as their plain trees, which are checked
        inner, extra = [_as_trees(m) for m in inner], [[_as_trees(m) for m in models] for models in extra]
    except CostModelError as e:
        raise CostModelError(f"{path}: {e}") from None
    except Exception as e:  # a skops file's regressor that is not one scikit-learn fitted
        raise CostModelError(f"{path}: a regressor that is not a fitted one ({type(e).__name__})") from None
    _check_trees_values(path, [*inner, *sum(extra, [])])
    model.models_, (model.compiled_models_, model.narrow_models_, model.narrow_compiled_models_) = inner, extra
    model.schema_version_ = FEATURE_SCHEMA_VERSION
    model.feature_names_ = list(FEATURE_NAMES)
    model.n_features_in_ = len(FEATURE_NAMES)
    model.hardware_ = checked_hardware(path, record.get("hardware"))
    return model


def _check_params(path: str, model: LearnedCostModel) -> None:
    """Refuse hyperparameters of another type than their defaults' (`baseline` decides how a model predicts)."""
    for name, default in LearnedCostModel().get_params().items():
        value = getattr(model, name)
        number = isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool)
        if type(value) is not type(default) and not number:
            raise CostModelError(f"{path}: its hyperparameter {name} is {value!r}, not a {type(default).__name__}")
        if isinstance(value, float) and not math.isfinite(value):
            raise CostModelError(f"{path}: its hyperparameter {name} is {value!r}, not a finite number")


def _regressors(models: list[Any]) -> bool:
    """Whether every item predicts as a model's regressor: plain trees (.npz), or scikit-learn's (skops)."""
    if all(isinstance(m, trees.Trees) for m in models):
        return True
    from sklearn.ensemble import HistGradientBoostingRegressor

    return all(isinstance(m, HistGradientBoostingRegressor) for m in models)


def load_default(path: str | None = None) -> LearnedCostModel | None:
    """The model at `path` when it was trained on this device (`Hardware.detect()`'s GPU name is the GPU, or one
    of the GPUs, its rows were measured on: `trained_on`); None when there is none or it is for other GPUs, or
    cannot be used (with a warning). The default path is read at the call (settings.current().model_path), so
    one setting governs the search and this loader; where it is the shipped model's, every shipped model is a
    candidate (settings.SHIPPED_MODELS: one pooled model of the H100's and the H200's rows)."""
    path = path or settings.current().model_path
    same = os.path.isfile(path) and os.path.isfile(settings.SHIPPED_MODEL) and os.path.samefile(
        path, settings.SHIPPED_MODEL)
    device = Hardware.detect().name
    for candidate in settings.SHIPPED_MODELS if same else (path,):
        model = _load_once(candidate)
        if model is not None and device in trained_on(model):
            return model
    return None


def load_cached(path: str) -> LearnedCostModel:
    """`load`, once per process and file version: the backend's regions each ask for the model, a search's setup
    reads its profile before the objective loads it (an .npz loads in tens of ms, a skops file took seconds)."""
    if not os.path.isfile(path):
        return load(path)  # refused, saying so
    stat = os.stat(path)
    key = (os.path.realpath(path), stat.st_mtime_ns, stat.st_size)
    if key not in _LOADED:
        _LOADED[key] = load(path)
    return _LOADED[key]


def _load_once(path: str) -> LearnedCostModel | None:
    """The shipped model at `path` (load_cached); None when there is none or it cannot be used (with a warning)."""
    if not os.path.isfile(path):
        return None
    try:
        return load_cached(path)
    except CostModelError as e:
        warnings.warn(f"the shipped cost model is not used: {e}", stacklevel=3)
        return None


_LOADED: dict[tuple[str, int, int], LearnedCostModel] = {}


def library_priced(X: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """`predicted` with the library matmuls' rows at the analytic model's figure (features.library_rows)."""
    library = library_rows(X)
    predicted[library] = X[library, FEATURE_NAMES.index(ANALYTIC_FEATURE)]
    return predicted
