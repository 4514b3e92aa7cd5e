"""sm_90 SASS (compiled on the CPU) of the K loop of the variants timed here (commands/variants.py's edits of the
generated source) beside the generated kernels: registers, K-loop instructions and a weight element a thread.

    PYTHONPATH=. TRITON_INTERPRET=0 python benchmarks/results/h100-2026-12-06o-w4-variants/variants_sass.py"""
import os
import sys

import torch

sys.path.insert(0, ".")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "commands"))
import variants  # noqa: E402

import fusionsearch as fs  # noqa: E402
from benchmarks.bytes_in_flight import with_config  # noqa: E402
from fusionsearch.codegen import resources as R  # noqa: E402
from fusionsearch.codegen.module import generate_module  # noqa: E402

variants.load_source = lambda source: None  # the source only: compiled here for sm_90, not run
P = "w4 s3 pairs words"
CASES = {1: [f"decode fma_acc n256 k64 sk8 {P}", f"decode fma_acc n256 k64 sk8 {P}|gad",
             f"decode fma n256 k128 sk4 {P}|gad_rows", f"decode fma n128 k128 sk4 {P}|gad_rows",
             f"decode dot n256 k64 sk8 {P} rows", f"decode dot n256 k64 sk8 {P} rows|pair"],
         16: [f"decode dot n256 k64 sk8 {P} rows", f"decode dot n256 k64 sk8 {P} rows|gad_rows",
              f"decode dot n256 k64 sk8 {P} rows|pair"]}
for m, texts in CASES.items():
    g = fs.workload("w4_dequant_mm", M=m, K=4096, N=11008, G=128)
    for text in texts:
        label = text.split("|")[0]
        kernel = generate_module(with_config(g, label)).kernels[0]
        _, source = variants.build(g, text, torch.bfloat16)
        sass = R.kernel_sass(g, kernel, source)
        res = R.kernel_resources(g, kernel, source)
        words = label.split()
        per = int(words[2][1:]) * int(words[3][1:]) / (32 * int(words[5][1:]))
        ops = R.each_loop_opcodes(sass)[0]
        total = sum(ops.values())
        print(f"M{m} {text}: {res.registers} registers; K loop {total} instructions, {total / per:.2f} a weight "
              f"element a thread; " + ", ".join(f"{op} {c}" for op, c in ops.most_common(8)), flush=True)
