"""GPU (issue 52, item 4): what bounds the int8 weight-only linear at one row. gpt-fast's form
`F.linear(x, w.to(x.dtype)) * scales` at Llama-2-7B's shapes, timed in one run with the backend's race timer
(CUDA-graph replay, L2 flushed, interleaved rounds):

- `read`: a Triton kernel that only reads the weight's bytes (one partial sum a program): the time a single
  kernel of this many bytes takes on this GPU, the attainable floor;
- `rows`: a plain Triton GEMV, each program a few whole weight rows (K contiguous, no split-K, no second pass),
  fp32 FMAs into a [rows, K block] accumulator summed once, the scale and the bf16 cast as its epilogue; swept
  over rows a program, K block, warps and stages;
- `decode`: the decode kind's best configs of the 2026-12-07 g run (`dot n64 k128 sk4|sk8 w4 s3`) through the
  package's own plan and codegen;
- `inductor`: Inductor's max-autotune code for the captured graph (what the backend's race compiles);
- `cublas bf16`: PyTorch's matmul on the weight already in bf16 (twice the bytes: its bandwidth, not its time,
  is the comparison).

Run on the GPU machine:  PYTHONPATH=. python benchmarks/gemv_bound_gpu.py --out $OUT [--shapes 4096x12288]
Writes gemv_bound.json after every shape; prints a table per shape, the summary last. `--dry` runs tiny shapes
on the CPU in Triton's interpreter (float32) and checks every kernel against eager."""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from typing import Any

import torch
import triton
import triton.language as tl

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.harness import add_out, comma_list, md_table, out_file, run_facts, write_json  # noqa: E402

SHAPES = ((4096, 12288), (4096, 4096), (4096, 11008), (11008, 4096), (4096, 32000))  # K x N
ROWS, BLOCK_K, WARPS, STAGES = (2, 4, 8), (512, 1024, 2048), (4, 8), (2, 3, 4)
READ_BLOCKS = ((8192, 4), (16384, 8), (32768, 8), (65536, 16))  # bytes a program, warps
DECODE_BEST = ("dot n64 k128 sk4 w4 s3", "dot n64 k128 sk8 w4 s3")


