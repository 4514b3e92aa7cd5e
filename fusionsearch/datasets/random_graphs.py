"""Random realistic matmul graphs: one to three matmuls (mm, bmm, addmm, linear) with the prologues and epilogues
real models put around them, shapes from real model families (or small awkward ones for the interpreter).

Deterministic per seed (one `random.Random`, no global RNG). Every graph validates and its reference on
`random_inputs` is finite: the generator tracks a rough range of every value and only draws an op whose input
is in its domain (exp on bounded values, log/sqrt/rsqrt on values >= 0.25), and scales a matmul operand by a
power of two when the product would leave the range float16 holds safely.

>>> g = random_graph(3, shape_scale="small")
>>> graph_id(g) == graph_id(random_graph(3, shape_scale="small"))
True
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from fusionsearch.errors import GraphError
from fusionsearch.graph.opgraph import OpGraph
from fusionsearch.graph.registry import dtype_from_name, dtype_name

REAL_M = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
REAL_KN = (256, 512, 1024, 1536, 2048, 2560, 3072, 4096, 5120, 6144, 8192, 11008, 14336, 16384)
REAL_BMM_M = tuple(m for m in REAL_M if m <= 512)
REAL_BMM_N = (256, 512, 1024)
REAL_BMM_K = tuple(k for k in REAL_KN if k <= 4096)
REAL_TABLE_ROWS = (1024, 4096, 8192, 32000, 50304, 128256)  # gather tables: token buckets, vocabularies
INPUT_BYTES_LIMIT = 1 << 30  # bytes of all inputs together, so that a GPU measures a graph quickly
SATURATING_RMS = 2.0  # widest input (rms) of a saturating op, see _Builder.tame
COLLAPSE = 0.25  # a selecting op whose result peaks below this share of its input's rms is refused (_Collapse)
PEAK_LIMIT = 4096.0  # largest |value| a graph may reach: float16 (max 65504) with margin for the rough estimates
SMALL_MAX = 80
MAX_MATMULS = 3
DEFAULT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_FLOATS = (torch.bfloat16, torch.float16, torch.float32)
# Precision rank: a value is only as exact as the least precise dtype it passed through. Validation's tolerance
# follows the output dtype, so an output may not be more precise than its history (no final upcast to fp32).
_RANK = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}
_EXACT = 3


@dataclass(frozen=True)
class _Val:
    """A node being built and what the generator knows of its values: practical bounds [lo, hi] (hard for
    bounded ops, ~6 sigma otherwise), root mean square, whether it is centred on zero, precision rank."""

    name: str
    lo: float
    hi: float
    rms: float
    centered: bool
    prec: int

    @property
    def peak(self) -> float:
        return max(abs(self.lo), abs(self.hi))


class _Collapse(Exception):
    """A selecting op (relu, clamp, sigmoid...) would keep only a small part of a wide value, such as the negative
    tail of a gelu: the operand's rounding error, absolute, would then be a large part of the result."""


def _check_kept(v: _Val, lo: float, hi: float) -> None:
    if max(abs(lo), abs(hi)) < COLLAPSE * v.rms:
        raise _Collapse


def _scaled(v: _Val, f: float) -> _Val:
    lo, hi = sorted((v.lo * f, v.hi * f))
    return replace(v, lo=lo, hi=hi, rms=v.rms * f)


def _tame_factor(v: _Val, rms_max: float) -> float:
    return 1.0 if v.rms <= rms_max else 2.0 ** -math.ceil(math.log2(v.rms / rms_max))


def graph_id(g: OpGraph) -> str:
    """A stable id of a graph's content (its signature hash)."""
    return g.signature_hash()


def random_graphs(n: int, seed: int = 0, **options: object) -> list[OpGraph]:
    """`n` random graphs, the i-th from seed `seed * 1_000_003 + i`; options as for `random_graph`."""
    return [random_graph(seed * 1_000_003 + i, **options) for i in range(n)]  # type: ignore[arg-type]


