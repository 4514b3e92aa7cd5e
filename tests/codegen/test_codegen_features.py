"""Code generation features, run in Triton's interpreter against the float64 reference.

(a) an output element no kernel writes is caught by validation (outputs are poisoned with NaN first);
(b) an exported plan runs where fusionsearch cannot be imported, externs included;
(c) hostile node names never reach generated source;
(d) strided and transposed operands, layout prologues, bmm, addmm, linear, every pointwise op fused in an
    epilogue and in a prologue, in float32 and float16, with and without upcasting;
(e) generated source is a pure function of (graph, plan).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

import networkx as nx
import pytest
import torch

import fusionsearch as fs
import fusionsearch.kinds.matmul_template.kind as template_kind
import fusionsearch.kinds.pointwise as codegen_pointwise
from fusionsearch import plan as P
from fusionsearch.codegen.module import generate_module
from fusionsearch.codegen.runtime import compile_plan, export_plan
from fusionsearch.errors import PlanError
from fusionsearch.graph import OpGraph
from fusionsearch.graph.registry import dtype_name, ops_of_kind
from fusionsearch.kinds.triton_source.kernel import GeneratedKernel
from fusionsearch.measure import TOLERANCE, rel_error, validate
from fusionsearch.plan import Decision, Plan, PointwiseKernel, TemplateKernel, TileConfig

DTYPES = [torch.float32, torch.float16]
SMALL_TILE = TileConfig(block_m=16, block_n=16, block_k=16, group_m=4, split_k=1)
SPLIT_TILE = TileConfig(block_m=16, block_n=32, block_k=16, group_m=1, split_k=3)


def _plan(g: OpGraph, decisions: dict[str, Decision] | None = None, config: TileConfig = SMALL_TILE) -> Plan:
    return P.build_plan(g, decisions or {}, {mm: config for mm in g.nodes_of_kind("template")})


def _assert_valid(plan: Plan, **options: object) -> None:
    v = validate(plan, **options)
    assert v.ok, f"{v.reason} (rel err {v.rel_err:.3g})\n{plan.describe()}"


# ---- (a) unwritten outputs -----------------------------------------------------------------------

def _drop_last_block(kernels: list[GeneratedKernel], which: int) -> list[GeneratedKernel]:
    """The same kernels with kernel `which` launched on one program fewer along axis 0."""
    out = list(kernels)
    k = out[which]
    assert k.grid[0] > 1, "the test needs a grid of several programs"
    out[which] = dataclasses.replace(k, grid=(k.grid[0] - 1, *k.grid[1:]))
    return out


def _mm_bias_gelu() -> OpGraph:
    return fs.workload("mm_bias_gelu", dtype=torch.float32, M=33, K=40, N=70)


@pytest.mark.parametrize(("config", "which", "serial"),
                         [(SMALL_TILE, 0, True), (SPLIT_TILE, 0, True), (SPLIT_TILE, 0, False), (SPLIT_TILE, 1, False)],
                         ids=["template", "serial_split_k", "split_k_partials", "split_k_reduce"])
def test_a_template_tile_never_launched_is_caught(monkeypatch: pytest.MonkeyPatch, config: TileConfig,
                                                  which: int, serial: bool) -> None:
    plan = _plan(_mm_bias_gelu(), P.fused_decisions(_mm_bias_gelu()), config)
    _assert_valid(plan, serial_split_k=serial)  # the honest plan is fine
    original = template_kind.generate_template
    monkeypatch.setattr(template_kind, "generate_template",
                        lambda *a, **k: _drop_last_block(original(*a, **k), which))
    v = validate(plan, serial_split_k=serial)
    assert not v.ok
    assert "NaN" in v.reason and "unwritten" in v.reason, v.reason


def test_a_pointwise_block_never_launched_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = P.unfused(_mm_bias_gelu())
    monkeypatch.setattr(codegen_pointwise, "XBLOCK", 64)  # several blocks over the 33x70 output
    _assert_valid(plan)
    original = codegen_pointwise.generate_pointwise

    def short(g: OpGraph, k: PointwiseKernel, stored: set[str], name: str, upcast: bool = True) -> GeneratedKernel:
        gk = original(g, k, stored, name, upcast)
        return _drop_last_block([gk], 0)[0] if "out" in k.nodes else gk

    monkeypatch.setattr(codegen_pointwise, "generate_pointwise", short)
    v = validate(plan)
    assert not v.ok and "NaN" in v.reason, v.reason


def test_an_unwritten_intermediate_shows_in_the_output(monkeypatch: pytest.MonkeyPatch) -> None:
    # The y_bias kernel skips its last block: gelu reads NaN there and the output carries it.
    plan = P.unfused(_mm_bias_gelu())
    monkeypatch.setattr(codegen_pointwise, "XBLOCK", 64)
    original = codegen_pointwise.generate_pointwise

    def short(g: OpGraph, k: PointwiseKernel, stored: set[str], name: str, upcast: bool = True) -> GeneratedKernel:
        gk = original(g, k, stored, name, upcast)
        return _drop_last_block([gk], 0)[0] if "y_bias" in k.nodes else gk

    monkeypatch.setattr(codegen_pointwise, "generate_pointwise", short)
    assert not validate(plan).ok


# ---- (b) export ----------------------------------------------------------------------------------

_RUNNER = textwrap.dedent('''
    import importlib.util
    import json
    import sys

    sys.modules["fusionsearch"] = None  # any import of fusionsearch now fails
    try:
        import fusionsearch  # noqa: F401
    except ImportError:
        pass
    else:
        raise SystemExit("fusionsearch is importable in the export test")
    import torch

    for i, job in enumerate(json.loads(sys.argv[1])):
        spec = importlib.util.spec_from_file_location(f"exported_{i}", job["module"])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        inputs = torch.load(job["inputs"])
        torch.save(module.run(*inputs), job["outputs"])
    print("exported plans ran")
''')


def _extern_graph() -> OpGraph:
    g = OpGraph()
    x, w = g.input("x", (13, 40), torch.float32), g.input("w", (40, 24), torch.float32)
    sm = g.add("extern", [x], name="sm", target="aten.softmax.int", args=[{"input": 0}, -1])
    y = g.add("mm", [sm, w], name="y")
    g.set_outputs([g.add("relu", [y], name="r")])
    return g


def test_exported_plans_run_without_fusionsearch(tmp_path: Path) -> None:
    w8 = fs.workload("w8_dequant_mm", dtype=torch.float16, M=21, K=100, N=40)
    cases = [(w8, _plan(w8, P.fused_decisions(w8), SPLIT_TILE)), (_extern_graph(), P.fully_fused(_extern_graph()))]
    assert any(k.kind == "extern" for k in cases[1][1].kernels)
    jobs, expected = [], []
    for i, (g, plan) in enumerate(cases):
        directory = tmp_path / f"plan{i}"
        module = Path(export_plan(plan, str(directory)))
        text = module.read_text()
        assert "import fusionsearch" not in text and "from fusionsearch" not in text
        assert Plan.from_json((directory / "plan.json").read_text(), g) == plan
        inputs = fs.random_inputs(g, seed=i)
        torch.save(inputs, tmp_path / f"in{i}.pt")
        jobs.append({"module": str(module), "inputs": str(tmp_path / f"in{i}.pt"),
                     "outputs": str(tmp_path / f"out{i}.pt")})
        expected.append(fs.reference(g, inputs, float64=True))
    assert (tmp_path / "plan1" / "externs.json").exists() and not (tmp_path / "plan0" / "externs.json").exists()
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": ""}
    proc = subprocess.run([sys.executable, "-c", _RUNNER, json.dumps(jobs)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "exported plans ran" in proc.stdout
    for i, refs in enumerate(expected):
        outs = torch.load(tmp_path / f"out{i}.pt")
        assert len(outs) == len(refs)
        for o, r in zip(outs, refs, strict=True):
            assert rel_error(o, r) <= TOLERANCE[o.dtype], (i, rel_error(o, r))


_HOSTILE_EXTERN_RUNNER = textwrap.dedent('''
    import importlib.util
    import sys

    import torch

    spec = importlib.util.spec_from_file_location("exported", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    mm = torch.ops.aten.mm
    try:
        module.run(torch.rand(13, 40), torch.rand(40, 24))
    except ValueError as e:
        print("refused:", e)
    print("mm unchanged:", torch.ops.aten.mm is mm)
''')


def test_an_exported_module_resolves_only_registered_extern_overloads(tmp_path: Path) -> None:
    """Item 14 of issue 53, the exported module's side: an externs.json naming 'aten.__setattr__' with args
    ["mm", 1] must be refused before anything is called, leaving torch.ops.aten as it was."""
    module = export_plan(P.fully_fused(_extern_graph()), str(tmp_path / "plan"))
    (tmp_path / "plan" / "externs.json").write_text(json.dumps(
        [{"target": "aten.__setattr__.default", "args": ["mm", 1], "kwargs": {}, "output_index": 0}]))
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", _HOSTILE_EXTERN_RUNNER, module], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "refused: externs.json: 'aten.__setattr__.default' is not a registered aten operator" in proc.stdout
    assert "mm unchanged: True" in proc.stdout


def test_extern_plans_validate_in_process() -> None:
    g = _extern_graph()
    for plan in (P.unfused(g), P.fully_fused(g)):
        _assert_valid(plan)


# ---- (c) hostile names ---------------------------------------------------------------------------

HOSTILE = [
    "x\"; import os; os.system('echo pwned') #",
    "w'\n__import__('os').system('x')",
    "__import__('os').system('x')",
    "s\\n\t{}}{%s",
    "ψ_节点_🙂",
    "def run(*inputs):",
    "tl.store(out0_ptr, 0)",
    "y\r\n  return",
    "z'''\"\"\"",
]


def _hostile_graph(names: Sequence[str]) -> OpGraph:
    """w8 dequant + gather + bias/gelu epilogue + an extern, every node named from `names`."""
    it = iter(names)
    g = OpGraph()
    t = g.input(next(it), (50, 40), torch.float32)
    idx = g.input(next(it), (13,), torch.int64)
    w = g.input(next(it), (40, 24), torch.int8)
    s = g.input(next(it), (24,), torch.float32)
    rows = g.add("index", [t, idx], name=next(it))
    wd = g.add("cast", [w], name=next(it), dtype="float32")
    ws = g.add("mul", [wd, s], name=next(it))
    y = g.add("mm", [rows, ws], name=next(it))
    out = g.add("gelu", [g.add("add", [y, s], name=next(it))], name=next(it), approximate="none")
    sm = g.add("extern", [out], name=next(it), target="aten.softmax.int", args=[{"input": 0}, -1])
    g.set_outputs([out, sm])
    return g


def _names(prefix: str, n: int) -> list[str]:
    return [f"{HOSTILE[i % len(HOSTILE)]}|{prefix}{i}" for i in range(n)]


def test_hostile_names_never_reach_generated_source() -> None:
    names = _names("n", 11)
    g = _hostile_graph(names)
    plain = _hostile_graph([f"node{i}" for i in range(11)])
    for maker in (P.unfused, P.fully_fused, P.heuristic):
        plan = maker(g)
        _assert_valid(plan)
        source = compile_plan(plan).source
        for name in names:
            for form in (name, repr(name), json.dumps(name), name.encode("unicode_escape").decode()):
                assert form not in source, (form, maker.__name__)
        for fragment in ("pwned", "__import__", "ψ", "🙂"):
            assert fragment not in source
        # Names are not part of the code at all: the same structure with plain names gives the same text.
        assert generate_module(maker(plain)).source == source


def test_hostile_names_survive_the_plan_json_round_trip(tmp_path: Path) -> None:
    g = _hostile_graph(_names("j", 11))
    plan = P.fully_fused(g)
    assert Plan.from_json(plan.to_json(), g) == plan
    exported = Path(export_plan(plan, str(tmp_path)))
    for name in _names("j", 11):
        assert name not in exported.read_text()


# ---- (d) layouts and matmul kinds ----------------------------------------------------------------

def _check_plans(g: OpGraph, mixed: Sequence[dict[str, Decision]] = (), configs: Sequence[TileConfig] = (
        SMALL_TILE, SPLIT_TILE), **options: object) -> None:
    plans = [P.unfused(g), P.fully_fused(g), P.heuristic(g)]
    plans += [_plan(g, d, c) for d in [P.fused_decisions(g), *mixed] for c in configs]
    for plan in plans:
        _assert_valid(plan, **options)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_non_contiguous_inputs(dtype: torch.dtype) -> None:
    m, k, n = 21, 40, 24
    g = OpGraph()
    x = g.input("x", (m, k), dtype, strides=(1, m))  # column-major activations
    w = g.input("w", (k, n), dtype, strides=(1, k))  # a transposed [N, K] weight
    y = g.add("mm", [x, w], name="y")
    g.set_outputs([g.add("relu", [y], name="r")])
    inputs = fs.random_inputs(g)
    assert inputs[0].stride() == (1, m) and inputs[1].stride() == (1, k)
    for plan in (P.unfused(g), P.fully_fused(g), _plan(g, P.fused_decisions(g), SPLIT_TILE)):
        v = validate(plan, inputs=inputs)
        assert v.ok, v.reason


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_transpose_permute_and_view_prologues(dtype: torch.dtype) -> None:
    m, k, n = 21, 40, 24
    g = OpGraph()
    x = g.input("x", (m, k // 2, 2), dtype)
    w = g.input("w", (n, k), dtype)
    xv = g.add("view", [x], name="xv", shape=[m, k])
    wt = g.add("transpose", [w], name="wt", dim0=0, dim1=1)
    g.set_outputs([g.add("mm", [xv, wt], name="y")])
    fused = P.fully_fused(g)
    (tk,) = fused.kernels
    assert isinstance(tk, TemplateKernel) and tk.prologue_a == ("xv",) and tk.prologue_b == ("wt",)
    _check_plans(g, [{"wt": ("prologue", "y", "B")}])
    g = OpGraph()
    w = g.input("w", (n, k), dtype)
    x = g.input("x", (m, k), dtype)
    g.set_outputs([g.add("mm", [x, g.add("permute", [w], name="wp", dims=[1, 0])], name="y")])
    _check_plans(g)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_broadcast_prologue_through_unsqueeze_and_expand(dtype: torch.dtype) -> None:
    # The A operand is one row broadcast to every row of the tile.
    g = OpGraph()
    x = g.input("x", (40,), dtype)
    xe = g.add("expand", [g.add("unsqueeze", [x], name="xu", dim=0)], name="xe", shape=[21, 40])
    g.set_outputs([g.add("mm", [xe, g.input("w", (40, 24), dtype)], name="y")])
    assert P.fully_fused(g).kernels[0].prologue_a == ("xu", "xe")  # type: ignore[union-attr]
    _check_plans(g)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_bmm_with_transposed_operand_and_epilogue(dtype: torch.dtype) -> None:
    g = OpGraph()
    a = g.input("a", (3, 21, 40), dtype)
    b = g.input("b", (3, 24, 40), dtype)
    bt = g.add("transpose", [b], name="bt", dim0=1, dim1=2)
    y = g.add("bmm", [a, bt], name="y")
    g.set_outputs([g.add("mul", [y], name="z", scalar=0.5)])
    _check_plans(g, [{"bt": ("prologue", "y", "B")}, {"z": ("epilogue", "y")}])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_addmm_with_alpha_beta_and_a_bias_computed_in_the_epilogue(dtype: torch.dtype) -> None:
    g = OpGraph()
    x, w, b = g.input("x", (21, 40), dtype), g.input("w", (40, 24), dtype), g.input("b", (24,), dtype)
    bias = g.add("add", [g.add("mul", [b], name="b2", scalar=2.0)], name="b3", scalar=-0.5)
    y = g.add("addmm", [bias, x, w], name="y", beta=0.5, alpha=1.5)
    g.set_outputs([g.add("sigmoid", [y], name="z")])
    epi = {"b2": ("epilogue", "y"), "b3": ("epilogue", "y"), "z": ("epilogue", "y")}
    plan = _plan(g, epi)
    assert len(plan.kernels) == 1 and plan.kernels[0].epilogue == ("b2", "b3", "z")  # type: ignore[union-attr]
    _check_plans(g, [epi, {"b3": ("epilogue", "y")}])
    # A full [M, N] bias with negative beta.
    g = OpGraph()
    x, w, c = g.input("x", (21, 40), dtype), g.input("w", (40, 24), dtype), g.input("c", (21, 24), dtype)
    g.set_outputs([g.add("addmm", [c, x, w], name="y", beta=-1.0, alpha=0.25)])
    _check_plans(g)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_linear_with_3d_input_and_bias(dtype: torch.dtype) -> None:
    g = OpGraph()
    x, w, b = g.input("x", (2, 7, 40), dtype), g.input("w", (24, 40), dtype), g.input("b", (24,), dtype)
    y = g.add("linear", [x, w, g.add("neg", [b], name="nb")], name="y")
    g.set_outputs([g.add("silu", [y], name="z")])
    _check_plans(g, [{"nb": ("epilogue", "y"), "z": ("epilogue", "y")}])
    g = OpGraph()
    x, w = g.input("x", (3, 5, 40), dtype), g.input("w", (24, 40), dtype)
    g.set_outputs([g.add("linear", [x, w], name="y")])
    _check_plans(g)


def test_shared_prologue_recomputed_in_two_matmuls() -> None:
    g = OpGraph()
    x, s = g.input("x", (21, 40), torch.float16), g.input("s", (40,), torch.float16)
    w1, w2 = g.input("w1", (40, 24), torch.float16), g.input("w2", (40, 24), torch.float16)
    xs = g.add("mul", [x, s], name="xs")
    y1, y2 = g.add("mm", [xs, w1], name="y1"), g.add("mm", [xs, w2], name="y2")
    g.set_outputs([g.add("add", [y1, y2], name="o")])
    plan = Plan(g, (TemplateKernel("y1", ("xs",), config=SPLIT_TILE),
                    TemplateKernel("y2", ("xs",), epilogue=("o",), config=SMALL_TILE)), frozenset({"xs"})).check()
    _assert_valid(plan)


def test_gathers_of_every_kind_in_a_prologue() -> None:
    for op in ("index", "index_select", "embedding"):
        for idt in (torch.int32, torch.int64):
            g = OpGraph()
            t, i = g.input("t", (50, 40), torch.float16), g.input("i", (21,), idt)
            r = g.add(op, [t, i], name="r")
            g.set_outputs([g.add("mm", [r, g.input("w", (40, 24), torch.float16)], name="y")])
            assert P.fully_fused(g).kernels[0].prologue_a == ("r",)  # type: ignore[union-attr]
            for plan in (P.unfused(g), P.fully_fused(g)):
                _assert_valid(plan)
    # A 2-D index gather viewed as the A operand.
    g = OpGraph()
    t, i = g.input("t", (50, 40), torch.float32), g.input("i", (3, 7), torch.int64)
    rv = g.add("view", [g.add("index", [t, i], name="r")], name="rv", shape=[21, 40])
    g.set_outputs([g.add("mm", [rv, g.input("w", (40, 24), torch.float32)], name="y")])
    _check_plans(g)


# ---- (d) every pointwise op, in an epilogue and in a prologue ------------------------------------

Builder = Callable[[OpGraph, str, str, torch.dtype], str]


def _pos(g: OpGraph, x: str) -> str:
    # Away from 1 so that log stays well conditioned in float16.
    return g.add("add", [g.add("abs", [x])], scalar=2.0)


def _wider(dt: torch.dtype) -> str:
    return "float64" if dt == torch.float32 else "float32"


# op -> (graph, value ~N(0, 0.4) of the tile's shape, a vector along the last dim, graph dtype) -> result node.
POINTWISE: dict[str, Builder] = {
    "add": lambda g, x, v, dt: g.add("add", [x, v]),
    "sub": lambda g, x, v, dt: g.add("sub", [v, x]),
    "mul": lambda g, x, v, dt: g.add("mul", [x, v]),
    "div": lambda g, x, v, dt: g.add("div", [x, _pos(g, v)]),
    "exp": lambda g, x, v, dt: g.add("exp", [x]),
    "log": lambda g, x, v, dt: g.add("log", [_pos(g, x)]),
    "sqrt": lambda g, x, v, dt: g.add("sqrt", [_pos(g, x)]),
    "rsqrt": lambda g, x, v, dt: g.add("rsqrt", [_pos(g, x)]),
    "sigmoid": lambda g, x, v, dt: g.add("sigmoid", [x]),
    "tanh": lambda g, x, v, dt: g.add("tanh", [x]),
    "relu": lambda g, x, v, dt: g.add("relu", [x]),
    "gelu": lambda g, x, v, dt: g.add("gelu", [x], approximate="none"),
    "gelu_tanh": lambda g, x, v, dt: g.add("gelu", [x], approximate="tanh"),
    "silu": lambda g, x, v, dt: g.add("silu", [x]),
    "pow": lambda g, x, v, dt: g.add("pow", [_pos(g, x)], scalar=1.5),
    "pow_tensor": lambda g, x, v, dt: g.add("pow", [_pos(g, x), v]),
    "maximum": lambda g, x, v, dt: g.add("maximum", [x, v]),
    "minimum": lambda g, x, v, dt: g.add("minimum", [x, v]),
    "maximum_scalar": lambda g, x, v, dt: g.add("maximum", [x], scalar=0.1),
    "where_gt": lambda g, x, v, dt: g.add("where", [g.add("gt", [x, v]), x, g.add("neg", [v])]),
    "where_scalar": lambda g, x, v, dt: g.add("where", [g.add("le", [x], scalar=0.0), x], scalar=0.5),
    "clamp": lambda g, x, v, dt: g.add("clamp", [x], min=-0.3, max=0.4),
    # eq against relu's exact zero and ne against a constant are immune to rounding; lt flips only at x == v.
    "compare": lambda g, x, v, dt: g.add("add", [
        g.add("add", [g.add("cast", [g.add("eq", [g.add("relu", [x])], scalar=0.0)], dtype=dtype_name(dt)),
                      g.add("cast", [g.add("ne", [x], scalar=0.25)], dtype=dtype_name(dt))]),
        g.add("cast", [g.add("lt", [x, v])], dtype=dtype_name(dt))]),
    "abs": lambda g, x, v, dt: g.add("abs", [x]),
    "neg": lambda g, x, v, dt: g.add("neg", [x]),
    "cast_float_round_trip": lambda g, x, v, dt: g.add("cast", [g.add("cast", [x], dtype=_wider(dt))],
                                                       dtype=dtype_name(dt)),
    "cast_bool": lambda g, x, v, dt: g.add("cast", [g.add("ge", [x, v])], dtype=dtype_name(dt)),
    # Truncation toward zero of values that are rarely near an integer, and a bool through int8.
    "cast_int": lambda g, x, v, dt: g.add("add", [
        g.add("cast", [g.add("cast", [x], dtype="int32")], dtype=dtype_name(dt)),
        g.add("cast", [g.add("cast", [g.add("ge", [x, v])], dtype="int8")], dtype=dtype_name(dt))]),
}
# Ops whose Triton forms avoid libdevice (the interpreter has none): tanh via the sigmoid, pow by multiplication,
# sqrt or exp/log. Their own test pins that the same source validates in the interpreter.
LIBDEVICE = {"tanh", "gelu_tanh", "pow", "pow_tensor"}


def test_every_registry_pointwise_op_is_exercised() -> None:
    used: set[str] = set()
    for build in POINTWISE.values():
        g = OpGraph()
        x, v = g.input("x", (4, 8), torch.float32), g.input("v", (8,), torch.float32)
        build(g, x, v, torch.float32)
        used |= {node.op for node in g if node.op != "input"}
    # The integer-only bitwise ops are generated and run in Triton against torch in tests/graph/test_bitwise_ops.py
    from tests.graph.test_bitwise_ops import OPS as BITWISE_OPS

    missing = set(ops_of_kind("pointwise")) - used - set(BITWISE_OPS)
    assert not missing, f"pointwise ops with no codegen test: {sorted(missing)}"


def _epilogue_graph(build: Builder, dt: torch.dtype) -> tuple[OpGraph, dict[str, Decision]]:
    g = OpGraph()
    x, w, v = g.input("x", (21, 40), dt), g.input("w", (40, 24), dt), g.input("v", (24,), dt)
    y = g.add("mm", [x, w], name="y")
    y0 = g.add("mul", [y], scalar=0.1)
    g.set_outputs([build(g, y0, v, dt)])
    # What follows the matmul is its epilogue; what only reads the vector is one pointwise kernel.
    after = nx.descendants(g.nx, "y")
    return g, {n.name: ("epilogue", "y") if n.name in after else ("group", "vector")
               for n in g if n.kind == "pointwise"}


def _prologue_graph(build: Builder, dt: torch.dtype) -> tuple[OpGraph, dict[str, Decision]]:
    g = OpGraph()
    x, w, v = g.input("x", (21, 40), dt), g.input("w", (40, 24), dt), g.input("v", (40,), dt)
    x0 = g.add("mul", [x], scalar=0.4)
    a = build(g, x0, v, dt)
    g.set_outputs([g.add("mm", [a, w], name="y")])
    return g, {n.name: ("prologue", "y", "A") for n in g if n.kind == "pointwise"}


INTERPRETABLE = list(POINTWISE)


@pytest.mark.parametrize("upcast", [False, True], ids=["native", "upcast"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", INTERPRETABLE)
def test_pointwise_op_fused_in_an_epilogue(op: str, dtype: torch.dtype, upcast: bool) -> None:
    g, decisions = _epilogue_graph(POINTWISE[op], dtype)
    plan = _plan(g, decisions)
    assert isinstance(plan.kernels[-1], TemplateKernel) and g.outputs[0] in plan.kernels[-1].epilogue
    _assert_valid(plan, upcast_epilogue=upcast)
    if upcast:
        _assert_valid(P.unfused(g))


@pytest.mark.parametrize("upcast", [False, True], ids=["native", "upcast"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", INTERPRETABLE)
def test_pointwise_op_fused_in_a_prologue(op: str, dtype: torch.dtype, upcast: bool) -> None:
    g, decisions = _prologue_graph(POINTWISE[op], dtype)
    plan = _plan(g, decisions)
    assert len(plan.kernels) == 1
    _assert_valid(plan, upcast_prologue=upcast)


@pytest.mark.parametrize("op", sorted(LIBDEVICE))
def test_libdevice_ops_in_the_interpreter(op: str) -> None:
    g, decisions = _epilogue_graph(POINTWISE[op], torch.float32)
    _assert_valid(_plan(g, decisions))


def _chain(g: OpGraph, x: str, v: str, dt: torch.dtype) -> str:
    """Every interpretable pointwise op on `x`, summed with small weights so float16 cannot overflow."""
    terms = [POINTWISE[op](g, x, v, dt) for op in INTERPRETABLE]
    acc = terms[0]
    for t in terms[1:]:
        acc = g.add("add", [acc, g.add("mul", [t], scalar=0.25)])
    return acc


def _chain_graphs(dt: torch.dtype) -> dict[str, tuple[OpGraph, dict[str, Decision]]]:
    return {"epilogue": _epilogue_graph(_chain, dt), "prologue": _prologue_graph(_chain, dt)}


@pytest.mark.parametrize("where", ["epilogue", "prologue"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_chain_of_every_pointwise_op_fused(where: str, dtype: torch.dtype) -> None:
    g, decisions = _chain_graphs(dtype)[where]
    fused = _plan(g, decisions, SPLIT_TILE)
    assert sum(isinstance(k, TemplateKernel) for k in fused.kernels) == 1
    assert len(fused.kernels) == (1 if where == "prologue" else 2)  # + div's and where's vector-only nodes
    option = f"upcast_{where}"
    _assert_valid(fused, **{option: True})
    if dtype == torch.float32:
        _assert_valid(fused, **{option: False})
        _assert_valid(P.unfused(g))


@pytest.mark.parametrize("where", ["epilogue", "prologue"])
def test_upcasting_a_float16_chain_computes_in_float32_and_is_more_accurate(where: str) -> None:
    g, decisions = _chain_graphs(torch.float16)[where]
    plan = _plan(g, decisions)
    option = f"upcast_{where}"
    native, upcast = compile_plan(plan, **{option: False}), compile_plan(plan, **{option: True})
    assert native.source != upcast.source
    assert upcast.source.count("tl.float32") > native.source.count("tl.float32")
    inputs = fs.random_inputs(g, seed=5)
    (ref,) = fs.reference(g, inputs, float64=True)
    err_native = rel_error(native(*inputs, poison=True)[0], ref)
    err_upcast = rel_error(upcast(*inputs, poison=True)[0], ref)
    # Rounding every one of ~60 ops to float16 costs accuracy; keeping them in fp32 recovers it.
    assert err_upcast <= TOLERANCE[torch.float16], err_upcast
    assert err_native < 5e-3, err_native
    assert err_upcast < 0.7 * err_native, (err_upcast, err_native)


def test_prologue_computes_in_float16_unless_upcast() -> None:
    g, decisions = _prologue_graph(POINTWISE["mul"], torch.float16)
    plan = _plan(g, decisions)
    native = generate_module(plan, upcast_prologue=False).source
    upcast = generate_module(plan, upcast_prologue=True).source
    loop = native[native.index("for k_tile"):native.index("tl.dot")]
    assert "tl.float32" not in loop
    loop = upcast[upcast.index("for k_tile"):upcast.index("tl.dot")]
    assert ".to(tl.float32)" in loop
    (operand,) = [line for line in loop.splitlines() if line.strip().startswith("a = ") and "tl.where" not in line]
    assert ".to(tl.float16)" in operand  # back to fp16 for tl.dot


# ---- (e) generated source is a pure function of (graph, plan) ------------------------------------

def test_generated_source_is_a_pure_function_of_graph_and_plan() -> None:
    def build() -> OpGraph:
        return fs.workload("swiglu", dtype=torch.float16, M=9, D=40, H=56)

    a, b = build(), build()
    for maker in (P.unfused, P.fully_fused, P.heuristic):
        first = generate_module(maker(a)).source
        assert generate_module(maker(a)).source == first
        assert generate_module(maker(b)).source == first  # an independently built, equal graph
        assert generate_module(Plan.from_json(maker(a).to_json(), b)).source == first  # a replayed plan
        assert compile_plan(maker(a)).source == first
    fused = P.fused_decisions(a)
    base = generate_module(_plan(a, fused, SMALL_TILE)).source
    variants = [dataclasses.replace(SMALL_TILE, **{key: value}) for key, value in
                [("block_m", 32), ("block_n", 32), ("block_k", 32), ("group_m", 1), ("split_k", 2), ("num_warps", 8),
                 ("num_stages", 2)]]
    sources = {generate_module(_plan(a, fused, c)).source for c in variants}
    assert base not in sources and len(sources) == len(variants)
    assert generate_module(_plan(a, fused, SMALL_TILE), upcast_prologue=True).source != \
        generate_module(_plan(a, fused, SMALL_TILE), upcast_epilogue=False).source


def test_generated_source_changes_with_the_fusion_decisions_and_the_shapes() -> None:
    g = fs.workload("mm_bias_gelu", dtype=torch.float16, M=21, K=40, N=70)
    plans = (P.unfused(g), P.fully_fused(g), _plan(g, {"y_bias": ("epilogue", "y")}))
    texts = {generate_module(p).source for p in plans}
    assert len(texts) == 3
    h = fs.workload("mm_bias_gelu", dtype=torch.float16, M=22, K=40, N=70)
    assert generate_module(P.fully_fused(h)).source not in texts


def test_compiled_plans_share_the_content_keyed_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSIONSEARCH_CACHE_DIR", str(tmp_path))
    g = fs.workload("scale_mm", dtype=torch.float32, M=21, K=40, N=24)
    first, second = compile_plan(P.fully_fused(g)), compile_plan(P.fully_fused(g))
    assert first.cache_key == second.cache_key
    files = list((tmp_path / "kernels").iterdir())
    assert [f.name for f in files] == [f"fs_{first.cache_key}.py"]
    assert files[0].read_text() == first.source


# ---- plan legality and code generation agree ------------------------------------------------------

def test_a_legal_plan_with_a_stored_bias_node_generates() -> None:
    g = OpGraph()
    x, w = g.input("x", (21, 40), torch.float32), g.input("w", (40, 24), torch.float32)
    b = g.input("b", (24,), torch.float32)
    bias = g.add("mul", [b], name="bias", scalar=2.0)
    g.set_outputs([g.add("addmm", [bias, x, w], name="y"), bias])
    try:
        plan = _plan(g, {"bias": ("epilogue", "y")})
    except PlanError:
        return  # refusing the plan is an acceptable answer too
    _assert_valid(plan)


def test_a_graph_with_an_unused_node_generates() -> None:
    g = OpGraph()
    x, w = g.input("x", (21, 40), torch.float32), g.input("w", (40, 24), torch.float32)
    g.add("neg", [x], name="unused")
    g.set_outputs([g.add("mm", [x, w], name="y")])
    try:
        plan = P.unfused(g)
    except PlanError:
        return
    _assert_valid(plan)


# ---- serial split-K ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "shape"), [("mm_bias_gelu", {"M": 16, "K": 512, "N": 96}),
                                             ("w8_dequant_mm", {"M": 5, "K": 256, "N": 64}),
                                             ("swiglu", {"M": 3, "D": 256, "H": 96})])
def test_serial_split_k_is_one_launch_and_sums_like_the_reduce_kernel(name: str, shape: dict[str, int]) -> None:
    """The last split of a tile sums the partials in split order: the outputs equal the two-kernel form's
    exactly, match the float64 reference, and a second call (counters reset by the kernel) gives them again."""
    g = fs.workload(name, dtype=torch.float32, **shape)
    base = P.heuristic(g)
    plan = Plan(g, [dataclasses.replace(k, config=dataclasses.replace(k.config, split_k=4, block_k=32))
                    if isinstance(k, TemplateKernel) else k for k in base.kernels], base.recompute)
    inputs = fs.random_inputs(g, seed=1)
    two = compile_plan(plan, serial_split_k=False)
    one = compile_plan(plan, serial_split_k=True)
    launches = lambda src: src[src.index("def run("):src.index("def steps(")].count("[(")  # noqa: E731
    templates = sum(isinstance(k, TemplateKernel) for k in plan.kernels)
    assert launches(one.source) == launches(two.source) - templates
    expected = two(*inputs)
    for _ in range(2):
        got = one(*inputs, poison=True)
        assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))
    assert validate(plan, g, inputs, serial_split_k=True).ok
    assert all(int(c.abs().sum()) == 0 for c in one.module._SEMAPHORES.values())  # left at zero for the next call


@pytest.mark.parametrize("serial", [True, False], ids=["serial", "two-kernel"])
def test_the_split_k_workspace_is_kept_between_calls_and_fresh_when_poisoned(serial: bool) -> None:
    """A call allocates only its outputs: the fp32 partial tiles live in one kept buffer per kernel and device
    (as cuBLAS keeps its workspace); results stay right call after call. Validation's poisoned calls take a
    fresh NaN-filled workspace instead, so a partial tile never written cannot read as an earlier call's."""
    g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=7, K=128, N=48)
    base = P.heuristic(g)
    plan = Plan(g, [dataclasses.replace(k, config=dataclasses.replace(k.config, split_k=4, block_k=32))
                    if isinstance(k, TemplateKernel) else k for k in base.kernels], base.recompute)
    compiled = compile_plan(plan, serial_split_k=serial)
    mod = compiled.module
    inputs = fs.random_inputs(g, seed=2)
    exact = fs.reference(g, inputs, float64=True)[0]
    kept = []
    for _ in range(3):
        out = compiled(*inputs)[0]
        assert rel_error(out, exact) <= TOLERANCE[torch.float32]
        assert len(mod._WORKSPACES) == 1
        kept.append(next(iter(mod._WORKSPACES.values())).data_ptr())
    assert len(set(kept)) == 1

    def refuse(*args: object) -> None:
        raise AssertionError("a poisoned call used the kept workspace")

    mod._workspace, original = refuse, mod._workspace
    try:
        assert rel_error(compiled(*inputs, poison=True)[0], exact) <= TOLERANCE[torch.float32]
    finally:
        mod._workspace = original
