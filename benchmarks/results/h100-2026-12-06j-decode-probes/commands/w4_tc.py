"""int4 GEMV on tensor cores with the dequant's scale and zero moved after each K tile's dot (prototype).

B = (q - 8) * s + z with s, z constant within a group of K rows. On a K tile inside one group:
dot(A, B) = s * (dot(A, R) - 136 * rowsum(A)) + z * rowsum(A), R = 128 + q as a 16-bit float (exact), made from
the byte by one byte permute. FORM 0: the generated words-dot form's fp32 dequant (FFMA, cvt) for comparison;
FORM 2: R by PRMT into 16-bit halves, the dot on R, the scale and zero on the tile's accumulator."""
import argparse
import json
import os
import sys

import torch
import triton
import triton.language as tl

_PRMT = tl.constexpr(os.environ.get("TRITON_INTERPRET") != "1")


@triton.jit
def _bytes_f32(words):
    b0, b1, b2, b3 = tl.inline_asm_elementwise(
        "prmt.b32 $0, $4, 0x43000000, 0x7044; prmt.b32 $1, $4, 0x43000000, 0x7144; "
        "prmt.b32 $2, $4, 0x43000000, 0x7244; prmt.b32 $3, $4, 0x43000000, 0x7344;",
        "=r,=r,=r,=r,r", [words], dtype=(tl.float32, tl.float32, tl.float32, tl.float32), is_pure=True, pack=1)
    return b0, b1, b2, b3


@triton.jit
def _bytes_bf16(words):
    """128 + byte j of each word as bf16 (bytes <= 127): two permutes a word, each two 16-bit halves."""
    b0, b1, b2, b3 = tl.inline_asm_elementwise(
        "{ .reg .b32 t0, t1; prmt.b32 t0, $4, 0x43434343, 0x4140; prmt.b32 t1, $4, 0x43434343, 0x4342; "
        "mov.b32 {$0, $1}, t0; mov.b32 {$2, $3}, t1; }",
        "=h,=h,=h,=h,r", [words], dtype=(tl.bfloat16, tl.bfloat16, tl.bfloat16, tl.bfloat16), is_pure=True, pack=1)
    return b0, b1, b2, b3


@triton.jit
def _bytes_bf16_pairs(words):
    """Two words a call (elements w, w+1 of a thread): four bf16 pairs, 128 + byte, one permute each:
    T0 = bytes 0,1 of word w, T1 = bytes 2,3 of w, T2 = bytes 0,1 of w+1, T3 = bytes 2,3 of w+1."""
    b0, b1, b2, b3 = tl.inline_asm_elementwise(
        "prmt.b32 $0, $4, 0x43434343, 0x4140; prmt.b32 $1, $4, 0x43434343, 0x4342; "
        "prmt.b32 $2, $5, 0x43434343, 0x4140; prmt.b32 $3, $5, 0x43434343, 0x4342;",
        "=r,=r,=r,=r,r,r", [words], dtype=(tl.bfloat16, tl.bfloat16, tl.bfloat16, tl.bfloat16), is_pure=True,
        pack=2)
    return b0, b1, b2, b3


