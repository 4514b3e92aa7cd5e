"""int4 GEMV in a 'words' form: the packed weight read as int32 words (4 columns' bytes, each a K pair of
nibbles), the nibbles turned into floats by a float32 magic number per byte of the word, the products FMAs into a
3-D accumulator (fma_acc). Handwritten prototype: SASS counts on the CPU (--sass) and timing on the GPU."""
import argparse
import os
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def w4_words(x_ptr, w_ptr, sh_ptr, s_ptr, z_ptr, y_ptr, ws_ptr, sem_ptr,
             M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, G: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr,
             STAGES: tl.constexpr, FORM: tl.constexpr):
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
    s0 = tl.load(sh_ptr).to(tl.int32)
    s1 = tl.load(sh_ptr + 1).to(tl.int32)
    sh0 = tl.where(s0 < 8, s0, 8)
    sh1 = tl.where(s1 < 8, s1, 8)
    mk0 = ((255 >> sh0) & 15) * 0x01010101
    mk1 = ((255 >> sh1) & 15) * 0x01010101
    acc0 = tl.zeros((BLOCK_M, BP, BW if FORM != 5 else BLOCK_N), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_M, BP, BW), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, BP, BW), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_M, BP, BW), dtype=tl.float32)
    wp = w_ptr.to(tl.pointer_type(tl.int32))
    for t in tl.range(KT, num_stages=STAGES):
        kb = pid_k * KT + t
        idx_k = kb * BLOCK_K + tl.arange(0, BLOCK_K)
        a = tl.load(x_ptr + idx_m[:, None] * K + idx_k[None, :], mask=mask_m[:, None], other=0.0)
        a_e, a_o = tl.split(tl.reshape(a, (BLOCK_M, BP, 2)))
        a_e = a_e.to(tl.float32)[:, :, None]
        a_o = a_o.to(tl.float32)[:, :, None]
        words = tl.load(wp + (kb * BP + kp)[:, None] * (N // 4) + nw[None, :], mask=mask_w[None, :], other=0)
        grp = kb * BLOCK_K // G
        for par in tl.static_range(2):
            if par == 0:
                tw = (words >> sh0) & mk0
                ax = a_e
            else:
                tw = (words >> sh1) & mk1
                ax = a_o
            if FORM == 2:
                f0, f1, f2, f3 = tl.inline_asm_elementwise(
                    "prmt.b32 $0, $4, 0x4B000000, 0x7440; prmt.b32 $1, $4, 0x4B000000, 0x7441; "
                    "prmt.b32 $2, $4, 0x4B000000, 0x7442; prmt.b32 $3, $4, 0x4B000000, 0x7443;",
                    "=r,=r,=r,=r,r", [tw], dtype=(tl.float32, tl.float32, tl.float32, tl.float32), is_pure=True,
                    pack=1)
            if FORM == 3:
                f0, f1, f2, f3 = tl.inline_asm_elementwise(
                    "prmt.b32 $0, $4, 0x43000000, 0x7044; prmt.b32 $1, $4, 0x43000000, 0x7144; "
                    "prmt.b32 $2, $4, 0x43000000, 0x7244; prmt.b32 $3, $4, 0x43000000, 0x7344;",
                    "=r,=r,=r,=r,r", [tw], dtype=(tl.float32, tl.float32, tl.float32, tl.float32), is_pure=True,
                    pack=1)
            if FORM == 5:
                f0, f1, f2, f3 = tl.inline_asm_elementwise(
                    "prmt.b32 $0, $4, 0x43000000, 0x7044; prmt.b32 $1, $4, 0x43000000, 0x7144; "
                    "prmt.b32 $2, $4, 0x43000000, 0x7244; prmt.b32 $3, $4, 0x43000000, 0x7344;",
                    "=r,=r,=r,=r,r", [tw], dtype=(tl.float32, tl.float32, tl.float32, tl.float32), is_pure=True,
                    pack=1)
                idx_n4 = pid * BLOCK_N + tl.arange(0, BLOCK_N)
                sv = tl.load(s_ptr + grp * N + idx_n4, mask=idx_n4 < N, other=0.0).to(tl.float32)
                zv = tl.load(z_ptr + grp * N + idx_n4, mask=idx_n4 < N, other=0.0).to(tl.float32)
                fb = tl.reshape(tl.join(tl.join(f0, f2), tl.join(f1, f3)), (BP, BLOCK_N))
                wb = fb * sv[None, :] + (zv - 136.0 * sv)[None, :]
                acc0 += ax * wb[None, :, :]
            for j in tl.static_range(4 if FORM != 5 else 0):
                sj = tl.load(s_ptr + grp * N + nw * 4 + j, mask=mask_w, other=0.0).to(tl.float32)
                zj = tl.load(z_ptr + grp * N + nw * 4 + j, mask=mask_w, other=0.0).to(tl.float32)
                if FORM == 0:   # exact bf16 rounding of eager: nibble -> bf16 -8 * s + z in bf16
                    q = ((tw >> (8 * j)) & 255) | 0x4B000000
                    v = q.to(tl.float32, bitcast=True) - 8388616.0
                    wv = (v.to(tl.bfloat16) * sj.to(tl.bfloat16)[None, :]).to(tl.bfloat16)
                    wv = (wv + zj.to(tl.bfloat16)[None, :]).to(tl.bfloat16).to(tl.float32)
                elif FORM == 2:
                    if j == 0:
                        fj = f0
                    elif j == 1:
                        fj = f1
                    elif j == 2:
                        fj = f2
                    else:
                        fj = f3
                    wv = (fj - 8388616.0) * sj[None, :] + zj[None, :]
                elif FORM == 3:  # 128 + nibble as f32; (v - 136) s + z = v s + (z - 136 s): one FFMA
                    if j == 0:
                        fj = f0
                    elif j == 1:
                        fj = f1
                    elif j == 2:
                        fj = f2
                    else:
                        fj = f3
                    wv = fj * sj[None, :] + (zj - 136.0 * sj)[None, :]
                elif FORM == 4:  # form 3 in Triton: the byte placed under a 128 exponent by shifts and masks
                    fj = ((((tw >> (8 * j)) & 255) << 16) | 0x43000000).to(tl.float32, bitcast=True)
                    wv = fj * sj[None, :] + (zj - 136.0 * sj)[None, :]
                else:           # fp32 dequant: one FFMA
                    q = ((tw >> (8 * j)) & 255) | 0x4B000000
                    v = q.to(tl.float32, bitcast=True) - 8388616.0
                    wv = v * sj[None, :] + zj[None, :]
                prod = ax * wv[None, :, :]
                if j == 0:
                    acc0 += prod
                elif j == 1:
                    acc1 += prod
                elif j == 2:
                    acc2 += prod
                else:
                    acc3 += prod
    r0 = tl.sum(acc0, axis=1)
    r1 = tl.sum(acc1, axis=1)
    r2 = tl.sum(acc2, axis=1)
    r3 = tl.sum(acc3, axis=1)
    if FORM == 5:
        acc = r0
    else:
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


def launch(x, w, sh, s, z, G, bn, bk, split, warps, stages, form, ws, sem):
    M, K = x.shape
    N = w.shape[1]
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(N, bn), split)
    w4_words[grid](x, w, sh, s, z, y, ws, sem, M, N, K, G, max(1, 1 << (M - 1).bit_length()), bn, bk, split,
                   stages, form, num_warps=warps, num_stages=stages)
    return y


CONFIGS = [(256, 64, 8, 4, 3), (256, 32, 16, 4, 3), (128, 64, 8, 4, 3), (256, 64, 8, 8, 3), (512, 64, 8, 8, 3),
           (128, 128, 4, 4, 3), (256, 64, 8, 4, 4)]


def sass(form):
    from triton.backends.compiler import GPUTarget
    from triton.runtime.jit import JITFunction

    from fusionsearch.codegen import resources as R
    fn = w4_words if isinstance(w4_words, JITFunction) else JITFunction(w4_words.fn)
    for bn, bk, split, warps, stages in CONFIGS[:3]:
        names = fn.arg_names
        sig = {**{k: "*bf16" for k in ("x_ptr", "s_ptr", "z_ptr", "y_ptr")}, "w_ptr": "*u8", "sh_ptr": "*u8",
               "ws_ptr": "*fp32", "sem_ptr": "*i32"}
        const = {"M": 1, "N": 11008, "K": 4096, "G": 128, "BLOCK_M": 1, "BLOCK_N": bn, "BLOCK_K": bk,
                 "SPLIT": split, "STAGES": stages, "FORM": form}
        sig.update({k: "constexpr" for k in const})
        src = triton.compiler.ASTSource(fn=fn, signature=sig, attrs={(i,): [["tt.divisibility", 16]] for i in range(8)},
                                        constexprs={(names.index(k),): v for k, v in const.items()})
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps, "num_stages": stages})
        text = R._sass(k.asm["cubin"])
        loop = R.sass_figures(text)["loop_instructions"]
        regs = R._usage(k.asm["cubin"])[0]
        per = bn * bk // (32 * warps)
        print(f"n{bn} k{bk} sk{split} w{warps} s{stages} form{form}: regs {regs} loop {loop} = {loop / per:.2f}/elt",
              R.loop_opcodes(text).most_common(10), flush=True)


