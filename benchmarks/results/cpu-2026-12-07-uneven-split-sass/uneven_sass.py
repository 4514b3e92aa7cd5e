"""sm_90 SASS (compiled on the CPU) of the int4 GEMV with splits that share the K blocks unevenly (43 column
blocks x 3 splits = 129 CTAs on 132 SMs; 6: 258) beside the even splits the suite picks: whether the K loop with
runtime bounds keeps its pipelined loads (LDGSTS: cp.async into shared memory; LDG: loads to registers) and its
instruction count, and the registers. No GPU timing: that is the next device call's.

    PYTHONPATH=. TRITON_INTERPRET=0 python benchmarks/results/cpu-2026-12-07-uneven-split-sass/uneven_sass.py"""
import sys

sys.path.insert(0, ".")
import fusionsearch as fs  # noqa: E402
from benchmarks.bytes_in_flight import with_config  # noqa: E402
from fusionsearch.codegen import resources as R  # noqa: E402
from fusionsearch.codegen.module import generate_module  # noqa: E402

P = "w4 s3 pairs words"
CASES = {1: [f"decode fma_acc n256 k64 sk{s} {P}" for s in (8, 3, 6)]
         + [f"decode dot n256 k64 sk{s} {P} rows" for s in (8, 3, 6)],
         16: [f"decode dot n256 k64 sk{s} {P} rows" for s in (8, 3, 6)]}
for m, labels in CASES.items():
    g = fs.workload("w4_dequant_mm", M=m, K=4096, N=11008, G=128)
    for label in labels:
        mod = generate_module(with_config(g, label))
        sass = R.kernel_sass(g, mod.kernels[0], mod.source)
        res = R.kernel_resources(g, mod.kernels[0], mod.source)
        header = next(line.strip() for line in mod.source.splitlines() if line.strip().startswith("for k"))
        print(f"M{m} {label}: {res.registers} registers, {res.shared_bytes} B shared; {header}")
        for i, ops in enumerate(R.each_loop_opcodes(sass)):
            what = "K loop" if i == 0 else f"loop {i + 1}"
            loads = {op: c for op, c in ops.items() if op.startswith(("LDG", "LDGSTS", "LDS", "STS", "BAR"))}
            print(f"  {what}: {sum(ops.values())} instructions; loads {dict(sorted(loads.items()))}")