@triton.jit
def _after_cols(acc, d, rs, s_ptr, z_ptr, grp, N, nw, t: tl.constexpr, mask_w):
    col = 8 * (nw // 2) + 2 * t + nw % 2
    sj = tl.load(s_ptr + grp * N + col, mask=mask_w, other=0.0).to(tl.float32)
    zj = tl.load(z_ptr + grp * N + col, mask=mask_w, other=0.0).to(tl.float32)
    return acc + sj[None, :] * (d - 136.0 * rs[:, None]) + zj[None, :] * rs[:, None]


@triton.jit
def _after(acc, d, rs, s_ptr, z_ptr, grp, N, nw, j: tl.constexpr, mask_w):
    sj = tl.load(s_ptr + grp * N + nw * 4 + j, mask=mask_w, other=0.0).to(tl.float32)
    zj = tl.load(z_ptr + grp * N + nw * 4 + j, mask=mask_w, other=0.0).to(tl.float32)
    return acc + sj[None, :] * (d - 136.0 * rs[:, None]) + zj[None, :] * rs[:, None]


@triton.jit
def _fp32_b(q, s_ptr, z_ptr, grp, N, nw, j: tl.constexpr, mask_w):
    sj = tl.load(s_ptr + grp * N + nw * 4 + j, mask=mask_w, other=0.0).to(tl.float32)
    zj = tl.load(z_ptr + grp * N + nw * 4 + j, mask=mask_w, other=0.0).to(tl.float32)
    return (q * sj[None, :] + (zj - 136.0 * sj)[None, :]).to(tl.bfloat16)


@triton.jit
def _fp32_bv(q, sj, zj):
    return (q * sj[None, :] + (zj - 136.0 * sj)[None, :]).to(tl.bfloat16)


@triton.jit
def _four(v, BW: tl.constexpr):
    """v [4 * BW] as its four byte positions: v[4w + j] for j = 0..3."""
    xa, xb = tl.split(tl.reshape(v, (BW, 2, 2)))
    v0, v2 = tl.split(xa)
    v1, v3 = tl.split(xb)
    return v0, v1, v2, v3


@triton.jit
def w4_tc(x_ptr, w_ptr, sh_ptr, s_ptr, z_ptr, y_ptr, ws_ptr, sem_ptr,
          M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, G: tl.constexpr,
          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT: tl.constexpr,
          STAGES: tl.constexpr, FORM: tl.constexpr, CONTIG: tl.constexpr = True):
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
    acc0 = tl.zeros((BLOCK_M, BW), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_M, BW), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, BW), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_M, BW), dtype=tl.float32)
    wp = w_ptr.to(tl.pointer_type(tl.int32))
    idx_n4 = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    g0 = (pid_k * KT) * BLOCK_K // G
    s_next = tl.load(s_ptr + g0 * N + idx_n4, mask=idx_n4 < N, other=0.0).to(tl.float32)
    z_next = tl.load(z_ptr + g0 * N + idx_n4, mask=idx_n4 < N, other=0.0).to(tl.float32)
    for t in tl.range(KT, num_stages=STAGES):
        kb = pid_k * KT + t
        k0 = kb * BLOCK_K
        if CONTIG:
            a = tl.load(x_ptr + idx_m[:, None] * K + (k0 + tl.arange(0, BLOCK_K))[None, :], mask=mask_m[:, None],
                        other=0.0)
            a_e, a_o = tl.split(tl.reshape(a, (BLOCK_M, BP, 2)))
        else:
            a_e = tl.load(x_ptr + idx_m[:, None] * K + (k0 + 2 * kp)[None, :], mask=mask_m[:, None], other=0.0)
            a_o = tl.load(x_ptr + idx_m[:, None] * K + (k0 + 2 * kp + 1)[None, :], mask=mask_m[:, None], other=0.0)
        words = tl.load(wp + (kb * BP + kp)[:, None] * (N // 4) + nw[None, :], mask=mask_w[None, :], other=0)
        grp = k0 // G
        ne = (words >> sh0) & mk0
        no = (words >> sh1) & mk1
        if FORM == 2:
            e0, e1, e2, e3 = _bytes_bf16(ne)
            o0, o1, o2, o3 = _bytes_bf16(no)
            rs = tl.sum(a_e.to(tl.float32), axis=1) + tl.sum(a_o.to(tl.float32), axis=1)
            acc0 = _after(acc0, tl.dot(a_o, o0, tl.dot(a_e, e0)), rs, s_ptr, z_ptr, grp, N, nw, 0, mask_w)
            acc1 = _after(acc1, tl.dot(a_o, o1, tl.dot(a_e, e1)), rs, s_ptr, z_ptr, grp, N, nw, 1, mask_w)
            acc2 = _after(acc2, tl.dot(a_o, o2, tl.dot(a_e, e2)), rs, s_ptr, z_ptr, grp, N, nw, 2, mask_w)
            acc3 = _after(acc3, tl.dot(a_o, o3, tl.dot(a_e, e3)), rs, s_ptr, z_ptr, grp, N, nw, 3, mask_w)
        elif FORM == 3:
            e0, e1, e2, e3 = _bytes_bf16_pairs(ne)
            o0, o1, o2, o3 = _bytes_bf16_pairs(no)
            rs = tl.sum(a_e.to(tl.float32), axis=1) + tl.sum(a_o.to(tl.float32), axis=1)
            acc0 = _after_cols(acc0, tl.dot(a_o, o0, tl.dot(a_e, e0)), rs, s_ptr, z_ptr, grp, N, nw, 0, mask_w)
            acc1 = _after_cols(acc1, tl.dot(a_o, o1, tl.dot(a_e, e1)), rs, s_ptr, z_ptr, grp, N, nw, 1, mask_w)
            acc2 = _after_cols(acc2, tl.dot(a_o, o2, tl.dot(a_e, e2)), rs, s_ptr, z_ptr, grp, N, nw, 2, mask_w)
            acc3 = _after_cols(acc3, tl.dot(a_o, o3, tl.dot(a_e, e3)), rs, s_ptr, z_ptr, grp, N, nw, 3, mask_w)
        elif FORM == 4 or FORM == 5:
            if FORM == 4:
                sv = tl.load(s_ptr + grp * N + idx_n4, mask=idx_n4 < N, other=0.0).to(tl.float32)
                zv = tl.load(z_ptr + grp * N + idx_n4, mask=idx_n4 < N, other=0.0).to(tl.float32)
            else:
                sv = s_next
                zv = z_next
                gn = tl.minimum(k0 + BLOCK_K, K - 1) // G
                s_next = tl.load(s_ptr + gn * N + idx_n4, mask=idx_n4 < N, other=0.0).to(tl.float32)
                z_next = tl.load(z_ptr + gn * N + idx_n4, mask=idx_n4 < N, other=0.0).to(tl.float32)
            c0, c1, c2, c3 = _four(sv, BW)
            d0, d1, d2, d3 = _four(zv, BW)
            e0, e1, e2, e3 = _bytes_f32(ne)
            o0, o1, o2, o3 = _bytes_f32(no)
            acc0 = tl.dot(a_e, _fp32_bv(e0, c0, d0), acc0)
            acc0 = tl.dot(a_o, _fp32_bv(o0, c0, d0), acc0)
            acc1 = tl.dot(a_e, _fp32_bv(e1, c1, d1), acc1)
            acc1 = tl.dot(a_o, _fp32_bv(o1, c1, d1), acc1)
            acc2 = tl.dot(a_e, _fp32_bv(e2, c2, d2), acc2)
            acc2 = tl.dot(a_o, _fp32_bv(o2, c2, d2), acc2)
            acc3 = tl.dot(a_e, _fp32_bv(e3, c3, d3), acc3)
            acc3 = tl.dot(a_o, _fp32_bv(o3, c3, d3), acc3)
        else:
            e0, e1, e2, e3 = _bytes_f32(ne)
            o0, o1, o2, o3 = _bytes_f32(no)
            acc0 = tl.dot(a_e, _fp32_b(e0, s_ptr, z_ptr, grp, N, nw, 0, mask_w), acc0)
            acc0 = tl.dot(a_o, _fp32_b(o0, s_ptr, z_ptr, grp, N, nw, 0, mask_w), acc0)
            acc1 = tl.dot(a_e, _fp32_b(e1, s_ptr, z_ptr, grp, N, nw, 1, mask_w), acc1)
            acc1 = tl.dot(a_o, _fp32_b(o1, s_ptr, z_ptr, grp, N, nw, 1, mask_w), acc1)
            acc2 = tl.dot(a_e, _fp32_b(e2, s_ptr, z_ptr, grp, N, nw, 2, mask_w), acc2)
            acc2 = tl.dot(a_o, _fp32_b(o2, s_ptr, z_ptr, grp, N, nw, 2, mask_w), acc2)
            acc3 = tl.dot(a_e, _fp32_b(e3, s_ptr, z_ptr, grp, N, nw, 3, mask_w), acc3)
            acc3 = tl.dot(a_o, _fp32_b(o3, s_ptr, z_ptr, grp, N, nw, 3, mask_w), acc3)
    if FORM == 3:  # acc_t[2u + i] is column 8u + 2t + i
        r0 = tl.reshape(acc0, (BLOCK_M, BW // 2, 2))
        r1 = tl.reshape(acc1, (BLOCK_M, BW // 2, 2))
        r2 = tl.reshape(acc2, (BLOCK_M, BW // 2, 2))
        r3 = tl.reshape(acc3, (BLOCK_M, BW // 2, 2))
        acc = tl.reshape(tl.permute(tl.join(tl.join(r0, r2), tl.join(r1, r3)), (0, 1, 3, 4, 2)), (BLOCK_M, BLOCK_N))
    else:
        acc = tl.reshape(tl.join(tl.join(acc0, acc2), tl.join(acc1, acc3)), (BLOCK_M, BLOCK_N))
    idx_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = idx_n < N
    if SPLIT == 1:
        tl.store(y_ptr + idx_m[:, None] * N + idx_n[None, :], acc.to(tl.bfloat16),
                 mask=mask_m[:, None] & mask_n[None, :])
    else:
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


def launch(x, w, sh, s, z, G, bn, bk, split, warps, stages, form, ws, sem, contig=True):
    M, K = x.shape
    N = w.shape[1]
    y = torch.empty((M, N), dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(N, bn), split)
    w4_tc[grid](x, w, sh, s, z, y, ws, sem, M, N, K, G, 16, bn, bk, split, stages, form, contig,
                num_warps=warps, num_stages=stages)
    return y


def grid_configs(M):
    out = []
    for bn in (64, 128, 256):
        for bk in (64, 128):
            for split in (2, 4, 8):
                for warps, stages in ((4, 3), (8, 3)):
                    out.append((bn, bk, split, warps, stages))
    return out


def sass(configs):
    from triton.backends.compiler import GPUTarget
    from triton.runtime.jit import JITFunction

    from fusionsearch.codegen import resources as R
    fn = w4_tc if isinstance(w4_tc, JITFunction) else JITFunction(w4_tc.fn)
    for form in (0, 3, 4, 5):
        for bn, bk, split, warps, stages in configs:
            names = fn.arg_names
            sig = {**{k: "*bf16" for k in ("x_ptr", "s_ptr", "z_ptr", "y_ptr")}, "w_ptr": "*u8", "sh_ptr": "*u8",
                   "ws_ptr": "*fp32", "sem_ptr": "*i32"}
            const = {"M": 16, "N": 11008, "K": 4096, "G": 128, "BLOCK_M": 16, "BLOCK_N": bn, "BLOCK_K": bk,
                     "SPLIT": split, "STAGES": stages, "FORM": form, "CONTIG": True}
            sig.update({k: "constexpr" for k in const})
            src = triton.compiler.ASTSource(fn=fn, signature=sig,
                                            attrs={(i,): [["tt.divisibility", 16]] for i in range(8)},
                                            constexprs={(names.index(k),): v for k, v in const.items()})
            k = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                               options={"num_warps": warps, "num_stages": stages})
            text = R._sass(k.asm["cubin"])
            loop = R.sass_figures(text)["loop_instructions"]
            regs = R._usage(k.asm["cubin"])[0]
            per = bn * bk // (32 * warps)
            print(f"form{form} n{bn} k{bk} sk{split} w{warps} s{stages}: regs {regs} loop {loop} = "
                  f"{loop / per:.2f}/elt", R.loop_opcodes(text).most_common(12), flush=True)


def gpu(out, ms):
    import fusionsearch as fs
    from fusionsearch.datasets.workloads import WORKLOADS
    from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
    from fusionsearch.measure.bench import time_callable
    from fusionsearch.plan import fully_fused
    sys.path.insert(0, os.getcwd())
    from benchmarks.decode_sweep_gpu import with_kernel
    rows = []
    os.makedirs(out, exist_ok=True)
    for M in ms:
        shape = {"M": M, "K": 4096, "N": 11008, "G": 128}
        g = fs.workload("w4_dequant_mm", dtype=torch.bfloat16, **shape)
        x, w, sh, s, z = fs.random_inputs(g, seed=0, device="cuda")
        ref64 = WORKLOADS["w4_dequant_mm"].torch_fn(x.double(), w, sh, s.double(), z.double())
        eager = WORKLOADS["w4_dequant_mm"].torch_fn(x, w, sh, s, z)
        scale = ref64.abs().max().item()
        cases = []
        for label in ("decode fma_acc n256 k64 sk8 w4 s3 pairs words", "decode dot n128 k128 sk4 w4 s3 pairs words"):
            cfg = DecodeConfig.from_short(label)
            plan = with_kernel(fully_fused(g), lambda k, cfg=cfg: DecodeKernel(k.matmul, k.prologue_a, k.prologue_b,
                                                                               k.epilogue, cfg))
            try:
                run = fs.compile_plan(plan).module.run
            except Exception as e:  # noqa: BLE001
                print("generated", label, "failed:", str(e)[:200])
                continue
            cases.append((f"generated {label[7:]}", lambda run=run, t=(x, w, sh, s, z): run(*t)[0]))
        ws = torch.empty(64 * 16 * 11008, dtype=torch.float32, device="cuda")
        sem = torch.zeros(4096, dtype=torch.int32, device="cuda")
        for cfg in ((128, 128, 4, 4, 3), (128, 64, 8, 4, 3), (256, 128, 4, 4, 3), (256, 64, 8, 4, 3),
                    (64, 128, 4, 4, 3), (128, 128, 8, 4, 3), (256, 128, 4, 8, 3), (128, 128, 2, 4, 3)):
            for form in (0, 3, 4, 5):
                bn, bk, split, warps, stages = cfg
                cases.append((f"tc form{form} n{bn} k{bk} sk{split} w{warps} s{stages}",
                              lambda a=(*cfg, form), t=(x, w, sh, s, z), b=(ws, sem): launch(*t, 128, *a, *b)))
        for label, fn in cases:
            try:
                y = fn()
                torch.cuda.synchronize()
                err = (y.double() - ref64).abs().max().item() / scale
                err_eager = (eager.double() - ref64).abs().max().item() / scale
                rel = ((y.double() - ref64).norm() / ref64.norm()).item()
                t = time_callable(fn, 5, 30)
                row = {"M": M, "label": label, "us": t.median_us, "err": err, "eager_err": err_eager, "rel": rel}
            except Exception as e:  # noqa: BLE001 - a form that fails to compile or run: say so and go on
                row = {"M": M, "label": label, "error": f"{type(e).__name__}: {str(e)[:300]}"}
            rows.append(row)
            print(json.dumps(row), flush=True)
        with open(os.path.join(out, "w4_tc.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    print(f"{'M':>2} {'kernel':50s} {'us':>7} {'maxerr':>9} {'rel':>9}")
    for M in ms:
        good = sorted((r for r in rows if r["M"] == M and "us" in r), key=lambda r: r["us"])
        for r in [r for r in good if r["label"].startswith("generated")] + good[:12]:
            print(f"{r['M']:>2} {r['label']:50s} {r['us']:7.1f} {r['err']:9.2e} {r['rel']:9.2e}")
    bad = [r for r in rows if "error" in r]
    print("errors:", len(bad), [r["label"] for r in bad][:10], bad[0]["error"] if bad else "")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--sass", action="store_true")
    ap.add_argument("--out", default="/tmp/w4_tc")
    ap.add_argument("--ms", default="1,16")
    args = ap.parse_args()
    if args.sass:
        sass([(128, 128, 4, 4, 3), (128, 64, 8, 4, 3), (256, 128, 4, 8, 3)])
        sys.exit()
    gpu(args.out, [int(m) for m in args.ms.split(",")])
