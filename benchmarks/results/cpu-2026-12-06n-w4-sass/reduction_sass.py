"""sm_90 SASS (compiled on the CPU) of the int4 GEMV's split-K tail at 16 rows: registers, and the LDG
instructions after the arrival atomic (the last split's loads of the partials). Run at 1da243e and with
matmul_tile.py as at 5433df5 (`git show 5433df5:fusionsearch/kinds/triton_source/matmul_tile.py`):

    PYTHONPATH=. TRITON_INTERPRET=0 python benchmarks/results/cpu-2026-12-06n-w4-sass/reduction_sass.py"""
import sys

sys.path.insert(0, ".")
import fusionsearch as fs  # noqa: E402
from benchmarks.bytes_in_flight import with_config  # noqa: E402
from fusionsearch.codegen import resources as R  # noqa: E402
from fusionsearch.codegen.module import generate_module  # noqa: E402

for label in ["decode dot n256 k64 sk8 w4 s3 pairs words rows", "decode dot n256 k32 sk16 w4 s3 pairs words rows"]:
    g = fs.workload("w4_dequant_mm", M=16, K=4096, N=11008, G=128)
    mod = generate_module(with_config(g, label))
    gk = mod.kernels[0]
    res = R.kernel_resources(g, gk, mod.source)
    sass = R.kernel_sass(g, gk, mod.source)
    tail = sass[sass.find("ATOM"):]
    ldg = [line for line in tail.splitlines() if "LDG" in line]
    kinds = ", ".join(sorted({line.split()[2] for line in ldg if len(line.split()) > 2}))
    print(f"{label:48s} registers {res.registers} tail LDG {len(ldg)} ({kinds}) branches {tail.count('BRA')}")