def random_graph(seed: int, *, max_matmuls: int = MAX_MATMULS, dtypes: Sequence[torch.dtype | str] = DEFAULT_DTYPES,
                 shape_scale: str = "real") -> OpGraph:
    """A random realistic graph of 1..max_matmuls matmuls in one dtype drawn from `dtypes`.

    shape_scale "real": M, K, N from real model families, inputs under 1 GiB; "small": every dim in 1..80
    (1 and non-multiples of 16 included) for Triton's interpreter."""
    if shape_scale not in ("real", "small"):
        raise GraphError(f"shape_scale must be 'real' or 'small', got {shape_scale!r}")
    if isinstance(max_matmuls, bool) or not isinstance(max_matmuls, int) or max_matmuls < 1:
        raise GraphError(f"max_matmuls must be a positive integer, got {max_matmuls!r}")
    dts = tuple(dtype_from_name(d, "random_graph dtypes") for d in dtypes)
    if not dts or any(d not in _FLOATS for d in dts):
        raise GraphError(f"dtypes must be some of bfloat16, float16, float32, got {list(dtypes)}")
    rng = random.Random(seed)
    while True:  # redraw (from the same stream, so still deterministic) until the graph is fit for its use
        g = _Builder(rng, dts, shape_scale == "small").build(min(max_matmuls, MAX_MATMULS))
        if shape_scale == "small" and _well_conditioned(g):
            return g.validate()
        if shape_scale == "real" and sum(g.node(n).nbytes for n in g.inputs) <= INPUT_BYTES_LIMIT:
            return g.validate()


def _well_conditioned(g: OpGraph, margin: float = 0.8) -> bool:
    """Eager PyTorch in the graph's own dtypes is finite and within `margin` of validation's tolerance of the
    float64 reference. A few float16 graphs are not (rounding amplified where an op keeps a small part of a
    wide value: a relu of mostly negative values, a shift onto zero, a one-column product that cancels): no
    plan could validate them, so they test nothing. Small graphs only: it runs the graph."""
    from fusionsearch.graph.reference import random_inputs, reference
    from fusionsearch.measure.validate import TOLERANCE, rel_error

    inputs = random_inputs(g)
    outs, exact = reference(g, inputs), reference(g, inputs, float64=True)
    return all(rel_error(o, r) <= margin * TOLERANCE[o.dtype] for o, r in zip(outs, exact, strict=True))


