"""Loop SASS instructions a weight element in the K loop of an int4 GEMV (w4_dequant_mm at M1: N 11008, group
128), compiled for sm_90 on the CPU:
per_element: per-element unpack (the generic prologue's form: a byte load, shift and group-scale load per element);
nibble_pairs: one byte load for both nibbles, x split into even and odd rows, the group scale applied once per
K block; nibble_pairs_folded: the same with the zero point's -8 taken out of the loop over elements (the sum of
x times 8, once a K block). No GPU: a direction for the code generator, not a timing.

    python benchmarks/results/cpu-2026-12-05c-int4-sass/int4_sass.py   # output.txt"""
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from fusionsearch.codegen.resources import _sass, sass_figures


@triton.jit
def per_element(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, K, N: tl.constexpr, G: tl.constexpr, BK: tl.constexpr,
                BN: tl.constexpr):
    n = tl.program_id(0) * BN + tl.arange(0, BN)
    acc = tl.zeros([BN], tl.float32)
    for k0 in range(0, K, BK):
        k = k0 + tl.arange(0, BK)
        b = tl.load(w_ptr + (k // 2)[:, None] * N + n[None, :])
        q = (b >> ((k % 2) * 4).to(tl.uint8)[:, None]) & 15
        s = tl.load(s_ptr + (k // G)[:, None] * N + n[None, :]).to(tl.float32)
        z = tl.load(z_ptr + (k // G)[:, None] * N + n[None, :]).to(tl.float32)
        w = (q.to(tl.float32) - 8) * s + z
        x = tl.load(x_ptr + k).to(tl.float32)
        acc += tl.sum(x[:, None] * w, 0)
    tl.store(y_ptr + n, acc.to(tl.bfloat16))


@triton.jit
def nibble_pairs(x_ptr, w_ptr, s_ptr, z_ptr, y_ptr, K, N: tl.constexpr, G: tl.constexpr, BK: tl.constexpr,
                 BN: tl.constexpr, FOLD: tl.constexpr):
    n = tl.program_id(0) * BN + tl.arange(0, BN)
    kk = tl.arange(0, BK // 2)
    acc = tl.zeros([BN], tl.float32)
    for k0 in range(0, K, BK):
        b = tl.load(w_ptr + (k0 // 2 + kk)[:, None] * N + n[None, :])
        lo = (b & 15).to(tl.float32)
        hi = (b >> 4).to(tl.float32)
        if not FOLD:  # the zero point's -8 on every element
            lo -= 8
            hi -= 8
        xe = tl.load(x_ptr + k0 + 2 * kk).to(tl.float32)
        xo = tl.load(x_ptr + k0 + 2 * kk + 1).to(tl.float32)
        s = tl.load(s_ptr + (k0 // G) * N + n).to(tl.float32)
        z = tl.load(z_ptr + (k0 // G) * N + n).to(tl.float32)
        xs = tl.sum(xe + xo, 0)
        dot = tl.sum(xe[:, None] * lo + xo[:, None] * hi, 0)
        if FOLD:  # the same -8 once a K block: 8 times the block's sum of x
            dot -= 8 * xs
        acc += dot * s + z * xs
    tl.store(y_ptr + n, acc.to(tl.bfloat16))


for label, fn, more in (("per_element", per_element, {}), ("nibble_pairs", nibble_pairs, {"FOLD": False}),
                        ("nibble_pairs_folded", nibble_pairs, {"FOLD": True})):
    for bk, bn, warps in ((64, 128, 4), (128, 128, 4), (64, 256, 8), (128, 64, 4)):
        sig = {"x_ptr": "*bf16", "w_ptr": "*u8", "s_ptr": "*bf16", "z_ptr": "*bf16", "y_ptr": "*bf16", "K": "i32",
               "N": "constexpr", "G": "constexpr", "BK": "constexpr", "BN": "constexpr",
               **dict.fromkeys(more, "constexpr")}
        consts = {(fn.arg_names.index(k),): v for k, v in {"N": 11008, "G": 128, "BK": bk, "BN": bn, **more}.items()}
        aligned = {(i,): [["tt.divisibility", 16]] for i in range(5)}
        src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=aligned)
        c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": 1})
        f = sass_figures(_sass(c.asm["cubin"]))
        per_thread = bk * bn / (32 * warps)
        print(f"{label:19s} BK{bk} BN{bn} w{warps}: loop {f['loop_instructions']:4d} instructions, "
              f"{f['loop_instructions'] / per_thread:5.2f} a weight element, loops {f['loops']}")
