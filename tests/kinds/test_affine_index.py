"""Affine indices (triton_source.tile.Affine): a reshape of an index known term by term splits it digit by
digit, and the index expressions it yields must equal the row-major unravel of the flat index for every value
of the terms (checked here by brute force over every value, with Python integers)."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from fusionsearch.kinds.triton_source.tile_index import Affine, Idx, _reshape_index


def _value(expr: str, env: dict[str, int]) -> int:
    return int(eval(expr, {}, dict(env)))  # noqa: S307 - the expressions are this test's own


def _unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    out = []
    for size in reversed(shape):
        out.append(flat % size)
        flat //= size
    return out[::-1]


def _k_index(block_k: int, blocks: int, parity: int) -> Idx:
    """The decode pairs form's K: kb * BLOCK_K + 2 * kp + parity."""
    return Idx.of(Affine((("kb", block_k, blocks), ("kp", 2, block_k // 2)), parity))


def _check(out: tuple[int, ...], src: tuple[int, ...], index: tuple[Idx, ...],
           variables: dict[str, range]) -> tuple[Idx, ...]:
    res = _reshape_index(out, src, index)
    for values in itertools.product(*variables.values()):
        env = dict(zip(variables, values, strict=True))
        flat_index = [_value(c.expr, env) for c in index]
        flat = 0
        for size, v in zip(out, flat_index, strict=True):
            flat = flat * size + v
        want = _unravel(flat, src)
        got = [_value(c.expr, env) for c in res]
        assert got == want, (out, src, env, [c.expr for c in res])
    return res


@pytest.mark.parametrize("parity", [0, 1])
@pytest.mark.parametrize(("block_k", "blocks"), [(32, 4), (128, 2), (256, 1)])
def test_nibble_and_group_reshapes_split_without_dividing(block_k: int, blocks: int, parity: int) -> None:
    k = block_k * blocks
    variables = {"kb": range(blocks), "kp": range(block_k // 2), "n": range(3)}
    index = (_k_index(block_k, blocks, parity), Idx("n"))
    nibbles = _check((k, 3), (k // 2, 2, 3), index, variables)
    assert nibbles[1].expr == str(parity) and "//" not in nibbles[0].expr  # one byte for both nibbles
    for group in (64, 128, 256):
        if k % group == 0:
            grouped = _check((k, 3), (k // group, group, 3), index, variables)
            if group % block_k == 0:  # the group's scale: one row a K block, no per-element index
                assert "kp" not in grouped[0].expr


def test_random_reshapes_of_affine_indices_match_the_unravel() -> None:
    rng = random.Random(7)
    for _ in range(60):
        block_k = rng.choice([4, 8, 16])
        blocks = rng.choice([1, 2, 3, 6])
        k = block_k * blocks
        lead = rng.choice([1, 2, 3])
        out = (lead, k)
        factors = [d for d in range(1, k + 1) if k % d == 0]
        f = rng.choice(factors)
        g = rng.choice([d for d in range(1, k // f + 1) if (k // f) % d == 0])
        src = rng.choice([(lead, k // f, f), (lead * (k // f), f), (lead, k // f // g, g, f), (lead * k,),
                          (lead, k // f, 1, f)])
        assert math.prod(src) == math.prod(out)
        index = (Idx("r"), _k_index(block_k, blocks, rng.choice([0, 1])))
        _check(out, src, index, {"r": range(lead), "kb": range(blocks), "kp": range(block_k // 2)})


def test_divmod_refuses_digits_that_overlap() -> None:
    a = Affine((("x", 3, 5),), 0)  # 0, 3, ..., 12: by 2 it does not split into digits
    assert a.divmod(2) is None
    assert Affine((("x", 4, 8), ("y", 1, 4)), 2).divmod(4) is None  # 4x + y + 2: y + 2 reaches 5
    q, r = Affine((("x", 4, 8), ("y", 1, 2)), 2).divmod(4)  # y + 2 < 4: x and y + 2 are its digits
    assert (q.expr(), r.expr()) == ("x", "(y + 2)")