class _Builder:
    """Builds one graph; every helper returns `_Val`s and records them in `self.vals`."""

    def __init__(self, rng: random.Random, dtypes: tuple[torch.dtype, ...], small: bool) -> None:
        self.rng, self.small, self.dtypes = rng, small, dtypes
        self.dt = rng.choice(dtypes)
        # Graphs with log/sqrt/rsqrt/pow/div get positive random inputs upstream of those ops, which changes
        # the magnitudes: only such graphs may draw them, and their inputs are modelled as not centred.
        self.positive = rng.random() < 0.3
        self.g = OpGraph()
        self.vals: dict[str, _Val] = {}
        self.counter: dict[str, int] = {}
        self.n_ops = 0

    # ---- sizes -----------------------------------------------------------------------------------------
    def dim(self, real: Sequence[int]) -> int:
        if self.small:
            return 1 if self.rng.random() < 0.12 else self.rng.randint(2, SMALL_MAX)
        return self.rng.choice(real)

    # ---- nodes -----------------------------------------------------------------------------------------
    def _fresh(self, prefix: str) -> str:
        self.counter[prefix] = self.counter.get(prefix, -1) + 1
        return f"{prefix}{self.counter[prefix]}"

    def input(self, prefix: str, shape: Sequence[int], dtype: torch.dtype | None = None,
              strides: Sequence[int] | None = None, positive: bool = False) -> _Val:
        dt = dtype or self.dt
        name = self.g.input(self._fresh(prefix), list(shape), dt, strides)
        if dt == torch.int8:
            v = _Val(name, -128.0, 127.0, 74.0, True, _EXACT)
        elif positive:  # a denominator: random_inputs draws it from [0.5, 1.5)
            v = _Val(name, 0.5, 1.5, 1.1, False, _RANK[dt])
        else:
            v = _Val(name, -6.0, 6.0, 1.1 if self.positive else 1.0, not self.positive, _RANK[dt])
        self.vals[name] = v
        return v

    def indices(self, shape: Sequence[int]) -> str:
        return self.g.input(self._fresh("idx"), list(shape), self.rng.choice((torch.int64, torch.int64, torch.int32)))

    def op(self, op: str, srcs: Sequence[_Val | str], lo: float, hi: float, rms: float, centered: bool,
           **attrs: object) -> _Val:
        names = [s.name if isinstance(s, _Val) else s for s in srcs]
        name = self.g.add(op, names, **attrs)
        self.n_ops += 1
        dt = self.g.node(name).dtype
        prec = min([_RANK.get(dt, _EXACT)] + [s.prec for s in srcs if isinstance(s, _Val)])
        v = _Val(name, lo, hi, min(rms, max(abs(lo), abs(hi))), centered, prec)
        self.vals[name] = v
        return v

    def cast(self, v: _Val, dtype: torch.dtype) -> _Val:
        if self.g.node(v.name).dtype == dtype:
            return v
        return self.op("cast", [v], v.lo, v.hi, v.rms, v.centered, dtype=dtype_name(dtype))

    def scale(self, v: _Val, s: float) -> _Val:
        lo, hi = sorted((v.lo * s, v.hi * s))
        return self.op("mul", [v], lo, hi, v.rms * abs(s), v.centered, scalar=s)

    def tame(self, v: _Val, rms_max: float) -> _Val:
        """v scaled by a power of two to rms <= rms_max: a saturating op (sigmoid, tanh, a two-sided clamp) on
        a wide value turns the operand's rounding error into a large relative error of its result."""
        f = _tame_factor(v, rms_max)
        return v if f == 1.0 else self.scale(v, f)

    # ---- the graph -------------------------------------------------------------------------------------
    def build(self, max_mm: int) -> OpGraph:
        n = self.rng.choices((1, 2, 3), weights=(45, 35, 20))[0] if max_mm >= 3 else self.rng.randint(1, max_mm)
        outs = self.bmm_graph(n) if self.rng.random() < 0.2 else self.dense_graph(n)
        outs = [self.finish(v) for v in outs]
        if self.rng.random() < 0.3:  # an intermediate value must be materialised too
            extra = [v for name, v in self.vals.items() if self._can_output(v) and name not in outs]
            if extra:
                outs.append(self.rng.choice(extra).name)
        self.g.set_outputs(list(dict.fromkeys(outs)))
        return self.g

    def _can_output(self, v: _Val) -> bool:
        node = self.g.node(v.name)
        return node.op != "input" and node.dtype in _FLOATS and _RANK[node.dtype] <= v.prec

    def finish(self, v: _Val) -> str:
        """An output no more precise than its history (see _RANK)."""
        if not self._can_output(v):
            v = self.cast(v, next(d for d, r in _RANK.items() if r == v.prec))
        return v.name

    def dense_graph(self, n: int) -> list[_Val]:
        kinds = [self.rng.choice(("mm", "addmm", "linear")) for _ in range(n)]
        m = self.dim(REAL_M)
        lead: tuple[int, ...] = (m,)
        if all(k == "linear" for k in kinds) and self.rng.random() < 0.3:  # x [b, s, K] as in a transformer
            b = self.rng.choice((2, 4)) if not self.small else self.rng.randint(1, 3)
            lead = (b, max(1, m // b)) if not self.small else (b, m)
        k0 = self.dim(REAL_KN)
        x = self.activation(lead, k0)
        topo = "single" if n == 1 else self.rng.choice(
            ("chain", "gated", "heads") if n == 2 else ("chain", "gated", "lora", "heads"))
        dims = [self.dim(REAL_KN) for _ in range(n)]
        if topo == "single":
            return [self.epilogue(self.matmul(kinds[0], x, k0, dims[0]), final=True)]
        if topo == "chain":
            h, k = x, k0
            for i in range(n):
                h = self.epilogue(self.matmul(kinds[i], h, k, dims[i]), final=i == n - 1)
                k = dims[i]
            return [h]
        if topo == "heads":  # q, k, v projections of one input: every head an output
            return [self.epilogue(self.matmul(kinds[i], x, k0, dims[i]), final=True) for i in range(n)]
        if topo == "gated":  # act(x @ w1) * (x @ w3) (SwiGLU, GeGLU), then the down projection when n == 3
            gate = self.activate(self.matmul(kinds[0], x, k0, dims[0]))
            up = self.matmul(kinds[1], x, k0, dims[0])
            h = self.binary("mul", gate, up)
            if n == 2:
                return [self.epilogue(h, final=True)]
            return [self.epilogue(self.matmul(kinds[2], h, dims[0], dims[2]), final=True)]
        # lora: x @ W + s * ((x @ A) @ B), the rank a small width
        y = self.matmul(kinds[0], x, k0, dims[0])
        r = self.dim((256, 512)) if not self.small else self.rng.randint(1, 16)
        t = self.matmul(kinds[1], x, k0, r)
        d = self.matmul(kinds[2], self.scale(t, self.rng.choice((0.5, 0.25, 1.0))), r, dims[0])
        return [self.epilogue(self.binary("add", y, d), final=True)]

    def bmm_graph(self, n: int) -> list[_Val]:
        """Batched products: attention-like chains [B, M, K] @ [B, K, S] -> scale, bound -> @ [B, S, N]."""
        batch = self.rng.randint(2, 32) if not self.small else self.rng.randint(1, 4)
        m, k = self.dim(REAL_BMM_M), self.dim(REAL_BMM_K)
        h = self.activation((batch, m), k, gather_ok=False)
        for i in range(n):
            width = self.dim(REAL_BMM_N)
            h = self.matmul("bmm", h, k, width)
            if i < n - 1 and self.rng.random() < 0.7:  # scores: scaled, then squashed like a softmax would
                h = self.scale(h, 2.0 ** -round(math.log2(max(k, 1)) / 2))
                try:
                    h = self.unary(h, self.rng.choice(("sigmoid", "tanh", "sigmoid")))
                except _Collapse:
                    h = self.unary(h, "tanh")
            h = self.epilogue(h, final=i == n - 1)
            k = width
        return [h]

    # ---- operands --------------------------------------------------------------------------------------
    def activation(self, lead: tuple[int, ...], k: int, gather_ok: bool = True) -> _Val:
        """An activation operand [*lead, K] with a prologue: a cast, a gather, per-token int8 dequant, an
        affine scale, a pointwise chain."""
        r = self.rng.random()
        alt = self.alt_dtype()
        if r < 0.2 and gather_ok:
            x = self.gathered(lead, k)
        elif r < 0.38 and alt is not None:
            x = self.cast(self.input("x", (*lead, k), alt), self.dt)
        elif r < 0.46:  # dynamic per-token int8 activations
            q = self.input("xq", (*lead, k), torch.int8)
            s = self.input("xs", (*lead, 1))
            x = self.binary("mul", self.cast(q, self.dt), s)
        else:
            x = self.input("x", (*lead, k))
        if self.rng.random() < 0.25:  # a norm's gain and bias
            x = self.binary("mul", x, self.input("gain", (k,)))
            if self.rng.random() < 0.5:
                x = self.binary("add", x, self.input("beta", (k,)))
        if self.rng.random() < 0.35:
            x = self.chain(x, self.rng.randint(1, 6))
        return x

    def gathered(self, lead: tuple[int, ...], k: int) -> _Val:
        rows = self.rng.randint(1, SMALL_MAX) if self.small else self.rng.choice(REAL_TABLE_ROWS)
        stored = self.dt if self.rng.random() < 0.7 else (self.alt_dtype() or self.dt)
        table = self.input("table", (rows, k), stored)
        idx = self.indices(lead)
        op = self.rng.choice(("index", "embedding") + (("index_select",) if len(lead) == 1 else ()))
        x = self.op(op, [table, idx], table.lo, table.hi, table.rms, table.centered)
        return self.cast(x, self.dt)

    def weight(self, lead: tuple[int, ...], rows: int, cols: int) -> _Val:
        """A weight operand of logical shape [*lead, rows, cols]: plain, transposed in memory (strides or a
        transpose node), int8 with per-row/per-column scales, int8 with one per-tensor scale (fp8-style),
        cast from another dtype, or with a pointwise chain."""
        kind = self.rng.choices(("plain", "strided", "transposed", "int8", "fp8", "cast", "chain"),
                                weights=(25, 12, 12, 22, 10, 10, 9))[0]
        shape = (*lead, rows, cols)
        nb = len(lead)
        if kind == "strided":
            strides = [*[rows * cols] * nb, 1, rows]
            return self.input("w", shape, strides=strides)
        transpose = kind in ("transposed", "int8", "fp8") and self.rng.random() < (1.0 if kind == "transposed" else 0.3)
        stored_dt = torch.int8 if kind in ("int8", "fp8") else (self.alt_dtype() if kind == "cast" else None)
        w = self.input("w", (*lead, cols, rows) if transpose else shape, stored_dt or self.dt)
        if transpose and self.rng.random() < 0.5:
            w = self.op("transpose", [w], w.lo, w.hi, w.rms, w.centered, dim0=nb, dim1=nb + 1)
            transpose = False
        w = self.cast(w, self.dt)
        if kind == "int8":
            r, c = (cols, rows) if transpose else (rows, cols)
            sshape = self.rng.choice(((c,), (1, c), (r, 1)))
            w = self.binary("mul", w, self.input("scale", sshape))
        elif kind == "fp8":
            if self.rng.random() < 0.5:
                w = self.scale(w, self.rng.choice((0.0078125, 0.015625, 0.03125)))
            else:
                w = self.binary("mul", w, self.input("scale", (1,)))
        elif kind == "chain":
            w = self.chain(w, self.rng.randint(1, 3))
        if transpose:
            w = self.op("transpose", [w], w.lo, w.hi, w.rms, w.centered, dim0=nb, dim1=nb + 1)
        return self.cast(w, self.dt)

    def matmul(self, kind: str, a: _Val, k: int, n: int) -> _Val:
        """a [..., K] times a fresh weight: mm/addmm [K, N], linear [N, K], bmm [B, K, N]."""
        a = self.cast(a, self.dt)
        lead = self.g.node(a.name).shape[:-1]
        if kind == "linear":
            b = self.weight((), n, k)
        else:
            b = self.weight(lead[:1] if kind == "bmm" else (), k, n)
        peak, rms, centered = _product(a, b, k)
        alpha = 1.0
        if peak > PEAK_LIMIT:  # scale the operand (or addmm's alpha) by a power of two: exact, and realistic
            factor = 2.0 ** -math.ceil(math.log2(peak / PEAK_LIMIT))
            if kind == "addmm" and self.rng.random() < 0.5:
                alpha = factor
            else:
                a = self.scale(a, factor)
            peak, rms = peak * factor, rms * factor
        if kind in ("mm", "bmm") or (kind == "linear" and self.rng.random() < 0.5):
            return self.op(kind, [a, b], -peak, peak, rms, centered)
        bias = self.bias(lead, n, kind == "addmm")
        attrs = {}
        if kind == "addmm":
            beta = self.rng.choice((1.0, 1.0, 0.5, 2.0))
            attrs = {k2: v for k2, v in (("alpha", alpha), ("beta", beta)) if v != 1.0}
        srcs = [bias, a, b] if kind == "addmm" else [a, b, bias]
        bpeak = bias.peak * attrs.get("beta", 1.0)
        return self.op(kind, srcs, -peak - bpeak, peak + bpeak, rms + bias.rms, centered and bias.centered, **attrs)

    def bias(self, lead: tuple[int, ...], n: int, full_ok: bool) -> _Val:
        shape: tuple[int, ...] = (n,)
        if full_ok and self.rng.random() < 0.3:
            shape = self.rng.choice(((1, n), (*lead, n)))
        alt = self.alt_dtype()
        if alt is not None and self.rng.random() < 0.3:  # an fp32 bias cast to the operand dtype
            return self.cast(self.input("bias", shape, alt), self.dt)
        return self.input("bias", shape)

    def alt_dtype(self) -> torch.dtype | None:
        """Another storage dtype to cast from: fp32 for low-precision graphs, else an allowed low precision."""
        if self.dt != torch.float32:
            return torch.float32
        low = [d for d in self.dtypes if d != torch.float32]
        return self.rng.choice(low) if low else None

    # ---- epilogues -------------------------------------------------------------------------------------
    def epilogue(self, y: _Val, final: bool) -> _Val:
        """Bias, scalar scale, activation, a pointwise chain, residual add, clamp, cast: each maybe."""
        shape = self.g.node(y.name).shape
        rng = self.rng
        if rng.random() < 0.35:
            y = self.binary("add", y, self.input("b", shape[-1:]))
        if rng.random() < 0.2:
            y = self.scale(y, rng.choice((0.5, 0.125, 2.0, 0.7071067811865476, -1.0)))
        if rng.random() < 0.55:
            y = self.activate(y)
        if rng.random() < 0.3:
            y = self.chain(y, rng.randint(1, 4))
        if rng.random() < 0.25:
            y = self.binary("add", y, self.input("res", shape))
        if rng.random() < 0.15:
            try:
                y = self.clamp(y)
            except _Collapse:
                pass
        if final and rng.random() < 0.2:  # a cast down to a dtype the value's history allows (see _RANK)
            lower = [d for d in self.dtypes if _RANK[d] <= y.prec and d != self.g.node(y.name).dtype]
            if lower:
                y = self.cast(y, rng.choice(lower))
        return y if final else self.cast(y, self.dt)  # it feeds the next matmul

    # ---- pointwise ops ---------------------------------------------------------------------------------
    def unary(self, v: _Val, op: str, **attrs: object) -> _Val:
        """op(v); sigmoid and tanh on a tamed v. Raises _Collapse (adding nothing) where relu, gelu, silu or
        sigmoid would keep only a small part of v."""
        f = _tame_factor(v, SATURATING_RMS) if op in ("sigmoid", "tanh") else 1.0
        lo, hi, rms, centered = _unary_range(op, _scaled(v, f))
        if op in ("relu", "gelu", "silu", "sigmoid"):
            _check_kept(_scaled(v, f), lo, hi)
        v = self.tame(v, SATURATING_RMS) if f != 1.0 else v
        return self.op(op, [v], lo, hi, rms, centered, **attrs)

    def activate(self, v: _Val) -> _Val:
        """An activation, one that keeps enough of v (none where every one would collapse it)."""
        ops = ["relu", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh"]
        self.rng.shuffle(ops)
        for op in ops:
            try:
                if op == "gelu_tanh":
                    return self.unary(v, "gelu", approximate="tanh")
                gelu = {"approximate": "none"} if op == "gelu" and self.rng.random() < 0.5 else {}
                return self.unary(v, op, **gelu)
            except _Collapse:
                continue
        return v

    def binary(self, op: str, a: _Val, b: _Val) -> _Val:
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

    def clamp(self, v: _Val) -> _Val:
        """A clamp to one of the common bounds, on a tamed v; _Collapse where it would keep too little."""
        lo, hi = self.rng.choice(((-6.0, 6.0), (0.0, 6.0), (-1.0, 1.0), (None, 10.0), (-10.0, None)))
        t = _scaled(v, _tame_factor(v, max(abs(b) for b in (lo, hi) if b is not None) / 2))
        nlo = max(t.lo, lo) if lo is not None else t.lo
        nhi = min(t.hi, hi) if hi is not None else t.hi
        _check_kept(t, nlo, nhi)
        v = self.tame(v, max(abs(b) for b in (lo, hi) if b is not None) / 2)
        attrs = {k: b for k, b in (("min", lo), ("max", hi)) if b is not None}
        return self.op("clamp", [v], min(nlo, nhi), max(nlo, nhi), v.rms, v.centered and lo is None, **attrs)

    def chain(self, v: _Val, n_ops: int) -> _Val:
        """A chain of about `n_ops` pointwise ops drawn from the registry, each only where its input is in the
        op's domain and its result stays in range."""
        start = self.n_ops
        for _ in range(8 * n_ops):
            if self.n_ops - start >= n_ops:
                break
            move = self.rng.choice(_MOVES)
            try:
                out = move(self, v)
            except _Collapse:
                continue
            if out is not None:
                v = out
        return v

    def vector_shape(self, v: _Val) -> tuple[int, ...]:
        shape = self.g.node(v.name).shape
        if len(shape) >= 2 and self.rng.random() < 0.3:
            return (shape[-2], 1)
        return shape[-1:]


def _product(a: _Val, b: _Val, k: int) -> tuple[float, float, bool]:
    """Peak, rms and centring of a K-long dot product of independent entries: sqrt(K) growth when either
    side is centred on zero, K growth (the means add up) otherwise."""
    if a.centered or b.centered:
        rms = math.sqrt(k) * a.rms * b.rms
        return 6.0 * rms, rms, True
    rms = (k + math.sqrt(k)) * a.rms * b.rms
    return 1.2 * rms + 6.0 * math.sqrt(k) * a.rms * b.rms, rms, False


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(min(x, 50.0), -50.0)))


def _unary_range(op: str, v: _Val) -> tuple[float, float, float, bool]:
    """[lo, hi], rms and centring of op(v)."""
    lo, hi, rms = v.lo, v.hi, v.rms
    if op == "relu":
        return max(lo, 0.0), max(hi, 0.0), rms, False
    if op in ("gelu", "silu"):
        floor = -0.17 if op == "gelu" else -0.28
        return (floor if lo < 0 else lo / 2), max(hi, 0.0), rms, False
    if op == "sigmoid":
        return _sigmoid(lo), _sigmoid(hi), 1.0, False
    if op == "tanh":
        return math.tanh(lo), math.tanh(hi), min(rms, 1.0), v.centered
    if op == "abs":
        return (0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))), v.peak, rms, False
    if op == "neg":
        return -hi, -lo, rms, v.centered
    if op == "exp":
        return math.exp(lo), math.exp(hi), math.exp(hi), False
    if op == "log":
        return math.log(lo), math.log(hi), max(abs(math.log(lo)), abs(math.log(hi))), False
    if op == "sqrt":
        return math.sqrt(lo), math.sqrt(hi), math.sqrt(hi), False
    if op == "rsqrt":
        return 1 / math.sqrt(hi), 1 / math.sqrt(lo), 1 / math.sqrt(lo), False
    raise AssertionError(op)


