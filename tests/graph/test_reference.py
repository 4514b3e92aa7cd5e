"""The reference executor and random inputs: eager PyTorch op by op, realistic and valid inputs."""

from __future__ import annotations

import pytest
import torch

import fusionsearch as fs
from fusionsearch.datasets.workloads import WORKLOADS
from fusionsearch.errors import MeasureError
from fusionsearch.graph import OpGraph
from fusionsearch.graph.reference import check_inputs

# Small shapes for every workload; sizes differ per dim so a transposed operand cannot pass by accident.
SMALL: dict[str, dict[str, int]] = {
    "w8_dequant_mm": {"M": 4, "K": 32, "N": 24},
    "gather_mm": {"M": 64, "K": 16, "N": 8, "T": 50},
    "mm_bias_gelu": {"M": 5, "K": 16, "N": 12},
    "cast_mm": {"M": 6, "K": 16, "N": 10},
    "scale_mm": {"M": 7, "K": 16, "N": 9},
    "swiglu": {"M": 3, "D": 16, "H": 40},
    "w4_dequant_mm": {"M": 3, "K": 32, "N": 24, "G": 8},
    "w8_linear": {"M": 2, "K": 40, "N": 24},
    "moe_ffn": {"T": 5, "D": 16, "H": 40, "E": 3},
}
DTYPES = [torch.float32, torch.bfloat16]


def test_every_workload_has_a_small_shape() -> None:
    assert set(SMALL) == set(WORKLOADS)
    for name, shape in SMALL.items():
        assert set(shape) == set(WORKLOADS[name].defaults), name


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(SMALL))
def test_reference_equals_plain_pytorch(name: str, dtype: torch.dtype) -> None:
    g = fs.workload(name, dtype=dtype, **SMALL[name])
    inputs = fs.random_inputs(g, seed=1)
    outs = fs.reference(g, inputs)
    expected = WORKLOADS[name].torch_fn(*inputs)
    assert len(outs) == len(g.outputs) == 1
    out = outs[0]
    node = g.node(g.outputs[0])
    assert out.dtype == expected.dtype == node.dtype == dtype
    assert tuple(out.shape) == tuple(expected.shape) == node.shape
    assert torch.equal(out, expected), f"max diff {(out.float() - expected.float()).abs().max().item()}"
    assert torch.isfinite(out.float()).all()
    assert out.float().abs().max() > 0  # the inputs are not degenerate zeros


@pytest.mark.parametrize("name", sorted(SMALL))
def test_float64_reference_is_float64_and_close_to_float32(name: str) -> None:
    g = fs.workload(name, dtype=torch.float32, **SMALL[name])
    inputs = fs.random_inputs(g, seed=2)
    before = [t.clone() for t in inputs]
    (ref32,) = fs.reference(g, inputs)
    (ref64,) = fs.reference(g, inputs, float64=True)
    assert ref32.dtype == torch.float32 and ref64.dtype == torch.float64
    torch.testing.assert_close(ref64, ref32.double(), rtol=1e-4, atol=1e-4 * ref64.abs().max().item())
    assert not torch.equal(ref64, ref32.double())  # it really computed in float64
    for t, b in zip(inputs, before, strict=True):  # the caller's inputs are left untouched
        assert t.dtype == b.dtype and torch.equal(t, b)


def test_float64_reference_keeps_low_precision_casts_exact() -> None:
    # In float64 mode a cast to bf16 is not rounded: the ideal result differs from the bf16 eager one.
    g = OpGraph()
    x = g.input("x", (64,), "float32")
    g.set_outputs([g.add("cast", [x], name="xb", dtype="bfloat16")])
    inputs = fs.random_inputs(g, seed=0)
    (exact,) = fs.reference(g, inputs, float64=True)
    (rounded,) = fs.reference(g, inputs)
    assert exact.dtype == torch.float64 and rounded.dtype == torch.bfloat16
    assert torch.equal(exact, inputs[0].double())
    assert not torch.equal(exact, rounded.double())


# ---- random inputs ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(SMALL))
def test_random_inputs_have_the_graph_shapes_dtypes_strides(name: str) -> None:
    g = fs.workload(name, **SMALL[name])
    inputs = fs.random_inputs(g, seed=0)
    assert len(inputs) == len(g.inputs)
    for input_name, t in zip(g.inputs, inputs, strict=True):
        node = g.node(input_name)
        assert (tuple(t.shape), t.dtype, tuple(t.stride())) == (node.shape, node.dtype, node.strides), input_name
        assert t.device.type == "cpu"
    check_inputs(g, inputs)


