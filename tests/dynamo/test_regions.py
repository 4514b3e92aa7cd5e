"""Cutting graphs into regions: every op in exactly one region, regions in an order that runs, one matmul per
tuned region, identical layers identical regions."""

from __future__ import annotations

import pytest
import torch

import fusionsearch as fs
from fusionsearch.dynamo.regions import partition


def _check(g: fs.OpGraph) -> list:
    regions = partition(g)
    available = set(g.inputs)
    ops = 0
    for r in regions:
        assert set(r.inputs) <= available  # each region only reads what earlier regions (or the inputs) made
        available |= set(r.outputs)
        assert len(r.graph.nodes_of_kind("template")) == (1 if r.tuned else 0)
        assert len(r.graph.inputs) == len(r.inputs) and len(r.graph.outputs) == len(r.outputs)
        ops += len(r.graph) - len(r.graph.inputs)
    assert ops == len(g) - len(g.inputs) and set(g.outputs) <= available
    return regions


@pytest.mark.parametrize("name", ["w8_dequant_mm", "gather_mm", "mm_bias_gelu", "cast_mm", "scale_mm", "swiglu"])
def test_every_op_lands_in_one_region_and_the_order_runs(name: str) -> None:
    g = fs.workload(name)
    regions = _check(g)
    assert sum(r.tuned for r in regions) == len(g.nodes_of_kind("template"))


def test_prologue_and_epilogue_work_joins_its_matmul() -> None:
    (region,) = _check(fs.workload("w8_dequant_mm"))  # dequant (prologue side) and all: one region
    assert region.tuned and len(region.graph) == len(fs.workload("w8_dequant_mm"))
    regions = _check(fs.workload("swiglu"))
    assert [len(r.graph.nodes_of_kind("template")) for r in regions] == [1, 1, 1]

    def holding(op: str) -> object:
        (r,) = [r for r in regions if any(r.graph.node(n).op == op for n in r.graph.topo_order())]
        return r

    # silu(x @ w1) is x @ w1's epilogue; the product with x @ w3 joins the later matmul's region, which
    # reads the first one's output
    silu, mul = holding("silu"), holding("mul")
    assert silu is not mul and silu.tuned and mul.tuned and set(silu.outputs) & set(mul.inputs)


def test_repeated_layers_give_regions_with_one_signature() -> None:
    layer = lambda: torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU())  # noqa: E731
    g = fs.capture(torch.nn.Sequential(layer(), layer(), layer()), torch.randn(8, 32))
    tuned = [r for r in _check(g) if r.tuned]
    assert len(tuned) == 3 and len({r.graph.signature_hash() for r in tuned}) == 1
    assert len({r.graph.to_dict().__repr__() for r in tuned}) == 1  # names too: one cached plan fits all


def test_a_loop_through_glue_unfuses_only_what_closes_it() -> None:
    """gpt-fast's int8 decoder: the residual add and the next RMSNorm's square join the matmul before them as
    epilogue, the norm's mean is an extern (glue) that reads the square, and the norm's tail reads the mean: a
    loop. Only the tail leaves the region; every int8 linear keeps its weight's cast (its prologue) and its
    scale (its epilogue), where the whole region used to become glue (the weight cast to bf16 every step)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks.models import llama
    from fusionsearch.graph.capture import capture_program

    model = llama.build(llama.tiny(2), torch.float32, "cpu")
    llama.quantize_int8(model)
    model.setup_caches(1, torch.float32, "cpu")
    with torch.no_grad():
        g = capture_program(model, torch.randint(0, 128, (1, 1)), torch.tensor([3])).graph
    regions = _check(g)
    tuned = [r for r in regions if r.tuned]
    assert len(tuned) == 2 * 5 + 1  # wqkv, wo, w1, w3, w2 a layer, and the output projection
    for r in tuned:
        ops = [n.op for n in r.graph if n.op != "input"]
        assert "cast" in ops and "mul" in ops, ops  # the int8 weight's cast and its scale stay with the matmul
