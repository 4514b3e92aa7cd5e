"""Shared by the learned-model tests: a synthetic dataset of real plans of the built-in workloads whose
"measured" kernel times are a known distortion of the analytic model, rows shaped as the collector writes."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.costmodel import H200, fits
from fusionsearch.costmodel.features import ANALYTIC_FEATURE, FEATURE_SCHEMA_VERSION, plan_features
from fusionsearch.datasets.measurements import append_rows
from fusionsearch.errors import PlanError
from fusionsearch.plan import FP32_DOT
from fusionsearch.search.space import enumerate_space

GRAPHS = [  # (workload, shape, dtype): small shapes, every built-in workload, three dtypes
    ("w8_dequant_mm", {"M": 16, "K": 512, "N": 512}, "bfloat16"),
    ("w8_dequant_mm", {"M": 32, "K": 1024, "N": 256}, "float16"),
    ("gather_mm", {"M": 64, "K": 256, "N": 512, "T": 1024}, "bfloat16"),
    ("gather_mm", {"M": 16, "K": 512, "N": 256, "T": 512}, "float32"),
    ("mm_bias_gelu", {"M": 16, "K": 1024, "N": 1024}, "bfloat16"),
    ("mm_bias_gelu", {"M": 128, "K": 256, "N": 256}, "float32"),
    ("cast_mm", {"M": 256, "K": 256, "N": 256}, "bfloat16"),
    ("cast_mm", {"M": 512, "K": 512, "N": 128}, "float16"),
    ("scale_mm", {"M": 256, "K": 512, "N": 512}, "bfloat16"),
    ("scale_mm", {"M": 128, "K": 256, "N": 1024}, "float32"),
    ("swiglu", {"M": 16, "D": 256, "H": 512}, "bfloat16"),
    ("swiglu", {"M": 64, "D": 512, "H": 256}, "float16"),
]


def truth_us(f: dict[str, float], rng: np.random.Generator) -> float:
    """The synthetic GPU: the roofline time distorted by tile choices the analytic model does not price."""
    factor = 1.0
    if f["kind_template"]:
        factor += 1.5 * (f["block_k"] >= 256) + 0.8 * (f["split_k"] >= 4) + 0.6 * (f["num_warps"] == 2)
        factor += 0.5 * (f["num_stages"] == 4 and f["block_n"] >= 128)
    else:
        factor = 1.3
    return f[ANALYTIC_FEATURE] * factor * float(np.exp(rng.normal(0.0, 0.02)))


def sample_plans(g: fs.OpGraph, rng: np.random.Generator, count: int = 16) -> list[P.Plan]:
    space = enumerate_space(g, fits=fits, max_configs=8)
    plans = {p.to_json(): p for p in (P.unfused(g), P.fully_fused(g), P.heuristic(g))}
    for _ in range(200):
        if len(plans) >= count:
            break
        params: dict[str, object] = {f"{grp.key}.fusion": grp.options[rng.integers(len(grp.options))]
                                     for grp in space.groups}
        for i, cfgs in enumerate(space.configs):
            params[f"mm{i}.config"] = cfgs[rng.integers(len(cfgs))].short()
        try:
            p = space.plan(params)
        except PlanError:
            continue
        plans.setdefault(p.to_json(), p)
    return list(plans.values())


def synthetic_rows(seed: int = 0) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    rows = []
    for name, shape, dtype in GRAPHS:
        g = fs.workload(name, dtype=dtype, **shape)
        gid = f"{name}-{dtype}-" + "-".join(f"{k}{v}" for k, v in shape.items())
        for j, plan in enumerate(sample_plans(g, rng)):
            for i, f in enumerate(plan_features(plan, H200)):
                rows.append({"features": f, "schema_version": FEATURE_SCHEMA_VERSION, "graph_id": gid,
                             "plan_id": f"p{j}", "kernel_index": i, "status": "ok", "time_us": truth_us(f, rng),
                             "hardware": {"device": H200.name, "profile": H200.to_dict()},
                             "graph": g.to_dict(), "plan": plan.to_dict(), "fp32_dot": FP32_DOT})
    return rows


@pytest.fixture(scope="session")  # read-only: test_learned and test_refit share the one file
def dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("costmodel") / "measurements.jsonl.gz")
    rows = synthetic_rows()
    append_rows(path, rows[: len(rows) // 2])  # two batches, as a resumed collection writes them
    append_rows(path, rows[len(rows) // 2:])
    return path


@pytest.fixture(scope="module")
def synthetic_graphs() -> list[tuple[str, dict[str, int], str]]:
    return list(GRAPHS)


@pytest.fixture(scope="module")
def synthetic() -> SimpleNamespace:
    """The synthetic dataset's makers, for tests that build rows or plans of their own."""
    return SimpleNamespace(rows=synthetic_rows, sample_plans=sample_plans, truth_us=truth_us, graphs=list(GRAPHS))
