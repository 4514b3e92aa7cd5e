"""int4 GEMV (one row) in the words form with the next K tile's loads issued into registers a step ahead
(prototype): no shared-memory staging, no barrier in the K loop, num_stages=1, against Triton's cp.async
pipeline of the same kernel (num_stages 3). w4_dequant_mm M1 K4096 N11008 G128, bf16."""
import argparse
import json
import os
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _bytes_f32(words):
    b0, b1, b2, b3 = tl.inline_asm_elementwise(
        "prmt.b32 $0, $4, 0x43000000, 0x7044; prmt.b32 $1, $4, 0x43000000, 0x7144; "
        "prmt.b32 $2, $4, 0x43000000, 0x7244; prmt.b32 $3, $4, 0x43000000, 0x7344;",
        "=r,=r,=r,=r,r", [words], dtype=(tl.float32, tl.float32, tl.float32, tl.float32), is_pure=True, pack=1)
    return b0, b1, b2, b3


@triton.jit
def _step(acc0, acc1, acc2, acc3, a, words, sv0, sv1, sv2, sv3, zv0, zv1, zv2, zv3, sh0, sh1, mk0, mk1,
          BLOCK_M: tl.constexpr, BP: tl.constexpr):
    a_e, a_o = tl.split(tl.reshape(a.to(tl.float32), (BLOCK_M, BP, 2)))
    a_e = a_e[:, :, None]
    a_o = a_o[:, :, None]
    for par in tl.static_range(2):
        if par == 0:
            f0, f1, f2, f3 = _bytes_f32((words >> sh0) & mk0)
            ax = a_e
        else:
            f0, f1, f2, f3 = _bytes_f32((words >> sh1) & mk1)
            ax = a_o
        acc0 += ax * (f0 * sv0[None, :] + (zv0 - 136.0 * sv0)[None, :])[None, :, :]
        acc1 += ax * (f1 * sv1[None, :] + (zv1 - 136.0 * sv1)[None, :])[None, :, :]
        acc2 += ax * (f2 * sv2[None, :] + (zv2 - 136.0 * sv2)[None, :])[None, :, :]
        acc3 += ax * (f3 * sv3[None, :] + (zv3 - 136.0 * sv3)[None, :])[None, :, :]
    return acc0, acc1, acc2, acc3


