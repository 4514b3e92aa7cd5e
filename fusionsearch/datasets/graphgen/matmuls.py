"""A matmul and what real models put around it: the activation operand's prologue (a cast, a row gather, int8
dequant, a norm's affine, a pointwise chain), the weight's storage (transposed, int8 or fp8-style scaled, cast,
with a chain), an optional bias, a power-of-two scale that keeps the product in float16's range, and the
epilogue (bias, scale, activation, chain, residual, clamp, cast)."""

from __future__ import annotations

import math

import torch

from fusionsearch.datasets.graphgen.builder import GraphBuilder
from fusionsearch.datasets.graphgen.chains import pointwise_chain
from fusionsearch.datasets.graphgen.shapes import REAL_TABLE_ROWS, SMALL_MAX
from fusionsearch.datasets.graphgen.values import PEAK_LIMIT, RANK, Collapse, Val, product_range


# ---- operands ------------------------------------------------------------------------------------------
def activation(b: GraphBuilder, lead: tuple[int, ...], k: int, gather_ok: bool = True) -> Val:
    """An activation operand [*lead, K] with a prologue: a cast, a gather, per-token int8 dequant, an
    affine scale, a pointwise chain."""
    r = b.rng.random()
    alt = b.alt_dtype()
    if r < 0.2 and gather_ok:
        x = gathered(b, lead, k)
    elif r < 0.38 and alt is not None:
        x = b.cast(b.input("x", (*lead, k), alt), b.dt)
    elif r < 0.46:  # dynamic per-token int8 activations
        q = b.input("xq", (*lead, k), torch.int8)
        s = b.input("xs", (*lead, 1))
        x = b.binary("mul", b.cast(q, b.dt), s)
    else:
        x = b.input("x", (*lead, k))
    if b.rng.random() < 0.25:  # a norm's gain and bias
        x = b.binary("mul", x, b.input("gain", (k,)))
        if b.rng.random() < 0.5:
            x = b.binary("add", x, b.input("beta", (k,)))
    if b.rng.random() < 0.35:
        x = pointwise_chain(b, x, b.rng.randint(1, 6))
    return x


def gathered(b: GraphBuilder, lead: tuple[int, ...], k: int) -> Val:
    """Rows of a table [rows, K] picked by an index tensor of shape lead (index, embedding or index_select)."""
    rows = b.rng.randint(1, SMALL_MAX) if b.small else b.rng.choice(REAL_TABLE_ROWS)
    stored = b.dt if b.rng.random() < 0.7 else (b.alt_dtype() or b.dt)
    table = b.input("table", (rows, k), stored)
    idx = b.indices(lead)
    op = b.rng.choice(("index", "embedding") + (("index_select",) if len(lead) == 1 else ()))
    x = b.op(op, [table, idx], table.lo, table.hi, table.rms, table.centered)
    return b.cast(x, b.dt)


def weight(b: GraphBuilder, lead: tuple[int, ...], rows: int, cols: int) -> Val:
    """A weight operand of logical shape [*lead, rows, cols]: plain, transposed in memory (strides or a
    transpose node), int8 with per-row/per-column scales, int8 with one per-tensor scale (fp8-style),
    cast from another dtype, or with a pointwise chain."""
    kind = b.rng.choices(("plain", "strided", "transposed", "int8", "fp8", "cast", "chain"),
                         weights=(25, 12, 12, 22, 10, 10, 9))[0]
    shape = (*lead, rows, cols)
    nb = len(lead)
    if kind == "strided":
        strides = [*[rows * cols] * nb, 1, rows]
        return b.input("w", shape, strides=strides)
    transpose = kind in ("transposed", "int8", "fp8") and b.rng.random() < (1.0 if kind == "transposed" else 0.3)
    stored_dt = torch.int8 if kind in ("int8", "fp8") else (b.alt_dtype() if kind == "cast" else None)
    w = b.input("w", (*lead, cols, rows) if transpose else shape, stored_dt or b.dt)
    if transpose and b.rng.random() < 0.5:
        w = b.op("transpose", [w], w.lo, w.hi, w.rms, w.centered, dim0=nb, dim1=nb + 1)
        transpose = False
    w = b.cast(w, b.dt)
    if kind == "int8":
        r, c = (cols, rows) if transpose else (rows, cols)
        sshape = b.rng.choice(((c,), (1, c), (r, 1)))
        w = b.binary("mul", w, b.input("scale", sshape))
    elif kind == "fp8":
        if b.rng.random() < 0.5:
            w = b.scale(w, b.rng.choice((0.0078125, 0.015625, 0.03125)))
        else:
            w = b.binary("mul", w, b.input("scale", (1,)))
    elif kind == "chain":
        w = pointwise_chain(b, w, b.rng.randint(1, 3))
    if transpose:
        w = b.op("transpose", [w], w.lo, w.hi, w.rms, w.centered, dim0=nb, dim1=nb + 1)
    return b.cast(w, b.dt)


