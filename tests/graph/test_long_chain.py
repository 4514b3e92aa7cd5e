"""A 5,000-node chain (a matmul, then 5,000 pointwise ops) goes through every stage without recursion: deepcopy,
topological order, spec and plan JSON, legality, the cost model and code generation (issue 24)."""

from __future__ import annotations

import copy
import sys

import pytest

from fusionsearch import plan as P
from fusionsearch.codegen.module import generate_module
from fusionsearch.costmodel import estimate
from fusionsearch.errors import PlanError
from fusionsearch.graph import OpGraph, graph_from_dict

LENGTH = 5_000


@pytest.fixture(scope="module")
def chain() -> OpGraph:
    g = OpGraph()
    x, w = g.input("x", (4, 8), "float32"), g.input("w", (8, 8), "float32")
    prev = g.add("mm", [x, w], name="y")
    for i in range(LENGTH):
        prev = g.add("relu" if i % 2 else "neg", [prev], name=f"n{i}")
    g.set_outputs([prev])
    return g


def test_the_chain_is_longer_than_pythons_recursion_limit() -> None:
    assert LENGTH > sys.getrecursionlimit()


def test_graph_stages_do_not_recurse(chain: OpGraph) -> None:
    twin = copy.deepcopy(chain)
    assert twin.topo_order() == chain.topo_order() and len(twin.topo_order()) == LENGTH + 3
    spec = chain.to_dict()
    spec["nodes"].reverse()  # the loader sorts them again: each node's input is listed after it
    back = graph_from_dict(spec)
    assert back.signature() == chain.signature() and back.same_structure(chain)


def test_plan_stages_do_not_recurse(chain: OpGraph) -> None:
    plan = P.unfused(chain)
    assert len(plan.kernels) == LENGTH + 1
    assert P.Plan.from_json(plan.to_json(), chain) == plan
    assert estimate(plan).time_us > 0
    source = generate_module(plan).source
    assert source.count("@triton.jit") >= LENGTH + 1
    # Fused whole, codegen would recurse once per node: the plan is refused first, with a sentence.
    with pytest.raises(PlanError, match="fuses a chain of more than 128 dependent nodes"):
        P.Plan(chain, (P.TemplateKernel("y", epilogue=tuple(f"n{i}" for i in range(LENGTH))),)).check()
    capped = P.build_plan(chain, {f"n{i}": ("epilogue", "y") for i in range(P.MAX_FUSED_DEPTH - 1)})
    assert "n126" in capped.kernels[0].nodes and len(generate_module(capped).source) > 0
