"""CPU: the int4 fma_acc decode kernel's K-loop SASS (sm_90) as generated (bf16: the nibble cast by a bf16
magic number, scale and zero in bf16) and with that cast rewritten in the source text to a float32 magic
number with scale and zero in fp32 (f32). Run from this folder with the repository root on PYTHONPATH and
TRITON_INTERPRET=0; the rewritten source is left in /tmp/w4_f32.py."""
import os
import re
import sys

import torch

import fusionsearch as fs
from fusionsearch.codegen import resources as R
from fusionsearch.codegen.module import generate_module
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
from fusionsearch.plan import fully_fused

sys.path.insert(0, os.environ.get("PYTHONPATH", "."))
from benchmarks.decode_sweep_gpu import with_kernel  # noqa: E402

SHIFT = re.compile(r"(\s+)(v\d+) = \(\(ld1\.to\(tl\.int32\) >> (.*?)\)\.to\(ld1\.dtype\) if .*")
MASK = re.compile(r"(\s+)(v\d+) = \((v\d+) & 15\)")
MAGIC = re.compile(r"(\s+)(v\d+) = \((v\d+)\.to\(tl\.int16\) \| tl\.full\(\(\), 17152, tl\.int16\)\)"
                   r"\.to\(tl\.bfloat16, bitcast=True\)")


def f32(source: str) -> str:
    out = []
    for line in source.splitlines():
        if m := SHIFT.match(line):
            out.append(f"{m[1]}{m[2]} = (ld1.to(tl.int32) >> {m[3]})")
        elif m := MASK.match(line):
            out.append(f"{m[1]}{m[2]} = ({m[3]} & 15)")
        elif m := MAGIC.match(line):
            out.append(f"{m[1]}{m[2]} = ({m[3]} | 0x4B000000).to(tl.float32, bitcast=True)")
        else:
            line = line.replace("tl.full((), 136, tl.bfloat16)", "8388616.0")
            line = line.replace("tl.full((), 128, tl.bfloat16)", "8388608.0")
            line = re.sub(r"\((v\d+) \* (ld\d)\)\.to\(tl\.bfloat16\)", r"(\1 * \2.to(tl.float32))", line)
            out.append(re.sub(r"\((v\d+) \+ (ld\d)\)\.to\(tl\.bfloat16\)", r"(\1 + \2.to(tl.float32))", line))
    return "\n".join(out) + "\n"


g = fs.workload("w4_dequant_mm", dtype=torch.bfloat16, M=1, K=4096, N=11008, G=128)
for cfg in (DecodeConfig(256, 64, 8, 4, 3, "fma_acc", True), DecodeConfig(256, 32, 16, 4, 3, "fma_acc", True)):
    plan = with_kernel(fully_fused(g), lambda k, cfg=cfg: DecodeKernel(k.matmul, k.prologue_a, k.prologue_b,
                                                                       k.epilogue, cfg))
    mod = generate_module(plan)
    for variant in ("bf16", "f32"):
        s = mod.source if variant == "bf16" else f32(mod.source)
        if variant == "f32":
            with open("/tmp/w4_f32.py", "w") as f:
                f.write(s)
        sass = R.kernel_sass(g, mod.kernels[0], s)
        ops, loop = R.loop_opcodes(sass), R.sass_figures(sass)["loop_instructions"]
        per = cfg.block_n * cfg.block_k // (32 * cfg.num_warps)
        print(cfg.short(), variant, loop, round(loop / per, 2), ops.most_common(10), flush=True)
