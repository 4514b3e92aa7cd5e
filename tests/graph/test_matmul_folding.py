"""gpt-fast's attention output projection at one token a step traces as a bmm against the weight broadcast over
the batch (aten's matmul does not fold a 3-D input whose size-1 dim has an odd stride); capture folds it into
one mm of batch rows, computing what eager computes. A bmm of distinct matrices stays a bmm."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import fusionsearch as fs
from fusionsearch.codegen.runtime import compile_plan
from fusionsearch.plan import heuristic


def _projection(y: torch.Tensor, w: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """gpt-fast's form: heads back to the model dim, then an int8 weight-only linear (scale after the matmul)."""
    b, _, s, _ = y.shape
    return F.linear(y.transpose(1, 2).contiguous().view(b, s, -1), w.to(y.dtype)) * scale


def _inputs(batch: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(batch)
    y = torch.randn(batch, 4, 1, 16, generator=g)  # [batch, heads, 1 token, head dim]
    w = torch.randint(-127, 128, (48, 64), generator=g, dtype=torch.int8)
    return y, w, torch.rand(48, generator=g) / 64


def test_the_projection_traces_as_a_broadcast_bmm_in_aten() -> None:
    """The precondition: without the fold, aten's own trace of this code holds a bmm."""
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(_projection, tracing_mode="fake")(*_inputs(8))
    assert any(n.target == torch.ops.aten.bmm.default for n in gm.graph.nodes)


def test_a_broadcast_bmm_is_captured_as_one_mm_of_the_batch_rows() -> None:
    inputs = _inputs(8)
    g = fs.capture(_projection, *inputs)
    mms = g.nodes_of_kind("template")
    assert [g.node(m).op for m in mms] == ["mm"] and g.node(mms[0]).shape == (8, 48)
    assert not [n for n in g if n.op == "expand" and n.shape == (8, 64, 48)]  # the broadcast weight is gone
    got = fs.reference(g, list(inputs), float64=True)[0]
    want = _projection(*(t.double() if t.is_floating_point() else t for t in inputs))
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    out = compile_plan(heuristic(g)).module.run(*inputs)[0]  # the generated kernels, in the interpreter
    assert torch.allclose(out.double(), want, rtol=1e-5, atol=1e-6)


def test_a_bmm_of_distinct_matrices_stays_a_bmm() -> None:
    a, b = torch.randn(4, 3, 8), torch.randn(4, 8, 5)
    g = fs.capture(lambda x, y: torch.bmm(x, y) * 2, a, b)
    assert [g.node(m).op for m in g.nodes_of_kind("template")] == ["bmm"]
    assert torch.allclose(fs.reference(g, [a, b])[0], torch.bmm(a, b) * 2)


def test_matrices_times_one_column_are_captured_as_one_row_times_the_transposed_matrices() -> None:
    """bmm(w [b, m, k], x [b, k, 1]) (transformers' batched experts) becomes bmm(x^T, w^T) transposed back: the
    rows-first form of the decode and grouped kinds, the same values."""
    g_ = torch.Generator().manual_seed(0)
    w, x = torch.randn(6, 40, 24, generator=g_), torch.randn(6, 24, generator=g_)

    def experts(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.bmm(w, x.unsqueeze(-1)).squeeze(-1) * 2

    g = fs.capture(experts, w, x)
    (mm,) = g.nodes_of_kind("template")
    assert g.node(mm).op == "bmm" and g.node(mm).shape == (6, 1, 40)
    got = fs.reference(g, [w, x], float64=True)[0]
    assert torch.allclose(got, experts(w.double(), x.double()), rtol=1e-12, atol=1e-12)
    out = compile_plan(heuristic(g)).module.run(w, x)[0]
    assert torch.allclose(out.double(), experts(w.double(), x.double()), rtol=1e-5, atol=1e-5)
