"""CPU: the int4 GEMV decode kernel's K-loop SASS (sm_90) in the pairs form and the words form, as the code
generator emits them (w4_dequant_mm K4096 N11008 G128, bf16): instructions a weight element, registers, the
commonest opcodes. Run from this folder with the repository root on PYTHONPATH and TRITON_INTERPRET=0."""
import sys

import torch

import fusionsearch as fs
from fusionsearch.codegen import resources as R
from fusionsearch.codegen.module import generate_module
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
from fusionsearch.plan import fully_fused

sys.path.insert(0, "../../..")
from benchmarks.decode_sweep_gpu import with_kernel  # noqa: E402

for rows, labels in ((1, ("decode fma_acc n256 k64 sk8 w4 s3 pairs", "decode fma_acc n256 k64 sk8 w4 s3 pairs words",
                          "decode fma_acc n128 k64 sk8 w4 s3 pairs words")),
                     (16, ("decode dot_t n64 k128 sk4 w4 s3 pairs", "decode dot n128 k128 sk4 w4 s3 pairs words"))):
    g = fs.workload("w4_dequant_mm", dtype=torch.bfloat16, M=rows, K=4096, N=11008, G=128)
    for label in labels:
        cfg = DecodeConfig.from_short(label)
        plan = with_kernel(fully_fused(g), lambda k, cfg=cfg: DecodeKernel(k.matmul, k.prologue_a, k.prologue_b,
                                                                           k.epilogue, cfg))
        mod = generate_module(plan)
        sass = R.kernel_sass(g, mod.kernels[0], mod.source)
        res = R.kernel_resources(g, mod.kernels[0], mod.source)
        per = cfg.block_n * cfg.block_k / (32 * cfg.num_warps)
        print(f"M{rows} {label}: {res.registers} registers, {res.loop_instructions} K-loop instructions = "
              f"{res.loop_instructions / per:.2f} a weight element; {R.loop_opcodes(sass).most_common(8)}", flush=True)