def test_random_inputs_follow_non_contiguous_strides() -> None:
    g = OpGraph()
    x = g.input("x", (3, 4), "float32")
    w = g.input("w", (4, 5), "float32", strides=(1, 4))  # a weight stored transposed
    g.set_outputs([g.add("mm", [x, w], name="y")])
    xs, ws = fs.random_inputs(g, seed=0)
    assert ws.stride() == (1, 4) and not ws.is_contiguous()
    assert xs.stride() == (4, 1)
    (y,) = fs.reference(g, [xs, ws])
    assert torch.equal(y, xs @ ws)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_random_inputs_are_deterministic_per_seed(name: str) -> None:
    g = fs.workload(name, **SMALL[name])
    a, b, c = fs.random_inputs(g, seed=3), fs.random_inputs(g, seed=3), fs.random_inputs(g, seed=4)
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(torch.equal(x, z) for x, z in zip(a, c, strict=True))
    assert not torch.equal(a[0], c[0])


def test_gather_indices_are_in_range_and_varied() -> None:
    g = fs.workload("gather_mm", M=64, K=16, N=8, T=50)
    for seed in range(5):
        x, idx, w = fs.random_inputs(g, seed=seed)
        assert idx.dtype == torch.int64 and idx.shape == (64,)
        assert int(idx.min()) >= 0 and int(idx.max()) < 50
        assert len(torch.unique(idx)) > 10, idx  # never all zeros, nor all one row
        assert x.shape == (50, 16)


def test_int8_inputs_span_negative_and_positive() -> None:
    g = fs.workload("w8_dequant_mm", M=4, K=64, N=64)
    _, w, s = fs.random_inputs(g, seed=0)
    assert w.dtype == torch.int8
    assert int(w.min()) < -64 and int(w.max()) > 64  # the full int8 range, as real quantised weights
    assert s.dtype == torch.bfloat16 and (s < 0).any() and (s > 0).any()


def test_inputs_feeding_log_sqrt_and_denominators_are_positive() -> None:
    g = OpGraph()
    a = g.input("a", (256,), "float32")
    b = g.input("b", (256,), "bfloat16")
    c = g.input("c", (256,), "float32")
    d = g.input("d", (256,), "float32")
    free = g.input("free", (256,), "float32")
    la = g.add("log", [a], name="la")
    sb = g.add("sqrt", [g.add("cast", [g.add("mul", [b], name="b2", scalar=2.0)], name="bc", dtype="float32")],
               name="sb")
    rc = g.add("rsqrt", [c], name="rc")
    q = g.add("div", [free, d], name="q")
    g.set_outputs([g.add("add", [g.add("add", [la, sb], name="s1"), g.add("add", [rc, q], name="s2")], name="out")])
    inputs = fs.random_inputs(g, seed=0)
    named = dict(zip(g.inputs, inputs, strict=True))
    for name in ("a", "b", "c", "d"):
        assert (named[name] > 0).all(), name
    assert (named["free"] < 0).any() and (named["free"] > 0).any()  # the numerator stays ~N(0, 1)
    (out,) = fs.reference(g, inputs)
    assert torch.isfinite(out).all()


# ---- check_inputs ----------------------------------------------------------------------------------

@pytest.fixture
def w8() -> OpGraph:
    return fs.workload("w8_dequant_mm", M=2, K=16, N=8)


def test_check_inputs_refuses_wrong_count(w8: OpGraph) -> None:
    x, w, _ = fs.random_inputs(w8)
    with pytest.raises(MeasureError, match=r"the graph takes 3 inputs \(x, w, s\), got 2"):
        fs.reference(w8, [x, w])


def test_check_inputs_refuses_wrong_shape_naming_the_input(w8: OpGraph) -> None:
    x, w, s = fs.random_inputs(w8)
    with pytest.raises(MeasureError) as err:
        fs.reference(w8, [x, w.t().contiguous(), s])
    msg = str(err.value)
    assert "input 'w'" in msg and "[16, 8]" in msg and "got [8, 16]" in msg, msg


def test_check_inputs_refuses_wrong_dtype_naming_the_input(w8: OpGraph) -> None:
    x, w, s = fs.random_inputs(w8)
    with pytest.raises(MeasureError) as err:
        check_inputs(w8, [x, w, s.float()])
    msg = str(err.value)
    assert "input 's'" in msg and "torch.bfloat16" in msg and "got [8] torch.float32" in msg, msg