# ---- chain moves: each adds one or two ops, or returns None where the input is outside its domain ----

def _m_activation(b: _Builder, v: _Val) -> _Val | None:
    return b.activate(v)


def _m_exp(b: _Builder, v: _Val) -> _Val | None:
    # exp only on bounded values (squashed by sigmoid/tanh first): a larger argument magnifies its rounding error.
    if v.peak > 1.0:
        v = b.unary(v, b.rng.choice(("sigmoid", "tanh")))
    return b.unary(v, "exp")


def _m_positive_domain(b: _Builder, v: _Val) -> _Val | None:
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


def _m_pow(b: _Builder, v: _Val) -> _Val | None:
    if not b.positive:
        return None
    if v.peak <= 1.0 and b.rng.random() < 0.5:  # 2 ** x
        return b.op("pow", [v], 2.0 ** v.lo, 2.0 ** v.hi, 2.0 ** v.hi, False, scalar=2.0, scalar_first=True)
    e = b.rng.choice((2, 3))
    if v.peak ** e > PEAK_LIMIT:
        return None
    lo = 0.0 if e == 2 and v.lo < 0 < v.hi else min(v.lo ** e, v.hi ** e)
    return b.op("pow", [v], lo, max(v.lo ** e, v.hi ** e), 3 * v.rms ** e, v.centered and e == 3, scalar=e)


