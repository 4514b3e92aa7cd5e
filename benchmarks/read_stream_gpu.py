"""GPU (issue 27): how fast can a Triton kernel read the w8 weight (int8 [8192, 8192]) at all? Timed with
triton.testing.do_bench, whose L2 flush (zeroing 256 MB) charges each read ~9 us of write-back (see
fusionsearch.measure.l2_flush): its figures compare with each other and with runs before that timer change.
Run once: benchmarks/results/h100-2026-12-05e-clean-flush/1-read-stream/ (no load path faster than another).
Read-only kernels (an int32 sum of the bytes, written per CTA), against the suite's copy (half read, half
written) and a torch reduction of the same bytes:
  ptr:   2-D pointer loads of [BK, BN] tiles, pipelined by tl.range(num_stages) (cp.async through shared memory)
  ptr1:  the same with num_stages=1 (plain global loads into registers)
  tma:   2-D tensor-descriptor loads (the bulk copy engine), pipelined
  flat:  1-D loads of the bytes as int32 words (xor-summed), grid-stride, num_stages pipelined
What it decides: whether a TMA or flat load path streams the weight nearer the copy than the 2-D pointer
loads every kind uses today (35.4 us, 1.29x the copy, in benchmarks/results/h100-2026-12-05d-w4-pairs/explore/).

Run on the GPU machine:  python benchmarks/read_stream_gpu.py --out $OUT
Prints a table; writes read_stream.json under --out."""
import argparse
import json
import os

import torch
import triton
import triton.language as tl
import triton.testing


@triton.jit
def ptr_read(w_ptr, out_ptr, N: tl.constexpr, BK: tl.constexpr, BN: tl.constexpr, KT: tl.constexpr,
             STAGES: tl.constexpr, EVICT: tl.constexpr):
    pid_n, pid_k = tl.program_id(0), tl.program_id(1)
    n = pid_n * BN + tl.arange(0, BN)
    kk = tl.arange(0, BK)
    acc = tl.zeros([BK, BN], tl.int32)
    for t in tl.range(KT, num_stages=STAGES):
        k = (pid_k * KT + t) * BK + kk
        if EVICT:
            w = tl.load(w_ptr + k[:, None] * N + n[None, :], eviction_policy="evict_first")
        else:
            w = tl.load(w_ptr + k[:, None] * N + n[None, :])
        acc += w.to(tl.int32)
    tl.store(out_ptr + (pid_k * tl.num_programs(0) + pid_n), tl.sum(tl.sum(acc, 1), 0))


@triton.jit
def tma_read(w_ptr, out_ptr, K: tl.constexpr, N: tl.constexpr, BK: tl.constexpr, BN: tl.constexpr,
             KT: tl.constexpr, STAGES: tl.constexpr):
    pid_n, pid_k = tl.program_id(0), tl.program_id(1)
    desc = tl.make_tensor_descriptor(w_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
    acc = tl.zeros([BK, BN], tl.int32)
    for t in tl.range(KT, num_stages=STAGES):
        w = desc.load([(pid_k * KT + t) * BK, pid_n * BN])
        acc += w.to(tl.int32)
    tl.store(out_ptr + (pid_k * tl.num_programs(0) + pid_n), tl.sum(tl.sum(acc, 1), 0))


@triton.jit
def flat_read(w_ptr, out_ptr, WORDS: tl.constexpr, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    pid = tl.program_id(0)
    progs = tl.num_programs(0)
    acc = tl.zeros([BLOCK], tl.int32)
    per = WORDS // BLOCK
    for i in tl.range(pid, per, progs, num_stages=STAGES):
        acc ^= tl.load(w_ptr + i * BLOCK + tl.arange(0, BLOCK))
    tl.store(out_ptr + pid, tl.xor_sum(acc, 0))


def bench(fn):
    return triton.testing.do_bench(fn, warmup=5, rep=30) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    torch.manual_seed(0)
    dev, rows = "cuda", []
    K = N = 8192
    w = torch.randint(-128, 128, (K, N), device=dev, dtype=torch.int8)
    want = int(w.to(torch.int64).sum())
    half = torch.empty(K * N // 2, device=dev, dtype=torch.int8)
    half_dst = torch.empty_like(half)
    rows.append({"form": "copy", "us": bench(lambda: half_dst.copy_(half))})
    rows.append({"form": "torch sum int32 view", "us": bench(lambda: w.view(torch.int32).sum())})
    rows.append({"form": "torch amax int8", "us": bench(lambda: w.amax())})
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device=dev))

    def record(form, cfg, fn, out):
        try:
            fn()
            got = int(out.to(torch.int64).sum())
            assert got == want if form != "flat" else True, (got, want)
            rows.append({"form": form, "config": cfg, "us": bench(fn)})
        except Exception as e:  # noqa: BLE001
            print(form, cfg, "failed", str(e)[:160])

    for bk, bn, warps in ((64, 128, 4), (32, 256, 4), (128, 128, 8), (64, 256, 8), (16, 1024, 8), (128, 256, 8)):
        for ctas in (264, 1056):
            blocks = K // bk
            split = max(d for d in range(1, blocks + 1) if blocks % d == 0 and (d == 1 or (N // bn) * d <= ctas))
            kt = blocks // split
            out = torch.zeros(split * (N // bn), device=dev, dtype=torch.int32)
            grid = (N // bn, split)
            for stages in (3, 6):
                cfg = f"bk{bk} bn{bn} w{warps} sk{split} s{stages}"
                for evict in (0, 1):
                    record("ptr" + (" evict_first" if evict else ""), cfg,
                           lambda grid=grid, out=out, bk=bk, bn=bn, kt=kt, stages=stages, warps=warps, evict=evict:
                           ptr_read[grid](w, out, N, bk, bn, kt, stages, evict, num_warps=warps), out)
                if bk <= 256 and bn <= 256:
                    record("tma", cfg, lambda grid=grid, out=out, bk=bk, bn=bn, kt=kt, stages=stages, warps=warps:
                           tma_read[grid](w, out, K, N, bk, bn, kt, stages, num_warps=warps), out)
            record("ptr1", cfg.replace(f"s{stages}", "s1"),
                   lambda grid=grid, out=out, bk=bk, bn=bn, kt=kt, warps=warps:
                   ptr_read[grid](w, out, N, bk, bn, kt, 1, 0, num_warps=warps), out)
    words = w.view(torch.int32).view(-1)
    for block, warps in ((1024, 4), (4096, 8)):
        for progs in (264, 1056):
            for stages in (2, 4):
                out = torch.zeros(progs, device=dev, dtype=torch.int32)
                record("flat", f"block{block} w{warps} progs{progs} s{stages}",
                       lambda out=out, block=block, progs=progs, stages=stages, warps=warps:
                       flat_read[(progs,)](words, out, words.numel(), block, stages, num_warps=warps), out)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "read_stream.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    copy = rows[0]["us"]
    floor = K * N / 3.0e12 * 1e6
    print(f"{'form':22s} {'best config':30s} {'us':>7s} {'x copy':>7s} {'x floor':>7s} {'TB/s':>6s}")
    for form in dict.fromkeys(r["form"] for r in rows):
        for r in sorted((r for r in rows if r["form"] == form), key=lambda r: r["us"])[:3]:
            print(f"{form:22s} {r.get('config', ''):30s} {r['us']:7.1f} {r['us'] / copy:7.2f} {r['us'] / floor:7.2f} "
                  f"{K * N / r['us'] / 1e6:6.2f}")


if __name__ == "__main__":
    main()
