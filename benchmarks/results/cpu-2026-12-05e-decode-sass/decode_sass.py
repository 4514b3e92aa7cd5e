"""CPU: the sm_90 SASS of the generated w8 decode kernels (dot_t, M=1, K=N=8192, bf16) beside the handwritten
kernel of the same form and grid (benchmarks/results/h100-2026-12-05e-clean-flush/commands/w8_gap.py, form
dot_scaled: 29.6 us at bk64 bn128 sk8 against the generated 41.1 on the H100). Counts a thread's instructions
by opcode (loads, shared-memory stores and ldmatrix, the products) and the K loop's length.

Run from a checkout:  TRITON_INTERPRET=0 python decode_sass.py <checkout root>"""
import collections
import dataclasses
import importlib.util
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

KEYS = ("LDG", "LDGSTS", "LDS", "STS", "LDSM", "HMUL2", "HGMMA", "PRMT", "I2F")


def sass_of(fn, signature, constexprs, aligned, warps, stages):
    attrs = {(fn.arg_names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    src = ASTSource(fn=fn, signature=signature, attrs=attrs,
                    constexprs={(fn.arg_names.index(k),): v for k, v in constexprs.items()})
    c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
    return R._sass(c.asm["cubin"])


def summary(name, sass):
    ops = collections.Counter()
    for line in sass.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]+\*/\s+(?:@!?P\d\s+)?([A-Z0-9_.]+)", line)
        if m:
            ops[m.group(1)] += 1
    picked = {k: v for k, v in sorted(ops.items()) if k.split(".")[0] in KEYS}
    print(f"{name}: loop {R.sass_figures(sass)['loop_instructions']} instructions; {picked}")


g = fs.workload("w8_dequant_mm", M=1, K=8192, N=8192, dtype=torch.bfloat16)
base = fully_fused(g)
for cfg in (DecodeConfig(128, 64, 8, 4, 3, "dot_t"), DecodeConfig(64, 128, 4, 4, 3, "dot_t")):
    ks = tuple(DecodeKernel(k.matmul, k.prologue_a, k.prologue_b, k.epilogue, cfg)
               if isinstance(k, FusedMatmulKernel) else k for k in base.kernels)
    mod = generate_module(dataclasses.replace(base, kernels=ks).check())
    gk = mod.kernels[0]
    fn = getattr(load_source(mod.source), gk.name)
    sig, consts, strides = R._signature(g, gk)
    aligned = [n for n in fn.arg_names if sig[n].startswith("*") or (n in strides and strides[n] % 16 == 0)]
    summary(f"generated {cfg.short()}", sass_of(fn, sig, consts, aligned, gk.num_warps, gk.num_stages))

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location(
    "w8_gap", os.path.join(here, "..", "h100-2026-12-05e-clean-flush", "commands", "w8_gap.py"))
text = open(spec.origin).read().split("def main")[0]
gemv_module = type(sys)("w8_gap_kernels")
path = os.path.join(here, "_w8_gap_kernels.py")
with open(path, "w") as f:
    f.write(text)
spec = importlib.util.spec_from_file_location("w8_gap_kernels", path)
gemv_module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gemv_module)
os.unlink(path)
for bk, bn, split in ((64, 128, 8), (128, 64, 4)):
    sig = {"x_ptr": "*bf16", "w_ptr": "*i8", "s_ptr": "*bf16", "ws_ptr": "*fp32", "N": "constexpr", "BK": "constexpr",
           "BN": "constexpr", "KT": "constexpr", "FORM": "constexpr", "STAGES": "constexpr"}
    consts = {"N": 8192, "BK": bk, "BN": bn, "KT": 8192 // bk // split, "FORM": 2, "STAGES": 3}
    summary(f"handwritten dot_scaled bk{bk} bn{bn} sk{split}",
            sass_of(gemv_module.gemv, sig, consts, ["x_ptr", "w_ptr", "s_ptr", "ws_ptr"], 4, 3))
