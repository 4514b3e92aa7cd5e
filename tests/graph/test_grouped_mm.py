"""A grouped matmul with offsets (`torch._grouped_mm`, transformers' `grouped_mm_fallback`) is captured as each
row times its group's matrix gathered by index (graph/grouped_mm.py): in float32, which aten's fake kernel
refuses, and in bfloat16; uneven groups, empty groups and one group compute what eager computes; the weight
gathered as stored, then transposed."""

from __future__ import annotations

import pytest
import torch

import fusionsearch as fs
from fusionsearch.graph.grouped_mm import rows_by_group
from fusionsearch.graph.opgraph import OpGraph

K, N = 12, 10


def _per_group(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """The float64 loop: group e's rows (offs[e-1] to offs[e]) times w[e]; rows past offs[-1] zero."""
    out = torch.zeros(x.shape[0], w.shape[2], dtype=torch.float64)
    start = 0
    for e, end in enumerate(offs.tolist()):
        out[start:end] = x[start:end].double() @ w[e].double()
        start = end
    return out


def _case(offsets: list[int], rows: int, dtype: torch.dtype = torch.float32
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(len(offsets) * 31 + rows)
    x = torch.randn(rows, K, generator=gen).to(dtype)
    w_stored = torch.randn(len(offsets), N, K, generator=gen).to(dtype)  # [E, N, K], as transformers stores it
    return x, w_stored, torch.tensor(offsets, dtype=torch.int32)


def _experts(x: torch.Tensor, w_stored: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    return torch._grouped_mm(x, w_stored.transpose(-2, -1), offs=offs)


CASES = [([2, 2, 5, 7], 7), ([0, 3, 3, 3], 3), ([6], 6), ([1, 4, 9], 9)]  # empty groups, one group


@pytest.mark.parametrize(("offsets", "rows"), CASES)
def test_rows_by_group_computes_what_grouped_mm_computes(offsets: list[int], rows: int) -> None:
    x, w_stored, offs = _case(offsets, rows)
    w = w_stored.transpose(-2, -1)
    want = _per_group(x, w, offs)
    got = rows_by_group(x, w, offs)
    assert torch.allclose(got.double(), want, rtol=1e-5, atol=1e-5)
    assert torch.allclose(got, torch._grouped_mm(x, w, offs=offs), rtol=1e-5, atol=1e-5)


def test_rows_past_the_last_offset_take_the_last_group() -> None:
    """aten leaves them unspecified; transformers' expert-parallel path masks them afterwards."""
    x, w_stored, offs = _case([1, 3], 5)
    w = w_stored.transpose(-2, -1)
    got = rows_by_group(x, w, offs)
    assert torch.allclose(got[3:].double(), x[3:].double() @ w[1].double(), rtol=1e-5, atol=1e-5)


def test_other_forms_are_left_to_aten() -> None:
    x, w_stored, offs = _case([2, 5], 5)
    w = w_stored.transpose(-2, -1)
    assert rows_by_group(x, w) is NotImplemented  # no offsets
    assert rows_by_group(x, w, offs, bias=torch.zeros(2, N)) is NotImplemented
    assert rows_by_group(x.view(1, 5, K), w, offs) is NotImplemented


def _expert_bmm(g: OpGraph) -> tuple[str, list[str]]:
    """The one bmm of `g` and the ops from its B operand down to its leaf."""
    (mm,) = g.nodes_of_kind("template")
    chain, n = [], g.node(mm).inputs[1]
    while g.node(n).op != "input":
        chain.append(g.node(n).op)
        n = g.node(n).inputs[0]
    return mm, chain


@pytest.mark.parametrize(("offsets", "rows"), CASES)
def test_a_float32_grouped_mm_is_captured_as_rows_times_their_gathered_expert(offsets: list[int],
                                                                              rows: int) -> None:
    x, w_stored, offs = _case(offsets, rows)
    g = fs.capture(_experts, x, w_stored, offs)
    mm, chain = _expert_bmm(g)
    if len(offsets) == 1:  # one group: one matmul of every row
        assert g.node(mm).op == "mm" and g.node(mm).shape == (rows, N)
    else:
        assert g.node(mm).op == "bmm" and g.node(mm).shape == (rows, 1, N)
        assert chain == ["transpose", "index"]  # the table gathered as stored, then transposed
    assert not any("grouped_mm" in str(g.node(n).attrs.get("target")) for n in g.nodes_of_kind("extern"))
    (got,) = fs.reference(g, [x, w_stored, offs], float64=True)
    assert torch.allclose(got, _per_group(x, w_stored.transpose(-2, -1), offs), rtol=1e-9, atol=1e-9)


def test_a_bfloat16_grouped_mm_is_captured_the_same_way() -> None:
    x, w_stored, offs = _case([2, 2, 5, 7], 7, torch.bfloat16)
    g = fs.capture(_experts, x, w_stored, offs)
    assert _expert_bmm(g)[1] == ["transpose", "index"]
    (got,) = fs.reference(g, [x, w_stored, offs])
    assert got.dtype == torch.bfloat16
    assert torch.allclose(got.double(), _per_group(x, w_stored.transpose(-2, -1), offs), rtol=2e-2, atol=5e-2)


def test_transformers_grouped_mm_fallback_op_is_captured_the_same_way() -> None:
    """What transformers calls under torch.compile for every dtype but bfloat16 (a custom op the extern node
    could not name)."""
    import transformers.integrations.moe  # noqa: F401  (registers torch.ops.transformers.grouped_mm_fallback)

    x, w_stored, offs = _case([0, 3, 4, 7], 7)

    def fallback(x: torch.Tensor, w_stored: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return torch.ops.transformers.grouped_mm_fallback(x, w_stored.transpose(-2, -1), offs=offs)

    g = fs.capture(fallback, x, w_stored, offs)
    assert _expert_bmm(g)[1] == ["transpose", "index"]
    (got,) = fs.reference(g, [x, w_stored, offs], float64=True)
    assert torch.allclose(got, fallback(x.double(), w_stored.double(), offs), rtol=1e-9, atol=1e-9)
