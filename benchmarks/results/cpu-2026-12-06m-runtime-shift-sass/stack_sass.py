"""sm_90 SASS (compiled on the CPU) of the int4 GEMV's decode kernels after the stack op (commit e0d9235):
w4_dequant_mm in its stack form (constant shifts) against the runtime-amount form it replaced
(tests/kinds/test_decode_words.runtime_shift_graph, the workload before that commit):

    PYTHONPATH=. TRITON_INTERPRET=0 python benchmarks/results/cpu-2026-12-06m-runtime-shift-sass/stack_sass.py \\
        > benchmarks/results/cpu-2026-12-06m-runtime-shift-sass/stack_sass.txt"""
import sys

sys.path.insert(0, ".")
import torch  # noqa: E402

import fusionsearch as fs  # noqa: E402
from benchmarks.bytes_in_flight import with_config  # noqa: E402
from fusionsearch.codegen import resources as R  # noqa: E402
from fusionsearch.codegen.module import generate_module  # noqa: E402
from tests.kinds.test_decode_words import runtime_shift_graph  # noqa: E402

D = "decode dot n256 k64 sk8 w4 s3 pairs words"
LABELS = {16: [f"{D} rows", "decode dot n128 k128 sk4 w4 s3 pairs words"],
          1: ["decode fma_acc n256 k64 sk8 w4 s3 pairs words", f"{D} rows"]}
for m, labels in LABELS.items():
    graphs = {"stack (w4_dequant_mm)": fs.workload("w4_dequant_mm", M=m, K=4096, N=11008, G=128),
              "runtime amounts": runtime_shift_graph(torch.bfloat16, m, 4096, 11008, 128)}
    for what, g in graphs.items():
        for label in labels:
            mod = generate_module(with_config(g, label))
            ops = R.loop_opcodes(R.kernel_sass(g, mod.kernels[0], mod.source))
            print(f"M{m} {what:22s} {label:48s} loop {sum(ops.values())} STS {ops['STS']} LDSM {ops['LDSM']} "
                  f"LDS {ops['LDS']}", flush=True)
