"""The index algebra of a tile: index components (Idx) as Triton expressions with their masks, known term by
term where they are affine, and the maps that layout ops and broadcasting make of them (reshape, broadcast, a
one-axis load's 1-D form). TileEvaluator walks a fused subgraph with these."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Affine:
    """An index known as a sum of scaled variables, each in [0, extent), plus a constant: what lets a reshape
    split it by a divisor without dividing per element. The decode matmul's nibble-pair form reads K as
    k = kb * BLOCK_K + 2 * kp + parity, so the nibble unpack's k // 2 and k % 2 become kb * BLOCK_K / 2 + kp and
    the parity, and a group scale's k // G (G a multiple of BLOCK_K) the scalar kb // (G / BLOCK_K)."""

    terms: tuple[tuple[str, int, int], ...]  # (Triton expression, coefficient, extent)
    const: int = 0

    def span(self) -> int:
        """The largest value the index takes."""
        return sum(c * (e - 1) for _, c, e in self.terms) + self.const

    def expr(self) -> str:
        parts = [v if c == 1 else f"{v} * {c}" for v, c, e in self.terms if e > 1]
        if self.const or not parts:
            parts.append(str(self.const))
        return parts[0] if len(parts) == 1 else f"({' + '.join(parts)})"

    def scaled(self, factor: int) -> Affine:
        return Affine(tuple((v, c * factor, e) for v, c, e in self.terms), self.const * factor)

    def plus(self, other: Affine) -> Affine:
        return Affine(self.terms + other.terms, self.const + other.const)

    def divmod(self, d: int) -> tuple[Affine, Affine] | None:
        """(self // d, self % d) as Affines, or None when the terms do not split at d: every term's coefficient
        a multiple of d (it goes to the quotient) or below d (the remainder), a term whose coefficient divides d
        cut into its quotient and remainder digits, and the remainder's span below d."""
        high: list[tuple[str, int, int]] = []
        low: list[tuple[str, int, int]] = []
        for v, c, e in self.terms:
            if c % d == 0:
                high.append((v, c // d, e))
            elif d % c == 0 and e > d // c:
                r = d // c
                high.append((f"({v}) // {r}", 1, -(-e // r)))
                low.append((f"({v}) % {r}", c, r))
            else:
                low.append((v, c, e))
        rem = Affine(tuple(low), self.const % d)
        if rem.span() >= d:
            return None
        return Affine(tuple(high), self.const // d), rem


@dataclass(frozen=True)
class Idx:
    """One index component: a Triton expression broadcastable to the tile ('0' for a broadcast dim) and the
    mask that bounds it (None when always in range); `affine` where its value is known term by term."""

    expr: str
    mask: str | None = None
    affine: Affine | None = None

    @staticmethod
    def of(a: Affine, mask: str | None = None) -> Idx:
        return Idx(a.expr(), mask, a)


ZERO = Idx("0")


WORD_BYTES = 4  # a uint8 operand read as int32 words: 4 columns' bytes a load (decode_matmul's words form)


def mask_of(index: tuple[Idx, ...]) -> str | None:
    masks: list[str] = []
    for c in index:
        if c.mask and c.mask not in masks:
            masks.append(c.mask)
    return " & ".join(f"({m})" for m in masks) if masks else None


def _word_column(c: Idx) -> int | None:
    """The byte position j where index component `c` is a words tile's columns, 4 * idx_w + j (MatmulTile's
    `word`); else None."""
    a = c.affine
    if a is None or len(a.terms) != 1 or not 0 <= a.const < WORD_BYTES:
        return None
    expr, coefficient, _ = a.terms[0]
    return a.const if coefficient == WORD_BYTES and expr.startswith("idx_w") else None


# Floats whose bits OR'd onto a small non-negative integer q give MAGIC + q exactly: (bits, MAGIC, the integer
# dtype the bits are built in, the largest q).


_SCALARS = {"pid_b", "pid_m", "pid_n", "pid_k", "kb"}  # the names a tile's index uses that are scalars
_AXIS = re.compile(r"^([A-Za-z_]\w*)(\[:, None\]|\[None, :\])$")


def _vector_index(index: tuple[Idx, ...]) -> tuple[tuple[Idx, ...], str] | None:
    """`index` as 1-D (each tile-axis component `v[:, None]` read as `v`, scalars kept) and the expansion that
    puts the loaded vector back on its axis, when every component that spans the tile spans the same one axis
    as a plain variable (its mask too); else None. Why: a [BN, 1] load gets a layout of its own, and a
    product of it with a dot operand is then computed in that layout and moved to the operand's through shared
    memory every K step (the generated w8 decode kernel stored each dequantised weight element to shared memory
    and read it back); a 1-D load expanded follows the operand's layout in registers."""
    axis, out = None, []
    for c in index:
        m = _AXIS.match(c.expr)
        term = c.affine.terms[0] if m is None and c.affine is not None and len(c.affine.terms) == 1 else None
        scaled = _AXIS.match(term[0]) if term else None
        if scaled:  # an affine of one axis variable: a words tile's columns, 4 * idx_w + j
            m, flat = scaled, f"({scaled[1]} * {term[1]} + {c.affine.const})"  # type: ignore[union-attr]
        elif m is None:
            if c.mask or not set(re.findall(r"[A-Za-z_]\w*", c.expr)) <= _SCALARS:
                return None  # a gathered row, a loaded value: a tile of its own
            out.append(c)  # a scalar: the batch, a group row
            continue
        else:
            flat = m[1]
        mask = _AXIS.match(c.mask) if c.mask else None
        if (axis or m[2]) != m[2] or (c.mask and (mask is None or mask[2] != m[2])):
            return None
        axis = m[2]
        out.append(Idx(flat, mask[1] if mask else None))
    return (tuple(out), axis) if axis else None


def _broadcast_index(src: tuple[int, ...], out: tuple[int, ...], index: tuple[Idx, ...]) -> tuple[Idx, ...]:
    """torch broadcasting as an index map: leading dims dropped, size-1 dims read at 0."""
    lead = len(out) - len(src)
    return tuple(ZERO if src[j] == 1 and out[j + lead] != 1 else index[j + lead] for j in range(len(src)))


def _reshape_index(out: tuple[int, ...], src: tuple[int, ...], index: tuple[Idx, ...]) -> tuple[Idx, ...]:
    """Row-major reshape as an index map: linearise the output index, split it over the source dims."""
    if out == src:
        return index
    # Dims of equal size at either end map straight through (row-major): only the middle is linearised, so the
    # index of a kept last dim stays its own (no division by a size that is not a power of two per element, and
    # a reshape of the rows stays free of the K loop's index).
    if out and src and out[-1] == src[-1]:
        return (*_reshape_index(out[:-1], src[:-1], index[:-1]), index[-1])
    if out and src and out[0] == src[0]:
        return (index[0], *_reshape_index(out[1:], src[1:], index[1:]))
    # A last dim that several of the output's rows fill (the pairs of a mixture-of-experts layer, [2T, H] read
    # from [T, 2H]): the rows split over the source's leading dims and a factor, the last index stays added.
    if len(out) > 1 and src and out[-1] > 1 and src[-1] % out[-1] == 0:
        inner = _reshape_index(out[:-1], (*src[:-1], src[-1] // out[-1]), index[:-1])
        last = Idx(f"(({inner[-1].expr}) * {out[-1]} + ({index[-1].expr}))", mask_of((inner[-1], index[-1])))
        return (*inner[:-1], last)
    # Only the masks of the components the linear index uses: the others (size-1 dims) do not move the load, and
    # a block mask on a scalar pointer (every used component scalar, as pid_b) is refused by tl.load.
    masks = mask_of(tuple(c for size, c in zip(out, index, strict=True) if c.expr != "0" and size != 1))
    if any(c.affine is not None for c in index):
        split = _reshape_affine(out, src, index, masks)
        if split is not None:
            return split
    terms, stride = [], 1
    for size, c in zip(reversed(out), reversed(index), strict=True):
        if c.expr != "0" and size != 1:
            terms.append(f"({c.expr}) * {stride}" if stride != 1 else f"({c.expr})")
        stride *= size
    linear = " + ".join(reversed(terms)) if terms else "0"
    res, inner = [], math.prod(src)
    for size in src:
        inner //= max(size, 1)
        if size == 1:
            res.append(ZERO)
            continue
        expr = f"(({linear}) // {inner})" if inner != 1 else f"({linear})"
        res.append(Idx(f"({expr} % {size})", masks))
    return tuple(res)


def _reshape_affine(out: tuple[int, ...], src: tuple[int, ...], index: tuple[Idx, ...], masks: str | None
                    ) -> tuple[Idx, ...] | None:
    """The row-major reshape of an index with Affine components, digit by digit (no per-element division where
    the digits line up); None where some source dim's digit does not split, and the caller linearises."""
    linear, stride = Affine(()), 1
    for size, c in zip(reversed(out), reversed(index), strict=True):
        if c.expr != "0" and size != 1:
            part = c.affine or Affine(((c.expr, 1, size),))
            linear = linear.plus(part.scaled(stride))
        stride *= size
    res: list[Idx] = []
    inner = math.prod(src)
    for size in src:
        inner //= max(size, 1)
        if size == 1:
            res.append(ZERO)
            continue
        quotient = linear.divmod(inner)
        if quotient is None:
            return None
        digit = quotient[0]
        if digit.span() >= size:
            wrapped = digit.divmod(size)
            if wrapped is None:
                return None
            digit = wrapped[1]
        res.append(Idx.of(digit, masks))
    return tuple(res)
