"""Does Triton 3.6 + ptxas emit packed bf16x2 arithmetic for an int4 dequant written in bf16? sm_90 SASS
(compiled on the CPU) of two handwritten kernels over a [64, 256] tile, 4 warps: the nibble as the exact bf16
128 + q (its bits OR 0x4300), then (q - 136) * s + z in bf16; against the same in fp32 rounded once to bf16.

    PYTHONPATH=. TRITON_INTERPRET=0 python benchmarks/results/cpu-2026-12-06n-w4-sass/bf16x2_probe.py"""
import collections
import sys

sys.path.insert(0, ".")
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from fusionsearch.codegen.resources import _SASS_LINE, _sass  # noqa: E402


@triton.jit
def bf16_math(w_ptr, s_ptr, z_ptr, o_ptr, BK: tl.constexpr, BN: tl.constexpr):
    k = tl.arange(0, BK)
    n = tl.arange(0, BN)
    w = tl.load(w_ptr + k[:, None] * BN + n[None, :])
    q = ((w & 15).to(tl.int16) | 0x4300).to(tl.bfloat16, bitcast=True)
    s = tl.load(s_ptr + n)[None, :]
    z = tl.load(z_ptr + n)[None, :]
    tl.store(o_ptr + k[:, None] * BN + n[None, :], (q - 136.0) * s + z)


@triton.jit
def f32_math(w_ptr, s_ptr, z_ptr, o_ptr, BK: tl.constexpr, BN: tl.constexpr):
    k = tl.arange(0, BK)
    n = tl.arange(0, BN)
    w = tl.load(w_ptr + k[:, None] * BN + n[None, :])
    s = tl.load(s_ptr + n)[None, :].to(tl.float32)
    z = tl.load(z_ptr + n)[None, :].to(tl.float32)
    v = ((w & 15).to(tl.float32) - 8.0) * s + z
    tl.store(o_ptr + k[:, None] * BN + n[None, :], v.to(tl.bfloat16))


SIGNATURE = {"w_ptr": "*u8", "s_ptr": "*bf16", "z_ptr": "*bf16", "o_ptr": "*bf16", "BK": "constexpr",
             "BN": "constexpr"}
for fn in (bf16_math, f32_math):
    src = ASTSource(fn=fn, signature=SIGNATURE, attrs={(i,): [["tt.divisibility", 16]] for i in range(4)},
                    constexprs={(4,): 64, (5,): 256})
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    ops = collections.Counter(m[2] for m in _SASS_LINE.finditer(_sass(compiled.asm["cubin"])))
    print(f"{fn.__name__} (128 elements a thread): " + ", ".join(f"{op} {c}" for op, c in ops.most_common(10)))
