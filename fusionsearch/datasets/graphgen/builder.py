"""GraphBuilder: one random graph under construction. It draws sizes and dtypes, adds inputs and ops together with
what is known of their values (values.Val), and draws the single pointwise ops (unary, activation, binary, clamp)
only where they keep the values in range."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import torch

from fusionsearch.datasets.graphgen.shapes import SMALL_MAX
from fusionsearch.datasets.graphgen.values import (
    EXACT,
    PEAK_LIMIT,
    RANK,
    SATURATING_RMS,
    Collapse,
    Val,
    check_kept,
    scaled,
    tame_factor,
    unary_range,
)
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.registry import dtype_name


class GraphBuilder:
    """Builds one graph; every helper returns `Val`s and records them in `self.vals`."""

    def __init__(self, rng: random.Random, dtypes: tuple[torch.dtype, ...], small: bool) -> None:
        self.rng, self.small, self.dtypes = rng, small, dtypes
        self.dt = rng.choice(dtypes)
        # Graphs with log/sqrt/rsqrt/pow/div get positive random inputs upstream of those ops, which changes
        # the magnitudes: only such graphs may draw them, and their inputs are modelled as not centred.
        self.positive = rng.random() < 0.3
        self.g = OpGraph()
        self.vals: dict[str, Val] = {}
        self.counter: dict[str, int] = {}
        self.n_ops = 0

    # ---- sizes and dtypes ------------------------------------------------------------------------------
    def dim(self, real: Sequence[int]) -> int:
        if self.small:
            return 1 if self.rng.random() < 0.12 else self.rng.randint(2, SMALL_MAX)
        return self.rng.choice(real)

    def alt_dtype(self) -> torch.dtype | None:
        """Another storage dtype to cast from: fp32 for low-precision graphs, else an allowed low precision."""
        if self.dt != torch.float32:
            return torch.float32
        low = [d for d in self.dtypes if d != torch.float32]
        return self.rng.choice(low) if low else None

    # ---- nodes -----------------------------------------------------------------------------------------
    def _fresh(self, prefix: str) -> str:
        self.counter[prefix] = self.counter.get(prefix, -1) + 1
        return f"{prefix}{self.counter[prefix]}"

    def input(self, prefix: str, shape: Sequence[int], dtype: torch.dtype | None = None,
              strides: Sequence[int] | None = None, positive: bool = False) -> Val:
        dt = dtype or self.dt
        name = self.g.input(self._fresh(prefix), list(shape), dt, strides)
        if dt == torch.int8:
            v = Val(name, -128.0, 127.0, 74.0, True, EXACT)
        elif positive:  # a denominator: random_inputs draws it from [0.5, 1.5)
            v = Val(name, 0.5, 1.5, 1.1, False, RANK[dt])
        else:
            v = Val(name, -6.0, 6.0, 1.1 if self.positive else 1.0, not self.positive, RANK[dt])
        self.vals[name] = v
        return v

    def indices(self, shape: Sequence[int]) -> str:
        return self.g.input(self._fresh("idx"), list(shape), self.rng.choice((torch.int64, torch.int64, torch.int32)))

    def op(self, op: str, srcs: Sequence[Val | str], lo: float, hi: float, rms: float, centered: bool,
           **attrs: object) -> Val:
        names = [s.name if isinstance(s, Val) else s for s in srcs]
        name = self.g.add(op, names, **attrs)
        self.n_ops += 1
        dt = self.g.node(name).dtype
        prec = min([RANK.get(dt, EXACT)] + [s.prec for s in srcs if isinstance(s, Val)])
        v = Val(name, lo, hi, min(rms, max(abs(lo), abs(hi))), centered, prec)
        self.vals[name] = v
        return v

    def cast(self, v: Val, dtype: torch.dtype) -> Val:
        if self.g.node(v.name).dtype == dtype:
            return v
        return self.op("cast", [v], v.lo, v.hi, v.rms, v.centered, dtype=dtype_name(dtype))

    def scale(self, v: Val, s: float) -> Val:
        lo, hi = sorted((v.lo * s, v.hi * s))
        return self.op("mul", [v], lo, hi, v.rms * abs(s), v.centered, scalar=s)

    def tame(self, v: Val, rms_max: float) -> Val:
        """v scaled by a power of two to rms <= rms_max: a saturating op (sigmoid, tanh, a two-sided clamp) on
        a wide value turns the operand's rounding error into a large relative error of its result."""
        f = tame_factor(v, rms_max)
        return v if f == 1.0 else self.scale(v, f)

    # ---- pointwise ops ---------------------------------------------------------------------------------
    def unary(self, v: Val, op: str, **attrs: object) -> Val:
        """op(v); sigmoid and tanh on a tamed v. Raises Collapse (adding nothing) where relu, gelu, silu or
        sigmoid would keep only a small part of v."""
        f = tame_factor(v, SATURATING_RMS) if op in ("sigmoid", "tanh") else 1.0
        lo, hi, rms, centered = unary_range(op, scaled(v, f))
        if op in ("relu", "gelu", "silu", "sigmoid"):
            check_kept(scaled(v, f), lo, hi)
        v = self.tame(v, SATURATING_RMS) if f != 1.0 else v
        return self.op(op, [v], lo, hi, rms, centered, **attrs)

    def activate(self, v: Val) -> Val:
        """An activation, one that keeps enough of v (none where every one would collapse it)."""
        ops = ["relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"]
        self.rng.shuffle(ops)
        for op in ops:
            try:
                if op == "gelu_tanh":
                    return self.unary(v, "gelu", approximate="tanh")
                gelu = {"approximate": "none"} if op == "gelu" and self.rng.random() < 0.5 else {}
                return self.unary(v, op, **gelu)
            except Collapse:
                continue
        return v

    def binary(self, op: str, a: Val, b: Val) -> Val:
        if op == "mul":
            if a.peak * b.peak > PEAK_LIMIT:
                a = self.scale(a, 2.0 ** -math.ceil(math.log2(a.peak * b.peak / PEAK_LIMIT)))
            cands = (a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi)
            return self.op("mul", [a, b], min(cands), max(cands), a.rms * b.rms, a.centered or b.centered)
        sign = -1.0 if op == "sub" else 1.0
        lo, hi = sorted((a.lo + sign * b.lo, a.hi + sign * b.hi))
        lo, hi = min(lo, a.lo + sign * b.hi, a.hi + sign * b.lo), max(hi, a.lo + sign * b.hi, a.hi + sign * b.lo)
        # A broadcast term is constant along some dim (a bias is constant along K): not centred in a product.
        same = self.g.node(a.name).shape == self.g.node(b.name).shape
        return self.op(op, [a, b], lo, hi, math.hypot(a.rms, b.rms), a.centered and b.centered and same)

    def clamp(self, v: Val) -> Val:
        """A clamp to one of the common bounds, on a tamed v; Collapse where it would keep too little."""
        lo, hi = self.rng.choice(((-6.0, 6.0), (0.0, 6.0), (-1.0, 1.0), (None, 10.0), (-10.0, None)))
        t = scaled(v, tame_factor(v, max(abs(b) for b in (lo, hi) if b is not None) / 2))
        nlo = max(t.lo, lo) if lo is not None else t.lo
        nhi = min(t.hi, hi) if hi is not None else t.hi
        check_kept(t, nlo, nhi)
        v = self.tame(v, max(abs(b) for b in (lo, hi) if b is not None) / 2)
        attrs = {k: b for k, b in (("min", lo), ("max", hi)) if b is not None}
        return self.op("clamp", [v], min(nlo, nhi), max(nlo, nhi), v.rms, v.centered and lo is None, **attrs)
