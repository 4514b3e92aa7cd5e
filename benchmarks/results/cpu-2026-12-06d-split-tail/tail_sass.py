"""CPU: sm_90 SASS figures of the w8 decode kernel `dot_t n128 k64 sk8` at 1 and 16 rows (the serial split-K tail
unrolled or not shows in `loops`), and how many partial loads (`LDG.E.128.STRONG.GPU`) it issues.

Run from a checkout:  TRITON_INTERPRET=0 PYTHONPATH=. python tail_sass.py"""
import dataclasses

import torch

import fusionsearch as fs
from fusionsearch.codegen import resources as R
from fusionsearch.codegen.module import generate_module
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
from fusionsearch.plan import FusedMatmulKernel, fully_fused

for M in (1, 16):
    g = fs.workload("w8_dequant_mm", M=M, K=8192, N=8192, dtype=torch.bfloat16)
    base = fully_fused(g)
    cfg = DecodeConfig(128, 64, 8, 4, 3, "dot_t")
    ks = tuple(DecodeKernel(k.matmul, k.prologue_a, k.prologue_b, k.epilogue, cfg)
               if isinstance(k, FusedMatmulKernel) else k for k in base.kernels)
    mod = generate_module(dataclasses.replace(base, kernels=ks).check())
    sass = R.kernel_sass(g, mod.kernels[0], mod.source)
    loads = sum(1 for line in sass.splitlines() if "LDG.E.128.STRONG.GPU" in line)  # the partials, read past L1
    print(M, R.sass_figures(sass), loads)
