"""GPU prototype (issue 27): Triton's warp specialisation (tl.range(..., warp_specialize=True)) on the decode
GEMVs' K loop: producer warps streaming the weight, consumer warps unpacking and multiplying, so that the
issue-bound and stream-bound phases overlap. Text-patched generated kernels; checked against eager PyTorch and
timed (clean L2 flush, median µs) in 5 alternating rounds."""
import os
import re
import statistics
import sys

import fusionsearch as fs
from fusionsearch.codegen.module import generate_module
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
from fusionsearch.measure.bench import time_callable
from fusionsearch.plan import fully_fused

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "gpu"))
from l2_prefetch import load  # noqa: E402

from benchmarks.decode_sweep_gpu import with_kernel  # noqa: E402

CASES = [("w4 M1", "w4_dequant_mm", {"M": 1, "K": 4096, "N": 11008, "G": 128},
          "decode fma_acc n256 k64 sk8 w4 s3 pairs words"),
         ("w4 M16", "w4_dequant_mm", {"M": 16, "K": 4096, "N": 11008, "G": 128},
          "decode dot n128 k128 sk4 w4 s3 pairs words"),
         ("w8 M1", "w8_dequant_mm", {"M": 1, "K": 8192, "N": 8192}, "decode dot_t n128 k64 sk8 w4 s3"),
         ("mbg M16", "mm_bias_gelu", {"M": 16, "K": 4096, "N": 4096}, "decode dot n64 k32 sk8 w8 s4")]


def main():
    print("| case | config | variant | µs (median of 5 rounds) | rounds | max rel err vs eager |")
    print("|---|---|---|---|---|---|")
    for label, name, shape, cfg_label in CASES:
        g = fs.workload(name, **shape)
        cfg = DecodeConfig.from_short(cfg_label)
        plan = with_kernel(fully_fused(g), lambda k, cfg=cfg: DecodeKernel(k.matmul, k.prologue_a, k.prologue_b,
                                                                           k.epilogue, cfg))
        src = generate_module(plan).source
        variants = {"as generated": src, "warp_specialize": re.sub(
            r"tl\.range\((\d+), num_stages=(\d+)\)", r"tl.range(\1, num_stages=\2, warp_specialize=True)", src)}
        inputs = fs.random_inputs(g, seed=0, device="cuda")
        ref = fs.reference(g, inputs)[0].float()
        runs = {}
        for v, text in variants.items():
            try:
                m = load(text)
                out = m.run(*inputs)[0].float()
                runs[v] = (m, ((out - ref).abs().max() / ref.abs().max()).item())
            except Exception as e:
                print(f"| {label} | {cfg_label} | {v} | failed: {str(e)[:200]} | | |", flush=True)
        times = {v: [] for v in runs}
        for _ in range(5):
            for v, (m, _err) in runs.items():
                times[v].append(time_callable(lambda m=m, inputs=inputs: m.run(*inputs)).median_us)
        for v, (_m, err) in runs.items():
            print(f"| {label} | {cfg_label.removeprefix('decode ')} | {v} | {statistics.median(times[v]):.1f} | "
                  f"{' '.join(f'{t:.1f}' for t in times[v])} | {err:.1e} |", flush=True)


if __name__ == "__main__":
    main()