def _m_scalar(b: _Builder, v: _Val) -> _Val | None:
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


def _m_minmax(b: _Builder, v: _Val) -> _Val | None:
    r = b.rng.random()
    if r < 0.4:
        return b.clamp(v)
    # Bounded against a constant: tamed like a clamp, or most of a wide value sits on the constant.
    op, c = ("maximum", b.rng.choice((0.0, -1.0, 0.5))) if r < 0.7 else ("minimum", b.rng.choice((6.0, 1.0, 0.0)))
    pick = max if op == "maximum" else min
    t = _scaled(v, _tame_factor(v, SATURATING_RMS))
    _check_kept(t, pick(t.lo, c), pick(t.hi, c))
    v = b.tame(v, SATURATING_RMS)
    return b.op(op, [v], pick(v.lo, c), pick(v.hi, c), v.rms, False, scalar=c)


def _m_sign(b: _Builder, v: _Val) -> _Val | None:
    return b.unary(v, b.rng.choice(("abs", "neg")))


def _m_vector(b: _Builder, v: _Val) -> _Val | None:
    """mul/add/sub/div by a broadcast vector input ([D] along the last dim, or [R, 1] per row)."""
    op = b.rng.choice(("mul", "add", "sub", "div"))
    shape = b.vector_shape(v)
    if op == "div":  # x / d: random_inputs draws the denominator from [0.5, 1.5)
        d = b.input("d", shape, positive=True)
        lo, hi = (v.lo / 1.5, v.hi / 0.5) if v.lo >= 0 else (v.lo / 0.5, max(v.hi / 0.5, v.hi / 1.5))
        return b.op("div", [v, d], lo, hi, 2 * v.rms, v.centered) if 2 * v.peak <= PEAK_LIMIT else None
    if op == "mul" and 6 * v.peak > PEAK_LIMIT:
        return None
    return b.binary(op, v, b.input("v", shape))


