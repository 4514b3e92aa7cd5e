"""GPU, exploratory: where do the 6-7 us between a bare read of the w8 weight (25.7 us) and the decode GEMV
(32.3 us) go? One ladder of handwritten kernels on one grid each, timed with fusionsearch's clean-flush timer:
  read:        int32 sum of the weight tile (no x)
  fma2d:       acc2d[BK, BN] += x * w (fp32), scale after the loop
  dot_scaled:  w -> bf16, * scale (bf16, per element, as eager rounds), tl.dot(w^T, x16) (the generated form)
  dot_hoisted: w -> bf16, tl.dot, scale after the loop
Split-K partials go to an fp32 workspace (reduce not timed). Then the generated plan of the suite's pick."""
import argparse
import dataclasses
import json
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.getcwd())
from fusionsearch.measure.bench import time_callable


@triton.jit
def gemv(x_ptr, w_ptr, s_ptr, ws_ptr, N: tl.constexpr, BK: tl.constexpr, BN: tl.constexpr, KT: tl.constexpr,
         FORM: tl.constexpr, STAGES: tl.constexpr):
    pid_n, pid_k = tl.program_id(0), tl.program_id(1)
    n = pid_n * BN + tl.arange(0, BN)
    kk = tl.arange(0, BK)
    m = tl.arange(0, 16)
    s = tl.load(s_ptr + n)
    if FORM == 0:
        acc2 = tl.zeros([BK, BN], tl.int32)
    elif FORM == 1:
        acc2 = tl.zeros([BK, BN], tl.float32)
    else:
        acc = tl.zeros([BN, 16], tl.float32)
    for t in tl.range(KT, num_stages=STAGES):
        k = (pid_k * KT + t) * BK + kk
        raw = tl.load(w_ptr + k[None, :] * N + n[:, None])  # [BN, BK], as the generated dot_t reads it
        if FORM == 0:
            acc2 += tl.trans(raw.to(tl.int32))
        elif FORM == 1:
            x = tl.load(x_ptr + k).to(tl.float32)
            acc2 += x[:, None] * tl.trans(raw.to(tl.float32))
        else:
            x = tl.load(x_ptr + k[:, None] + m[None, :] * 0, mask=m[None, :] < 1, other=0)  # [BK, 16]
            wb = raw.to(x_ptr.dtype.element_ty)
            if FORM == 2:
                wb = (wb * s[:, None]).to(x_ptr.dtype.element_ty)
            acc = tl.dot(wb, x, acc)
    if FORM <= 1:
        out = tl.sum(acc2, 0).to(tl.float32) * s.to(tl.float32)
    else:
        out = tl.sum(acc, 1)  # column 0 only is nonzero
        if FORM == 3:
            out = out * s.to(tl.float32)
    tl.store(ws_ptr + pid_k * N + n, out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    torch.manual_seed(0)
    K = N = 8192
    x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randint(-128, 128, (K, N), device="cuda", dtype=torch.int8)
    s = (torch.rand(N, device="cuda") * 0.01).to(torch.bfloat16)
    ref = ((x.double() @ (w.double() * s.double()))[0])
    rows = []
    for bk, bn, warps, split in ((128, 64, 4, 4), (64, 128, 4, 8), (64, 128, 4, 16), (32, 256, 4, 32),
                                 (128, 128, 8, 8), (64, 256, 8, 16), (256, 64, 4, 4)):
        kt = K // bk // split
        ws = torch.empty(split, N, device="cuda", dtype=torch.float32)
        for stages in (3, 4):
            for form, name in enumerate(("read", "fma2d", "dot_scaled", "dot_hoisted")):
                cfg = f"bk{bk} bn{bn} w{warps} sk{split} s{stages}"
                def fn(bn=bn, split=split, ws=ws, bk=bk, kt=kt, form=form, stages=stages, warps=warps):
                    gemv[(N // bn, split)](x, w, s, ws, N, bk, bn, kt, form, stages, num_warps=warps)
                try:
                    fn()
                    if form:
                        err = ((ws.sum(0).double() - ref).abs().max() / ref.abs().max()).item()
                        assert err < 2e-2, err
                    us = time_callable(fn, 5, 40).median_us
                except Exception as e:
                    print(name, cfg, "failed", str(e)[:200], flush=True)
                    continue
                rows.append({"form": name, "config": cfg, "us": us})
                print(f"{name:12s} {cfg:28s} {us:7.1f}", flush=True)
    import fusionsearch as fs
    from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
    from fusionsearch.measure.bench import benchmark
    from fusionsearch.plan import FusedMatmulKernel, fully_fused
    for M in (1, 16):
        g = fs.workload("w8_dequant_mm", M=M, K=K, N=N)
        base = fully_fused(g)
        inputs = fs.random_inputs(g, seed=0, device="cuda")
        for c in (DecodeConfig(64, 128, 4, 4, 3, "dot_t"), DecodeConfig(256, 32, 16, 4, 3, "dot_t"),
                  DecodeConfig(128, 64, 8, 4, 3, "dot_t"), DecodeConfig(128, 64, 16, 4, 3, "dot_t")):
            ks = tuple(DecodeKernel(k.matmul, k.prologue_a, k.prologue_b, k.epilogue, c)
                       if isinstance(k, FusedMatmulKernel) else k for k in base.kernels)
            p = dataclasses.replace(base, kernels=ks).check()
            t = benchmark(p, inputs, 5, 40)
            rows.append({"form": f"generated M{M}", "config": c.short(), "us": t.median_us, "reason": t.reason})
            print(f"generated M{M} {c.short():40s} {t.median_us:7.1f} {t.reason[:100]}", flush=True)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "w8_gap.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    print("\nbest per form:")
    for form in dict.fromkeys(r["form"] for r in rows):
        for r in sorted((r for r in rows if r["form"] == form), key=lambda r: r["us"])[:3]:
            print(f"{form:14s} {r['config']:40s} {r['us']:7.1f}")

main()
