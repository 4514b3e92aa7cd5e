"""The library choice: a matmul with nothing fused may run in PyTorch's own matmul (cuBLAS on NVIDIA GPUs).

Library plans run through the same generated module as the Triton kernels around them and are validated
against the float64 reference; nothing may be fused into a library matmul; the space offers the choice only
when asked; both cost models price a library matmul by the analytic library figure."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.costmodel.analytic import LIBRARY_FIXED_US, estimate
from fusionsearch.costmodel.features import library_rows, plan_features, to_matrix
from fusionsearch.costmodel.hardware import H200
from fusionsearch.costmodel.learned import LearnedCostModel
from fusionsearch.costmodel.pricing import plan_times_us
from fusionsearch.costmodel.refit import correct
from fusionsearch.errors import PlanError
from fusionsearch.kinds.library import LIBRARY
from fusionsearch.measure import validate
from fusionsearch.plan import LibraryKernel, Plan, PointwiseKernel, TemplateKernel
from fusionsearch.search.space import enumerate_space, random_plans, seed_plans


def _matmul_graphs(dtype: torch.dtype) -> list[fs.OpGraph]:
    """One graph per matmul op, each followed by a pointwise op so that the library output feeds a kernel."""
    graphs = []
    g = fs.OpGraph()
    g.set_outputs([g.add("relu", [g.add("mm", [g.input("a", (24, 40), dtype), g.input("b", (40, 56), dtype)])])])
    graphs.append(g)
    g = fs.OpGraph()
    a, b = g.input("a", (3, 20, 32), dtype), g.input("b", (3, 32, 24), dtype)
    g.set_outputs([g.add("neg", [g.add("bmm", [a, b])])])
    graphs.append(g)
    g = fs.OpGraph()
    bias, x, w = g.input("bias", (48,), dtype), g.input("x", (20, 32), dtype), g.input("w", (32, 48), dtype)
    g.set_outputs([g.add("relu", [g.add("addmm", [bias, x, w], beta=0.5, alpha=-1.5)])])
    graphs.append(g)
    g = fs.OpGraph()
    x, w, bias = g.input("x", (2, 10, 32), dtype), g.input("w", (40, 32), dtype), g.input("bias", (40,), dtype)
    g.set_outputs([g.add("sigmoid", [g.add("linear", [x, w, bias])])])
    graphs.append(g)
    return graphs


def _library_everywhere(g: fs.OpGraph) -> Plan:
    return P.build_plan(g, {}, library=g.nodes_of_kind("template"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("index", range(4), ids=["mm", "bmm", "addmm", "linear"])
def test_library_matmuls_match_the_float64_reference(index: int, dtype: torch.dtype) -> None:
    g = _matmul_graphs(dtype)[index]
    plan = _library_everywhere(g)
    assert [k.kind for k in plan.kernels] == ["library", "pointwise"]
    v = validate(plan, g)
    assert v.ok, v.reason


def test_library_and_triton_matmuls_mix_in_one_plan() -> None:
    g = fs.workload("swiglu", dtype=torch.float32, M=20, D=32, H=48)
    gate, up, y = g.nodes_of_kind("template")
    plan = P.build_plan(g, {n: ("epilogue", gate) for n in ("gate_silu", "hidden")}, library=[up, y])
    assert {k.kind for k in plan.kernels} == {"library", "template"}
    v = validate(plan, g)
    assert v.ok, v.reason


def test_nothing_fuses_into_a_library_matmul() -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=16, K=32, N=32)
    mm = g.nodes_of_kind("template")[0]
    epilogue = {n: ("epilogue", mm) for n in P.fused_decisions(g)}
    with pytest.raises(PlanError, match="nothing can be fused"):
        P.build_plan(g, epilogue, library=[mm])
    g = fs.workload("w8_dequant_mm", dtype=torch.float32, M=16, K=32, N=32)
    mm = g.nodes_of_kind("template")[0]
    with pytest.raises(PlanError, match="nothing can be fused"):
        P.build_plan(g, P.fused_decisions(g), library=[mm])


def test_a_library_kernel_on_a_pointwise_node_is_refused() -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=16, K=32, N=32)
    mm = g.nodes_of_kind("template")[0]
    bad = Plan(g, (LibraryKernel(mm), LibraryKernel("out"), PointwiseKernel(("y_bias",))))
    with pytest.raises(PlanError, match="not a matmul"):
        bad.check()


def test_library_plans_survive_json() -> None:
    g = fs.workload("swiglu", dtype=torch.float32, M=20, D=32, H=48)
    plan = _library_everywhere(g)
    again = Plan.from_json(plan.to_json(), g)
    assert again.kernels == plan.kernels
    assert "library" in plan.describe()
    with pytest.raises(fs.errors.SpecError, match="'matmul' must be a node name"):
        Plan.from_dict({"kernels": [{"kind": "library"}]}, g)


def test_the_space_offers_the_library_only_when_asked() -> None:
    g = fs.workload("swiglu", dtype=torch.float32, M=20, D=32, H=48)
    plain = enumerate_space(g, max_configs=4)
    lib = enumerate_space(g, max_configs=4, library=True)
    assert all(LIBRARY not in c for name, c in plain.parameter_choices().items())
    assert all(c[-1] == LIBRARY for name, c in lib.parameter_choices().items() if name.endswith(".config"))
    per_mm = [len(c) for c in plain.configs]
    assert lib.size() == plain.size() // np.prod(per_mm) * np.prod([n + 1 for n in per_mm])
    # the eager-like plan (every matmul in the library, nothing fused) is a seed, and only with the choice
    assert any(all(k.kind != "template" for k in lib.plan(s).kernels) for s in seed_plans(lib))
    assert not any(all(k.kind != "template" for k in plain.plan(s).kernels) for s in seed_plans(plain))
    drawn = random_plans(lib, 60, random.Random(0))
    assert any(k.kind == "library" for p in drawn for k in p.kernels)
    for p in drawn:  # a fused group never lands on a library matmul
        library = {k.matmul for k in p.kernels if isinstance(k, LibraryKernel)}
        assert not any(isinstance(k, TemplateKernel) and k.matmul in library for k in p.kernels)
    # without the choice, random_plans draws what it drew before the choice existed (a config object per matmul)
    rng, expected = random.Random(3), {}
    for _ in range(20 * 20):
        if len(expected) >= 20:
            break
        params = {f"{grp.key}.fusion": rng.choice(grp.options) for grp in plain.groups}
        params |= {f"mm{i}.config": rng.choice(cfgs).short() for i, cfgs in enumerate(plain.configs)}
        try:
            expected.setdefault(plain.plan(params).to_json(), None)
        except PlanError:
            continue
    assert [p.to_json() for p in random_plans(plain, 20, random.Random(3))] == list(expected)


def test_the_analytic_library_figure() -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.bfloat16, M=4096, K=4096, N=4096)
    big = estimate(_library_everywhere(g)).per_kernel[0]
    assert big.kind == "library"
    assert big.flops == 2 * 4096 ** 3  # an mm: its bias is a separate add node, not an operand
    assert big.time_us == pytest.approx(big.compute_us + H200.launch_us)  # compute-bound
    g = fs.workload("mm_bias_gelu", dtype=torch.bfloat16, M=16, K=4096, N=4096)
    small = estimate(_library_everywhere(g)).per_kernel[0]
    moved = 16 * 4096 * 2 + 4096 * 4096 * 2 + 16 * 4096 * 2
    assert small.bytes_read + small.bytes_written == moved
    assert small.time_us == pytest.approx(moved / H200.bandwidth_bytes_per_s * 1e6 + LIBRARY_FIXED_US + H200.launch_us)


def test_the_learned_model_prices_library_matmuls_by_the_analytic_figure() -> None:
    g = fs.workload("swiglu", dtype=torch.bfloat16, M=64, D=256, H=512)
    gate, up, y = g.nodes_of_kind("template")
    plans = [P.unfused(g), P.build_plan(g, {}, library=[up]), _library_everywhere(g)]
    X = to_matrix([f for p in plans for f in plan_features(p, H200)])
    lib = library_rows(X)
    assert lib.sum() == 4 and not library_rows(to_matrix(plan_features(plans[0], H200))).any()
    rng = np.random.default_rng(0)
    train = X[~lib]
    model = LearnedCostModel(max_iter=20, min_samples_leaf=1, n_bags=1).fit(
        train, rng.uniform(5, 50, len(train)), hardware=H200)
    analytic = [estimate(p) for p in plans]
    times = plan_times_us(model, plans, H200)
    own = model.predict(train)
    # the plan with every matmul in the library: its matmuls at the analytic figure, the rest by the model
    kinds = [k.kind for k in plans[2].kernels]
    assert kinds.count("library") == 3
    lib_us = sum(e.time_us for e, kind in zip(analytic[2].per_kernel, kinds, strict=True) if kind == "library")
    rest = to_matrix(plan_features(plans[2], H200))[[kind != "library" for kind in kinds]]
    assert times[2] == pytest.approx(lib_us + model.predict(rest).sum())
    assert times[0] == pytest.approx(own[:len(plans[0].kernels)].sum())
    fixed = correct(model, train, rng.uniform(5, 50, len(train)))  # a refitted model keeps the library figures
    assert plan_times_us(fixed, plans, H200)[2] == pytest.approx(lib_us + fixed.predict(rest).sum())


def test_explain_names_the_library_figure_for_a_library_matmul() -> None:
    """A library kernel's predicted time is the analytic library figure, not a roofline: explain says which."""
    import dataclasses

    from fusionsearch.search.study import SearchOptions, run_study

    g = _matmul_graphs(torch.float32)[0]
    res = dataclasses.replace(run_study(g, SearchOptions(trials=2, backend="model", library=True)),
                              best=_library_everywhere(g))
    kernels = res.explain().split("  kernel ")[1:]
    assert [k.split(":")[1].split()[0] for k in kernels] == ["library", "pointwise"]
    assert "library figure (cuBLAS's measured rates)" in kernels[0] and "roofline model" not in kernels[0]
    assert "roofline model" in kernels[1] and "library figure" not in kernels[1]