def _m_where(b: _Builder, v: _Val) -> _Val | None:
    """Leaky relu as where(x > 0, x, a * x): continuous at the threshold, so a comparison that rounding flips
    (a value that is 0 in float16 but tiny in float64) changes the result by a tiny amount only."""
    a = b.rng.choice((0.01, 0.2))
    lo, hi = min(v.lo * a, 0.0), max(v.hi, 0.0)
    _check_kept(v, lo, hi)
    cond = b.op("gt", [v], 0.0, 1.0, 1.0, False, scalar=0.0)
    leak = b.scale(v, a)
    return b.op("where", [cond, v, leak], lo, hi, v.rms, False)


def _m_cast(b: _Builder, v: _Val) -> _Val | None:
    """Compute on in another dtype: up to fp32 in low-precision graphs, down in fp32 ones."""
    dt = b.g.node(v.name).dtype
    others = [d for d in (*b.dtypes, torch.float32) if d != dt]
    return b.cast(v, b.rng.choice(others)) if others else None


_MOVES: tuple[Callable[[_Builder, _Val], _Val | None], ...] = (
    _m_activation, _m_exp, _m_exp, _m_positive_domain, _m_pow, _m_scalar, _m_scalar, _m_minmax, _m_sign,
    _m_vector, _m_vector, _m_where, _m_cast,
)
