"""CPU: the w8 decode kernel's registers and SASS with its split-K tail unrolled (as generated: static) or a
runtime loop (range), compiled for sm_90 as codegen.resources does. Run from this folder with the repository
root on PYTHONPATH and TRITON_INTERPRET=0."""
import os
import sys

import torch

import fusionsearch as fs
from fusionsearch.codegen import resources as R
from fusionsearch.codegen.module import generate_module
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
from fusionsearch.plan import fully_fused

sys.path.insert(0, os.environ.get("PYTHONPATH", "."))
from benchmarks.decode_sweep_gpu import with_kernel  # noqa: E402

for M, cfg in ((1, DecodeConfig(128, 64, 8, 4, 3, "dot_t")), (16, DecodeConfig(128, 64, 8, 4, 3, "dot_t")),
               (16, DecodeConfig(64, 128, 4, 4, 3, "dot_t"))):
    g = fs.workload("w8_dequant_mm", dtype=torch.bfloat16, M=M, K=8192, N=8192)
    plan = with_kernel(fully_fused(g), lambda k, cfg=cfg: DecodeKernel(k.matmul, k.prologue_a, k.prologue_b,
                                                                       k.epilogue, cfg))
    mod = generate_module(plan)
    for rolled in (False, True):
        s = mod.source.replace("for s in tl.static_range(", "for s in range(") if rolled else mod.source
        res = R.kernel_resources(g, mod.kernels[0], s)
        print(M, cfg.short(), "range" if rolled else "static", res, flush=True)
