"""sm_90 SASS (compiled on the CPU) of the stack-form int4 GEMV: each loop's instructions apart (the K loop, then
a split-K tail's loop over the partials where the tail has one), for the configs the suite picks. Corrects
cpu-2026-12-06n-w4-sass/loop_opcodes.txt, which counted every loop together: its "K loop 885 vs 625" was the
K loop plus the tail's loop. Run at HEAD and with matmul_tile.py as at 5433df5 (the tail one partial at a time):

    PYTHONPATH=. TRITON_INTERPRET=0 python benchmarks/results/cpu-2026-12-06o-k-loop-sass/each_loop.py"""
import sys

sys.path.insert(0, ".")
import fusionsearch as fs  # noqa: E402
from benchmarks.bytes_in_flight import with_config  # noqa: E402
from fusionsearch.codegen import resources as R  # noqa: E402
from fusionsearch.codegen.module import generate_module  # noqa: E402

CASES = {16: ["decode dot n256 k64 sk8 w4 s3 pairs words rows"],
         1: ["decode fma_acc n256 k64 sk8 w4 s3 pairs words", "decode dot n256 k64 sk8 w4 s3 pairs words rows"]}
for m, labels in CASES.items():
    g = fs.workload("w4_dequant_mm", M=m, K=4096, N=11008, G=128)
    for label in labels:
        mod = generate_module(with_config(g, label))
        sass = R.kernel_sass(g, mod.kernels[0], mod.source)
        res = R.kernel_resources(g, mod.kernels[0], mod.source)
        words = label.split()
        per = int(words[2][1:]) * int(words[3][1:]) / (32 * int(words[5][1:]))  # weight elements a thread a K step
        print(f"M{m} {label}: {res.registers} registers, {res.shared_bytes} B shared")
        for i, ops in enumerate(R.each_loop_opcodes(sass)):
            total = sum(ops.values())
            what = "K loop" if i == 0 else f"loop {i + 1}"
            top = ", ".join(f"{op} {c}" for op, c in ops.most_common(8))
            print(f"  {what}: {total} instructions ({total / per:.2f} a weight element a thread); {top}")
