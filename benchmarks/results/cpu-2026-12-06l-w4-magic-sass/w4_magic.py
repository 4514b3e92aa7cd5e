"""Probe (issue 27, int4 GEMV): the group scale and zero applied once a K tile, after the dot, not to every
weight element. B is the nibble as the exact bf16 128 + q (magic exponent: PRMT + LOP3 a pair of elements, no
float arithmetic a weight element); per K tile (inside one group) P = dot(a, 128 + q) in fp32, and
sum_k a_k ((q_k - 8) s + z) = s (P - 136 X) + z X, X = sum_k a_k. `HI`: the even K's high nibble kept in place
(128 + 16 q, that parity's A scaled by 1/16, exact): no shift. Handwritten; timed against the generated plans.

    python gpu/w4_magic.py --sass            # CPU: sm_90 loop figures of each config
    python gpu/w4_magic.py --gpu OUT         # GPU: validate against float64 and time with the generated plans"""
import json
import os
import sys

import torch
import triton
import triton.language as tl

INTERP = os.environ.get("TRITON_INTERPRET") == "1"
_ASM = tl.constexpr(not INTERP)


@triton.jit
def _magic_pairs(words, HI: tl.constexpr):
    """The four byte positions' nibbles of int32 words as bf16 magic values, per position j a tensor of the
    words' shape: (lo_j, hi_j) with lo = 128 + (byte & 15), hi = 128 + (byte & 240) (HI) or, without HI, the
    words already shifted and masked to one nibble a byte and only lo_j."""
    if not _ASM:  # the interpreter runs no inline assembly: the same values by integer ops (as fp32)
        l0 = ((words & 15) + 128).to(tl.float32)
        l1 = (((words >> 8) & 15) + 128).to(tl.float32)
        l2 = (((words >> 16) & 15) + 128).to(tl.float32)
        l3 = (((words >> 24) & 15) + 128).to(tl.float32)
        if HI:
            h0 = ((words & 240) + 128).to(tl.float32)
            h1 = (((words >> 8) & 240) + 128).to(tl.float32)
            h2 = (((words >> 16) & 240) + 128).to(tl.float32)
            h3 = (((words >> 24) & 240) + 128).to(tl.float32)
            return l0, l1, l2, l3, h0, h1, h2, h3
        return l0, l1, l2, l3, l0, l1, l2, l3
    if HI:
        l0, l1, l2, l3, h0, h1, h2, h3 = tl.inline_asm_elementwise(
            "{ .reg .b32 t; "
            "prmt.b32 t, $8, $9, 0x4400; lop3.b32 $0, t, 0x000F000F, 0x43004300, 0xEA; "
            "lop3.b32 $4, t, 0x00F000F0, 0x43004300, 0xEA; "
            "prmt.b32 t, $8, $9, 0x5511; lop3.b32 $1, t, 0x000F000F, 0x43004300, 0xEA; "
            "lop3.b32 $5, t, 0x00F000F0, 0x43004300, 0xEA; "
            "prmt.b32 t, $8, $9, 0x6622; lop3.b32 $2, t, 0x000F000F, 0x43004300, 0xEA; "
            "lop3.b32 $6, t, 0x00F000F0, 0x43004300, 0xEA; "
            "prmt.b32 t, $8, $9, 0x7733; lop3.b32 $3, t, 0x000F000F, 0x43004300, 0xEA; "
            "lop3.b32 $7, t, 0x00F000F0, 0x43004300, 0xEA; }",
            "=r,=r,=r,=r,=r,=r,=r,=r,r,r", [words], dtype=(tl.bfloat16,) * 8, is_pure=True, pack=2)
        return l0, l1, l2, l3, h0, h1, h2, h3
    else:
        l0, l1, l2, l3 = tl.inline_asm_elementwise(
            "{ .reg .b32 t; "
            "prmt.b32 t, $4, $5, 0x4400; lop3.b32 $0, t, 0x00FF00FF, 0x43004300, 0xEA; "
            "prmt.b32 t, $4, $5, 0x5511; lop3.b32 $1, t, 0x00FF00FF, 0x43004300, 0xEA; "
            "prmt.b32 t, $4, $5, 0x6622; lop3.b32 $2, t, 0x00FF00FF, 0x43004300, 0xEA; "
            "prmt.b32 t, $4, $5, 0x7733; lop3.b32 $3, t, 0x00FF00FF, 0x43004300, 0xEA; }",
            "=r,=r,=r,=r,r,r", [words], dtype=(tl.bfloat16,) * 4, is_pure=True, pack=2)
        return l0, l1, l2, l3, l0, l1, l2, l3


