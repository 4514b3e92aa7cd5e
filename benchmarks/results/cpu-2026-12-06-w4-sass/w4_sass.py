"""CPU: the sm_90 SASS of the generated int4 decode kernel (w4_dequant_mm M1/M16 K4096 N11008 G128, bf16, the
suite's pick `dot_t n64 k128 sk4 w4 s3 pairs`, and two wider tiles): the K loop's length and its instructions by
opcode, as `codegen.resources` compiles them (Triton 3.6, no GPU needed).

Run from a checkout:  TRITON_INTERPRET=0 python w4_sass.py <checkout root>"""
import collections
import dataclasses
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
sys.path.insert(0, ROOT)

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

import fusionsearch as fs  # noqa: E402
from fusionsearch.codegen import resources as R  # noqa: E402
from fusionsearch.codegen.module import generate_module  # noqa: E402
from fusionsearch.codegen.runtime import load_source  # noqa: E402
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel  # noqa: E402
from fusionsearch.plan import FusedMatmulKernel, fully_fused  # noqa: E402

KEYS = ("I2F", "SEL", "PRMT", "LOP3", "SHF", "HADD2", "HFMA2", "HGMMA", "LDS", "STS", "LDSM")


def sass_of(fn, signature, constexprs, aligned, warps, stages):
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    src = ASTSource(fn=fn, signature=signature, attrs=attrs,
                    constexprs={(fn.arg_names.index(k),): v for k, v in constexprs.items()})
    c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
    return R._sass(c.asm["cubin"])


def loop_ops(sass):
    """Opcode counts inside the backward branch's range (the K loop)."""
    code = []
    for line in sass.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]+)\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)(.*)", line)
        if m:
            code.append((int(m[1], 16), m[2], m[3]))
    loops = [(int(t[1], 16), a) for a, op, rest in code if op.startswith("BRA")
             for t in [re.search(r"0x([0-9a-f]+)", rest)] if t and int(t[1], 16) < a]
    inside = [op for a, op, _ in code if any(s <= a <= e for s, e in loops)]
    return collections.Counter(op.split(".")[0] for op in inside)


for m in (1, 16):
    g = fs.workload("w4_dequant_mm", M=m, K=4096, N=11008, G=128, dtype=torch.bfloat16)
    base = fully_fused(g)
    for cfg in (DecodeConfig(64, 128, 4, 4, 3, "dot_t", pairs=True),
                DecodeConfig(128, 128, 4, 4, 3, "dot_t", pairs=True),
                DecodeConfig(128, 128, 4, 8, 4, "dot_t", pairs=True)):
        ks = tuple(DecodeKernel(k.matmul, k.prologue_a, k.prologue_b, k.epilogue, cfg)
                   if isinstance(k, FusedMatmulKernel) else k for k in base.kernels)
        mod = generate_module(dataclasses.replace(base, kernels=ks).check())
        gk = mod.kernels[0]
        fn = getattr(load_source(mod.source), gk.name)
        sig, consts, strides = R._signature(g, gk)
        aligned = [n for n in fn.arg_names if sig[n].startswith("*") or (n in strides and strides[n] % 16 == 0)]
        sass = sass_of(fn, sig, consts, aligned, gk.num_warps, gk.num_stages)
        ops = loop_ops(sass)
        per_thread = cfg.block_n * cfg.block_k // (32 * cfg.num_warps)
        loop = R.sass_figures(sass)["loop_instructions"]
        print(f"M{m} {cfg.short()}: loop {loop} instructions, {loop / per_thread:.2f} a weight element; "
              + ", ".join(f"{k} {ops[k]}" for k in KEYS if ops[k]))
