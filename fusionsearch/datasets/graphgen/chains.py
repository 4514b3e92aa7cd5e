"""Pointwise chains: `pointwise_chain` draws about n ops, one move at a time from `MOVES`, each only where its
input is in the op's domain and its result stays in range. A move adds one or two ops to the builder's graph and
returns the new value, or returns None (adding nothing) where the value is outside its domain."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from fusionsearch.datasets.graphgen.builder import GraphBuilder
from fusionsearch.datasets.graphgen.values import (
    PEAK_LIMIT,
    SATURATING_RMS,
    Collapse,
    Val,
    check_kept,
    scaled,
    tame_factor,
)


def pointwise_chain(b: GraphBuilder, v: Val, n_ops: int) -> Val:
    """A chain of about `n_ops` pointwise ops drawn from the registry, each only where its input is in the
    op's domain and its result stays in range."""
    start = b.n_ops
    for _ in range(8 * n_ops):
        if b.n_ops - start >= n_ops:
            break
        move = b.rng.choice(MOVES)
        try:
            out = move(b, v)
        except Collapse:
            continue
        if out is not None:
            v = out
    return v


def _m_activation(b: GraphBuilder, v: Val) -> Val | None:
    return b.activate(v)


def _m_exp(b: GraphBuilder, v: Val) -> Val | None:
    # exp only on bounded values (squashed by sigmoid/tanh first): a larger argument magnifies its rounding error.
    if v.peak > 1.0:
        v = b.unary(v, b.rng.choice(("sigmoid", "tanh")))
    return b.unary(v, "exp")


def _m_positive_domain(b: GraphBuilder, v: Val) -> Val | None:
    if not b.positive:
        return None
    op = b.rng.choice(("log", "sqrt", "rsqrt", "pow", "div"))
    # log only well away from 1, where its result crosses zero and loses relative accuracy
    if v.lo < (2.0 if op == "log" else 0.25):  # make it positive first: |x| + c or sigmoid(x) + c
        if v.peak > PEAK_LIMIT / 2:
            return None
        base = b.unary(v, b.rng.choice(("abs", "sigmoid")))
        c = b.rng.choice((2.0, 3.0)) if op == "log" else b.rng.choice((0.5, 1.0, 2.0))
        v = b.op("add", [base], base.lo + c, base.hi + c, base.rms + c, False, scalar=c)
    if op == "pow":
        return b.op("pow", [v], math.sqrt(v.lo), math.sqrt(v.hi), math.sqrt(v.hi), False, scalar=0.5)
    if op == "div":  # c / x
        c = b.rng.choice((1.0, 2.0))
        return b.op("div", [v], c / v.hi, c / v.lo, c / v.lo, False, scalar=c, scalar_first=True)
    return b.unary(v, op)


def _m_pow(b: GraphBuilder, v: Val) -> Val | None:
    if not b.positive:
        return None
    if v.peak <= 1.0 and b.rng.random() < 0.5:  # 2 ** x
        return b.op("pow", [v], 2.0 ** v.lo, 2.0 ** v.hi, 2.0 ** v.hi, False, scalar=2.0, scalar_first=True)
    e = b.rng.choice((2, 3))
    if v.peak ** e > PEAK_LIMIT:
        return None
    lo = 0.0 if e == 2 and v.lo < 0 < v.hi else min(v.lo ** e, v.hi ** e)
    return b.op("pow", [v], lo, max(v.lo ** e, v.hi ** e), 3 * v.rms ** e, v.centered and e == 3, scalar=e)


