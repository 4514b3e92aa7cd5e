"""sm_90 SASS (compiled on the CPU) of the int4 GEMV's decode kernels: w4_dequant_mm, whose nibble shift amounts
are an input tensor, against the same graph with the amount a constant of the graph (w4_const_shift.py beside
this script), and edits of the generated source that try to keep runtime amounts:

    PYTHONPATH=. python benchmarks/results/cpu-2026-12-06m-runtime-shift-sass/shift_sass.py > sass.txt

Per kernel: the K loop's instructions, and the shared-memory stores / ldmatrix / shared loads in it (B's dot
operand made in registers and sent through shared memory shows as STS + LDSM a tile)."""
import json
import subprocess
import sys
import tempfile

sys.path.insert(0, ".")
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

import fusionsearch as fs  # noqa: E402
from benchmarks.bytes_in_flight import with_config  # noqa: E402
from fusionsearch.codegen import resources as R  # noqa: E402
from fusionsearch.codegen.module import generate_module  # noqa: E402
from fusionsearch.codegen.runtime import load_source  # noqa: E402
from fusionsearch.graph.spec import load_graph  # noqa: E402

CONST = "benchmarks/results/cpu-2026-12-06m-runtime-shift-sass/w4_const_shift.py"
D = "decode dot n256 k64 sk8 w4 s3 pairs words"
LABELS = {16: [f"{D} rows", f"{D} rows groups", "decode dot n128 k128 sk4 w4 s3 pairs words groups"],
          1: ["decode fma_acc n256 k64 sk8 w4 s3 pairs words", f"{D} rows", f"{D} rows groups"]}


def figures(g, source, gk):
    fn = getattr(load_source(source), gk.name)
    signature, constants, strides = R._signature(g, gk)
    aligned = [i for i, n in enumerate(fn.arg_names)
               if signature[n].startswith("*") or (n in strides and strides[n] % 16 == 0)]
    src = ASTSource(fn=fn, signature=signature, attrs={(i,): [["tt.divisibility", 16]] for i in aligned},
                    constexprs={(fn.arg_names.index(n),): v for n, v in constants.items()})
    c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": gk.num_warps,
                                                                        "num_stages": gk.num_stages})
    ops = R.loop_opcodes(R._sass(c.asm["cubin"]))
    return f"loop {sum(ops.values())} STS {ops['STS']} LDSM {ops['LDSM']} LDS {ops['LDS']}"


for m in (16, 1):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([sys.executable, CONST, str(m), f.name], check=True)
        graphs = {"w4_dequant_mm (runtime shifts)": fs.workload("w4_dequant_mm", M=m, K=4096, N=11008, G=128),
                  "constant shift": load_graph(f.name)}
        for what, g in graphs.items():
            for label in LABELS[m]:
                mod = generate_module(with_config(g, label))
                print(f"M{m} {what:32s} {label:52s} {figures(g, mod.source, mod.kernels[0])}", flush=True)

# Edits of the generated runtime-shift kernel (M16, rows groups): Triton keeps B's dot operand in registers only
# where every leaf of its chain is a load or a constant; a splat of a runtime scalar is neither
g = fs.workload("w4_dequant_mm", M=16, K=4096, N=11008, G=128)
mod = generate_module(with_config(g, f"{D} rows groups"))
base = mod.source
N0 = "nib0 = ((ldw0 >> sh0) & (((255 >> sh0) & 15) * 16843009))"
N1 = "nib1 = ((ldw0 >> sh1) & (((255 >> sh1) & 15) * 16843009))"
assert N0 in base and N1 in base, "the generated source changed: update the edits"
EDITS = {
    "as generated": (N0, N1),
    "constant amounts 4, 0": ("nib0 = ((ldw0 >> 4) & 0x0F0F0F0F)", "nib1 = (ldw0 & 0x0F0F0F0F)"),
    "constant amounts, runtime mask": ("nib0 = ((ldw0 >> 4) & (((255 >> sh0) & 15) * 16843009))",
                                       "nib1 = (ldw0 & (((255 >> sh1) & 15) * 16843009))"),
    "runtime amounts, constant mask": ("nib0 = ((ldw0 >> sh0) & 0x0F0F0F0F)", "nib1 = ((ldw0 >> sh1) & 0x0F0F0F0F)"),
    "amount as a tile (1s * amount)": ("nib0 = ((ldw0 >> (tl.full(ldw0.shape, 1, tl.int32) * sh0)) & 0x0F0F0F0F)",
                                       "nib1 = ((ldw0 >> (tl.full(ldw0.shape, 1, tl.int32) * sh1)) & 0x0F0F0F0F)"),
    "amount a scalar load in the loop": ("s0i = tl.minimum(tl.load(in1_ptr).to(tl.int32), 8)\n        "
                                         "nib0 = ((ldw0 >> s0i) & (((255 >> s0i) & 15) * 16843009))",
                                         "s1i = tl.minimum(tl.load(in1_ptr + in1_s0).to(tl.int32), 8)\n        "
                                         "nib1 = ((ldw0 >> s1i) & (((255 >> s1i) & 15) * 16843009))"),
    "amount a tile load in the loop": ("sa0 = tl.minimum(tl.load(in1_ptr + tl.zeros(ldw0.shape, tl.int32)).to("
                                       "tl.int32), 8)\n        nib0 = ((ldw0 >> sa0) & (((255 >> sa0) & 15) * "
                                       "16843009))",
                                       "sa1 = tl.minimum(tl.load(in1_ptr + in1_s0 + tl.zeros(ldw0.shape, tl.int32))"
                                       ".to(tl.int32), 8)\n        nib1 = ((ldw0 >> sa1) & (((255 >> sa1) & 15) * "
                                       "16843009))"),
}
for what, (n0, n1) in EDITS.items():
    print(f"edit M16 rows groups: {what:34s} {figures(g, base.replace(N0, n0).replace(N1, n1), mod.kernels[0])}",
          flush=True)
print(json.dumps({"triton": triton.__version__}))
