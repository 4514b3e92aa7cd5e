"""What the random graph generator knows of a value: practical bounds, root mean square, centring and precision,
and the range arithmetic of the ops it draws (a product's growth, a unary op's image, taming by a power of two)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

SATURATING_RMS = 2.0  # widest input (rms) of a saturating op, see GraphBuilder.tame
COLLAPSE = 0.25  # a selecting op whose result peaks below this share of its input's rms is refused (Collapse)
PEAK_LIMIT = 4096.0  # largest |value| a graph may reach: float16 (max 65504) with margin for the rough estimates
FLOATS = (torch.bfloat16, torch.float16, torch.float32)
# Precision rank: a value is only as exact as the least precise dtype it passed through. Validation's tolerance
# follows the output dtype, so an output may not be more precise than its history (no final upcast to fp32).
RANK = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}
EXACT = 3


@dataclass(frozen=True)
class Val:
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


class Collapse(Exception):
    """A selecting op (relu, clamp, sigmoid...) would keep only a small part of a wide value, such as the negative
    tail of a gelu: the operand's rounding error, absolute, would then be a large part of the result."""


def check_kept(v: Val, lo: float, hi: float) -> None:
    if max(abs(lo), abs(hi)) < COLLAPSE * v.rms:
        raise Collapse


def scaled(v: Val, f: float) -> Val:
    lo, hi = sorted((v.lo * f, v.hi * f))
    return replace(v, lo=lo, hi=hi, rms=v.rms * f)


def tame_factor(v: Val, rms_max: float) -> float:
    return 1.0 if v.rms <= rms_max else 2.0 ** -math.ceil(math.log2(v.rms / rms_max))


def product_range(a: Val, b: Val, k: int) -> tuple[float, float, bool]:
    """Peak, rms and centring of a K-long dot product of independent entries: sqrt(K) growth when either
    side is centred on zero, K growth (the means add up) otherwise."""
    if a.centered or b.centered:
        rms = math.sqrt(k) * a.rms * b.rms
        return 6.0 * rms, rms, True
    rms = (k + math.sqrt(k)) * a.rms * b.rms
    return 1.2 * rms + 6.0 * math.sqrt(k) * a.rms * b.rms, rms, False


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(min(x, 50.0), -50.0)))


def unary_range(op: str, v: Val) -> tuple[float, float, float, bool]:
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
