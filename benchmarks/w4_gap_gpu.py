"""GPU, exploratory (not yet run: no device was lent the session it was written): where does the int4 decode
GEMV (w4_dequant_mm M1 K4096 N11008 G128: 32.3 us, 4.07x its 7.9 us floor on the H100, before the bit-cast
unpack of benchmarks/results/cpu-2026-12-06-w4-sass) lose its time? A ladder of handwritten kernels on one
grid each, the weight read as the generated dot_t reads it ([BN, BK/2] tiles of the packed [K/2, N] uint8),
timed with fusionsearch's clean-flush timer:
  read:     int32 sum of the packed bytes (no x)
  nibbles:  int32 sum of both nibbles (the unpack's shifts and masks, no float)
  dot:      both nibbles -> bf16, -8, *scale, +zero (bf16 steps, as eager rounds), two tl.dot against x's even
            and odd K (the generated pairs form)
  dot_f32:  the same dequant computed in fp32, rounded to bf16 once before the dot
Split-K partials go to an fp32 workspace (reduce not timed). Then the generated plan of several configs.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/w4_gap_gpu.py --out $OUT   (about 2 minutes)"""
import argparse
import json
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.getcwd())
from fusionsearch.measure.bench import time_callable


@triton.jit
def gemv4(x_ptr, w_ptr, s_ptr, z_ptr, ws_ptr, N: tl.constexpr, G: tl.constexpr, BK: tl.constexpr,
          BN: tl.constexpr, KT: tl.constexpr, FORM: tl.constexpr, STAGES: tl.constexpr):
    pid_n, pid_k = tl.program_id(0), tl.program_id(1)
    n = pid_n * BN + tl.arange(0, BN)
    kp = tl.arange(0, BK // 2)
    m = tl.arange(0, 16)
    if FORM <= 1:
        acc2 = tl.zeros([BN, BK // 2], tl.int32)
    else:
        acc = tl.zeros([BN, 16], tl.float32)
    for t in tl.range(KT, num_stages=STAGES):
        kb = pid_k * KT + t
        raw = tl.load(w_ptr + (kb * (BK // 2) + kp[None, :]) * N + n[:, None])  # [BN, BK/2]
        if FORM == 0:
            acc2 += raw.to(tl.int32)
        elif FORM == 1:
            r = raw.to(tl.int32)
            acc2 += ((r >> 4) & 15) + (r & 15)
        else:
            grp = (kb * BK) // G
            s = tl.load(s_ptr + grp * N + n)[:, None]
            z = tl.load(z_ptr + grp * N + n)[:, None]
            hi = ((raw >> 4) & 15)
            lo = (raw & 15)
            dt = x_ptr.dtype.element_ty
            if FORM == 2:
                we = ((hi.to(dt) - 8).to(dt) * s).to(dt) + z
                wo = ((lo.to(dt) - 8).to(dt) * s).to(dt) + z
            else:
                we = (hi.to(tl.float32) - 8.0) * s.to(tl.float32) + z.to(tl.float32)
                wo = (lo.to(tl.float32) - 8.0) * s.to(tl.float32) + z.to(tl.float32)
            ke = kb * BK + 2 * kp
            xe = tl.load(x_ptr + ke[:, None] + m[None, :] * 0, mask=m[None, :] < 1, other=0)  # [BK/2, 16]
            xo = tl.load(x_ptr + ke[:, None] + 1 + m[None, :] * 0, mask=m[None, :] < 1, other=0)
            acc = tl.dot(we.to(dt), xe, acc)
            acc = tl.dot(wo.to(dt), xo, acc)
    if FORM <= 1:
        out = tl.sum(acc2, 1).to(tl.float32)
    else:
        out = tl.sum(acc, 1)
    tl.store(ws_ptr + pid_k * N + n, out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    torch.manual_seed(0)
    K, N, G = 4096, 11008, 128
    x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randint(0, 256, (K // 2, N), device="cuda", dtype=torch.uint8)
    s = (torch.rand(K // G, N, device="cuda") * 0.01).to(torch.bfloat16)
    z = (torch.randn(K // G, N, device="cuda") * 0.01).to(torch.bfloat16)
    q = torch.stack(((w >> 4) & 15, w & 15), 1).reshape(K, N).double() - 8
    wd = q * s.double().repeat_interleave(G, 0) + z.double().repeat_interleave(G, 0)
    ref = (x.double() @ wd)[0]
    rows = []
    for bk, bn, warps, split in ((128, 64, 4, 4), (128, 128, 4, 4), (128, 128, 8, 4), (64, 128, 4, 8)):
        kt = K // bk // split
        ws = torch.empty(split, N, device="cuda", dtype=torch.float32)
        for stages in (3,):
            for form, name in enumerate(("read", "nibbles", "dot", "dot_f32")):
                cfg = f"bk{bk} bn{bn} w{warps} sk{split} s{stages}"

                def fn(bn=bn, split=split, ws=ws, bk=bk, kt=kt, form=form, stages=stages, warps=warps):
                    gemv4[(N // bn, split)](x, w, s, z, ws, N, G, bk, bn, kt, form, stages, num_warps=warps)
                try:
                    fn()
                    if form >= 2:
                        err = ((ws.sum(0).double() - ref).abs().max() / ref.abs().max()).item()
                        assert err < 2e-2, err
                    us = time_callable(fn, 5, 40).median_us
                except Exception as e:
                    print(name, cfg, "failed", str(e)[:200], flush=True)
                    continue
                rows.append({"form": name, "config": cfg, "us": us})
                print(f"{name:12s} {cfg:28s} {us:7.1f}", flush=True)
    import fusionsearch as fs
    from benchmarks.decode_sweep_gpu import with_kernel
    from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
    from fusionsearch.measure.bench import benchmark
    from fusionsearch.plan import fully_fused
    for M in (1, 16):
        g = fs.workload("w4_dequant_mm", M=M, K=K, N=N, G=G)
        base = fully_fused(g)
        inputs = fs.random_inputs(g, seed=0, device="cuda")
        for c in (DecodeConfig(64, 128, 4, 4, 3, "dot_t", pairs=True), DecodeConfig(128, 128, 4, 4, 3, "dot_t",
                  pairs=True), DecodeConfig(128, 128, 4, 8, 4, "dot_t", pairs=True),
                  DecodeConfig(128, 64, 8, 4, 3, "dot_t", pairs=True), DecodeConfig(64, 128, 4, 4, 3, "dot_t")):
            try:
                p = with_kernel(base, lambda k, c=c: DecodeKernel(k.matmul, k.prologue_a, k.prologue_b, k.epilogue, c))
                t = benchmark(p, inputs, 5, 40)
                us, why = t.median_us, t.reason
            except Exception as e:
                us, why = None, str(e)[:200]
            rows.append({"form": f"generated M{M}", "config": c.short(), "us": us, "reason": why})
            print(f"generated M{M} {c.short():40s} {us} {why[:100]}", flush=True)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "w4_gap.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    print("\nbest per form:")
    for form in dict.fromkeys(r["form"] for r in rows):
        for r in sorted((r for r in rows if r["form"] == form and r["us"]), key=lambda r: r["us"])[:3]:
            print(f"{form:14s} {r['config']:40s} {r['us']:7.1f}")


if __name__ == "__main__":
    main()
