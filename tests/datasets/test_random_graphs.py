"""The random graph generator: deterministic per seed, varied like real models (matmul kinds, prologues on A and
B, gathers, dequant, epilogues, 1-3 matmuls, three dtypes), shapes in the stated ranges, finite references, and
graphs whose reference plans validate in Triton's interpreter."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.datasets.random_graphs import (
    INPUT_BYTES_LIMIT,
    REAL_KN,
    REAL_M,
    SMALL_MAX,
    graph_id,
    random_graph,
    random_graphs,
)
from fusionsearch.errors import GraphError
from fusionsearch.graph import OpGraph, graph_from_dict
from fusionsearch.measure import validate
from fusionsearch.plan import TemplateKernel, template_operands
from fusionsearch.search.space import enumerate_space

N_GRAPHS = 200
INTERPRETER = (torch.float32, torch.float16)


@pytest.fixture(scope="module")
def real() -> list[OpGraph]:
    return [random_graph(s) for s in range(N_GRAPHS)]


@pytest.fixture(scope="module")
def real_plans(real: list[OpGraph]) -> list[P.Plan]:
    return [P.fully_fused(g) for g in real]


@pytest.fixture(scope="module")
def small() -> list[OpGraph]:
    return [random_graph(s, shape_scale="small") for s in range(N_GRAPHS)]


def _problem(g: OpGraph, mm: str) -> tuple[int, int, int, int]:
    """(batch, M, K, N) of one matmul."""
    node, ops = g.node(mm), template_operands(g, mm)
    a = g.node(ops["A"]).shape
    if node.op == "bmm":
        return a[0], a[1], a[2], node.shape[2]
    return 1, math.prod(a[:-1]), a[-1], node.shape[-1]


# ---- determinism ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("scale", ["real", "small"])
def test_same_seed_gives_the_same_graph_whatever_the_global_rng(scale: str) -> None:
    for seed in range(15):
        random.seed(1)
        torch.manual_seed(1)
        a = random_graph(seed, shape_scale=scale)
        random.seed(2)
        torch.manual_seed(2)
        random.random()
        b = random_graph(seed, shape_scale=scale)
        assert graph_id(a) == graph_id(b) == a.signature_hash()
        assert a.signature() == b.signature() and a.describe() == b.describe()


def test_seeds_give_different_graphs(real: list[OpGraph], small: list[OpGraph]) -> None:
    assert len({graph_id(g) for g in real}) == N_GRAPHS
    assert len({graph_id(g) for g in small}) == N_GRAPHS


def test_random_graphs_is_a_deterministic_batch() -> None:
    a, b = random_graphs(5, seed=7), random_graphs(5, seed=7)
    assert [graph_id(g) for g in a] == [graph_id(g) for g in b]
    assert len({graph_id(g) for g in a} | {graph_id(g) for g in random_graphs(5, seed=8)}) == 10


def test_bad_options_are_refused() -> None:
    with pytest.raises(GraphError, match="shape_scale"):
        random_graph(0, shape_scale="huge")
    with pytest.raises(GraphError, match="dtypes"):
        random_graph(0, dtypes=(torch.int8,))
    with pytest.raises(GraphError, match="max_matmuls"):
        random_graph(0, max_matmuls=0)


def test_options_are_honoured() -> None:
    for seed in range(40):
        g = random_graph(seed, max_matmuls=1, dtypes=("fp16",), shape_scale="small")
        (mm,) = g.nodes_of_kind("template")
        assert g.node(mm).dtype == torch.float16
        assert all(n.dtype != torch.bfloat16 for n in g)


# ---- variety -------------------------------------------------------------------------------------------

def test_variety_over_200_real_graphs(real: list[OpGraph], real_plans: list[P.Plan]) -> None:
    ops = Counter(n.op for g in real for n in g)
    assert all(ops[k] >= 10 for k in ("mm", "bmm", "addmm", "linear")), ops
    assert ops["index"] and ops["embedding"], "row gathers x[idx] and embedding"
    for op in ("relu", "gelu", "silu", "sigmoid", "tanh", "clamp", "exp", "where", "transpose", "cast"):
        assert ops[op], op
    approx = Counter(n.attrs.get("approximate", "none") for g in real for n in g if n.op == "gelu")
    assert approx["tanh"] and approx["none"], "both gelu forms"
    assert Counter(len(g.nodes_of_kind("template")) for g in real).keys() == {1, 2, 3}
    dtypes = Counter(g.node(g.nodes_of_kind("template")[0]).dtype for g in real)
    assert all(dtypes[d] >= 30 for d in (torch.bfloat16, torch.float16, torch.float32)), dtypes

    def count(pred: object) -> int:
        return sum(1 for g in real if pred(g))  # type: ignore[operator]

    assert count(lambda g: g.nodes_of_kind("indexing")) >= 10
    dequant = count(lambda g: any(g.node(n).dtype == torch.int8 and any(g.node(c).op in ("cast", "transpose")
                                                                        for c in g.consumers(n)) for n in g.inputs))
    assert dequant >= 40
    assert count(lambda g: any(g.node(n).strides[-2:] == (1, g.node(n).shape[-2]) and g.node(n).shape[-2] > 1
                               for n in g.inputs if len(g.node(n).shape) >= 2)) >= 10, "transposed weights"
    assert count(lambda g: len(g.outputs) > 1) >= 20
    assert count(lambda g: any(g.consumers(o) for o in g.outputs)) >= 20, "intermediate values as outputs"
    kernels = [k for p in real_plans for k in p.kernels if isinstance(k, TemplateKernel)]
    assert sum(1 for k in kernels if k.prologue_a) >= 40
    assert sum(1 for k in kernels if k.prologue_b) >= 40
    assert sum(1 for k in kernels if k.epilogue) >= 100
    assert max(len(k.epilogue) for k in kernels) >= 5 and max(len(k.prologue_a) for k in kernels) >= 5


def test_real_shapes_come_from_model_families(real: list[OpGraph]) -> None:
    ms = set()
    for g in real:
        assert sum(g.node(n).nbytes for n in g.inputs) <= INPUT_BYTES_LIMIT
        for mm in g.nodes_of_kind("template"):
            batch, m, k, n = _problem(g, mm)
            assert m in REAL_M and k in REAL_KN and n in REAL_KN, (g.node(mm).op, batch, m, k, n)
            if g.node(mm).op == "bmm":
                assert 2 <= batch <= 32 and m <= 512 and n <= 1024
            ms.add(m)
    assert {1, 16, 8192} <= ms and len(ms) >= 12


def test_small_shapes_are_awkward_and_at_most_80(small: list[OpGraph]) -> None:
    dims = Counter()
    for g in small:
        for node in g:
            assert all(1 <= s <= SMALL_MAX for s in node.shape), (node.name, node.shape)
        for mm in g.nodes_of_kind("template"):
            dims.update(_problem(g, mm)[1:])
    assert dims[1] >= 10
    assert sum(c for d, c in dims.items() if d % 16) > 0.8 * sum(dims.values())


def test_every_reference_plan_of_real_graphs_is_legal(real: list[OpGraph]) -> None:
    for g in real[:60]:
        for make in (P.unfused, P.heuristic):
            make(g).check()
    fused = 0
    for g in real[:20]:
        space = enumerate_space(g, max_configs=4)
        assert space.size() >= 1
        fused += sum(len(grp.options) > 1 for grp in space.groups)
    assert fused >= 20


# ---- numerics ------------------------------------------------------------------------------------------

def _all_values(g: OpGraph) -> OpGraph:
    """A copy of g whose outputs are all its floating values."""
    h = graph_from_dict(g.to_dict())
    h.set_outputs([n.name for n in h if n.op != "input" and n.dtype.is_floating_point])
    return h


def test_references_of_200_small_graphs_are_finite_everywhere(small: list[OpGraph]) -> None:
    for seed, g in enumerate(small):
        h = _all_values(g)
        for name, out in zip(h.outputs, fs.reference(h, fs.random_inputs(h, seed=seed)), strict=True):
            assert torch.isfinite(out).all(), f"seed {seed}: {name} ({h.node(name).op}) is not finite"


# NumPy warnings from the interpreter: tl.sigmoid of a large -x overflows exp (to the right 0), and padded lanes
# of a masked tile divide 0 by 0 (never stored).
@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning")
@pytest.mark.parametrize("seed", range(30))
def test_reference_plans_validate_in_the_interpreter(seed: int) -> None:
    g = random_graph(seed, shape_scale="small", dtypes=INTERPRETER)
    for make in (P.unfused, P.fully_fused, P.heuristic):
        plan = make(g)
        v = validate(plan)
        assert v.ok, f"seed {seed}, {make.__name__}: {v.reason}\n{g.describe()}\n{plan.describe()}"


@pytest.mark.parametrize("lead", [(1, 1), (1, 1, 1), (2, 1), (1, 3), (1,)])
def test_linear_over_unit_leading_dims_validates(lead: tuple[int, ...]) -> None:
    # All-1 leading dims once lost the tile's row index (a [1, BLOCK_K] A tile).
    g = OpGraph()
    x, w = g.input("x", (*lead, 8), torch.float32), g.input("w", (5, 8), torch.float32)
    b = g.input("b", (5,), torch.float32)
    y = g.add("linear", [x, w, b], name="y")
    g.set_outputs([g.add("relu", [y], name="z")])
    for make in (P.unfused, P.fully_fused):
        assert validate(make(g)).ok


def test_the_experts_family_gives_mixture_of_experts_graphs_the_grouped_kind_accepts() -> None:
    from fusionsearch.kinds.grouped_matmul import expert_routing

    for seed in range(4):
        g = random_graph(seed, family="experts", shape_scale="small")
        assert g.signature_hash() == random_graph(seed, family="experts", shape_scale="small").signature_hash()
        assert all(expert_routing(g, mm) is not None for mm in g.nodes_of_kind("template"))
        real = random_graph(seed, family="experts")
        assert sum(real.node(n).nbytes for n in real.inputs) <= 1 << 30
    with pytest.raises(GraphError, match="family must be one of mixed, experts"):
        random_graph(0, family="nonsense")


def test_the_experts_family_draws_decode_and_prefill_token_counts_within_the_gathered_bound() -> None:
    from fusionsearch.datasets.random_graphs import GATHERED_BYTES_LIMIT

    tokens = set()
    for seed in range(40):
        g = random_graph(seed, family="experts")
        t, h, d = g.node("x").shape[0], g.node("w1").shape[1], g.node("w1").shape[2]
        assert 2 * t * h * d * g.node("w1").dtype.itemsize <= GATHERED_BYTES_LIMIT
        tokens.add(t)
    assert tokens & {1, 2, 4, 8, 16} and tokens & {64, 128, 256, 512}, tokens


def test_the_decode_family_gives_decode_sized_quantised_matmuls_that_validate() -> None:
    """Every built-in decode workload is drawn (int4 nibbles among them, which the mixed family never draws),
    real graphs have 1-16 rows and fit the input budget, and small ones validate fully fused against float64."""
    import random

    from fusionsearch.costmodel.hardware import Hardware
    from fusionsearch.datasets.random_graphs import DECODE_WORKLOADS
    from fusionsearch.search.collect import sample_plans

    def which(g: OpGraph) -> str:
        names = set(g.inputs)
        return ("w4_dequant_mm" if "scales" in names else "gather_mm" if "idx" in names
                else ("w8_linear" if "w_t" in g else "w8_dequant_mm") if g.node("w").dtype == torch.int8
                else "mm_bias_gelu")

    seen = set()
    for seed in range(24):
        real = random_graph(seed, family="decode")
        assert real.signature_hash() == random_graph(seed, family="decode").signature_hash()
        seen.add(which(real))
        (mm,) = real.nodes_of_kind("template")
        assert real.node(real.node(mm).inputs[0]).shape[0] <= 16
        assert sum(real.node(n).nbytes for n in real.inputs) <= 1 << 30
        if which(real) == "w4_dequant_mm":
            k = real.node(real.node(mm).inputs[0]).shape[1]
            assert k % real.node("scales").shape[0] == 0 and k // real.node("scales").shape[0] in (32, 64, 128)
    assert seen == set(DECODE_WORKLOADS), seen
    for seed in range(4):
        small = random_graph(seed, family="decode", shape_scale="small", dtypes=("float32", "float16"))
        v = validate(P.fully_fused(small))
        assert v.ok, v.reason
    plans = sample_plans(random_graph(1, family="decode"), 6, random.Random(0), Hardware.detect())
    assert any(k.kind == "decode" for p in plans for k in p.kernels)


def test_the_experts_family_draws_no_float16_at_real_widths_where_the_output_overflows_it() -> None:
    real = [random_graph(seed, family="experts", dtypes=("float16", "bfloat16")) for seed in range(12)]
    assert {g.node(g.outputs[0]).dtype for g in real} == {torch.bfloat16}
    with pytest.raises(GraphError, match="overflow float16"):
        random_graph(0, family="experts", dtypes=("float16",))
    assert random_graph(0, family="experts", shape_scale="small", dtypes=("float16",)).node("y").dtype == torch.float16
    # why: the narrowest real width drawn already overflows float16 on the collector's N(0,1) inputs
    from fusionsearch.graph.reference import random_inputs

    for dtype, finite in ((torch.float16, False), (torch.bfloat16, True)):
        g = fs.workload("moe_ffn", T=4, D=1024, H=1408, E=4, dtype=dtype)
        (y,) = fs.reference(g, random_inputs(g, seed=0))
        assert bool(torch.isfinite(y).all()) == finite
