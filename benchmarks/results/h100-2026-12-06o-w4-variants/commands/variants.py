"""GPU probe (issue 27): the int4 words form with the group scale and zero applied after each K step's product
("gad": the dot or FMA reads 128 + q as is; acc += s * (d - 136 xs) + z * xs, xs the step's sum of x; one
group a K step or part of one, G % BLOCK_K == 0), as an edit of the generated source, timed in the same rounds
as the generated kernels; each validated against float64.

    PYTHONPATH=. python gpu/variants.py --out $OUT --case w4_dequant_mm:M=1,K=4096,N=11008,G=128 \\
        --configs "decode fma_acc n256 k64 sk8 w4 s3 pairs words;decode fma n128 k128 sk4 w4 s3 pairs words|gad"
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
import fusionsearch as fs  # noqa: E402
from benchmarks.bytes_in_flight import with_config  # noqa: E402
from benchmarks.decode_forms_gpu import parse_case  # noqa: E402
from benchmarks.harness import floor_us, run_facts, write_json  # noqa: E402
from benchmarks.suite import measure_copy  # noqa: E402
from fusionsearch.codegen.module import generate_module  # noqa: E402
from fusionsearch.codegen.runtime import load_source  # noqa: E402
from fusionsearch.costmodel.analytic import least_bytes, matmul_flops  # noqa: E402
from fusionsearch.graph.tolerance import output_tolerances, rel_error  # noqa: E402
from fusionsearch.measure.bench import measure_ceilings, time_interleaved  # noqa: E402

TL = {torch.bfloat16: "tl.bfloat16", torch.float16: "tl.float16", torch.float32: "tl.float32"}


def gad_source(src: str, label: str, dt: torch.dtype, rows: bool) -> str:
    """The words form's K-loop body from A's split to the loop's end, rewritten with the group affine after the
    product (names as the generator makes them for w4_dequant_mm: in1 w, in2 scales, in3 zeros)."""
    fma = label.split()[1] in ("fma", "fma_acc")
    start = src.index("        a_e, a_o = tl.split(")
    end = src.index("    acc = tl.reshape(tl.join(")
    if fma:  # the fma forms' accumulators: 2-D only, the 3-D ones unused
        src = src.replace("    acc = tl.reshape(tl.join(", "    acc = tl.reshape(tl.join(", 1)
    b = ["        a_e, a_o = tl.split(tl.reshape(a, (BLOCK_M, BLOCK_K // 2, 2)))",
         "        xs = tl.sum(a.to(tl.float32), axis=1)[:, None]",
         "        ldw0 = tl.load((in1_ptr + ((kb * (BLOCK_K // 2) + kp[:, None])) * in1_s0)"
         ".to(tl.pointer_type(tl.int32))"
         " + idx_w[None, :])",
         "        q0, q1, q2, q3 = _bytes_f32((ldw0 >> 4) & 252645135)",
         "        q4, q5, q6, q7 = _bytes_f32(ldw0 & 252645135)"]
    g = "((kb * BLOCK_K) // G)"
    if rows:  # the group's scale and zero rows loaded whole, split into the byte positions in registers
        b.append("        cols_g = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)")
        for v, arg in (("s", "in2"), ("z", "in3")):
            b.append(f"        {v}_h0, {v}_h1 = tl.split(tl.reshape("
                     f"tl.load({arg}_ptr + {g} * {arg}_s0 + cols_g * {arg}_s1)"
                     f".to(tl.float32), (BLOCK_N // 4, 2, 2)))")
            b.append(f"        {v}0, {v}2 = tl.split({v}_h0)")
            b.append(f"        {v}1, {v}3 = tl.split({v}_h1)")
            for j in range(4):
                b.append(f"        {v}{j} = {v}{j}[None, :]")
    else:
        for j in range(4):
            b.append(f"        s{j} = tl.load(in2_ptr + {g} * in2_s0 + (idx_w * 4 + {j}) * in2_s1)"
                     ".to(tl.float32)[None, :]")
            b.append(f"        z{j} = tl.load(in3_ptr + {g} * in3_s0 + (idx_w * 4 + {j}) * in3_s1)"
                     ".to(tl.float32)[None, :]")
    for j in range(4):
        e, o = f"q{j}", f"q{j + 4}"
        if fma:
            b.append(f"        d{j} = tl.sum(a_e.to(tl.float32)[:, :, None] * {e}[None, :, :] + "
                     f"a_o.to(tl.float32)[:, :, None] * {o}[None, :, :], axis=1)")
        else:
            b.append(f"        d{j} = tl.dot(a_e, {e}.to({TL[dt]}))")
            b.append(f"        d{j} = tl.dot(a_o, {o}.to({TL[dt]}), d{j})")
        b.append(f"        accw{j} += d{j} * s{j} + xs * (z{j} - 136.0 * s{j})")
    out = src[:start] + "\n".join(b) + "\n" + src[end:]
    return out.replace("    acc = tl.reshape(tl.join(", "    acc = tl.reshape(tl.join(")


_PAIR_ASM = "".join(f"""
@triton.jit
def _pair_dequant_bf16_{j}(words, shifted, s2, z2, c1, c2):
    # byte {j} of each word: its two nibbles (k even: high, k odd: low) as one bf16x2 of 128 + 8 hi and 128 + lo,
    # to hi - 8 and lo - 8 by one exact fma, then (q - 8) * s + z by one more (one rounding)
    return tl.inline_asm_elementwise(
        "{{ .reg .b32 t, u; "
        "prmt.b32 t, $2, $1, {j | j << 4 | (4 + j) << 8 | (4 + j) << 12}; "
        "lop3.b32 t, t, 0x000F0078, 0x43004300, 0xEA; "
        "fma.rn.bf16x2 u, t, $5, $6; "
        "fma.rn.bf16x2 $0, u, $3, $4; }}",
        "=r,r,r,r,r,r,r", [words, shifted, s2, z2, c1, c2], dtype=tl.int32, is_pure=True, pack=1)