@triton.jit
def _row_j(ptr, row, cols):
    """A contiguous [BLOCK_N] row split into its four byte positions (column 4 w + j -> the j-th), fp32."""
    r = tl.load(ptr + row + cols).to(tl.float32)
    h0, h1 = tl.split(tl.reshape(r, (cols.shape[0] // 4, 2, 2)))
    j0, j2 = tl.split(h0)
    j1, j3 = tl.split(h1)
    return j0, j1, j2, j3


@triton.jit
def w4_magic(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, ws_ptr, sem_ptr, M, N, K: tl.constexpr, G: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr,
             STAGES: tl.constexpr, HI: tl.constexpr, ABL: tl.constexpr = 0):
    """ABL (ablations, for what bounds it): 1 no scale fix (acc += P; no scale or zero loads), 2 B as the raw
    word bits (one PRMT a pair: no nibble masks, no magic), 3 both: loads and dots alone. Wrong values."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    KT: tl.constexpr = K // BLOCK_K // SPLIT
    rm = tl.arange(0, BLOCK_M)
    mask_m = rm < M
    kp = tl.arange(0, BLOCK_K // 2)
    wi = pid_n * (BLOCK_N // 4) + tl.arange(0, BLOCK_N // 4)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc0 = tl.zeros((BLOCK_M, BLOCK_N // 4), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_M, BLOCK_N // 4), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, BLOCK_N // 4), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_M, BLOCK_N // 4), dtype=tl.float32)
    for t in tl.range(KT, num_stages=STAGES):
        kb = pid_k * KT + t
        a = tl.load(x_ptr + rm[:, None] * K + kb * BLOCK_K + tl.arange(0, BLOCK_K)[None, :], mask=mask_m[:, None],
                    other=0.0)
        a_e, a_o = tl.split(tl.reshape(a, (BLOCK_M, BLOCK_K // 2, 2)))  # k even: shift 4 (high), odd: 0 (low)
        words = tl.load((w_ptr + (kb * (BLOCK_K // 2) + kp[:, None]) * N).to(tl.pointer_type(tl.int32)) + wi[None, :])
        if HI:
            a_h = (a_e.to(tl.float32) * 0.0625).to(a.dtype)
            if not _ASM:
                a_h = a_h.to(tl.float32)
                a_o = a_o.to(tl.float32)
            l0, l1, l2, l3, h0, h1, h2, h3 = _magic_pairs(words, True)
            p0 = tl.dot(a_h, h0, tl.dot(a_o, l0, tl.zeros((BLOCK_M, BLOCK_N // 4), tl.float32)))
            p1 = tl.dot(a_h, h1, tl.dot(a_o, l1, tl.zeros((BLOCK_M, BLOCK_N // 4), tl.float32)))
            p2 = tl.dot(a_h, h2, tl.dot(a_o, l2, tl.zeros((BLOCK_M, BLOCK_N // 4), tl.float32)))
            p3 = tl.dot(a_h, h3, tl.dot(a_o, l3, tl.zeros((BLOCK_M, BLOCK_N // 4), tl.float32)))
        else:
            if not _ASM:
                a_e = a_e.to(tl.float32)
                a_o = a_o.to(tl.float32)
            if ABL % 4 >= 2:
                e0, e1, e2, e3 = tl.inline_asm_elementwise(
                    "prmt.b32 $0, $4, $5, 0x5410; prmt.b32 $1, $4, $5, 0x7632; prmt.b32 $2, $4, $5, 0x7610; "
                    "prmt.b32 $3, $4, $5, 0x5432;", "=r,=r,=r,=r,r,r", [words], dtype=(tl.bfloat16,) * 4,
                    is_pure=True, pack=2)
                o0, o1, o2, o3 = e1, e2, e3, e0
            else:
                e0, e1, e2, e3, _, _, _, _ = _magic_pairs((words >> 4) & 0x0F0F0F0F, False)
                o0, o1, o2, o3, _, _, _, _ = _magic_pairs(words & 0x0F0F0F0F, False)
            p0 = tl.dot(a_e, e0, tl.dot(a_o, o0, tl.zeros((BLOCK_M, BLOCK_N // 4), tl.float32)))
            p1 = tl.dot(a_e, e1, tl.dot(a_o, o1, tl.zeros((BLOCK_M, BLOCK_N // 4), tl.float32)))
            p2 = tl.dot(a_e, e2, tl.dot(a_o, o2, tl.zeros((BLOCK_M, BLOCK_N // 4), tl.float32)))
            p3 = tl.dot(a_e, e3, tl.dot(a_o, o3, tl.zeros((BLOCK_M, BLOCK_N // 4), tl.float32)))
        if ABL % 2 == 1 or ABL == 6:
            acc0 += p0
            acc1 += p1
            acc2 += p2
            acc3 += p3
        elif HI:  # sum a (q - 8) = P - 136 X_odd - 16 X_even
            grp = (kb * BLOCK_K) // G * N
            s0, s1, s2, s3 = _row_j(s_ptr, grp, cols)
            z0, z1, z2, z3 = _row_j(z_ptr, grp, cols)
            x_e = tl.sum(a_e.to(tl.float32), axis=1)[:, None]
            x_o = tl.sum(a_o.to(tl.float32), axis=1)[:, None]
            u, xs = -(136.0 * x_o + 16.0 * x_e), x_e + x_o
            acc0 += p0 * s0[None, :] + u * s0[None, :] + xs * z0[None, :]
            acc1 += p1 * s1[None, :] + u * s1[None, :] + xs * z1[None, :]
            acc2 += p2 * s2[None, :] + u * s2[None, :] + xs * z2[None, :]
            acc3 += p3 * s3[None, :] + u * s3[None, :] + xs * z3[None, :]
        else:  # sum a (q - 8) s + X z = P s + X (z - 136 s)
            grp = (kb * BLOCK_K) // G * N
            s0, s1, s2, s3 = _row_j(s_ptr, grp, cols)
            z0, z1, z2, z3 = _row_j(z_ptr, grp, cols)
            xs = tl.sum(a.to(tl.float32), axis=1)[:, None]
            acc0 += p0 * s0[None, :] + xs * (z0 - 136.0 * s0)[None, :]
            acc1 += p1 * s1[None, :] + xs * (z1 - 136.0 * s1)[None, :]
            acc2 += p2 * s2[None, :] + xs * (z2 - 136.0 * s2)[None, :]
            acc3 += p3 * s3[None, :] + xs * (z3 - 136.0 * s3)[None, :]
    acc = tl.reshape(tl.join(tl.join(acc0, acc2), tl.join(acc1, acc3)), (BLOCK_M, BLOCK_N))
    mask = mask_m[:, None] & (cols < N)[None, :]
    off = rm[:, None] * N + cols[None, :]
    if SPLIT == 1:
        tl.store(y_ptr + off, acc.to(y_ptr.dtype.element_ty), mask=mask)
    elif ABL >= 4:
        tl.store(ws_ptr + pid_k * M * N + off, acc, mask=mask)
    else:
        tl.store(ws_ptr + pid_k * M * N + off, acc, mask=mask)
        tl.debug_barrier()
        arrived = tl.atomic_add(sem_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT - 1:
            tl.debug_barrier()
            tot = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for s in range(SPLIT):
                tot += tl.load(ws_ptr + s * M * N + off, mask=mask, other=0.0, cache_modifier=".cg")
            tl.store(y_ptr + off, tot.to(y_ptr.dtype.element_ty), mask=mask)
            tl.atomic_xchg(sem_ptr + pid_n, 0, sem="relaxed", scope="gpu")


@triton.jit
def _bytes_f32(words):
    """The four bytes of int32 words as the float32s 128 + byte (bytes <= 127): a byte permute each."""
    if _ASM:
        b0, b1, b2, b3 = tl.inline_asm_elementwise(
            "prmt.b32 $0, $4, 0x43000000, 0x7044; prmt.b32 $1, $4, 0x43000000, 0x7144; "
            "prmt.b32 $2, $4, 0x43000000, 0x7244; prmt.b32 $3, $4, 0x43000000, 0x7344;",
            "=r,=r,=r,=r,r", [words], dtype=(tl.float32, tl.float32, tl.float32, tl.float32), is_pure=True, pack=1)
    else:
        b0 = ((words & 255) + 128).to(tl.float32)
        b1 = (((words >> 8) & 255) + 128).to(tl.float32)
        b2 = (((words >> 16) & 255) + 128).to(tl.float32)
        b3 = (((words >> 24) & 255) + 128).to(tl.float32)
    return b0, b1, b2, b3


@triton.jit
def w4_magic_fma(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, ws_ptr, sem_ptr, M, N, K: tl.constexpr, G: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr,
                 STAGES: tl.constexpr):
    """One row (M = 1): P_j = sum over the tile of a_k (128 + q) on the CUDA cores (fp32 FMAs of the magic
    floats), reduced over K once a tile, then s (P - 136 X) + z X."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    KT: tl.constexpr = K // BLOCK_K // SPLIT
    kp = tl.arange(0, BLOCK_K // 2)
    wi = pid_n * (BLOCK_N // 4) + tl.arange(0, BLOCK_N // 4)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc0 = tl.zeros((BLOCK_N // 4,), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_N // 4,), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_N // 4,), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_N // 4,), dtype=tl.float32)
    for t in tl.range(KT, num_stages=STAGES):
        kb = pid_k * KT + t
        a = tl.load(x_ptr + kb * BLOCK_K + tl.arange(0, BLOCK_K)).to(tl.float32)
        a_e, a_o = tl.split(tl.reshape(a, (BLOCK_K // 2, 2)))
        words = tl.load((w_ptr + (kb * (BLOCK_K // 2) + kp[:, None]) * N).to(tl.pointer_type(tl.int32)) + wi[None, :])
        lo0, lo1, lo2, lo3 = _bytes_f32(words & 0x0F0F0F0F)
        hi0, hi1, hi2, hi3 = _bytes_f32((words >> 4) & 0x0F0F0F0F)
        p0 = tl.sum(a_o[:, None] * lo0 + a_e[:, None] * hi0, axis=0)
        p1 = tl.sum(a_o[:, None] * lo1 + a_e[:, None] * hi1, axis=0)
        p2 = tl.sum(a_o[:, None] * lo2 + a_e[:, None] * hi2, axis=0)
        p3 = tl.sum(a_o[:, None] * lo3 + a_e[:, None] * hi3, axis=0)
        grp = (kb * BLOCK_K) // G * N
        s0, s1, s2, s3 = _row_j(s_ptr, grp, cols)
        z0, z1, z2, z3 = _row_j(z_ptr, grp, cols)
        xs = tl.sum(a, axis=0)
        acc0 += p0 * s0 + xs * (z0 - 136.0 * s0)
        acc1 += p1 * s1 + xs * (z1 - 136.0 * s1)
        acc2 += p2 * s2 + xs * (z2 - 136.0 * s2)
        acc3 += p3 * s3 + xs * (z3 - 136.0 * s3)
    acc = tl.reshape(tl.join(tl.join(acc0, acc2), tl.join(acc1, acc3)), (BLOCK_N,))
    mask = cols < N
    if SPLIT == 1:
        tl.store(y_ptr + cols, acc.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        tl.store(ws_ptr + pid_k * N + cols, acc, mask=mask)
        tl.debug_barrier()
        arrived = tl.atomic_add(sem_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT - 1:
            tl.debug_barrier()
            tot = tl.zeros((BLOCK_N,), dtype=tl.float32)
            for s in tl.static_range(SPLIT):
                tot += tl.load(ws_ptr + s * N + cols, mask=mask, other=0.0, cache_modifier=".cg")
            tl.store(y_ptr + cols, tot.to(y_ptr.dtype.element_ty), mask=mask)
            tl.atomic_xchg(sem_ptr + pid_n, 0, sem="relaxed", scope="gpu")


@triton.jit
def w4_magic_fma3(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, ws_ptr, sem_ptr, M, N, K: tl.constexpr, G: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr,
                  STAGES: tl.constexpr):
    """One row: fma_acc's [BLOCK_K / 2, BLOCK_N / 4] accumulators of a (128 + q) (one FFMA a weight element),
    over the group's G / BLOCK_K tiles (unrolled), reduced over K and fixed once a group."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    TPG: tl.constexpr = G // BLOCK_K
    GROUPS: tl.constexpr = K // G // SPLIT
    kp = tl.arange(0, BLOCK_K // 2)
    wi = pid_n * (BLOCK_N // 4) + tl.arange(0, BLOCK_N // 4)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc0 = tl.zeros((BLOCK_N // 4,), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_N // 4,), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_N // 4,), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_N // 4,), dtype=tl.float32)
    for gi in tl.range(GROUPS, num_stages=STAGES):
        grp = pid_k * GROUPS + gi
        t0 = tl.zeros((BLOCK_K // 2, BLOCK_N // 4), dtype=tl.float32)
        t1 = tl.zeros((BLOCK_K // 2, BLOCK_N // 4), dtype=tl.float32)
        t2 = tl.zeros((BLOCK_K // 2, BLOCK_N // 4), dtype=tl.float32)
        t3 = tl.zeros((BLOCK_K // 2, BLOCK_N // 4), dtype=tl.float32)
        xs = tl.zeros((BLOCK_K,), dtype=tl.float32)
        for sub in tl.static_range(TPG):
            kb = grp * TPG + sub
            a = tl.load(x_ptr + kb * BLOCK_K + tl.arange(0, BLOCK_K)).to(tl.float32)
            xs += a
            a_e, a_o = tl.split(tl.reshape(a, (BLOCK_K // 2, 2)))
            words = tl.load((w_ptr + (kb * (BLOCK_K // 2) + kp[:, None]) * N).to(tl.pointer_type(tl.int32))
                            + wi[None, :])
            lo0, lo1, lo2, lo3 = _bytes_f32(words & 0x0F0F0F0F)
            hi0, hi1, hi2, hi3 = _bytes_f32((words >> 4) & 0x0F0F0F0F)
            t0 += a_o[:, None] * lo0
            t0 += a_e[:, None] * hi0
            t1 += a_o[:, None] * lo1
            t1 += a_e[:, None] * hi1
            t2 += a_o[:, None] * lo2
            t2 += a_e[:, None] * hi2
            t3 += a_o[:, None] * lo3
            t3 += a_e[:, None] * hi3
        x = tl.sum(xs, axis=0)
        s0, s1, s2, s3 = _row_j(s_ptr, grp * N, cols)
        z0, z1, z2, z3 = _row_j(z_ptr, grp * N, cols)
        acc0 += tl.sum(t0, axis=0) * s0 + x * (z0 - 136.0 * s0)
        acc1 += tl.sum(t1, axis=0) * s1 + x * (z1 - 136.0 * s1)
        acc2 += tl.sum(t2, axis=0) * s2 + x * (z2 - 136.0 * s2)
        acc3 += tl.sum(t3, axis=0) * s3 + x * (z3 - 136.0 * s3)
    acc = tl.reshape(tl.join(tl.join(acc0, acc2), tl.join(acc1, acc3)), (BLOCK_N,))
    mask = cols < N
    if SPLIT == 1:
        tl.store(y_ptr + cols, acc.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        tl.store(ws_ptr + pid_k * N + cols, acc, mask=mask)
        tl.debug_barrier()
        arrived = tl.atomic_add(sem_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT - 1:
            tl.debug_barrier()
            tot = tl.zeros((BLOCK_N,), dtype=tl.float32)
            for s in tl.static_range(SPLIT):
                tot += tl.load(ws_ptr + s * N + cols, mask=mask, other=0.0, cache_modifier=".cg")
            tl.store(y_ptr + cols, tot.to(y_ptr.dtype.element_ty), mask=mask)
            tl.atomic_xchg(sem_ptr + pid_n, 0, sem="relaxed", scope="gpu")


@triton.jit
def w4_read(w_ptr, out_ptr, N, K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
            SPLIT: tl.constexpr, STAGES: tl.constexpr):
    """A bare read of the packed weight on the GEMV's grid (words tiles through the same pipelined loop), its
    xor kept so the loads stay."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    KT: tl.constexpr = K // BLOCK_K // SPLIT
    kp = tl.arange(0, BLOCK_K // 2)
    wi = pid_n * (BLOCK_N // 4) + tl.arange(0, BLOCK_N // 4)
    x = tl.zeros((BLOCK_K // 2, BLOCK_N // 4), dtype=tl.int32)
    for t in tl.range(KT, num_stages=STAGES):
        kb = pid_k * KT + t
        x ^= tl.load((w_ptr + (kb * (BLOCK_K // 2) + kp[:, None]) * N).to(tl.pointer_type(tl.int32)) + wi[None, :])
    tl.store(out_ptr + pid_k * N + wi, tl.sum(x, axis=0).to(tl.float32))


@triton.jit
def w4_magic_g(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, ws_ptr, sem_ptr, M, N, K: tl.constexpr, G: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr,
               STAGES: tl.constexpr, STRIDED: tl.constexpr):
    """`magic` with the scale fix once a group: the group's G / BLOCK_K tiles (unrolled) dot into one P, then
    s (P - 136 X) + z X. STRIDED: the scales and zeros loaded a byte position at a time (every fourth element)
    instead of as rows split in registers."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    TPG: tl.constexpr = G // BLOCK_K
    GROUPS: tl.constexpr = K // G // SPLIT
    rm = tl.arange(0, BLOCK_M)
    mask_m = rm < M
    kp = tl.arange(0, BLOCK_K // 2)
    wi = pid_n * (BLOCK_N // 4) + tl.arange(0, BLOCK_N // 4)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc0 = tl.zeros((BLOCK_M, BLOCK_N // 4), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_M, BLOCK_N // 4), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, BLOCK_N // 4), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_M, BLOCK_N // 4), dtype=tl.float32)
    for gi in tl.range(GROUPS, num_stages=STAGES):
        grp = pid_k * GROUPS + gi
        p0 = tl.zeros((BLOCK_M, BLOCK_N // 4), dtype=tl.float32)
        p1 = tl.zeros((BLOCK_M, BLOCK_N // 4), dtype=tl.float32)
        p2 = tl.zeros((BLOCK_M, BLOCK_N // 4), dtype=tl.float32)
        p3 = tl.zeros((BLOCK_M, BLOCK_N // 4), dtype=tl.float32)
        xs = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for sub in tl.static_range(TPG):
            kb = grp * TPG + sub
            a = tl.load(x_ptr + rm[:, None] * K + kb * BLOCK_K + tl.arange(0, BLOCK_K)[None, :],
                        mask=mask_m[:, None], other=0.0)
            xs += tl.sum(a.to(tl.float32), axis=1)
            a_e, a_o = tl.split(tl.reshape(a, (BLOCK_M, BLOCK_K // 2, 2)))
            if not _ASM:
                a_e = a_e.to(tl.float32)
                a_o = a_o.to(tl.float32)
            words = tl.load((w_ptr + (kb * (BLOCK_K // 2) + kp[:, None]) * N).to(tl.pointer_type(tl.int32))
                            + wi[None, :])
            e0, e1, e2, e3, _, _, _, _ = _magic_pairs((words >> 4) & 0x0F0F0F0F, False)
            o0, o1, o2, o3, _, _, _, _ = _magic_pairs(words & 0x0F0F0F0F, False)
            p0 = tl.dot(a_e, e0, tl.dot(a_o, o0, p0))
            p1 = tl.dot(a_e, e1, tl.dot(a_o, o1, p1))
            p2 = tl.dot(a_e, e2, tl.dot(a_o, o2, p2))
            p3 = tl.dot(a_e, e3, tl.dot(a_o, o3, p3))
        if STRIDED:
            cj = pid_n * BLOCK_N + 4 * tl.arange(0, BLOCK_N // 4)
            s0 = tl.load(s_ptr + grp * N + cj).to(tl.float32)
            s1 = tl.load(s_ptr + grp * N + cj + 1).to(tl.float32)
            s2 = tl.load(s_ptr + grp * N + cj + 2).to(tl.float32)
            s3 = tl.load(s_ptr + grp * N + cj + 3).to(tl.float32)
            z0 = tl.load(z_ptr + grp * N + cj).to(tl.float32)
            z1 = tl.load(z_ptr + grp * N + cj + 1).to(tl.float32)
            z2 = tl.load(z_ptr + grp * N + cj + 2).to(tl.float32)
            z3 = tl.load(z_ptr + grp * N + cj + 3).to(tl.float32)
        else:
            s0, s1, s2, s3 = _row_j(s_ptr, grp * N, cols)
            z0, z1, z2, z3 = _row_j(z_ptr, grp * N, cols)
        x = xs[:, None]
        acc0 += p0 * s0[None, :] + x * (z0 - 136.0 * s0)[None, :]
        acc1 += p1 * s1[None, :] + x * (z1 - 136.0 * s1)[None, :]
        acc2 += p2 * s2[None, :] + x * (z2 - 136.0 * s2)[None, :]
        acc3 += p3 * s3[None, :] + x * (z3 - 136.0 * s3)[None, :]
    acc = tl.reshape(tl.join(tl.join(acc0, acc2), tl.join(acc1, acc3)), (BLOCK_M, BLOCK_N))
    mask = mask_m[:, None] & (cols < N)[None, :]
    off = rm[:, None] * N + cols[None, :]
    tl.store(ws_ptr + pid_k * M * N + off, acc, mask=mask)
    tl.debug_barrier()
    arrived = tl.atomic_add(sem_ptr + pid_n, 1, sem="acq_rel", scope="gpu")
    if arrived == SPLIT - 1:
        tl.debug_barrier()
        tot = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for s in range(SPLIT):
            tot += tl.load(ws_ptr + s * M * N + off, mask=mask, other=0.0, cache_modifier=".cg")
        tl.store(y_ptr + off, tot.to(y_ptr.dtype.element_ty), mask=mask)
        tl.atomic_xchg(sem_ptr + pid_n, 0, sem="relaxed", scope="gpu")


def launcher(x, w, s, z, bn, bk, split, warps, stages, hi, abl=0):
    """hi: True / False for the dot kernel (padded to 16 rows), "fma" for the one-row CUDA-core kernel."""
    M, K = x.shape
    N = w.shape[1]
    G = K // s.shape[0]
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    ws = torch.empty((split, M, N), dtype=torch.float32, device=x.device)
    sem = torch.zeros(triton.cdiv(N, bn), dtype=torch.int32, device=x.device)
    grid = (triton.cdiv(N, bn), split)

    def run():
        if hi in ("g", "g-strided"):
            w4_magic_g[grid](x, w, s, z, y, ws, sem, M, N, K, G, BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, SPLIT=split,
                             STAGES=stages, STRIDED=hi == "g-strided", num_warps=warps)
        elif hi == "read":
            w4_read[grid](w, ws, N, K, BLOCK_N=bn, BLOCK_K=bk, SPLIT=split, STAGES=stages, num_warps=warps)
        elif hi == "fma3":
            w4_magic_fma3[grid](x, w, s, z, y, ws, sem, M, N, K, G, BLOCK_M=1, BLOCK_N=bn, BLOCK_K=bk, SPLIT=split,
                                STAGES=stages, num_warps=warps)
        elif hi == "fma":
            w4_magic_fma[grid](x, w, s, z, y, ws, sem, M, N, K, G, BLOCK_M=1, BLOCK_N=bn, BLOCK_K=bk, SPLIT=split,
                               STAGES=stages, num_warps=warps)
        else:
            w4_magic[grid](x, w, s, z, y, ws, sem, M, N, K, G, BLOCK_M=16, BLOCK_N=bn, BLOCK_K=bk, SPLIT=split,
                           STAGES=stages, HI=hi, ABL=abl, num_warps=warps)
        return y
    return run


CONFIGS = [(256, 64, 8, 4, 3), (128, 64, 8, 4, 3), (256, 128, 4, 4, 3), (128, 128, 4, 4, 3), (256, 64, 8, 8, 3),
           (128, 64, 16, 4, 3), (256, 32, 16, 4, 3), (128, 128, 8, 4, 3), (256, 64, 8, 4, 4)]
FMA3_CONFIGS = [(256, 64, 8, 4, 3), (256, 32, 8, 4, 3), (128, 64, 8, 4, 3), (256, 64, 4, 4, 3), (512, 32, 4, 4, 3),
                (256, 64, 8, 8, 3), (128, 32, 16, 4, 3), (256, 64, 8, 4, 2)]
ABLATED = [(256, 64, 8, 4, 3), (128, 128, 4, 4, 3)]
FMA_CONFIGS = [(256, 64, 8, 4, 3), (256, 128, 4, 4, 3), (128, 128, 8, 4, 3), (256, 32, 16, 4, 3),
               (512, 64, 4, 4, 3), (256, 64, 8, 8, 3), (512, 32, 8, 4, 3), (128, 64, 16, 4, 3)]
GENERATED = {1: ["decode fma_acc n256 k64 sk8 w4 s3 pairs words", "decode dot n256 k64 sk8 w4 s3 pairs words rows"],
             16: ["decode dot n256 k64 sk8 w4 s3 pairs words rows"]}


def sass() -> None:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from fusionsearch.codegen.resources import _sass, _usage, loop_opcodes
    sig = {"x_ptr": "*bf16", "w_ptr": "*u8", "s_ptr": "*bf16", "z_ptr": "*bf16", "y_ptr": "*bf16", "ws_ptr": "*fp32",
           "sem_ptr": "*i32", "M": "i32", "N": "i32"}
    for hi in (True, False, "fma", "fma3"):
        fn = {"fma": w4_magic_fma, "fma3": w4_magic_fma3}.get(hi, w4_magic)
        names = list(fn.arg_names)
        for bn, bk, split, warps, stages in {"fma": FMA_CONFIGS, "fma3": FMA3_CONFIGS}.get(hi, CONFIGS):
            fma = hi in ("fma", "fma3")
            const = {"K": 4096, "G": 128, "BLOCK_M": 1 if fma else 16, "BLOCK_N": bn, "BLOCK_K": bk,
                     "SPLIT": split, "STAGES": stages, **({} if fma else {"HI": hi, "ABL": 0})}
            signature = {n: sig.get(n, "constexpr") for n in names}
            attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names) if sig.get(n, "").startswith("*")}
            src = ASTSource(fn=fn, signature=signature, attrs=attrs,
                            constexprs={(names.index(k),): v for k, v in const.items()})
            c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps,
                                                                                "num_stages": stages})
            ops = loop_opcodes(_sass(c.asm["cubin"]))
            regs, _ = _usage(c.asm["cubin"])
            per = (128 if hi == "fma3" else bk) * bn // (32 * warps)  # fma3: one loop step a group (G = 128)
            print(f"hi={hi} n{bn} k{bk} sk{split} w{warps} s{stages}: regs {regs} smem {c.metadata.shared} "
                  f"loop {sum(ops.values())} ({sum(ops.values()) / per:.2f}/elt)", dict(ops.most_common(12)))


def inputs(m, device):
    from fusionsearch.datasets.workloads import WORKLOADS
    g = torch.Generator().manual_seed(0)
    K, N, G = 4096, 11008, 128
    x = torch.randn(m, K, generator=g).to(torch.bfloat16)
    w = torch.randint(0, 256, (K // 2, N), generator=g, dtype=torch.int64).to(torch.uint8)
    shifts = torch.tensor([[4], [0]], dtype=torch.uint8)
    s = (torch.rand(K // G, N, generator=g) * 0.02 + 0.005).to(torch.bfloat16)
    z = (torch.randn(K // G, N, generator=g) * 0.01).to(torch.bfloat16)
    ref = WORKLOADS["w4_dequant_mm"].torch_fn(*(t.double() if t.is_floating_point() else t
                                                for t in (x, w, shifts, s, z)))
    return [t.to(device) for t in (x, w, shifts, s, z)], ref


def gpu(out: str) -> None:
    sys.path.insert(0, ".")
    import fusionsearch as fs
    from benchmarks.bytes_in_flight import with_config
    from fusionsearch.codegen.module import generate_module
    from fusionsearch.codegen.runtime import load_source
    from fusionsearch.graph.tolerance import rel_error
    from fusionsearch.measure.bench import time_interleaved
    os.makedirs(out, exist_ok=True)
    result = {"device": torch.cuda.get_device_name()}
    for m in (1, 16):
        (x, w, shifts, s, z), ref = inputs(m, "cuda")
        fns, errs = {}, {}
        g = fs.workload("w4_dequant_mm", M=m, K=4096, N=11008, G=128)
        for label in GENERATED[m]:
            mod = generate_module(with_config(g, label))
            gen = load_source(mod.source)
            y = gen.run(x, w, shifts, s, z)[0]
            errs[label] = rel_error(y.double().cpu(), ref)
            fns[label] = (lambda gen=gen, args=(x, w, shifts, s, z): gen.run(*args))
        for hi in (True, False, "fma", "fma3") if m == 1 else (True, False):
            for bn, bk, split, warps, stages in {"fma": FMA_CONFIGS, "fma3": FMA3_CONFIGS}.get(hi, CONFIGS):
                form = {True: "magic-hi", False: "magic", "fma": "magic-fma", "fma3": "magic-fma3"}[hi]
                key = f"{form} n{bn} k{bk} sk{split} w{warps} s{stages}"
                try:
                    run = launcher(x, w, s, z, bn, bk, split, warps, stages, hi)
                    y = run()
                    torch.cuda.synchronize()
                    errs[key] = rel_error(y.double().cpu(), ref)
                    fns[key] = run
                except Exception as e:  # noqa: BLE001
                    print(key, "failed:", str(e)[:300], flush=True)
        for abl, what in ((1, "no scale fix"), (2, "raw B"), (3, "loads+dots only")):
            for bn, bk, split, warps, stages in ABLATED:
                key = f"ablation {what}: magic n{bn} k{bk} sk{split} w{warps} s{stages}"
                try:
                    run = launcher(x, w, s, z, bn, bk, split, warps, stages, False, abl)
                    run()
                    torch.cuda.synchronize()
                    errs[key] = float("nan")
                    fns[key] = run
                except Exception as e:  # noqa: BLE001
                    print(key, "failed:", str(e)[:300], flush=True)
        times = time_interleaved(fns, rounds=5, warmup_ms=5, rep_ms=25)
        med = {k: sorted(v)[len(v) // 2] for k, v in times.items() if v}
        result[f"M{m}"] = {"median_us": med, "rel_err": errs, "rounds": times}
        print(f"M{m}:", flush=True)
        for k in sorted(med, key=med.get):
            print(f"  {k:52s} {med[k]:7.2f} us  rel err {errs[k]:.2e}", flush=True)
    with open(os.path.join(out, "w4_magic.json"), "w") as f:
        json.dump(result, f, indent=1)


SECOND = {  # (form, abl): configs; call 2: the fix once a group, and what the loop costs without each part
    ("magic", 0): [(256, 64, 8, 4, 3), (128, 128, 4, 4, 3)],
    ("g", 0): [(256, 64, 8, 4, 3), (128, 64, 8, 4, 3), (256, 32, 16, 4, 3), (128, 128, 4, 4, 3), (256, 64, 4, 4, 3),
               (256, 32, 8, 4, 3)],
    ("g-strided", 0): [(256, 64, 8, 4, 3), (128, 128, 4, 4, 3), (256, 64, 4, 4, 3)],
    ("magic", 3): [(256, 64, 8, 4, 3), (128, 128, 4, 4, 3)],
    ("magic", 7): [(256, 64, 8, 4, 3), (128, 128, 4, 4, 3)],
    ("magic", 4): [(256, 64, 8, 4, 3), (128, 128, 4, 4, 3)],
    ("read", 0): [(256, 64, 8, 4, 3), (128, 128, 4, 4, 3), (256, 64, 4, 4, 3), (256, 128, 4, 4, 3)],
}
ABLATIONS = {0: "", 3: "ablation loads+dots only: ", 7: "ablation loads+dots, no split-K reduction: ",
             4: "ablation no split-K reduction: "}


def gpu2(out: str) -> None:
    sys.path.insert(0, ".")
    import fusionsearch as fs
    from benchmarks.bytes_in_flight import with_config
    from fusionsearch.codegen.module import generate_module
    from fusionsearch.codegen.runtime import load_source
    from fusionsearch.graph.tolerance import rel_error
    from fusionsearch.measure.bench import time_interleaved
    os.makedirs(out, exist_ok=True)
    result = {"device": torch.cuda.get_device_name()}
    for m in (16, 1):
        (x, w, shifts, s, z), ref = inputs(m, "cuda")
        fns, errs = {}, {}
        g = fs.workload("w4_dequant_mm", M=m, K=4096, N=11008, G=128)
        for label in GENERATED[m]:
            gen = load_source(generate_module(with_config(g, label)).source)
            y = gen.run(x, w, shifts, s, z)[0]
            errs[label] = rel_error(y.double().cpu(), ref)
            fns[label] = (lambda gen=gen, args=(x, w, shifts, s, z): gen.run(*args))
        w_copy = torch.empty_like(w)
        fns["copy of the packed weight (read + write 22.5 MB)"] = lambda w_copy=w_copy, w=w: w_copy.copy_(w)
        errs["copy of the packed weight (read + write 22.5 MB)"] = float("nan")
        for (form, abl), configs in SECOND.items():
            for bn, bk, split, warps, stages in configs:
                key = f"{ABLATIONS[abl]}{form} n{bn} k{bk} sk{split} w{warps} s{stages}"
                try:
                    hi = False if form == "magic" else form
                    run = launcher(x, w, s, z, bn, bk, split, warps, stages, hi, abl)
                    y = run()
                    torch.cuda.synchronize()
                    errs[key] = rel_error(y.double().cpu(), ref) if abl == 0 and form != "read" else float("nan")
                    fns[key] = run
                except Exception as e:  # noqa: BLE001
                    print(key, "failed:", str(e)[:300], flush=True)
        times = time_interleaved(fns, rounds=5, warmup_ms=5, rep_ms=25)
        med = {k: sorted(v)[len(v) // 2] for k, v in times.items() if v}
        result[f"M{m}"] = {"median_us": med, "rel_err": errs, "rounds": times}
        print(f"M{m}:", flush=True)
        for k in sorted(med, key=med.get):
            print(f"  {k:60s} {med[k]:7.2f} us  rel err {errs[k]:.2e}", flush=True)
        with open(os.path.join(out, "w4_magic2.json"), "w") as f:
            json.dump(result, f, indent=1)


def check_cpu() -> None:
    """Under TRITON_INTERPRET=1: the algebra (fp32 activations; small N) against float64."""
    from fusionsearch.datasets.workloads import WORKLOADS
    g = torch.Generator().manual_seed(1)
    for m, N in ((1, 256 + 128), (5, 512)):
        K, G = 1024, 128
        x = torch.randn(m, K, generator=g)
        w = torch.randint(0, 256, (K // 2, N), generator=g, dtype=torch.int64).to(torch.uint8)
        s = torch.rand(K // G, N, generator=g) * 0.02 + 0.005
        z = torch.randn(K // G, N, generator=g) * 0.01
        ref = WORKLOADS["w4_dequant_mm"].torch_fn(x.double(), w, torch.tensor([[4], [0]], dtype=torch.uint8),
                                                  s.double(), z.double())
        for hi in (True, False, "fma", "fma3", "g", "g-strided") if m == 1 else (True, False, "g", "g-strided"):
            for bn, bk, split in ((128, 64, 2), (256, 128, 4), (128, 32, 2)):
                y = launcher(x, w, s, z, bn, bk, split, 4, 2, hi)()
                err = ((y.double() - ref).norm() / ref.norm()).item()
                print(f"M{m} N{N} hi={hi} n{bn} k{bk} sk{split}: rel err {err:.2e}")
                assert err < 1e-5, err


if __name__ == "__main__":
    if "--check" in sys.argv:
        check_cpu()
    elif "--sass" in sys.argv:
        sass()
    elif "--gpu2" in sys.argv:
        gpu2(sys.argv[-1])
    elif "--gpu" in sys.argv:
        gpu(sys.argv[-1])
