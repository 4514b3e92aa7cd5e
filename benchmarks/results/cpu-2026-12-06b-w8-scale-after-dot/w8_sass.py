"""CPU: the sm_90 SASS of the generated w8 decode kernel (w8_dequant_mm M1/M16 K=N=8192, bf16) with its
per-column scale in the K loop and after it (codegen option scale_after_dot): the K loop's length and its
instructions by opcode, as `codegen.resources` compiles them (Triton 3.6, no GPU needed).

Run from a checkout:  TRITON_INTERPRET=0 python w8_sass.py <checkout root>"""
import dataclasses
import os
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
sys.path.insert(0, ROOT)

import torch  # noqa: E402

import fusionsearch as fs  # noqa: E402
from fusionsearch.codegen import resources as R  # noqa: E402
from fusionsearch.codegen.module import generate_module  # noqa: E402
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel  # noqa: E402
from fusionsearch.plan import FusedMatmulKernel, fully_fused  # noqa: E402

KEYS = ("I2F", "PRMT", "LOP3", "SHF", "HMUL2", "HFMA2", "FMUL", "FFMA", "HGMMA", "HMMA", "LDG", "LDS", "STS", "LDSM")

for m in (1, 16):
    g = fs.workload("w8_dequant_mm", M=m, K=8192, N=8192, dtype=torch.bfloat16)
    base = fully_fused(g)
    for cfg in (DecodeConfig(128, 64, 8, 4, 3, "dot_t"), DecodeConfig(64, 128, 4, 4, 3, "dot_t"),
                DecodeConfig(64, 128, 4, 4, 3, "dot"), DecodeConfig(256, 16, 16, 8, 4, "fma")):
        if cfg.product == "fma" and m > 4:
            continue
        for after in (False, True):
            ks = tuple(DecodeKernel(k.matmul, k.prologue_a, k.prologue_b, k.epilogue, cfg)
                       if isinstance(k, FusedMatmulKernel) else k for k in base.kernels)
            plan = dataclasses.replace(base, kernels=ks, options=base.options.with_overrides(scale_after_dot=after))
            mod = generate_module(plan.check())
            sass = R.kernel_sass(g, mod.kernels[0], mod.source)
            ops = R.loop_opcodes(sass)
            per_thread = cfg.block_n * cfg.block_k // (32 * cfg.num_warps)
            loop = R.sass_figures(sass)["loop_instructions"]
            print(f"M{m} {cfg.short()} scale {'after' if after else 'in loop'}: loop {loop} instructions, "
                  f"{loop / per_thread:.2f} a weight element; " + ", ".join(f"{k} {ops[k]}" for k in KEYS if ops[k]))