@triton.jit
def gemv_rows(x_ptr, w_ptr, s_ptr, y_ptr, K, ROWS: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
              STAGES: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    acc = tl.zeros((ROWS, BLOCK_K), dtype=tl.float32)
    for k0 in tl.range(0, K, BLOCK_K, num_stages=STAGES):
        ks = k0 + tl.arange(0, BLOCK_K)
        if EVEN_K:
            w = tl.load(w_ptr + rows[:, None] * K + ks[None, :])
            x = tl.load(x_ptr + ks)
        else:
            w = tl.load(w_ptr + rows[:, None] * K + ks[None, :], mask=ks[None, :] < K, other=0)
            x = tl.load(x_ptr + ks, mask=ks < K, other=0)
        acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
    y = tl.sum(acc, axis=1) * tl.load(s_ptr + rows).to(tl.float32)
    tl.store(y_ptr + rows, y.to(y_ptr.dtype.element_ty))


@triton.jit
def read_bytes(w_ptr, out_ptr, numel, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(w_ptr + offs, mask=offs < numel, other=0)
    tl.store(out_ptr + tl.program_id(0), tl.sum(v.to(tl.int32), axis=0))


def linear(x: torch.Tensor, w: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """gpt-fast's WeightOnlyInt8Linear.forward."""
    return torch.nn.functional.linear(x, w.to(x.dtype)) * s


def rows_fn(x: torch.Tensor, w: torch.Tensor, s: torch.Tensor, rows: int, block_k: int, warps: int, stages: int):
    n, k = w.shape
    y = torch.empty(1, n, dtype=x.dtype, device=x.device)

    def run() -> torch.Tensor:
        gemv_rows[(n // rows,)](x, w, s, y, k, ROWS=rows, BLOCK_K=block_k, EVEN_K=k % block_k == 0, STAGES=stages,
                                num_warps=warps)
        return y
    return run


def read_fn(w: torch.Tensor, block: int, warps: int):
    programs = triton.cdiv(w.numel(), block)
    out = torch.empty(programs, dtype=torch.int32, device=w.device)

    def run() -> torch.Tensor:
        read_bytes[(programs,)](w, out, w.numel(), BLOCK=block, num_warps=warps)
        return out
    return run


def rows_configs(n: int) -> list[tuple[int, int, int, int]]:
    return [c for c in itertools.product(ROWS, BLOCK_K, WARPS, STAGES) if n % c[0] == 0]


def dry() -> None:
    """Tiny shapes in the interpreter (float32): every rows config and the read kernel against eager."""
    torch.manual_seed(0)
    for k, n in ((1000, 16), (1024, 8)):
        x = torch.randn(1, k)
        w = torch.randint(-127, 128, (n, k), dtype=torch.int8)
        s = torch.rand(n) / 512
        want = linear(x.double(), w, s.double())
        for rows, bk in itertools.product(ROWS, (256, 512)):
            if n % rows == 0:
                got = rows_fn(x, w, s, rows, bk, 4, 2)()
                assert torch.allclose(got.double(), want, rtol=1e-4, atol=1e-5), (k, n, rows, bk)
        got = read_fn(w, 4096, 4)().sum().item()
        assert got == int(w.to(torch.int64).sum()), (got, int(w.sum()))
    print("dry: every rows config and the read kernel match eager")


def main() -> None:
    ap = argparse.ArgumentParser()
    add_out(ap, "gemv_bound.json")
    ap.add_argument("--shapes", default=",".join(f"{k}x{n}" for k, n in SHAPES), help="KxN, comma-separated")
    ap.add_argument("--finalists", type=int, default=4, help="rows configs raced in rounds")
    ap.add_argument("--dry", action="store_true", help="tiny shapes on the CPU in the interpreter, checked")
    args = ap.parse_args()
    if args.dry:
        dry()
        return
    import fusionsearch as fs
    from benchmarks.decode_sweep_gpu import with_kernel
    from fusionsearch.dynamo.race import inductor_region, interleaved_timer
    from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
    from fusionsearch.measure.bench import measure_ceilings, time_callable
    from fusionsearch.plan import FusedMatmulKernel, fully_fused

    ceilings = measure_ceilings()
    bw = ceilings["bandwidth_bytes_per_s"]
    report: dict[str, Any] = {**run_facts("device", "torch", "triton", date="utc"), "ceilings": ceilings, "cases": []}
    race = interleaved_timer(graphed=True, rounds=5)
    summary = []
    for shape in comma_list(args.shapes):
        k, n = map(int, shape.split("x"))
        t0 = time.time()
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16, generator=gen)
        w = torch.randint(-127, 128, (n, k), device="cuda", dtype=torch.int8, generator=gen)
        s = (torch.rand(n, device="cuda", generator=gen) / 512).to(torch.bfloat16)
        want = linear(x.float(), w, s.float())
        screened = []
        for cfg in rows_configs(n):
            fn = rows_fn(x, w, s, *cfg)
            err = ((fn().float() - want).abs().max() / want.abs().max()).item()
            screened.append({"config": "rows{} k{} w{} s{}".format(*cfg), "rel_err": err,
                             "median_us": time_callable(fn, 5, 20).median_us, "fn": fn})
        reads = [{"config": f"read {b}B w{wp}", "median_us": time_callable(f := read_fn(w, b, wp), 5, 20).median_us,
                  "fn": f} for b, wp in READ_BLOCKS]
        ok = sorted((r for r in screened if r["rel_err"] < 2e-2), key=lambda r: r["median_us"])
        cands = {r["config"]: r["fn"] for r in ok[:args.finalists]}
        cands |= {r["config"]: r["fn"] for r in sorted(reads, key=lambda r: r["median_us"])[:2]}
        g = fs.capture(linear, x, w, s)
        base = fully_fused(g)
        for short in DECODE_BEST:
            cfg = DecodeConfig.from_short(f"decode {short}")
            plan = with_kernel(base, lambda kk, c=cfg: DecodeKernel(kk.matmul, kk.prologue_a, kk.prologue_b,
                                                                    kk.epilogue, c))
            run = fs.compile_plan(plan)
            cands[f"decode {short}"] = lambda run=run, inp=(x, w, s): run(*inp)
        assert any(isinstance(kk, FusedMatmulKernel) for kk in base.kernels)
        theirs = inductor_region(g, [x, w, s], "max-autotune")
        cands["inductor max-autotune"] = lambda theirs=theirs, inp=(x, w, s): theirs(*inp)
        wb = w.to(torch.bfloat16)
        cands["cublas bf16"] = lambda x=x, wb=wb: torch.nn.functional.linear(x, wb)
        raced = race(cands)
        read_us = w.numel() / bw * 1e6
        case = {"k": k, "n": n, "weight_bytes": w.numel(), "copy_weight_us": read_us, "raced": raced,
                "screened": [{kk: v for kk, v in r.items() if kk != "fn"} for r in screened + reads],
                "seconds": time.time() - t0}
        report["cases"].append(case)
        write_json(report, out_file(args.out, "gemv_bound.json"))
        order = sorted(raced.items(), key=lambda kv: kv[1])
        print(f"\n{k}->{n} ({case['seconds']:.0f} s; weight at copy bw {read_us:.1f} us)")
        print("\n".join(md_table(["variant", "us", "% copy bw (bytes it reads)"], (
            [c, f"{t:.1f}", f"{100 * read_us * (2 if c == 'cublas bf16' else 1) / t:.0f}"] for c, t in order))),
            flush=True)
        best_rows = min((t for c, t in raced.items() if c.startswith("rows")), default=None)
        best_read = min((t for c, t in raced.items() if c.startswith("read")), default=None)
        best_dec = min((t for c, t in raced.items() if c.startswith("decode")), default=None)
        summary.append((f"{k}->{n}", read_us, best_read, best_rows, best_dec, raced.get("inductor max-autotune")))

    def f(v: float | None) -> str:
        return "" if v is None else f"{v:.1f}"
    print("\n".join(md_table(["K->N", "weight at copy bw us", "read only us", "rows GEMV us", "decode kind us",
                              "inductor us", "rows x inductor"], (
        [c, f(cp), f(rd), f(rw), f(dc), f(ind), f"{ind / rw:.2f}" if ind and rw else ""]
        for c, cp, rd, rw, dc, ind in summary))))


if __name__ == "__main__":
    main()
