"""GPU prototype (issue 27): is the int4 words GEMV waiting on its group scale and zero loads? The generated
kernel loads them in the K loop as 2-byte loads a thread (one bf16 per byte position, 8 loads an iteration),
which Triton's pipeliner does not turn into cp.async (under 4 bytes), so their DRAM latency is exposed every
iteration. Variants of the generated source (text-patched, the same kernel otherwise):
  gen:        as generated
  contig:     each scale/zero row read as one contiguous [BLOCK_N] vector, split into the 4 byte positions
  prefetch:   contig, the next K step's row loaded one step ahead (registers)
  stages4:    gen with num_stages=4
Each validated against float64 and timed (clean L2 flush, median µs). --check runs small shapes on the CPU."""
import argparse
import importlib.util
import os
import re
import sys
import tempfile

import torch

import fusionsearch as fs
from fusionsearch.codegen.module import generate_module
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
from fusionsearch.plan import fully_fused

sys.path.insert(0, os.getcwd())
from benchmarks.decode_sweep_gpu import with_kernel  # noqa: E402

LOAD = re.compile(r"^(\s+)(ld\d+) = tl\.load\((in\d+)_ptr \+ \(\(kb\) // (\d+)\) \* \3_s0 "
                  r"\+ \(\(idx_w \* 4 \+ (\d)\)\) \* \3_s1\)\[None, :\]$")


def patch(src: str, variant: str) -> str:
    if variant == "gen":
        return src
    if variant == "stages4":
        return src.replace("num_stages=3", "num_stages=4")
    lines = src.split("\n")
    loop = next(i for i, ln in enumerate(lines) if ln.strip().startswith("for k_tile in tl.range("))
    indent = re.match(r"\s*", lines[loop]).group(0)
    steps = int(re.search(r"tl\.range\((\d+)", lines[loop]).group(1))
    first = re.search(r"kb = (.*) \+ k_tile", src).group(1)
    body = indent + "    "
    out, seen, pre, heads = [], {}, [], []
    for ln in lines:
        m = LOAD.match(ln)
        if not m:
            out.append(ln)
            continue
        _, name, arg, div, j = m.groups()
        if arg not in seen:
            row = f"row_{arg}"
            seen[arg] = row
            vec = lambda kb, arg=arg, div=div: (f"tl.load({arg}_ptr + (({kb}) // {div}) * {arg}_s0 + "  # noqa: E731
                                                f"(pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) * {arg}_s1)")
            if variant == "contig":
                out.append(f"{body}{row} = {vec('kb')}")
            else:  # prefetch: row for this step was loaded last step
                pre.append(f"{indent}{row}_next = {vec(first)}")
                heads.append(f"{body}{row} = {row}_next")
                heads.append(f"{body}{row}_next = {vec(f'{first} + tl.minimum(k_tile + 1, {steps - 1})')}")
            out.append(f"{body}{row}_e, {row}_o = tl.split(tl.reshape({row}, (BLOCK_N // 4, 2, 2)))")
            out.append(f"{body}{row}_0, {row}_2 = tl.split({row}_e)")
            out.append(f"{body}{row}_1, {row}_3 = tl.split({row}_o)")
        out.append(f"{body}{name} = {seen[arg]}_{j}[None, :]")
    if variant == "prefetch":
        loop = next(i for i, ln in enumerate(out) if ln.strip().startswith("for k_tile in tl.range("))
        out = out[:loop] + pre + out[loop:loop + 1] + heads + out[loop + 1:]
    return "\n".join(out)


def load_module(src: str):
    path = os.path.join(tempfile.mkdtemp(), "w4_variant.py")
    open(path, "w").write(src)
    spec = importlib.util.spec_from_file_location("w4_variant_" + str(abs(hash(src))), path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    device = "cpu" if args.check else "cuda"
    shapes = [(1, 2048, 512, 128, torch.float32)] if args.check else [(1, 4096, 11008, 128, torch.bfloat16)]
    labels = ["decode fma_acc n256 k64 sk8 w4 s3 pairs words", "decode fma_acc n128 k64 sk8 w4 s3 pairs words"]
    if not args.check:
        from fusionsearch.measure.bench import time_callable
    print("| shape | config | variant | µs | max rel err |")
    print("|---|---|---|---|---|")
    for m, k, n, grp, dtype in shapes:
        g = fs.workload("w4_dequant_mm", dtype=dtype, M=m, K=k, N=n, G=grp)
        inputs = fs.random_inputs(g, seed=0, device=device)
        ref = fs.reference(g, inputs)[0].float()  # eager PyTorch on the same inputs
        for label in labels:
            cfg = DecodeConfig.from_short(label)
            if args.check:
                cfg = DecodeConfig(cfg.block_n, cfg.block_k, 8 if k // cfg.block_k >= 8 else 1, cfg.num_warps,
                                   cfg.num_stages, cfg.product, True, True)
            plan = with_kernel(fully_fused(g), lambda kk, cfg=cfg: DecodeKernel(kk.matmul, kk.prologue_a,
                                                                                kk.prologue_b, kk.epilogue, cfg))
            src = generate_module(plan).source
            for variant in ("gen", "contig", "prefetch", "stages4"):
                try:
                    mod = load_module(patch(src, variant))
                    out = mod.run(*inputs)[0].float()
                    err = ((out - ref).abs().max() / ref.abs().max()).item()
                    timed = lambda mod=mod, inputs=inputs: mod.run(*inputs)  # noqa: E731
                    us = time_callable(timed).median_us if not args.check else 0.0
                    print(f"| M{m} K{k} N{n} G{grp} | {label.removeprefix('decode ')} | {variant} | {us:.1f} | "
                          f"{err:.2e} |", flush=True)
                except Exception as e:  # a variant that does not compile
                    print(f"| M{m} K{k} N{n} G{grp} | {label} | {variant} | failed: {str(e)[:300]} | |", flush=True)


if __name__ == "__main__":
    main()
