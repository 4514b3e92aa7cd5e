"""w8 GEMV variants: where the int8 -> bf16 conversion happens relative to the move into the dot's layout, and
the weight prepacked K-contiguous.
CPU: TRITON_INTERPRET=0 python gpu/w8_layout.py sass   (sm_90 K-loop opcode counts)
GPU: python gpu/w8_layout.py time --out DIR"""
import collections
import json
import os
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.getcwd())


@triton.jit
def cvt4(w):
    # int8 -> bf16 4 bytes at a time: each byte b + 128 placed in 2^23's mantissa, less 2^23 + 128, exact in
    # fp32, then packed in pairs. Done in the load layout (inline asm is not moved across a layout conversion).
    return tl.inline_asm_elementwise(
        asm="""{
        .reg .b32 x, m, f0, f1, f2, f3;
        mov.b32 m, 0x4B000000;
        xor.b32 x, $2, 0x80808080;
        prmt.b32 f0, x, m, 0x7650;
        prmt.b32 f1, x, m, 0x7651;
        prmt.b32 f2, x, m, 0x7652;
        prmt.b32 f3, x, m, 0x7653;
        sub.f32 f0, f0, 0f4B000080;
        sub.f32 f1, f1, 0f4B000080;
        sub.f32 f2, f2, 0f4B000080;
        sub.f32 f3, f3, 0f4B000080;
        cvt.rn.bf16x2.f32 $0, f1, f0;
        cvt.rn.bf16x2.f32 $1, f3, f2;
        }""",
        constraints="=r,=r,r", args=[w], dtype=tl.bfloat16, is_pure=True, pack=4)


@triton.jit
def gemv8(x_ptr, w_ptr, s_ptr, ws_ptr, N: tl.constexpr, BK: tl.constexpr, BN: tl.constexpr, KT: tl.constexpr,
          FORM: tl.constexpr, STAGES: tl.constexpr):
    pid_n, pid_k = tl.program_id(0), tl.program_id(1)
    n = pid_n * BN + tl.arange(0, BN)
    kk = tl.arange(0, BK)
    m = tl.arange(0, 16)
    acc = tl.zeros([BN, 16], tl.float32)
    for t in tl.range(KT, num_stages=STAGES):
        k = (pid_k * KT + t) * BK + kk
        xt = tl.load(x_ptr + k[:, None] + m[None, :] * 0, mask=m[None, :] < 1, other=0.0)  # [BK, 16]
        if FORM == 0:  # the generated form: the tile read as W^T [BN, BK], cast, dot
            w = tl.load(w_ptr + k[None, :] * N + n[:, None]).to(tl.bfloat16)
            acc = tl.dot(w, xt, acc)
        elif FORM == 1:  # read as [BK, BN], cast there, transposed
            w = tl.load(w_ptr + k[:, None] * N + n[None, :]).to(tl.bfloat16)
            acc = tl.dot(tl.trans(w), xt, acc)
        elif FORM == 2:  # read as [BK, BN], cast by inline asm there, transposed
            w = cvt4(tl.load(w_ptr + k[:, None] * N + n[None, :]))
            acc = tl.dot(tl.trans(w), xt, acc)
        else:  # the weight prepacked as [N, K] (K contiguous): W^T [BN, BK] read as laid out
            w = tl.load(w_ptr + n[:, None] * (KT * BK * tl.num_programs(1)) + k[None, :]).to(tl.bfloat16)
            acc = tl.dot(w, xt, acc)
    s = tl.load(s_ptr + n).to(tl.float32)
    tl.store(ws_ptr + pid_k * N + n, tl.sum(acc, 1) * s)


def sass():
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from fusionsearch.codegen import resources as R
    sig = {"x_ptr": "*bf16", "w_ptr": "*i8", "s_ptr": "*bf16", "ws_ptr": "*fp32", "N": "constexpr", "BK": "constexpr",
           "BN": "constexpr", "KT": "constexpr", "FORM": "constexpr", "STAGES": "constexpr"}
    for bk, bn, split in ((64, 128, 8), (128, 64, 4)):
        for form in (0, 1, 2, 3):
            consts = {"N": 8192, "BK": bk, "BN": bn, "KT": 8192 // bk // split, "FORM": form, "STAGES": 3}
            names = gemv8.arg_names
            src = ASTSource(fn=gemv8, signature=sig, attrs={(i,): [["tt.divisibility", 16]] for i in range(4)},
                            constexprs={(names.index(k),): v for k, v in consts.items()})
            try:
                c = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 3})
            except Exception as e:
                print(bk, bn, form, "failed", str(e)[:300])
                continue
            s = R._sass(c.asm["cubin"])
            ops = R.loop_opcodes(s)
            code, loops = R._code_and_loops(s)
            full = collections.Counter(op for a, op, _ in code if any(x <= a <= y for x, y in loops))
            print(f"bk{bk} bn{bn} sk{split} form {form}: loop {sum(ops.values())}",
                  {k: v for k, v in full.items() if k.startswith(("LDS", "STS", "LDSM", "PRMT", "HGMMA", "HMMA",
                                                                   "LDG", "I2F", "HADD2", "LOP3", "STSM"))})


def time(out):
    from fusionsearch.measure.bench import time_callable
    torch.manual_seed(0)
    K = N = 8192
    x = torch.randn(1, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randint(-128, 128, (K, N), device="cuda", dtype=torch.int8)
    wt = w.t().contiguous()
    s = (torch.rand(N, device="cuda") * 0.01).to(torch.bfloat16)
    ref = (x.double() @ w.double())[0] * s.double()
    rows = []
    for bk, bn, split, warps in ((64, 128, 8, 4), (128, 64, 4, 4), (32, 256, 16, 4), (64, 256, 16, 8)):
        ws = torch.empty(split, N, device="cuda", dtype=torch.float32)
        for form in (0, 1, 2, 3):
            def fn(bk=bk, bn=bn, split=split, form=form, ws=ws, warps=warps):
                gemv8[(N // bn, split)](x, wt if form == 3 else w, s, ws, N, bk, bn, K // bk // split, form, 3,
                                        num_warps=warps)
            try:
                fn()
                err = ((ws.sum(0).double() - ref).abs().max() / ref.abs().max()).item()
                us = time_callable(fn, 5, 40).median_us
            except Exception as e:
                print(bk, bn, form, "failed", str(e)[:200], flush=True)
                continue
            rows.append({"config": f"bk{bk} bn{bn} sk{split} w{warps}", "form": form, "us": us, "err": err})
            print(f"bk{bk} bn{bn} sk{split} w{warps} form {form}: {us:6.1f} us err {err:.1e}", flush=True)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "w8_layout.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    sass() if sys.argv[1] == "sass" else time(sys.argv[sys.argv.index("--out") + 1])
