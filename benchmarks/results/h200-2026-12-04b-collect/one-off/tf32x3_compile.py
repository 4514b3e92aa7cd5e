"""One-off (CPU, no GPU): an fp32 matmul template compiled for sm_90 with Triton's IEEE dot (what the code
generator emits for fp32 operands: the FMA units) against tf32x3 and tf32 (tensor cores; tf32x3 splits each
operand in two tf32 parts for near-fp32 accuracy), by editing the generated source's `input_precision`.
Registers, shared memory and SASS figures as the cost model's compiled features read them.

    python benchmarks/results/h200-2026-12-04b-collect/one-off/tf32x3_compile.py > tf32x3_compile.txt
"""

from __future__ import annotations

import torch

import fusionsearch as fs
from fusionsearch.codegen.module import generate_module
from fusionsearch.codegen.resources import _compile
from fusionsearch.search import plan as P

if __name__ == "__main__":
    g = fs.workload("mm_bias_gelu", dtype=torch.float32, M=2048, K=4096, N=1536)
    generated = generate_module(P.fully_fused(g))
    gk = next(k for k in generated.kernels if "# fusionsearch template kernel" in k.source)
    print(f"mm_bias_gelu fp32 M2048 K4096 N1536, fully fused, {gk.num_warps} warps, {gk.num_stages} stages")
    for precision in ("ieee", "tf32x3", "tf32"):
        source = generated.source.replace('input_precision="ieee"', f'input_precision="{precision}"')
        print(f"{precision:<7} {_compile(g, gk, source, 90)}")
