"""GPU (issue 27): Nsight Compute on the int4 GEMV in the decode kind's pairs form and its words form (one and
16 rows), beside a copy and a read of the packed weight's bytes. Run under
    ncu --clock-control none --profile-from-start off --set full -o $OUT/ncu/probe python3 gpu/ncu_probe.py
Each labelled launch runs once between cudaProfilerStart/Stop (ncu's default cache control flushes and
invalidates the caches before each replay: L2 cold and clean, as the suite's timer leaves it). Without ncu
(`--time`), each launch is also timed with fusionsearch's own timer (clean L2 flush, median, µs)."""
import json
import os
import sys

import torch
import triton
import triton.language as tl

import fusionsearch as fs
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
from fusionsearch.measure.bench import time_callable
from fusionsearch.plan import fully_fused

sys.path.insert(0, os.getcwd())
from benchmarks.decode_sweep_gpu import with_kernel  # noqa: E402


@triton.jit
def empty_kernel(p):
    pass


@triton.jit
def read_words(w_ptr, out_ptr, n_words, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    """Each CTA xor-sums ITERS blocks of int32 words, blocks strided over the grid."""
    pid = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.int32)
    for i in tl.range(ITERS, num_stages=1):
        off = (i * tl.num_programs(0) + pid) * BLOCK + tl.arange(0, BLOCK)
        acc ^= tl.load(w_ptr + off, mask=off < n_words, other=0)
    tl.store(out_ptr + pid, tl.xor_sum(acc, 0))


def decode(cfg):
    return lambda k: DecodeKernel(k.matmul, k.prologue_a, k.prologue_b, k.epilogue, cfg)


W4 = {"M": 1, "K": 4096, "N": 11008, "G": 128}
W4_16 = {**W4, "M": 16}
PLANS = [
    ("w4 M1 fma_acc n256 k64 sk8 pairs", "w4_dequant_mm", W4, decode(DecodeConfig(256, 64, 8, 4, 3, "fma_acc", True))),
    ("w4 M1 fma_acc n256 k64 sk8 pairs words", "w4_dequant_mm", W4,
     decode(DecodeConfig(256, 64, 8, 4, 3, "fma_acc", True, True))),
    ("w4 M16 dot_t n64 k128 sk4 pairs", "w4_dequant_mm", W4_16, decode(DecodeConfig(64, 128, 4, 4, 3, "dot_t", True))),
    ("w4 M16 dot n128 k128 sk4 pairs words", "w4_dequant_mm", W4_16,
     decode(DecodeConfig(128, 128, 4, 4, 3, "dot", True, True))),
]


def launches():
    """(label, callable) for every launch profiled, in order."""
    out = []
    for label, name, shape, make in PLANS:
        g = fs.workload(name, **shape)
        plan = with_kernel(fully_fused(g), make)
        inputs = fs.random_inputs(g, seed=0, device="cuda")
        run = fs.compile_plan(plan).module.run
        out.append((label, lambda run=run, inputs=inputs: run(*inputs)))
    sink = torch.empty(1 << 16, dtype=torch.int32, device="cuda")
    out.append(("empty kernel", lambda: empty_kernel[(1,)](sink)))
    for mb, tag in ((22_544_384, "w4 weight 21.5 MiB"),):
        src = torch.randint(-2**31, 2**31 - 1, (mb // 4,), dtype=torch.int32, device="cuda")
        half = src[: mb // 8]
        dst = torch.empty_like(half)
        out.append((f"copy {tag} (half read, half written)", lambda dst=dst, half=half: dst.copy_(half)))
        for grid in (528, 1056):
            iters = triton.cdiv(mb // 4, grid * 1024)
            out.append((f"read {tag} words grid {grid}",
                        lambda src=src, grid=grid, iters=iters, n=mb // 4:
                        read_words[(grid,)](src, sink, n, BLOCK=1024, ITERS=iters, num_warps=8)))
    return out


def main():
    out = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else None
    runs = launches()
    for _, fn in runs:  # compile and warm every launch before profiling starts
        fn()
    torch.cuda.synchronize()
    if "--time" in sys.argv:
        rows = []
        for label, fn in runs:
            t = time_callable(fn, 5, 40)
            rows.append({"label": label, "us": t.median_us})
            print(f"{label:45s} {t.median_us:7.1f} us", flush=True)
        if out:
            os.makedirs(out, exist_ok=True)
            with open(os.path.join(out, "timer.json"), "w") as f:
                json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
        return
    torch.cuda.profiler.start()
    for _label, fn in runs:
        fn()
        torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(json.dumps([label for label, _ in runs]))


if __name__ == "__main__":
    main()