def gpu(out):
    import json

    import fusionsearch as fs
    from fusionsearch.datasets.workloads import WORKLOADS
    from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
    from fusionsearch.measure.bench import time_callable
    from fusionsearch.plan import fully_fused
    sys.path.insert(0, os.getcwd())
    from benchmarks.decode_sweep_gpu import with_kernel
    rows = []
    for M in (1, 4):
        shape = {"M": M, "K": 4096, "N": 11008, "G": 128}
        g = fs.workload("w4_dequant_mm", dtype=torch.bfloat16, **shape)
        x, w, sh, s, z = fs.random_inputs(g, seed=0, device="cuda")
        ref64 = WORKLOADS["w4_dequant_mm"].torch_fn(x.double(), w, sh, s.double(), z.double())
        eager = WORKLOADS["w4_dequant_mm"].torch_fn(x, w, sh, s, z)
        scale = ref64.abs().max().item()
        cases = []
        for cfg in (DecodeConfig(256, 64, 8, 4, 3, "fma_acc", True), DecodeConfig(256, 32, 16, 4, 3, "fma_acc", True)):
            if cfg.accumulator_per_thread(M) > 64:
                continue
            plan = with_kernel(fully_fused(g), lambda k, cfg=cfg: DecodeKernel(k.matmul, k.prologue_a, k.prologue_b,
                                                                               k.epilogue, cfg))
            run = fs.compile_plan(plan).module.run
            cases.append((f"generated {cfg.short()}", lambda run=run, t=(x, w, sh, s, z): run(*t)[0]))
        ws = torch.empty(64 * 16 * 11008, dtype=torch.float32, device="cuda")
        sem = torch.zeros(4096, dtype=torch.int32, device="cuda")
        for bn, bk, split, warps, stages in CONFIGS:
            if M * (bk // 2) * (bn // 4) * 4 // (32 * warps) > 64:
                continue
            for form in (0, 1, 2, 3, 4):
                cases.append((f"words form{form} n{bn} k{bk} sk{split} w{warps} s{stages}",
                              lambda a=(bn, bk, split, warps, stages, form), t=(x, w, sh, s, z), b=(ws, sem):
                              launch(*t, 128, *a, *b)))
        for label, fn in cases:
            try:
                y = fn()
                torch.cuda.synchronize()
                err = (y.double() - ref64).abs().max().item() / scale
                err_eager = (eager.double() - ref64).abs().max().item() / scale
                t = time_callable(fn, 5, 40)
                row = {"M": M, "label": label, "us": t.median_us, "err": err, "eager_err": err_eager}
            except Exception as e:  # a form that fails to compile or run: say so and go on
                row = {"M": M, "label": label, "error": f"{type(e).__name__}: {str(e)[:200]}"}
            rows.append(row)
            print(json.dumps(row), flush=True)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "w4_words.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    print(f"{'M':>2} {'kernel':45s} {'us':>7} {'max err/max|ref|':>16}")
    for r in rows:
        print(f"{r['M']:>2} {r['label']:45s} " + (f"{r['us']:7.1f} {r['err']:16.2e}" if "us" in r else r["error"][:60]))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sass", action="store_true")
    ap.add_argument("--out", default="/tmp/w4_words")
    args = ap.parse_args()
    if args.sass:
        for f in (3, 5):
            sass(f)
        sys.exit()
    gpu(args.out)