def test_check_inputs_refuses_a_non_tensor(w8: OpGraph) -> None:
    x, w, _ = fs.random_inputs(w8)
    with pytest.raises(MeasureError, match=r"input 's' must be a tensor, got list"):
        check_inputs(w8, [x, w, [1.0] * 8])


def test_the_reference_keeps_only_the_values_still_to_be_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chain of ten ops: when each op runs, every value before its input is already freed (a gathered
    float64 expert table kept to the end was 45 GB at 16 tokens), and the outputs are still right."""
    import importlib
    import weakref

    reference_module = importlib.import_module("fusionsearch.graph.reference")  # the package's name is the function

    g = OpGraph()
    v = g.input("x", (64,), torch.float32)
    for i in range(10):
        v = g.add("mul", [v], name=f"m{i}", scalar=1.5)
    g.set_outputs([v])
    made: list[weakref.ref[torch.Tensor]] = []
    most_alive = 0
    real_get_op = reference_module.get_op

    class Recording:
        def __init__(self, op: object) -> None:
            self.op = op

        def torch_ref(self, args: list[torch.Tensor], attrs: dict[str, object]) -> torch.Tensor:
            nonlocal most_alive
            most_alive = max(most_alive, sum(r() is not None for r in made))
            out = self.op.torch_ref(args, attrs)  # type: ignore[attr-defined]
            made.append(weakref.ref(out))
            return out

    monkeypatch.setattr(reference_module, "get_op", lambda name: Recording(real_get_op(name)))
    (x,) = fs.random_inputs(g, seed=0)
    (out,) = fs.reference(g, [x], float64=True)
    assert torch.equal(out, x.double() * 1.5 ** 10)
    assert most_alive == 1, most_alive  # only the op's own input; kept to the end it would be 9


def test_a_float64_reference_the_gpu_has_no_memory_for_runs_on_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """A search beside a benchmark on an H100 failed 8 of 8 trials on the reference's 14 GiB allocation."""
    import importlib

    R = importlib.import_module("fusionsearch.graph.reference")  # the package exports its function by that name
    g = fs.workload("mm_bias_gelu", M=5, K=7, N=3)
    inputs = fs.random_inputs(g, seed=0)
    expected = R.reference(g, inputs, float64=True)
    devices: list[str] = []
    evaluate = R._evaluate

    def short_of_memory(g: OpGraph, ins: list[torch.Tensor], float64: bool, replaced: dict) -> list[torch.Tensor]:
        devices.append("accelerator" if ins is inputs else "host")
        if ins is inputs:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 14.00 GiB.")
        return evaluate(g, ins, float64, replaced)

    monkeypatch.setattr(R, "_evaluate", short_of_memory)
    with pytest.raises(torch.OutOfMemoryError):  # inputs on the host: nowhere else to go
        R.reference(g, inputs, float64=True)
    monkeypatch.setattr(R, "accelerator", lambda ins: torch.device("cpu"))  # as if the inputs were on a GPU
    devices.clear()
    got = R.reference(g, inputs, float64=True)
    assert devices == ["accelerator", "host"]
    assert all(torch.equal(a, b) and a.dtype == torch.float64 for a, b in zip(got, expected, strict=True))


def test_float64_reference_casts_each_input_when_first_read_not_all_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 53 item 5: `fusionsearch run` of a full-size swiglu took 1.9 GB: the float64 reference cast every
    input up front, all three weights' float64 copies alive beside the inputs. Each input is now cast when
    first read and dropped after its last use: one weight's copy at a time in a chain of matmuls."""
    import gc
    import importlib

    R = importlib.import_module("fusionsearch.graph.reference")  # the module (the package exports the function)

    g = OpGraph()
    x = g.input("x", [4, 48], "float32")
    h = g.add("mm", [x, g.input("w1", [48, 48], "float32")])
    h = g.add("mm", [h, g.input("w2", [48, 48], "float32")])
    g.set_outputs([g.add("mm", [h, g.input("w3", [48, 48], "float32")])])
    live: list[int] = []
    apply_op = R.apply_op

    def counting(node, args, float64):  # type: ignore[no-untyped-def]
        live.append(sum(isinstance(o, torch.Tensor) and o.dtype == torch.float64 and o.shape == (48, 48)
                        for o in gc.get_objects()))
        return apply_op(node, args, float64)

    monkeypatch.setattr(R, "apply_op", counting)
    inputs = fs.random_inputs(g, seed=0)
    out = fs.reference(g, inputs, float64=True)[0]
    assert live == [1, 1, 1]  # all cast at once: [3, 2, 1]
    w = [t.double() for t in inputs]
    assert torch.equal(out, w[0] @ w[1] @ w[2] @ w[3])
