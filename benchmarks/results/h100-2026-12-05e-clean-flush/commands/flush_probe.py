"""Does do_bench's L2 flush (zeroing a 256 MB buffer: leaves L2 full of dirty lines) cost a weight-streaming
kernel write-back time? Times the read-only kernels and the copy under three flushes: zero_ (do_bench's),
a read of 256 MB (L2 full of clean lines), none; and reads of 1x/2x/4x/16x the bytes."""
import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.read_stream_gpu import flat_read, ptr_read


def timed(fn, flush, reps=200):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        flush()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        ts.append((s, e))
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in ts) * 1e3

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    dev = "cuda"
    cache = torch.empty(256 << 20, dtype=torch.int8, device=dev)
    cwords = cache.view(torch.int32)
    cout = torch.zeros(1056, dtype=torch.int32, device=dev)
    flushes = {"zero_ (do_bench)": lambda: cache.zero_(),
               "read 256MB (clean)": lambda: flat_read[(1056,)](cwords, cout, cwords.numel(), 1024, 4, num_warps=4),
               "none": lambda: None}
    rows = []
    K = N = 8192
    w = torch.randint(-128, 128, (K, N), device=dev, dtype=torch.int8)
    half = torch.empty(K * N // 2, device=dev, dtype=torch.int8)
    dst = torch.empty_like(half)
    full_dst = torch.empty_like(w)
    out = torch.zeros(32 * (N // 256), device=dev, dtype=torch.int32)
    words = w.view(torch.int32).view(-1)
    fout = torch.zeros(1056, dtype=torch.int32, device=dev)
    fns = {"copy 33.5MB->33.5MB": lambda: dst.copy_(half),
           "copy 67MB->67MB": lambda: full_dst.copy_(w),
           "ptr read 67MB bk32 bn256 sk32 s3": lambda: ptr_read[(N // 256, 32)](w, out, N, 32, 256, K // 32 // 32, 3,
                                                                                 0, num_warps=4),
           "flat read 67MB": lambda: flat_read[(1056,)](words, fout, words.numel(), 1024, 4, num_warps=4)}
    big = torch.empty(1 << 30, dtype=torch.int8, device=dev).view(torch.int32)
    for mult in (1, 2, 4, 16):
        n = words.numel() * mult
        fns[f"flat read {67 * mult}MB"] = lambda n=n: flat_read[(1056,)](big, fout, n, 1024, 4, num_warps=4)
    for name, fn in fns.items():
        for fl, flush in flushes.items():
            us = timed(fn, flush)
            rows.append({"fn": name, "flush": fl, "us": us})
            print(f"{name:36s} {fl:20s} {us:8.1f}", flush=True)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "flush.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)

main()
