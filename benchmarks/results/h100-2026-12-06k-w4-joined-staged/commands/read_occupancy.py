"""GPU: does a read of the w8 weight (64 MiB) get nearer the copy with every SM full of threads? The flat read of
benchmarks/read_stream_gpu.py (1-D int32 words, xor-summed) at up to 16 CTAs of 4 warps an SM (100% occupancy,
as a copy kernel runs) and one chunk a CTA (no grid-stride loop), against the copy of half the bytes and the
2-D tile read the GEMVs do; fusionsearch's timer (clean L2 flush), 7 interleaved rounds."""
import json
import os
import sys

import torch
import triton
import triton.language as tl

from fusionsearch.measure.bench import time_interleaved

sys.path.insert(0, os.getcwd())
from benchmarks.read_stream_gpu import flat_read, ptr_read  # noqa: E402


@triton.jit
def chunk_read(w_ptr, out_ptr, BLOCK: tl.constexpr, UNROLL: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], tl.int32)
    for u in tl.static_range(UNROLL):
        acc ^= tl.load(w_ptr + (pid * UNROLL + u) * BLOCK + tl.arange(0, BLOCK))
    tl.store(out_ptr + pid, tl.xor_sum(acc, 0))


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    K = N = 8192
    w = torch.randint(-128, 128, (K, N), device="cuda", dtype=torch.int8)
    words = w.view(torch.int32).view(-1)
    half = torch.empty(K * N // 2, device="cuda", dtype=torch.int8)
    half_dst = torch.empty_like(half)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    fns = {"copy of half (read 32 MiB + write 32 MiB)": lambda: half_dst.copy_(half)}
    out = torch.zeros(1 << 20, device="cuda", dtype=torch.int32)
    for block, warps in ((512, 4), (1024, 4), (2048, 8)):
        for per_sm in (4, 8, 16):
            progs = per_sm * sms
            for stages in (1, 2, 4):
                fns[f"flat block{block} w{warps} {per_sm}/SM s{stages}"] = (
                    lambda block=block, warps=warps, progs=progs, stages=stages:
                    flat_read[(progs,)](words, out, words.numel(), block, stages, num_warps=warps))
    for block, unroll, warps in ((512, 1, 4), (512, 4, 4), (1024, 2, 4), (2048, 4, 8), (512, 8, 4)):
        grid = words.numel() // (block * unroll)
        fns[f"chunk block{block} x{unroll} w{warps} ({grid} CTAs)"] = (
            lambda block=block, unroll=unroll, warps=warps, grid=grid:
            chunk_read[(grid,)](words, out, block, unroll, num_warps=warps))
    # the GEMV's own tile read: bk64 bn128, 8 splits, 3 stages (512 CTAs)
    fns["ptr bk64 bn128 w4 sk8 s3 (the w8 GEMV's grid)"] = lambda: ptr_read[(N // 128, 8)](w, out, N, 64, 128, 16, 3, 0,
                                                                                           num_warps=4)
    for f in fns.values():
        f()
    torch.cuda.synchronize()
    times = time_interleaved(fns, rounds=7, warmup_ms=5, rep_ms=20)
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items() if v}
    with open(os.path.join(out_dir, "read_occupancy.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "median_us": med, "rounds": times}, f, indent=1)
    for k in sorted(med, key=med.get)[:25]:
        print(f"  {k:48s} {med[k]:7.2f} us  {K * N / med[k] / 1e6:5.2f} TB/s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/read")
