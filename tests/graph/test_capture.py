"""capture: PyTorch functions and modules traced to aten, mapped onto registry ops or extern nodes."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import fusionsearch as fs
from fusionsearch import GraphError
from fusionsearch.codegen.runtime import compile_plan
from fusionsearch.datasets.workloads import WORKLOADS
from fusionsearch.graph.opgraph import OpGraph

SMALL = {"M": 16, "K": 32, "N": 24, "T": 20, "D": 16, "H": 32, "G": 8, "E": 4}


def ops(g: OpGraph) -> list[str]:
    return [n.op for n in g if n.op != "input"]


def only(g: OpGraph, op: str) -> fs.graph.Node:
    found = [n for n in g if n.op == op]
    assert len(found) == 1, g.describe()
    return found[0]


def assert_reference_matches(g: OpGraph, inputs: list[torch.Tensor], expected: object) -> None:
    expected = list(expected) if isinstance(expected, tuple | list) else [expected]
    got = fs.reference(g, inputs)
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize(("name", "dtype"),
                         [(n, d) for n in WORKLOADS for d in (torch.float32, torch.bfloat16)])
def test_capture_of_each_workloads_torch_form_matches_its_builder(name: str, dtype: torch.dtype) -> None:
    w = WORKLOADS[name]
    g = fs.workload(name, dtype=dtype, **{k: SMALL[k] for k in w.defaults})
    inputs = fs.random_inputs(g)
    captured = fs.capture(w.torch_fn, *inputs)
    assert captured.same_structure(g), f"captured:\n{captured.describe()}\nbuilt:\n{g.describe()}"
    assert captured.inputs == g.inputs  # names come from the function's parameters
    assert_reference_matches(captured, inputs, w.torch_fn(*inputs))


def test_module_parameters_become_trailing_inputs_and_softmax_an_extern() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Softmax(dim=-1))
    x = torch.randn(4, 8)
    g = fs.capture(model, x)
    assert g.inputs == ["input", "0_weight", "0_bias"]
    assert ops(g) == ["transpose", "addmm", "gelu", "extern"]
    assert only(g, "gelu").attrs == {"approximate": "none"}
    assert only(g, "extern").attrs["target"] == "aten._softmax.default"
    inputs = [x, *(p.detach() for p in model.parameters())]
    with torch.no_grad():
        assert_reference_matches(g, inputs, model(x))
        exact = model.double()(x.double())
    torch.testing.assert_close(fs.reference(g, inputs, float64=True)[0], exact, rtol=1e-6, atol=1e-7)


def test_module_buffers_and_batched_linear() -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(8, 8, bias=False)
            self.register_buffer("gain", torch.linspace(0.5, 1.5, 8))

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return self.proj(tokens) * self.gain

    model = Scaled()
    x = torch.randn(2, 3, 8)
    g = fs.capture(model, x)
    assert g.inputs == ["tokens", "proj_weight", "gain"]
    assert "view" in ops(g) and "mm" in ops(g) and "extern" not in ops(g)
    with torch.no_grad():
        assert_reference_matches(g, [x, model.proj.weight, model.gain], model(x))


@pytest.mark.parametrize(("fn", "target"), [
    (lambda x: torch.cumsum(x * 2.0, dim=1), "aten.cumsum.default"),
    (lambda x: F.layer_norm(x, (x.shape[-1],)) + 1.0, "aten.native_layer_norm.default"),
])
def test_unsupported_op_becomes_extern_and_reference_still_matches(fn: object, target: str) -> None:
    x = torch.randn(6, 10)
    g = fs.capture(fn, x)  # type: ignore[arg-type]
    ext = only(g, "extern")
    assert ext.attrs["target"] == target
    assert ext.attrs["args"][0] == {"input": 0}
    assert_reference_matches(g, [x], fn(x))  # type: ignore[operator]


def test_multi_output_op_gives_one_extern_per_used_output() -> None:
    def halves(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = torch.split(x, 3, dim=0)
        return b.exp(), a

    x = torch.randn(6, 4)
    g = fs.capture(halves, x)
    externs = [n for n in g if n.op == "extern"]
    assert sorted(n.attrs.get("output_index") for n in externs) == [0, 1]
    assert_reference_matches(g, [x], halves(x))


@pytest.mark.parametrize(("fn", "op", "attrs"), [
    (lambda x: x * 0.5, "mul", {"scalar": 0.5}),
    (lambda x: 2 - x, "sub", {"scalar": 2, "scalar_first": True}),
    (lambda x: x ** 2, "pow", {"scalar": 2}),
    (lambda x: 2.0 ** x, "pow", {"scalar": 2.0, "scalar_first": True}),
    (lambda x: x / 4, "div", {"scalar": 4}),
    (lambda x: torch.clamp(x, -1, 1), "clamp", {"min": -1, "max": 1}),
    (lambda x: torch.clamp(x, min=0.25), "clamp", {"min": 0.25}),
    (lambda x: x > 0.5, "gt", {"scalar": 0.5}),
])
def test_python_scalar_operand_becomes_scalar_attr(fn: object, op: str, attrs: dict[str, object]) -> None:
    x = torch.randn(5, 7)
    g = fs.capture(fn, x)  # type: ignore[arg-type]
    assert ops(g) == [op]
    node = only(g, op)
    assert node.attrs == attrs and node.inputs == ("x",)
    assert_reference_matches(g, [x], fn(x))  # type: ignore[operator]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_where_with_a_scalar_branch_folds_the_scalar(dtype: torch.dtype) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x, 0.0) + torch.where(x < 0, 1.0, x)

    x = torch.randn(4, 8, dtype=dtype)
    g = fs.capture(fn, x)
    wheres = [n for n in g if n.op == "where"]
    expected = [(2, {"scalar": 0.0}), (2, {"scalar": 1.0, "scalar_first": True})]
    assert [(len(n.inputs), n.attrs) for n in wheres] == expected
    assert "extern" not in ops(g) and g.node(g.outputs[0]).dtype == dtype
    assert_reference_matches(g, [x], fn(x))


def test_add_with_alpha_multiplies_explicitly() -> None:
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    g = fs.capture(lambda x, y: torch.add(x, y, alpha=3), x, y)
    assert ops(g) == ["mul", "add"]
    assert only(g, "mul").attrs == {"scalar": 3}
    assert_reference_matches(g, [x, y], x + 3 * y)


def test_transposed_weight_matmul_captures_a_transpose() -> None:
    x, w = torch.randn(16, 32), torch.randn(24, 32)
    g = fs.capture(lambda x, w: x @ w.t(), x, w)
    assert ops(g) == ["transpose", "mm"]
    t, mm = only(g, "transpose"), only(g, "mm")
    assert t.inputs == ("w",) and t.attrs == {"dim0": 0, "dim1": 1} and t.shape == (32, 24)
    assert mm.inputs == ("x", t.name)
    assert_reference_matches(g, [x, w], x @ w.t())


def test_input_strides_come_from_the_examples_and_negative_dims_are_normalised() -> None:
    w = torch.randn(32, 24).t()  # a transposed (column-major) example weight
    x = torch.randn(2, 16, 24)
    g = fs.capture(lambda x, w: x.transpose(-2, -1).unsqueeze(-1), x, w)
    assert g.node("w").strides == (1, 24) and g.node("x").strides == (384, 24, 1)
    assert only(g, "transpose").attrs == {"dim0": 1, "dim1": 2}
    assert only(g, "unsqueeze").attrs == {"dim": 3}


def test_identity_ops_reuse_their_input_and_casts_map_to_cast() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return x.clone().contiguous().detach().to(torch.float32).to(torch.bfloat16).relu()

    x = torch.randn(4, 4)
    g = fs.capture(fn, x)
    assert ops(g) == ["cast", "relu"]
    assert only(g, "cast").attrs == {"dtype": "bfloat16"}
    assert_reference_matches(g, [x], fn(x))


def test_gathers_map_to_indexing_ops() -> None:
    table, idx = torch.randn(10, 8), torch.tensor([3, 0, 9, 3])

    def fn(t: torch.Tensor, i: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return t[i], t.index_select(0, i), F.embedding(i, t)

    g = fs.capture(fn, table, idx)
    assert ops(g) == ["index", "index_select", "embedding"]
    assert only(g, "embedding").inputs == ("t", "i")
    assert_reference_matches(g, [table, idx], fn(table, idx))


def test_registry_refusal_falls_back_to_extern() -> None:
    a, b = torch.randint(-3, 3, (4, 5)), torch.randint(-3, 3, (5, 6))  # integer mm: not a template the registry takes
    g = fs.capture(lambda a, b: a @ b, a, b)
    assert ops(g) == ["extern"] and only(g, "extern").attrs["target"] == "aten.mm.default"
    assert_reference_matches(g, [a, b], a @ b)


def test_captured_graph_round_trips_through_json(tmp_path: object) -> None:
    x = torch.randn(4, 6)
    g = fs.capture(lambda x: torch.softmax(x * 0.5, dim=-1).sum(dim=0), x)
    path = f"{tmp_path}/g.json"
    g.save(path)
    assert fs.load_graph(path).same_structure(g)


@pytest.mark.parametrize(("args", "message"), [
    ((3, torch.randn(2)), "function or nn.Module"),
    ((lambda x: x, [1.0, 2.0]), "example input 0 must be a tensor or a Python number"),
    ((lambda x, y: x, torch.randn(2), "2.0"), "example input 1 must be a tensor or a Python number"),
    ((lambda x: x, torch.randn(2), 2.0), "takes 1 positional argument but 2 were given"),
    ((lambda a, b: a @ b, torch.randn(2, 3), torch.randn(4, 3)), "tracing"),
    ((lambda x: x + torch.tensor([1.0, 2.0]), torch.randn(2)), "constant tensor"),
    ((lambda x: 3, torch.randn(2)), "must return a tensor"),
])
def test_bad_input_raises_one_clear_graph_error(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(GraphError, match=message) as info:
        fs.capture(*args)  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_default_and_keyword_arguments_and_python_scalars_capture() -> None:
    def f(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor, scale: float = 0.125) -> torch.Tensor:
        return (q @ k.t()) * scale + mask

    q, k, mask = torch.randn(4, 8), torch.randn(6, 8), torch.randn(4, 6)
    g = fs.capture(f, q, k, mask)  # the default scale is a constant of the trace
    assert g.inputs == ["q", "k", "mask"]
    assert torch.allclose(fs.reference(g, [q, k, mask])[0], f(q, k, mask))
    g = fs.capture(f, q, k, mask=mask, scale=0.5)  # a keyword tensor is an input, a keyword number a constant
    assert g.inputs == ["q", "k", "mask"]
    assert torch.allclose(fs.reference(g, [q, k, mask])[0], f(q, k, mask, 0.5))
    with pytest.raises(GraphError, match="keyword argument 'scale' must be a tensor or a Python number"):
        fs.capture(f, q, k, mask, scale="0.5")


def test_an_in_place_write_of_an_input_is_an_output_of_the_program_and_refused_by_capture() -> None:
    from fusionsearch.graph.capture import capture_program

    def write(x: torch.Tensor, cache: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        cache[:, pos] = x * 2
        return cache.sum(1) @ x

    x, cache, pos = torch.randn(3, 2), torch.zeros(3, 5), torch.tensor([1, 4])
    program = capture_program(write, x, cache, pos)
    assert (program.returned, program.mutated) == (1, ("cache",))
    written = cache.clone()
    want = write(x, written, pos)
    out, new_cache = fs.reference(program.graph, [x, cache, pos])
    assert torch.allclose(out, want) and torch.equal(new_cache, written)
    with pytest.raises(GraphError, match="writes its input 'cache' in place"):
        fs.capture(write, x, cache, pos)


@pytest.mark.parametrize("take", [lambda x: x[:, 8:40], lambda x: x.narrow(1, 3, 32), lambda x: x[:, -40:-8],
                                  lambda x: x[:, 1:65:2], lambda x: x[2:18, 5:37]],
                         ids=["slice", "narrow", "negative", "step", "rows"])
def test_slices_capture_as_index_maps_and_fuse_into_the_matmul_prologue(take: object) -> None:
    from fusionsearch import plan as P

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(take(x)) @ w  # type: ignore[operator]

    x, w = torch.randn(20, 70), torch.randn(32, 24)
    g = fs.capture(f, x, w)
    assert "extern" not in [n.op for n in g] and "slice" in [n.op for n in g]
    assert torch.allclose(fs.reference(g, [x, w])[0], f(x, w))
    plan = P.fully_fused(g)
    assert any(k.kind == "template" and k.prologue_a for k in plan.kernels)  # the slice and relu in the loads
    v = fs.measure.validate(plan, g)
    assert v.ok, v.reason
    assert torch.allclose(compile_plan(plan)(x, w)[0], f(x, w), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("fn", "message"), [
    (lambda a, c: (a @ c) * a.max().item(),
     "cannot capture `.item()` (or float(), int(), bool()) of a tensor (the result of max): a Python number read "
     "from a tensor's values is data-dependent; keep it a tensor (`t.max()`, not `t.max().item()`)"),
    (lambda a, c: (a @ c) if a.sum() > 0 else c,
     "tracing <lambda> failed: it decides in Python on a tensor's values (`if t > 0`, float(t), int(t), `.item()` "
     "used as a number or size), which cannot be captured; keep it a tensor (torch.where instead of if)"),
    (lambda a, c: torch.nonzero(a @ c),
     "cannot capture nonzero: the size of its output depends on its input's values (data-dependent); only ops "
     "whose output sizes follow from input sizes can be captured"),
], ids=["item", "branch", "nonzero"])
def test_a_data_dependent_value_is_refused_naming_what_was_written(fn: object, message: str) -> None:
    with pytest.raises(GraphError) as e:
        fs.capture(fn, torch.randn(4, 4), torch.randn(4, 4))
    assert str(e.value) == message
