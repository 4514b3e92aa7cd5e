"""GPU prototype (issue 27): does prefetching a decode GEMV's whole weight range into L2 at the start of each
CTA (PTX prefetch.global.L2, one a 128-byte line) take it nearer the floor? The weight is then requested from
DRAM at once by every CTA of the one wave, instead of num_stages K steps ahead; the K loop's loads find it in
L2 (or in flight). Text-patched generated kernels, the same otherwise; each checked against eager PyTorch and
timed (clean L2 flush, median µs) in 5 alternating rounds. --check compiles every variant for sm_90 (CPU)."""
import argparse
import importlib.util
import os
import re
import statistics
import sys
import tempfile

import fusionsearch as fs
from fusionsearch.codegen.module import generate_module
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
from fusionsearch.plan import fully_fused

sys.path.insert(0, os.getcwd())
from benchmarks.decode_sweep_gpu import with_kernel  # noqa: E402

HELPER = '''
@triton.jit
def _pf_region(base, row0, ROWS: tl.constexpr, row_bytes, col0, LINES: tl.constexpr):
    p = base.to(tl.pointer_type(tl.int8)) + (row0 + tl.arange(0, ROWS))[:, None].to(tl.int64) * row_bytes \\
        + col0 + tl.arange(0, LINES)[None, :] * 128
    tl.inline_asm_elementwise("prefetch.global.L2 [$1];\\n\\tmov.u32 $0, 0;", "=r,l", [p], dtype=tl.int32,
                              is_pure=False, pack=1)
'''

# label, workload, shape, config, weight arg, rows a CTA reads (per split), row0, bytes a row stride, col0, lines
CASES = [
    ("w8 M1", "w8_dequant_mm", {"M": 1, "K": 8192, "N": 8192}, "decode dot_t n128 k64 sk8 w4 s3",
     "in1", 1024, "pid_k * 1024", "in1_s0", "pid_n * 128", 1),
    ("w8 M16", "w8_dequant_mm", {"M": 16, "K": 8192, "N": 8192}, "decode dot_t n128 k64 sk8 w4 s3",
     "in1", 1024, "pid_k * 1024", "in1_s0", "pid_n * 128", 1),
    ("mbg M16", "mm_bias_gelu", {"M": 16, "K": 4096, "N": 4096}, "decode dot n64 k32 sk8 w8 s4",
     "in1", 512, "pid_k * 512", "in1_s0 * 2", "pid_n * 128", 1),
    ("w4 M1", "w4_dequant_mm", {"M": 1, "K": 4096, "N": 11008, "G": 128},
     "decode fma_acc n256 k64 sk8 w4 s3 pairs words",
     "in2", 256, "pid_k * 256", "in2_s0", "pid_n * 256", 2),
    ("w4 M16", "w4_dequant_mm", {"M": 16, "K": 4096, "N": 11008, "G": 128},
     "decode dot n128 k128 sk4 w4 s3 pairs words",
     "in2", 512, "pid_k * 512", "in2_s0", "pid_n * 128", 1),
]


def patch(src: str, case, fraction: float) -> str:
    if fraction == 0:
        return src
    _, _, _, _, arg, rows, row0, stride, col0, lines = case
    out = src.replace("import triton.language as tl\n", "import triton.language as tl\n" + HELPER, 1)
    loop = re.search(r"\n(\s+)for k_tile in tl\.range\(", out)
    indent = loop.group(1)
    call = f"\n{indent}_pf_region({arg}_ptr, {row0}, {int(rows * fraction)}, {stride}, {col0}, {lines})"
    return out[:loop.start()] + call + out[loop.start():]


def load(src: str):
    path = os.path.join(tempfile.mkdtemp(), "pf_variant.py")
    open(path, "w").write(src)
    spec = importlib.util.spec_from_file_location(f"pf_{abs(hash(src))}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    fractions = (0, 1.0, 0.5)
    if args.check:
        from fusionsearch.codegen import resources as R
    else:
        from fusionsearch.measure.bench import time_callable
    print("| case | config | prefetched | µs (median of 5 rounds) | rounds | max rel err vs eager |")
    print("|---|---|---|---|---|---|")
    for case in CASES:
        label, name, shape, cfg_label = case[:4]
        g = fs.workload(name, **shape)
        cfg = DecodeConfig.from_short(cfg_label)
        plan = with_kernel(fully_fused(g), lambda k, cfg=cfg: DecodeKernel(k.matmul, k.prologue_a, k.prologue_b,
                                                                           k.epilogue, cfg))
        mod = generate_module(plan)
        if args.check:
            for f in fractions:
                sass = R.kernel_sass(g, mod.kernels[0], patch(mod.source, case, f))
                print(label, f, "prefetch instructions:", len(re.findall(r"CCTL|PREFETCH|\.PF", sass)))
            continue
        inputs = fs.random_inputs(g, seed=0, device="cuda")
        ref = fs.reference(g, inputs)[0].float()
        runs = {}
        for f in fractions:
            try:
                m = load(patch(mod.source, case, f))
                out = m.run(*inputs)[0].float()
                runs[f] = (m, ((out - ref).abs().max() / ref.abs().max()).item())
            except Exception as e:
                print(f"| {label} | {cfg_label} | {f} | failed: {str(e)[:200]} | | |", flush=True)
        times = {f: [] for f in runs}
        for _ in range(5):
            for f, (m, _) in runs.items():
                times[f].append(time_callable(lambda m=m, inputs=inputs: m.run(*inputs)).median_us)
        for f, (_m, err) in runs.items():
            print(f"| {label} | {cfg_label.removeprefix('decode ')} | {f:.0%} | {statistics.median(times[f]):.1f} | "
                  f"{' '.join(f'{t:.1f}' for t in times[f])} | {err:.1e} |", flush=True)


if __name__ == "__main__":
    main()
