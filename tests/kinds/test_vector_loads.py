"""One-axis loads (triton_source.tile._vector_index): a value whose tile index spans one axis (a per-column
scale at idx_n[:, None]) is loaded 1-D and expanded, which keeps the decode kind's dequantised weight in the
dot operand's registers. The rewritten index must address exactly what the 2-D one did (checked with NumPy
over a table, masks included); anything else is left as it was; the decode kind's source uses it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.graph.tolerance import rel_error
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
from fusionsearch.kinds.triton_source.tile_index import ZERO, Idx, _vector_index
from fusionsearch.plan import FusedMatmulKernel

ENV = {"idx_n": np.arange(8) + 16, "mask_n": np.arange(8) + 16 < 21, "pid_b": 2, "kb": 3, "idx_m": np.arange(4),
       "mask_m": np.arange(4) < 3, "kp": np.arange(4)}
SIZE = 40  # each dim of the table read


def _read(index: tuple[Idx, ...], expand: str = "") -> np.ndarray:
    """What a masked load of a table of `index`'s rank gives (0 where masked), NumPy standing in for Triton."""
    parts = [np.asarray(eval(c.expr, {}, dict(ENV))) for c in index]  # noqa: S307 - the test's own expressions
    mask = np.ones((), bool)
    for c in index:
        if c.mask:
            mask = mask & np.asarray(eval(c.mask, {}, dict(ENV)))  # noqa: S307
    table = np.arange(SIZE ** len(parts)).reshape((SIZE,) * len(parts))
    out = np.where(mask, table[tuple(np.broadcast_arrays(*[p % SIZE for p in parts]))], 0)
    return eval(f"out{expand}", {}, {"out": out}) if expand else out  # noqa: S307


@pytest.mark.parametrize("index", [
    (Idx("idx_n[:, None]"),),
    (Idx("idx_n[None, :]", "mask_n[None, :]"),),
    (Idx("pid_b"), Idx("idx_n[:, None]", "mask_n[:, None]")),
    (Idx("pid_b"), Idx("kb"), Idx("idx_n[None, :]")),
    (ZERO, Idx("idx_n[:, None]")),
])
def test_a_one_axis_index_reads_what_the_2d_load_read(index):
    found = _vector_index(index)
    assert found is not None
    vector, expand = found
    assert all("[" not in c.expr and (c.mask is None or "[" not in c.mask) for c in vector)
    want = _read(index)
    got = _read(vector, expand)
    assert got.shape == want.shape and (got == want).all()


@pytest.mark.parametrize("index", [
    (Idx("idx_m[:, None]"), Idx("idx_n[None, :]")),  # spans the tile: a real 2-D load
    (Idx("idx_n[:, None]", "mask_n[None, :]"),),  # its mask on the other axis
    (Idx("idx_n"),),  # a 1-D value: nothing to expand
    (Idx("(kb * 64 + kp[None, :])"), Idx("idx_n[:, None]")),  # a compound index
    (ZERO, ZERO),  # a scalar load stays as it is
    (Idx("pid_b", "mask_b"), Idx("idx_n[:, None]")),  # a scalar with a mask
    (Idx("row3"), Idx("idx_k[:, None]")),  # a gathered row: a loaded [1, BM] tile, not a scalar
])
def test_anything_else_is_left_as_it_was(index):
    assert _vector_index(index) is None


@pytest.mark.parametrize("cfg", [DecodeConfig(32, 16, 2, 4, 2, "dot_t"), DecodeConfig(32, 16, 2, 4, 2, "dot")],
                         ids=lambda c: c.product)
def test_the_decode_kind_loads_a_per_column_scale_1d(cfg):
    g = fs.workload("w8_dequant_mm", dtype=torch.float16, M=3, K=64, N=40)  # N uneven for the blocks: masked
    base = P.fully_fused(g)
    # the scale kept in the K loop (scale_after_dot moves it after the loop, test_scale_after_dot.py)
    plan = dataclasses.replace(base, kernels=tuple(
        DecodeKernel(k.matmul, k.prologue_a, k.prologue_b, k.epilogue, cfg) if isinstance(k, FusedMatmulKernel)
        else k for k in base.kernels), options=base.options.with_overrides(scale_after_dot=False)).check()
    compiled = fs.compile_plan(plan)
    axis = "[:, None]" if cfg.product == "dot_t" else "[None, :]"
    assert any(line.strip().startswith("ld") and "(idx_n) *" in line and "mask=(mask_n)" in line
               and line.rstrip().endswith(axis) for line in compiled.source.splitlines()), compiled.source
    inputs = fs.random_inputs(g, seed=4)
    (ref,) = fs.reference(g, inputs, float64=True)
    (out,) = compiled(*inputs)
    assert rel_error(out, ref) <= 1e-3, rel_error(out, ref)