""" for j in range(4))


def pair_source(src: str) -> str:
    """The dot over the whole K block, each byte's nibble pair one bf16x2 of B's dot operand (k even, k odd),
    dequantised in bf16x2 (exact but the last fma's one rounding)."""
    start = src.index("        a_e, a_o = tl.split(")
    end = src.index("    acc = tl.reshape(tl.join(")
    b = ["        ldw0 = tl.load((in1_ptr + ((kb * (BLOCK_K // 2) + kp[:, None])) * in1_s0)"
         ".to(tl.pointer_type(tl.int32))"
         " + idx_w[None, :])",
         "        cols_g = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
         "        c_scale = tl.full((BLOCK_K // 2, BLOCK_N // 4), 0x3F803E00, tl.int32)",
         f"        c_shift = tl.full((BLOCK_K // 2, BLOCK_N // 4), {0xC308C1C0 - (1 << 32)}, tl.int32)"]
    for v, arg in (("s", "in2"), ("z", "in3")):
        b.append(f"        {v}_r = tl.load({arg}_ptr + ((kb * BLOCK_K) // G) * {arg}_s0 + cols_g * {arg}_s1)"
                 ".to(tl.int16, bitcast=True).to(tl.int32) & 65535")
        b.append(f"        {v}_h0, {v}_h1 = tl.split(tl.reshape({v}_r | ({v}_r << 16), (BLOCK_N // 4, 2, 2)))")
        b.append(f"        {v}0, {v}2 = tl.split({v}_h0)")
        b.append(f"        {v}1, {v}3 = tl.split({v}_h1)")
    for j in range(4):
        b.append(f"        r{j} = _pair_dequant_bf16_{j}(ldw0, ldw0 >> 1, s{j}[None, :], z{j}[None, :], "
                 "c_scale, c_shift)")
        b.append(f"        lo{j} = r{j}.to(tl.int16).to(tl.bfloat16, bitcast=True)")
        b.append(f"        hi{j} = (r{j} >> 16).to(tl.int16).to(tl.bfloat16, bitcast=True)")
        b.append(f"        b{j} = tl.reshape(tl.permute(tl.join(lo{j}, hi{j}), (0, 2, 1)), (BLOCK_K, BLOCK_N // 4))")
        b.append(f"        accw{j} = tl.dot(a, b{j}, accw{j})")
    out = src[:start] + "\n".join(b) + "\n" + src[end:]
    return out.replace("\n\ndef _alloc(", _PAIR_ASM + "\n\ndef _alloc(", 1)


def build(g, text: str, dt: torch.dtype):
    label, _, variant = text.partition("|")
    source = generate_module(with_config(g, label.strip())).source
    if variant.strip() in ("gad", "gad_rows"):
        source = gad_source(source, label.strip(), dt, variant.strip() == "gad_rows")
        source = source.replace("BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):",
                                "BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):\n"
                                f"    G = {g.node('x').shape[1] // g.node('scales').shape[0]}")
        for j in range(4):  # fma_acc's summed 3-D accumulators: not used by the gad loop
            source = source.replace(f"    accw{j} = tl.sum(accw{j}_3d, axis=1)\n", "")
    elif variant.strip() == "pair":
        source = pair_source(source)
        source = source.replace("BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):",
                                "BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):\n"
                                f"    G = {g.node('x').shape[1] // g.node('scales').shape[0]}")
    elif variant.strip():
        raise SystemExit(f"unknown variant {variant!r}")
    return load_source(source), source


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--case", required=True)
    ap.add_argument("--configs", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    name, shape = parse_case(args.case)
    dt = getattr(torch, args.dtype)
    g = fs.workload(name, dtype=dt, **shape)
    inputs = fs.random_inputs(g, seed=0, device=args.device)
    (ref,) = fs.reference(g, inputs, float64=True)
    tol = output_tolerances(g)[0]
    fns, rows = {}, {}
    for text in (c.strip() for c in args.configs.split(";") if c.strip()):
        try:
            mod, _ = build(g, text, dt)
            (y,) = mod.run(*inputs)
            err = rel_error(y.double().cpu(), ref.cpu())
            rows[text] = {"rel_err": err, "ok": err <= tol}
            if err <= tol:
                fns[text] = lambda mod=mod: mod.run(*inputs)
        except Exception as e:  # noqa: BLE001
            rows[text] = {"ok": False, "reason": str(e)[-600:]}
        print(text, rows[text], flush=True)
    if args.device != "cuda":
        return
    nbytes = least_bytes(g)
    floor = floor_us(nbytes, matmul_flops(g), measure_ceilings())
    copy = measure_copy(nbytes)["median_us"]
    times = time_interleaved(fns, rounds=args.rounds, warmup_ms=5, rep_ms=25)
    for label, t in times.items():
        rows[label].update({"rounds_us": t, "median_us": sorted(t)[len(t) // 2] if t else None})
    os.makedirs(args.out, exist_ok=True)
    write_json({**run_facts("device", "torch", "triton"), "case": args.case, "floor_us": floor,
                "copy_same_bytes_us": copy,
                "rows": rows}, os.path.join(args.out, "variants.json"))
    print(f"{args.case}: floor {floor:.2f} us, copy {copy:.2f} us")
    for label in sorted(rows, key=lambda k: rows[k].get("median_us") or 1e9):
        r = rows[label]
        if r.get("median_us"):
            print(f"  {r['median_us']:7.2f} us  {r['median_us'] / floor:5.2f}x floor  err {r['rel_err']:.2e}  {label}  "
                  f"(rounds {min(r['rounds_us']):.2f}-{max(r['rounds_us']):.2f})")
        else:
            print(f"  failed: {label}: {r.get('reason') or r.get('rel_err')}")


if __name__ == "__main__":
    main()