def bias(b: GraphBuilder, lead: tuple[int, ...], n: int, full_ok: bool) -> Val:
    shape: tuple[int, ...] = (n,)
    if full_ok and b.rng.random() < 0.3:
        shape = b.rng.choice(((1, n), (*lead, n)))
    alt = b.alt_dtype()
    if alt is not None and b.rng.random() < 0.3:  # an fp32 bias cast to the operand dtype
        return b.cast(b.input("bias", shape, alt), b.dt)
    return b.input("bias", shape)


# ---- the product ---------------------------------------------------------------------------------------
def matmul(b: GraphBuilder, kind: str, a: Val, k: int, n: int) -> Val:
    """a [..., K] times a fresh weight: mm/addmm [K, N], linear [N, K], bmm [B, K, N]."""
    a = b.cast(a, b.dt)
    lead = b.g.node(a.name).shape[:-1]
    if kind == "linear":
        w = weight(b, (), n, k)
    else:
        w = weight(b, lead[:1] if kind == "bmm" else (), k, n)
    peak, rms, centered = product_range(a, w, k)
    alpha = 1.0
    if peak > PEAK_LIMIT:  # scale the operand (or addmm's alpha) by a power of two: exact, and realistic
        factor = 2.0 ** -math.ceil(math.log2(peak / PEAK_LIMIT))
        if kind == "addmm" and b.rng.random() < 0.5:
            alpha = factor
        else:
            a = b.scale(a, factor)
        peak, rms = peak * factor, rms * factor
    if kind in ("mm", "bmm") or (kind == "linear" and b.rng.random() < 0.5):
        return b.op(kind, [a, w], -peak, peak, rms, centered)
    c = bias(b, lead, n, kind == "addmm")
    attrs = {}
    if kind == "addmm":
        beta = b.rng.choice((1.0, 1.0, 0.5, 2.0))
        attrs = {k2: v for k2, v in (("alpha", alpha), ("beta", beta)) if v != 1.0}
    srcs = [c, a, w] if kind == "addmm" else [a, w, c]
    cpeak = c.peak * attrs.get("beta", 1.0)
    return b.op(kind, srcs, -peak - cpeak, peak + cpeak, rms + c.rms, centered and c.centered, **attrs)


# ---- epilogues -----------------------------------------------------------------------------------------
def epilogue(b: GraphBuilder, y: Val, final: bool) -> Val:
    """Bias, scalar scale, activation, a pointwise chain, residual add, clamp, cast: each maybe."""
    shape = b.g.node(y.name).shape
    rng = b.rng
    if rng.random() < 0.35:
        y = b.binary("add", y, b.input("b", shape[-1:]))
    if rng.random() < 0.2:
        y = b.scale(y, rng.choice((0.5, 0.125, 2.0, 0.7071067811865476, -1.0)))
    if rng.random() < 0.55:
        y = b.activate(y)
    if rng.random() < 0.3:
        y = pointwise_chain(b, y, rng.randint(1, 4))
    if rng.random() < 0.25:
        y = b.binary("add", y, b.input("res", shape))
    if rng.random() < 0.15:
        try:
            y = b.clamp(y)
        except Collapse:
            pass
    if final and rng.random() < 0.2:  # a cast down to a dtype the value's history allows (see values.RANK)
        lower = [d for d in b.dtypes if RANK[d] <= y.prec and d != b.g.node(y.name).dtype]
        if lower:
            y = b.cast(y, rng.choice(lower))
    return y if final else b.cast(y, b.dt)  # it feeds the next matmul