def _m_scalar(b: GraphBuilder, v: Val) -> Val | None:
    op = b.rng.choice(("mul", "add", "sub", "rsub", "div"))
    if op == "mul":
        s = b.rng.choice((0.5, 2.0, 0.125, 1.702, -1.0, 0.7071067811865476, 3.0))
        return b.scale(v, s) if v.peak * abs(s) <= PEAK_LIMIT else None
    if op == "div":  # a scalar quotient makes random_inputs draw the graph's upstream inputs positive
        return b.scale(v, 0.5) if not b.positive else b.op("div", [v], v.lo / 2, v.hi / 2, v.rms / 2, v.centered,
                                                            scalar=2.0)
    c = b.rng.choice((1.0, 0.5, 3.0, 0.1))
    lo, hi = (v.lo + c, v.hi + c) if op == "add" else (v.lo - c, v.hi - c) if op == "sub" else (c - v.hi, c - v.lo)
    if max(abs(lo), abs(hi)) < 0.5 * v.peak:  # a shift onto zero cancels digits: relative error grows
        return None
    attrs = {"scalar": c, "scalar_first": True} if op == "rsub" else {"scalar": c}
    return b.op("add" if op == "add" else "sub", [v], lo, hi, v.rms + c, False, **attrs)


def _m_minmax(b: GraphBuilder, v: Val) -> Val | None:
    r = b.rng.random()
    if r < 0.4:
        return b.clamp(v)
    # Bounded against a constant: tamed like a clamp, or most of a wide value sits on the constant.
    op, c = ("maximum", b.rng.choice((0.0, -1.0, 0.5))) if r < 0.7 else ("minimum", b.rng.choice((6.0, 1.0, 0.0)))
    pick = max if op == "maximum" else min
    t = scaled(v, tame_factor(v, SATURATING_RMS))
    check_kept(t, pick(t.lo, c), pick(t.hi, c))
    v = b.tame(v, SATURATING_RMS)
    return b.op(op, [v], pick(v.lo, c), pick(v.hi, c), v.rms, False, scalar=c)


def _m_sign(b: GraphBuilder, v: Val) -> Val | None:
    return b.unary(v, b.rng.choice(("abs", "neg")))


def _vector_shape(b: GraphBuilder, v: Val) -> tuple[int, ...]:
    shape = b.g.node(v.name).shape
    if len(shape) >= 2 and b.rng.random() < 0.3:
        return (shape[-2], 1)
    return shape[-1:]


def _m_vector(b: GraphBuilder, v: Val) -> Val | None:
    """mul/add/sub/div by a broadcast vector input ([D] along the last dim, or [R, 1] per row)."""
    op = b.rng.choice(("mul", "add", "sub", "div"))
    shape = _vector_shape(b, v)
    if op == "div":  # x / d: random_inputs draws the denominator from [0.5, 1.5)
        d = b.input("d", shape, positive=True)
        lo, hi = (v.lo / 1.5, v.hi / 0.5) if v.lo >= 0 else (v.lo / 0.5, max(v.hi / 0.5, v.hi / 1.5))
        return b.op("div", [v, d], lo, hi, 2 * v.rms, v.centered) if 2 * v.peak <= PEAK_LIMIT else None
    if op == "mul" and 6 * v.peak > PEAK_LIMIT:
        return None
    return b.binary(op, v, b.input("v", shape))


def _m_where(b: GraphBuilder, v: Val) -> Val | None:
    """Leaky relu as where(x > 0, x, a * x): continuous at the threshold, so a comparison that rounding flips
    (a value that is 0 in float16 but tiny in float64) changes the result by a tiny amount only."""
    a = b.rng.choice((0.01, 0.2))
    lo, hi = min(v.lo * a, 0.0), max(v.hi, 0.0)
    check_kept(v, lo, hi)
    cond = b.op("gt", [v], 0.0, 1.0, 1.0, False, scalar=0.0)
    leak = b.scale(v, a)
    return b.op("where", [cond, v, leak], lo, hi, v.rms, False)


def _m_cast(b: GraphBuilder, v: Val) -> Val | None:
    """Compute on in another dtype: up to fp32 in low-precision graphs, down in fp32 ones."""
    dt = b.g.node(v.name).dtype
    others = [d for d in (*b.dtypes, torch.float32) if d != dt]
    return b.cast(v, b.rng.choice(others)) if others else None


# The draw is uniform over this tuple: its order and repeats are part of every seed's graph.
MOVES: tuple[Callable[[GraphBuilder, Val], Val | None], ...] = (
    _m_activation, _m_exp, _m_exp, _m_positive_domain, _m_pow, _m_scalar, _m_scalar, _m_minmax, _m_sign,
    _m_vector, _m_vector, _m_where, _m_cast,
)
