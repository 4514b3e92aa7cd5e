"""Loop opcodes of generated decode kernels, compiled on the CPU for sm_90 (the last snippet of sass.txt):
    python .../sass.py w4_dequant_mm 16 "decode dot n256 k64 sk8 w4 s3 pairs words rows"
"""
import sys

sys.path.insert(0, ".")
import fusionsearch as fs  # noqa: E402
from benchmarks.bytes_in_flight import with_config  # noqa: E402
from fusionsearch.codegen.module import generate_module  # noqa: E402
from fusionsearch.codegen.resources import kernel_sass, loop_opcodes, plan_resources  # noqa: E402

name, m, labels = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
shape = {"M": m, "K": 4096, "N": 11008, "G": 128} if name == "w4_dequant_mm" else {"M": m, "K": 8192, "N": 8192}
g = fs.workload(name, **shape)
for label in labels:
    plan = with_config(g, label)
    mod = generate_module(plan)
    ops = loop_opcodes(kernel_sass(g, mod.kernels[0], mod.source))
    r = plan_resources(plan)[0]
    print(f"{label}: regs {r.registers} smem {r.shared_bytes} loop instr {sum(ops.values())}:",
          dict(ops.most_common(18)))
