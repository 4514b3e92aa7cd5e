"""sm_90 SASS (compiled on the CPU) of the stack-form int4 GEMV's K loop: each opcode's count a K step and per
weight element a thread (a thread's share of BLOCK_N x BLOCK_K elements), registers and shared memory, for the
configs the suite picks; run at 1da243e and with matmul_tile.py as at 5433df5 (the split-K tail before it):

    PYTHONPATH=. TRITON_INTERPRET=0 python benchmarks/results/cpu-2026-12-06n-w4-sass/loop_opcodes.py"""
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
        ops = R.loop_opcodes(R.kernel_sass(g, mod.kernels[0], mod.source))
        res = R.kernel_resources(g, mod.kernels[0], mod.source)
        words = label.split()
        n, k = int(words[2][1:]), int(words[3][1:])
        warps = int(words[5][1:])
        per = n * k / (32 * warps)  # weight elements a thread a K step
        total = sum(ops.values())
        top = ", ".join(f"{op} {c} ({c / per:.2f})" for op, c in ops.most_common(8))
        print(f"M{m} {label}: {res.registers} registers, {res.shared_bytes} B shared; loop {total} instructions, "
              f"{total / per:.2f} a weight element a thread; {top}")