@triton.jit
def w4_pf(x_ptr, w_ptr, sh_ptr, s_ptr, z_ptr, y_ptr, ws_ptr, sem_ptr,
          M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, G: tl.constexpr,
          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr,
          STAGES: tl.constexpr, PF: tl.constexpr):
    BW: tl.constexpr = BLOCK_N // 4
    BP: tl.constexpr = BLOCK_K // 2
    KT: tl.constexpr = K // BLOCK_K // SPLIT
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    idx_m = tl.arange(0, BLOCK_M)
    mask_m = idx_m < M
    nw = pid * BW + tl.arange(0, BW)
    mask_w = nw < N // 4
    kp = tl.arange(0, BP)
    kk = tl.arange(0, BLOCK_K)
    s0 = tl.load(sh_ptr).to(tl.int32)
    s1 = tl.load(sh_ptr + 1).to(tl.int32)
    sh0 = tl.where(s0 < 8, s0, 8)
    sh1 = tl.where(s1 < 8, s1, 8)
    mk0 = ((255 >> sh0) & 15) * 0x01010101
    mk1 = ((255 >> sh1) & 15) * 0x01010101
    acc0 = tl.zeros((BLOCK_M, BP, BW), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_M, BP, BW), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, BP, BW), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_M, BP, BW), dtype=tl.float32)
    wp = w_ptr.to(tl.pointer_type(tl.int32))
    kb0 = pid_k * KT
    if PF:
        a_n = tl.load(x_ptr + idx_m[:, None] * K + (kb0 * BLOCK_K + kk)[None, :], mask=mask_m[:, None], other=0.0)
        w_n = tl.load(wp + (kb0 * BP + kp)[:, None] * (N // 4) + nw[None, :], mask=mask_w[None, :], other=0)
        g = kb0 * BLOCK_K // G
        sv0n = tl.load(s_ptr + g * N + nw * 4 + 0, mask=mask_w, other=0.0).to(tl.float32)
        sv1n = tl.load(s_ptr + g * N + nw * 4 + 1, mask=mask_w, other=0.0).to(tl.float32)
        sv2n = tl.load(s_ptr + g * N + nw * 4 + 2, mask=mask_w, other=0.0).to(tl.float32)
        sv3n = tl.load(s_ptr + g * N + nw * 4 + 3, mask=mask_w, other=0.0).to(tl.float32)
        zv0n = tl.load(z_ptr + g * N + nw * 4 + 0, mask=mask_w, other=0.0).to(tl.float32)
        zv1n = tl.load(z_ptr + g * N + nw * 4 + 1, mask=mask_w, other=0.0).to(tl.float32)
        zv2n = tl.load(z_ptr + g * N + nw * 4 + 2, mask=mask_w, other=0.0).to(tl.float32)
        zv3n = tl.load(z_ptr + g * N + nw * 4 + 3, mask=mask_w, other=0.0).to(tl.float32)
        for t in range(KT):
            a = a_n
            words = w_n
            sv0, sv1, sv2, sv3, zv0, zv1, zv2, zv3 = sv0n, sv1n, sv2n, sv3n, zv0n, zv1n, zv2n, zv3n
            kbn = kb0 + tl.minimum(t + 1, KT - 1)
            a_n = tl.load(x_ptr + idx_m[:, None] * K + (kbn * BLOCK_K + kk)[None, :], mask=mask_m[:, None],
                          other=0.0)
            w_n = tl.load(wp + (kbn * BP + kp)[:, None] * (N // 4) + nw[None, :], mask=mask_w[None, :], other=0)
            g = kbn * BLOCK_K // G
            sv0n = tl.load(s_ptr + g * N + nw * 4 + 0, mask=mask_w, other=0.0).to(tl.float32)
            sv1n = tl.load(s_ptr + g * N + nw * 4 + 1, mask=mask_w, other=0.0).to(tl.float32)
            sv2n = tl.load(s_ptr + g * N + nw * 4 + 2, mask=mask_w, other=0.0).to(tl.float32)
            sv3n = tl.load(s_ptr + g * N + nw * 4 + 3, mask=mask_w, other=0.0).to(tl.float32)
            zv0n = tl.load(z_ptr + g * N + nw * 4 + 0, mask=mask_w, other=0.0).to(tl.float32)
            zv1n = tl.load(z_ptr + g * N + nw * 4 + 1, mask=mask_w, other=0.0).to(tl.float32)
            zv2n = tl.load(z_ptr + g * N + nw * 4 + 2, mask=mask_w, other=0.0).to(tl.float32)
            zv3n = tl.load(z_ptr + g * N + nw * 4 + 3, mask=mask_w, other=0.0).to(tl.float32)
            acc0, acc1, acc2, acc3 = _step(acc0, acc1, acc2, acc3, a, words, sv0, sv1, sv2, sv3, zv0, zv1, zv2,
                                           zv3, sh0, sh1, mk0, mk1, BLOCK_M, BP)
    else:
        for t in tl.range(KT, num_stages=STAGES):
            kb = kb0 + t
            a = tl.load(x_ptr + idx_m[:, None] * K + (kb * BLOCK_K + kk)[None, :], mask=mask_m[:, None], other=0.0)
            words = tl.load(wp + (kb * BP + kp)[:, None] * (N // 4) + nw[None, :], mask=mask_w[None, :], other=0)
            g = kb * BLOCK_K // G
            sv0 = tl.load(s_ptr + g * N + nw * 4 + 0, mask=mask_w, other=0.0).to(tl.float32)
            sv1 = tl.load(s_ptr + g * N + nw * 4 + 1, mask=mask_w, other=0.0).to(tl.float32)
            sv2 = tl.load(s_ptr + g * N + nw * 4 + 2, mask=mask_w, other=0.0).to(tl.float32)
            sv3 = tl.load(s_ptr + g * N + nw * 4 + 3, mask=mask_w, other=0.0).to(tl.float32)
            zv0 = tl.load(z_ptr + g * N + nw * 4 + 0, mask=mask_w, other=0.0).to(tl.float32)
            zv1 = tl.load(z_ptr + g * N + nw * 4 + 1, mask=mask_w, other=0.0).to(tl.float32)
            zv2 = tl.load(z_ptr + g * N + nw * 4 + 2, mask=mask_w, other=0.0).to(tl.float32)
            zv3 = tl.load(z_ptr + g * N + nw * 4 + 3, mask=mask_w, other=0.0).to(tl.float32)
            acc0, acc1, acc2, acc3 = _step(acc0, acc1, acc2, acc3, a, words, sv0, sv1, sv2, sv3, zv0, zv1, zv2,
                                           zv3, sh0, sh1, mk0, mk1, BLOCK_M, BP)
    r0 = tl.sum(acc0, axis=1)
    r1 = tl.sum(acc1, axis=1)
    r2 = tl.sum(acc2, axis=1)
    r3 = tl.sum(acc3, axis=1)
    acc = tl.reshape(tl.join(tl.join(r0, r2), tl.join(r1, r3)), (BLOCK_M, BLOCK_N))
    idx_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = idx_n < N
    ws_off = (pid_k * M + idx_m[:, None]) * N + idx_n[None, :]
    tl.store(ws_ptr + ws_off, acc, mask=mask_m[:, None] & mask_n[None, :])
    tl.debug_barrier()
    arrived = tl.atomic_add(sem_ptr + pid, 1, sem='acq_rel', scope='gpu')
    if arrived == SPLIT - 1:
        tl.debug_barrier()
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for s in tl.static_range(SPLIT):
            acc += tl.load(ws_ptr + (s * M + idx_m[:, None]) * N + idx_n[None, :],
                           mask=mask_m[:, None] & mask_n[None, :], other=0.0, cache_modifier='.cg')
        tl.store(y_ptr + idx_m[:, None] * N + idx_n[None, :], acc.to(tl.bfloat16),
                 mask=mask_m[:, None] & mask_n[None, :])
        tl.atomic_xchg(sem_ptr + pid, 0, sem='relaxed', scope='gpu')


@triton.jit
def _step2(acc0, acc1, acc2, acc3, a_e, a_o, words, sv0, sv1, sv2, sv3, zv0, zv1, zv2, zv3, sh0, sh1, mk0, mk1):
    for par in tl.static_range(2):
        if par == 0:
            f0, f1, f2, f3 = _bytes_f32((words >> sh0) & mk0)
            ax = a_e[:, None]
        else:
            f0, f1, f2, f3 = _bytes_f32((words >> sh1) & mk1)
            ax = a_o[:, None]
        acc0 += ax * (f0 * sv0[None, :] + (zv0 - 136.0 * sv0)[None, :])
        acc1 += ax * (f1 * sv1[None, :] + (zv1 - 136.0 * sv1)[None, :])
        acc2 += ax * (f2 * sv2[None, :] + (zv2 - 136.0 * sv2)[None, :])
        acc3 += ax * (f3 * sv3[None, :] + (zv3 - 136.0 * sv3)[None, :])
    return acc0, acc1, acc2, acc3


@triton.jit
def _loads(x_ptr, wp, s_ptr, z_ptr, kb, kp, nw, mask_w, N: tl.constexpr, G: tl.constexpr, BLOCK_K: tl.constexpr,
           BP: tl.constexpr):
    a_e = tl.load(x_ptr + kb * BLOCK_K + 2 * kp).to(tl.float32)
    a_o = tl.load(x_ptr + kb * BLOCK_K + 2 * kp + 1).to(tl.float32)
    words = tl.load(wp + (kb * BP + kp)[:, None] * (N // 4) + nw[None, :], mask=mask_w[None, :], other=0)
    g = kb * BLOCK_K // G
    sv0 = tl.load(s_ptr + g * N + nw * 4 + 0, mask=mask_w, other=0.0).to(tl.float32)
    sv1 = tl.load(s_ptr + g * N + nw * 4 + 1, mask=mask_w, other=0.0).to(tl.float32)
    sv2 = tl.load(s_ptr + g * N + nw * 4 + 2, mask=mask_w, other=0.0).to(tl.float32)
    sv3 = tl.load(s_ptr + g * N + nw * 4 + 3, mask=mask_w, other=0.0).to(tl.float32)
    zv0 = tl.load(z_ptr + g * N + nw * 4 + 0, mask=mask_w, other=0.0).to(tl.float32)
    zv1 = tl.load(z_ptr + g * N + nw * 4 + 1, mask=mask_w, other=0.0).to(tl.float32)
    zv2 = tl.load(z_ptr + g * N + nw * 4 + 2, mask=mask_w, other=0.0).to(tl.float32)
    zv3 = tl.load(z_ptr + g * N + nw * 4 + 3, mask=mask_w, other=0.0).to(tl.float32)
    return a_e, a_o, words, sv0, sv1, sv2, sv3, zv0, zv1, zv2, zv3


@triton.jit
def w4_row(x_ptr, w_ptr, sh_ptr, s_ptr, z_ptr, y_ptr, ws_ptr, sem_ptr,
           M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, G: tl.constexpr,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr,
           STAGES: tl.constexpr, PF: tl.constexpr):
    """One row, 2-D accumulators [BK/2, BN/4] per byte position; PF: the next tile's loads a step ahead."""
    BW: tl.constexpr = BLOCK_N // 4
    BP: tl.constexpr = BLOCK_K // 2
    KT: tl.constexpr = K // BLOCK_K // SPLIT
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    nw = pid * BW + tl.arange(0, BW)
    mask_w = nw < N // 4
    kp = tl.arange(0, BP)
    s0 = tl.load(sh_ptr).to(tl.int32)
    s1 = tl.load(sh_ptr + 1).to(tl.int32)
    sh0 = tl.where(s0 < 8, s0, 8)
    sh1 = tl.where(s1 < 8, s1, 8)
    mk0 = ((255 >> sh0) & 15) * 0x01010101
    mk1 = ((255 >> sh1) & 15) * 0x01010101
    acc0 = tl.zeros((BP, BW), dtype=tl.float32)
    acc1 = tl.zeros((BP, BW), dtype=tl.float32)
    acc2 = tl.zeros((BP, BW), dtype=tl.float32)
    acc3 = tl.zeros((BP, BW), dtype=tl.float32)
    wp = w_ptr.to(tl.pointer_type(tl.int32))
    kb0 = pid_k * KT
    if PF:
        nxt = _loads(x_ptr, wp, s_ptr, z_ptr, kb0, kp, nw, mask_w, N, G, BLOCK_K, BP)
        for t in range(KT):
            cur = nxt
            nxt = _loads(x_ptr, wp, s_ptr, z_ptr, kb0 + tl.minimum(t + 1, KT - 1), kp, nw, mask_w, N, G, BLOCK_K, BP)
            acc0, acc1, acc2, acc3 = _step2(acc0, acc1, acc2, acc3, *cur, sh0, sh1, mk0, mk1)
    else:
        for t in tl.range(KT, num_stages=STAGES):
            cur = _loads(x_ptr, wp, s_ptr, z_ptr, kb0 + t, kp, nw, mask_w, N, G, BLOCK_K, BP)
            acc0, acc1, acc2, acc3 = _step2(acc0, acc1, acc2, acc3, *cur, sh0, sh1, mk0, mk1)
    r0 = tl.sum(acc0, axis=0)[None, :]
    r1 = tl.sum(acc1, axis=0)[None, :]
    r2 = tl.sum(acc2, axis=0)[None, :]
    r3 = tl.sum(acc3, axis=0)[None, :]
    acc = tl.reshape(tl.join(tl.join(r0, r2), tl.join(r1, r3)), (1, BLOCK_N))
    idx_m = tl.arange(0, 1)
    idx_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = idx_n < N
    ws_off = (pid_k * M + idx_m[:, None]) * N + idx_n[None, :]
    tl.store(ws_ptr + ws_off, acc, mask=mask_n[None, :])
    tl.debug_barrier()
    arrived = tl.atomic_add(sem_ptr + pid, 1, sem='acq_rel', scope='gpu')
    if arrived == SPLIT - 1:
        tl.debug_barrier()
        acc = tl.zeros((1, BLOCK_N), dtype=tl.float32)
        for s in tl.static_range(SPLIT):
            acc += tl.load(ws_ptr + (s * M + idx_m[:, None]) * N + idx_n[None, :], mask=mask_n[None, :], other=0.0,
                           cache_modifier='.cg')
        tl.store(y_ptr + idx_m[:, None] * N + idx_n[None, :], acc.to(tl.bfloat16), mask=mask_n[None, :])
        tl.atomic_xchg(sem_ptr + pid, 0, sem='relaxed', scope='gpu')


CONFIGS = [(bn, bk, sk, w, s, pf) for (bn, bk, sk) in ((256, 64, 8), (256, 32, 16), (128, 64, 8), (256, 64, 4),
                                                       (128, 32, 16), (512, 64, 8), (256, 128, 4))
           for (w, s, pf) in ((4, 3, 0), (4, 1, 1), (8, 1, 1), (2, 1, 1))]


def launch(x, w, sh, s, z, bn, bk, split, warps, stages, pf, ws, sem, kern=None):
    M, K = x.shape
    N = w.shape[1]
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    (kern or w4_pf)[(triton.cdiv(N, bn), split)](x, w, sh, s, z, y, ws, sem, M, N, K, 128, 1, bn, bk, split, stages, pf,
                                       num_warps=warps, num_stages=stages)
    return y


def sass():
    from triton.backends.compiler import GPUTarget
    from triton.runtime.jit import JITFunction

    from fusionsearch.codegen import resources as R
    for kern, bn, bk, split, warps, stages, pf in [(w4_pf, *CONFIGS[0])] + [(w4_row, *c) for c in CONFIGS[:4]]:
        fn = kern if isinstance(kern, JITFunction) else JITFunction(kern.fn)
        sig = {**{k: "*bf16" for k in ("x_ptr", "s_ptr", "z_ptr", "y_ptr")}, "w_ptr": "*u8", "sh_ptr": "*u8",
               "ws_ptr": "*fp32", "sem_ptr": "*i32"}
        const = {"M": 1, "N": 11008, "K": 4096, "G": 128, "BLOCK_M": 1, "BLOCK_N": bn, "BLOCK_K": bk,
                 "SPLIT": split, "STAGES": stages, "PF": pf}
        sig.update({k: "constexpr" for k in const})
        src = triton.compiler.ASTSource(fn=fn, signature=sig, attrs={(i,): [["tt.divisibility", 16]] for i in range(8)},
                                        constexprs={(fn.arg_names.index(k),): v for k, v in const.items()})
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
        text = R._sass(k.asm["cubin"])
        loop = R.sass_figures(text)["loop_instructions"]
        regs = R._usage(k.asm["cubin"])[0]
        per = bn * bk // (32 * warps)
        name = kern.__name__ if hasattr(kern, "__name__") else fn.fn.__name__
        print(name, f"n{bn} k{bk} sk{split} w{warps} s{stages} pf{pf}: regs {regs} loop {loop} = {loop / per:.2f}/elt",
              R.loop_opcodes(text).most_common(10), flush=True)


def gpu(out):
    import fusionsearch as fs
    from fusionsearch.datasets.workloads import WORKLOADS
    from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
    from fusionsearch.measure.bench import time_callable
    from fusionsearch.plan import fully_fused
    sys.path.insert(0, os.getcwd())
    from benchmarks.decode_sweep_gpu import with_kernel
    os.makedirs(out, exist_ok=True)
    g = fs.workload("w4_dequant_mm", dtype=torch.bfloat16, M=1, K=4096, N=11008, G=128)
    x, w, sh, s, z = fs.random_inputs(g, seed=0, device="cuda")
    ref64 = WORKLOADS["w4_dequant_mm"].torch_fn(x.double(), w, sh, s.double(), z.double())
    scale = ref64.abs().max().item()
    cfg = DecodeConfig.from_short("decode fma_acc n256 k64 sk8 w4 s3 pairs words")
    plan = with_kernel(fully_fused(g), lambda k: DecodeKernel(k.matmul, k.prologue_a, k.prologue_b, k.epilogue, cfg))
    run = fs.compile_plan(plan).module.run
    cases = [("generated fma_acc n256 k64 sk8 w4 s3 words", lambda: run(x, w, sh, s, z)[0])]
    ws = torch.empty(64 * 16 * 11008, dtype=torch.float32, device="cuda")
    sem = torch.zeros(4096, dtype=torch.int32, device="cuda")
    for c in CONFIGS:
        bn, bk, split, warps, stages, pf = c
        if (bk // 2) * (bn // 4) * 4 // (32 * warps) > 128:
            continue
        if not pf:
            cases.append((f"3d n{bn} k{bk} sk{split} w{warps} s{stages} pipeline",
                          lambda c=c: launch(x, w, sh, s, z, *c, ws, sem)))
        cases.append((f"2d n{bn} k{bk} sk{split} w{warps} s{stages} {'prefetch' if pf else 'pipeline'}",
                      lambda c=c: launch(x, w, sh, s, z, *c, ws, sem, kern=w4_row)))
    rows = []
    for label, fn in cases:
        try:
            y = fn()
            torch.cuda.synchronize()
            err = (y.double() - ref64).abs().max().item() / scale
            t = time_callable(fn, 5, 30)
            row = {"label": label, "us": t.median_us, "err": err}
        except Exception as e:  # noqa: BLE001
            row = {"label": label, "error": f"{type(e).__name__}: {str(e)[:300]}"}
        rows.append(row)
        print(json.dumps(row), flush=True)
    with open(os.path.join(out, "w4_prefetch.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    for r in sorted((r for r in rows if "us" in r), key=lambda r: r["us"]):
        print(f"{r['label']:50s} {r['us']:7.1f} {r['err']:9.2e}")
    print("errors:", [r["label"] for r in rows if "error" in r])


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sass", action="store_true")
    ap.add_argument("--out", default="/tmp/w4_prefetch")
    args = ap.parse_args()
    if args.sass:
        sass()
    else:
        gpu(args.out)
