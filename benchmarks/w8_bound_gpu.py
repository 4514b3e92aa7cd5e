"""GPU: what bounds the decode-shaped int8 weight-only matmul y[16, 8192] = x @ (w_int8[8192, 8192].to(bf16) * s[N])?

The search's best plan (the dequant fused as prologue B, 16x64x128 g8 split-K 4, 4 warps, 3 stages) runs in
about 36 us, while a device copy of the same ~67 MB takes about 21 us and the DRAM floor is about 16 us. To
tell whether the weight-load stream itself (tiling, bytes in flight) or the dequant + dot path is the bound,
this times with do_bench (L2 flushed, median) the copy, the plan at split-K 1/2/4/8, and hand-written Triton
kernels on the plan's grid (N tiles x split-K slices, each looping over its K range in BLOCK_K x BLOCK_N weight
tiles): loads only (stream_acc, stream_sum), the plan's math by hand (stream_dot), the same without the scale
(stream_dot_noscale), and on a bf16 weight (bf16_dot, twice the bytes). Each hand-written kernel is checked
against torch before it is timed (exact for the sums, float64 for the dots). Sweeps vary one tiling factor at
a time from the plan's, then combine the best value of each. The loads-only loops set num_stages on tl.range:
without it Triton pipelines (cp.async, like the plan's B loads) only loads that feed a tl.dot.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/w8_bound_gpu.py --out $OUT
Writes w8_bound.json under --out; prints one line per variant, then a short table last.
CPU smoke test (correctness checks only, fp16 in place of bf16, K=2048 N=512):
    TRITON_INTERPRET=1 PYTHONPATH=. python benchmarks/w8_bound_gpu.py --small --device cpu
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
import triton
import triton.language as tl

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen.runtime import compile_plan
from fusionsearch.costmodel.analytic import fits
from fusionsearch.errors import failure_reason

M = 16
PLAN_CFG = P.TileConfig(block_m=16, block_n=64, block_k=128, group_m=8, split_k=4, num_warps=4, num_stages=3)
FAMILIES = {
    "stream_acc": "loads only: int8 tiles read as int32 words (4 columns each), added elementwise into a tile "
                  "accumulator, one column reduction after the loop; stores one word-sum per 4 columns per split",
    "stream_sum": "loads + a per-tile reduction: int8 tile -> int32, tl.sum over K every iteration; stores one "
                  "int32 column sum per split",
    "stream_dot": "the plan's math by hand: int8 -> bf16 -> * scale -> tl.dot with the 16 x BLOCK_K x tile, fp32 "
                  "accumulator, split-K partials stored to an fp32 workspace (the reduce is not timed)",
    "stream_dot_noscale": "stream_dot without the scale multiply",
    "bf16_dot": "stream_dot's loop on a bf16 weight (w.to(bf16) * s precomputed): twice the weight bytes, no dequant",
}
DOT_TOL = 1e-2  # relative Frobenius error against float64 (bf16 rounding of the scaled weight is ~2^-9)


@triton.jit
def stream_sum_kernel(w_ptr, out_ptr, N: tl.constexpr, K_TILES: tl.constexpr, BLOCK_K: tl.constexpr,
                      BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    """The loop's num_stages is explicit: Triton pipelines a load that feeds no tl.dot (cp.async into
    shared memory, STAGES - 1 tiles ahead, as the plan's B loads) only when the loop asks; with STAGES 1
    the loads go straight to registers."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    idx_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), dtype=tl.int32)
    for k_tile in tl.range(K_TILES, num_stages=STAGES):
        idx_k = (pid_k * K_TILES + k_tile) * BLOCK_K + tl.arange(0, BLOCK_K)
        w = tl.load(w_ptr + idx_k[:, None] * N + idx_n[None, :])
        acc += tl.sum(w.to(tl.int32), axis=0)
    tl.store(out_ptr + pid_k * N + idx_n, acc)


@triton.jit
def stream_acc_kernel(w_ptr, out_ptr, NW: tl.constexpr, K_TILES: tl.constexpr, BLOCK_K: tl.constexpr,
                      BLOCK_NW: tl.constexpr, STAGES: tl.constexpr):
    """w_ptr: the int8 weight viewed as int32 [K, N / 4]; a BLOCK_K x BLOCK_NW word tile is the plan's
    BLOCK_K x (4 * BLOCK_NW) byte tile. Wrapping int32 adds; no cross-thread work inside the loop. The
    loop's num_stages as in stream_sum_kernel."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    idx_n = pid_n * BLOCK_NW + tl.arange(0, BLOCK_NW)
    acc = tl.zeros((BLOCK_K, BLOCK_NW), dtype=tl.int32)
    for k_tile in tl.range(K_TILES, num_stages=STAGES):
        idx_k = (pid_k * K_TILES + k_tile) * BLOCK_K + tl.arange(0, BLOCK_K)
        acc += tl.load(w_ptr + idx_k[:, None] * NW + idx_n[None, :])
    tl.store(out_ptr + pid_k * NW + idx_n, tl.sum(acc, axis=0))


@triton.jit
def stream_dot_kernel(x_ptr, w_ptr, s_ptr, ws_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                      K_TILES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      SCALE: tl.constexpr):
    """As the plan's template: the scale row loaded once before the loop, the weight tile converted to the
    activation dtype, multiplied by the scale and rounded back, tl.dot into an fp32 accumulator; the split's
    partial tile to ws[pid_k, M, N]. With w_ptr a bf16 weight the conversion is a no-op."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    idx_m = tl.arange(0, BLOCK_M)
    idx_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if SCALE:
        s = tl.load(s_ptr + idx_n[None, :])
    for k_tile in range(K_TILES):
        idx_k = (pid_k * K_TILES + k_tile) * BLOCK_K + tl.arange(0, BLOCK_K)
        a = tl.load(x_ptr + idx_m[:, None] * K + idx_k[None, :])
        b = tl.load(w_ptr + idx_k[:, None] * N + idx_n[None, :]).to(a.dtype)
        if SCALE:
            b = (b * s).to(a.dtype)
        acc = tl.dot(a, b, acc)
    tl.store(ws_ptr + (pid_k * M + idx_m[:, None]) * N + idx_n[None, :], acc)


@dataclass(frozen=True)
class Tiling:
    """A hand-written kernel's tiling: the plan's grid (N / bn tiles x split) and loop (K / bk / split tiles)."""

    bn: int = PLAN_CFG.block_n
    bk: int = PLAN_CFG.block_k
    split: int = PLAN_CFG.split_k
    warps: int = PLAN_CFG.num_warps
    stages: int = PLAN_CFG.num_stages

    def label(self) -> str:
        return f"n{self.bn} k{self.bk} sk{self.split} w{self.warps} s{self.stages}"


PLAN_TILING = Tiling()
# One factor at a time away from the plan's tiling (block N, block K, split-K, warps, stages).
SWEEP = {"bn": (64, 128, 256), "bk": (64, 128, 256), "split": (1, 2, 4, 8), "warps": (4, 8), "stages": (3, 1)}


def one_at_a_time(base: Tiling) -> list[Tiling]:
    out = [base]
    for factor, values in SWEEP.items():
        out += [replace(base, **{factor: v}) for v in values if v != getattr(base, factor)]
    return out


def plan_label(cfg: P.TileConfig) -> str:
    return (f"n{cfg.block_n} k{cfg.block_k} sk{cfg.split_k} w{cfg.num_warps} s{cfg.num_stages} "
            f"(m{cfg.block_m} g{cfg.group_m})")


class Bench:
    """The tensors, references and result rows of one run."""

    def __init__(self, args: argparse.Namespace, device: torch.device, dt: torch.dtype, k: int, n: int) -> None:
        self.args, self.device, self.dt, self.k, self.n = args, device, dt, k, n
        self.timing = not args.small
        self.deadline = time.time() + args.budget_s
        self.g = fs.workload("w8_dequant_mm", dtype=dt, M=M, K=k, N=n)
        self.x, self.w, self.s = fs.random_inputs(self.g, seed=0, device=device)
        self.w32 = self.w.view(torch.int32)  # [K, N / 4], the same bytes
        self.wb: torch.Tensor | None = None  # the bf16 weight, made when bf16_dot first needs it
        self._refs: dict[Any, torch.Tensor] = {}
        self.rows: list[dict[str, Any]] = []
        self.copy_us: float | None = None
        self.weight_bytes = self.w.numel() * self.w.element_size()
        self.copy_bytes = self.weight_bytes + self.x.numel() * dt.itemsize + M * n * dt.itemsize

    # ---- references --------------------------------------------------------------------------------
    def ref(self, key: Any) -> torch.Tensor:
        if key not in self._refs:
            kind = key[0] if isinstance(key, tuple) else key
            if kind == "sum":
                split = key[1]
                self._refs[key] = self.w.view(split, self.k // split, self.n).to(torch.int64).sum(1)
            elif kind == "acc":
                split = key[1]
                s = self.w32.view(split, self.k // split, self.n // 4).to(torch.int64).sum(1)
                self._refs[key] = torch.remainder(s + 2**31, 2**32) - 2**31  # int32 wrap-around
            elif kind == "scaled":
                self._refs[key] = self.x.double() @ (self.w.double() * self.s.double())
            elif kind == "noscale":
                self._refs[key] = self.x.double() @ self.w.double()
            elif kind == "bf16":
                self._refs[key] = self.x.double() @ self.bf16_weight().double()
        return self._refs[key]

    def bf16_weight(self) -> torch.Tensor:
        if self.wb is None:
            self.wb = (self.w.to(self.dt) * self.s).contiguous()
        return self.wb

    # ---- one variant -------------------------------------------------------------------------------
    def time_us(self, fn: Callable[[], object]) -> float:
        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3

    def record(self, row: dict[str, Any], total_bytes: int | None = None, weight_bytes: int | None = None) -> None:
        us = row.get("us")
        wb = weight_bytes or self.weight_bytes
        row.setdefault("weight_bytes", wb)
        row.setdefault("total_bytes", total_bytes)
        if us:
            row["weight_gbs"] = wb / us / 1e3
            row["total_gbs"] = total_bytes / us / 1e3 if total_bytes else None
            row["x_copy"] = us / self.copy_us if self.copy_us else None
        self.rows.append(row)
        status = f"{us:8.2f} us" if us else ("ok (not timed)" if row.get("ok") else f"FAILED {row.get('error', '')}")
        extra = "".join(f"  {k} {row[k]}" for k in ("regs", "spills", "shared", "cp_async", "tma") if k in row)
        err = f"  err {row['err']:.2e}" if isinstance(row.get("err"), float) else ""
        print(f"{row['family']:<19} {row['config']:<34} {status}{err}{extra}", flush=True)

    def over_budget(self, family: str, label: str) -> bool:
        if time.time() <= self.deadline:
            return False
        self.record({"family": family, "config": label, "ok": False,
                     "error": f"skipped: past --budget-s {self.args.budget_s:.0f} s"})
        return True

    def hand(self, family: str, t: Tiling) -> dict[str, Any] | None:
        """Check, then time, one hand-written kernel; the row (also kept in self.rows)."""
        k, n = self.k, self.n
        row: dict[str, Any] = {"family": family, "config": t.label(), **asdict(t), "ok": False}
        if self.over_budget(family, t.label()):
            return None
        if n % t.bn or k % (t.bk * t.split):
            row["error"] = f"skipped: N={n} or K={k} not a multiple of the tile (bn {t.bn}, bk*split {t.bk * t.split})"
            self.record(row)
            return row
        k_tiles = k // (t.bk * t.split)
        grid = (n // t.bn, t.split)
        row.update(ctas=grid[0] * grid[1], k_tiles=k_tiles, tile_bytes=t.bk * t.bn * (2 if family == "bf16_dot" else 1))
        opts = {"num_warps": t.warps, "num_stages": t.stages}
        weight_bytes = self.weight_bytes
        try:
            if family == "stream_sum":
                out = torch.full((t.split, n), -1, dtype=torch.int32, device=self.device)

                def fn() -> Any:
                    return stream_sum_kernel[grid](self.w, out, N=n, K_TILES=k_tiles, BLOCK_K=t.bk, BLOCK_N=t.bn,
                                                   STAGES=t.stages, **opts)

                total = weight_bytes + out.numel() * 4
                ref = self.ref(("sum", t.split))
            elif family == "stream_acc":
                out = torch.full((t.split, n // 4), -1, dtype=torch.int32, device=self.device)

                def fn() -> Any:
                    return stream_acc_kernel[grid](self.w32, out, NW=n // 4, K_TILES=k_tiles, BLOCK_K=t.bk,
                                                   BLOCK_NW=t.bn // 4, STAGES=t.stages, **opts)

                total = weight_bytes + out.numel() * 4
                ref = self.ref(("acc", t.split))
            else:
                scale = family == "stream_dot"
                w = self.bf16_weight() if family == "bf16_dot" else self.w
                weight_bytes = w.numel() * w.element_size()
                out = torch.full((t.split, M, n), float("nan"), dtype=torch.float32, device=self.device)

                def fn() -> Any:
                    return stream_dot_kernel[grid](self.x, w, self.s, out, M=M, N=n, K=k, K_TILES=k_tiles, BLOCK_M=M,
                                                   BLOCK_N=t.bn, BLOCK_K=t.bk, SCALE=scale, **opts)

                total = weight_bytes + self.x.numel() * self.dt.itemsize + out.numel() * 4 + (n * 2 if scale else 0)
                ref = self.ref({"stream_dot": "scaled", "stream_dot_noscale": "noscale", "bf16_dot": "bf16"}[family])
            compiled = fn()
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            row.update(kernel_info(compiled))
            if family in ("stream_sum", "stream_acc"):
                bad = int((out.to(torch.int64) != ref).sum())
                row["err"] = float(bad)
                if bad:
                    row["error"] = f"invalid: {bad} of {out.numel()} sums differ from torch"
            else:
                err = rel_err(out.sum(0), ref)
                row["err"] = err
                if not err <= DOT_TOL:
                    row["error"] = f"invalid: relative error {err:.3g} > {DOT_TOL} against float64"
            if "error" not in row:
                row["ok"] = True
                if self.timing:
                    row["us"] = self.time_us(fn)
        except Exception as e:
            row["error"] = failure_reason(e, 300)
        self.record(row, total, weight_bytes)
        return row

    def plan(self, split: int) -> dict[str, Any] | None:
        """The project's plan: the dequant nodes fused as prologue B, PLAN_CFG with `split` split-K slices."""
        cfg = replace(PLAN_CFG, split_k=split)
        label = plan_label(cfg)
        if self.over_budget("plan", label):
            return None
        row: dict[str, Any] = {"family": "plan", "config": label, **asdict(cfg), "ok": False}
        total = self.weight_bytes + (self.x.numel() + self.s.numel() + M * self.n) * self.dt.itemsize
        g = self.g
        mm = g.nodes_of_kind("template")[0]
        try:
            if not fits(g, mm, cfg):
                raise ValueError(f"does not fit (costmodel.analytic.fits) for M={M} K={self.k} N={self.n}")
            decisions = {nd: ("prologue", mm, "B") for nd in g.nodes_of_kind("pointwise")}
            plan = P.build_plan(g, decisions, {mm: cfg})
            row["plan"] = plan.describe()
            mod = compile_plan(plan).module
            inputs = [self.x, self.w, self.s]
            y = mod.run(*inputs)[0]
            if self.device.type == "cuda":
                torch.cuda.synchronize()
            row["err"] = err = rel_err(y, self.ref("scaled"))
            if not err <= DOT_TOL:
                row["error"] = f"invalid: relative error {err:.3g} > {DOT_TOL} against float64"
            else:
                row["ok"] = True
                row.update(plan_kernel_info(mod))
                if self.timing:
                    row["us"] = self.time_us(lambda: mod.run(*inputs))
        except Exception as e:
            row["error"] = failure_reason(e, 300)
        self.record(row, total)
        return row

    def copy(self) -> None:
        src = torch.empty(self.copy_bytes, dtype=torch.uint8, device=self.device)
        dst = torch.empty_like(src)
        row: dict[str, Any] = {"family": "copy", "config": f"{self.copy_bytes / 1e6:.1f} MB (w + x + y)", "ok": True}
        if self.timing:
            row["us"] = self.copy_us = self.time_us(lambda: dst.copy_(src))
        # weight GB/s of the copy: the bytes it reads; total: read + write
        self.record(row, 2 * self.copy_bytes, self.copy_bytes)

    # ---- picking ---------------------------------------------------------------------------------
    def family_rows(self, family: str) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["family"] == family and r.get("ok") and "bn" in r]

    def best(self, family: str) -> Tiling | None:
        """The fastest checked tiling of a family; without timings (--small) the last checked one, so that
        the follow-up variants still run."""
        rows = self.family_rows(family)
        if not rows:
            return None
        r = min(rows, key=lambda r: r["us"]) if self.timing else rows[-1]
        return Tiling(r["bn"], r["bk"], r["split"], r["warps"], r["stages"])

    def combined(self, family: str, base: Tiling) -> Tiling:
        """For each factor, its best value among the one-at-a-time variants around `base` (without timings:
        the last one checked, to exercise the path)."""
        rows = self.family_rows(family)
        picks = {}
        for factor in SWEEP:
            others = [f for f in SWEEP if f != factor]
            cands = [r for r in rows if all(r[f] == getattr(base, f) for f in others)]
            if not cands:
                picks[factor] = getattr(base, factor)
                continue
            r = min(cands, key=lambda r: r["us"]) if self.timing else cands[-1]
            picks[factor] = r[factor]
        return Tiling(**picks)


def rel_err(y: torch.Tensor, ref: torch.Tensor) -> float:
    y = y.double()
    if not bool(torch.isfinite(y).all()):
        return float("inf")
    return float((y - ref).norm() / ref.norm().clamp_min(1e-30))


def kernel_info(compiled: Any) -> dict[str, Any]:
    """Registers, spills, shared memory and the async copies in the PTX of a launched kernel (GPU only)."""
    if compiled is None or not hasattr(compiled, "asm"):
        return {}
    info: dict[str, Any] = {}
    try:
        info["regs"], info["spills"] = compiled.n_regs, compiled.n_spills
        info["shared"] = compiled.metadata.shared
        ptx = compiled.asm["ptx"]
        info["cp_async"] = ptx.count("cp.async.cg.") + ptx.count("cp.async.ca.")  # pipelined pointer loads
        info["tma"] = ptx.count("cp.async.bulk")
        info["ld_global"] = ptx.count("ld.global")
    except Exception as e:
        info["info_error"] = failure_reason(e, 120)
    return info


def plan_kernel_info(mod: Any) -> dict[str, Any]:
    """kernel_info of the plan module's compiled Triton kernel(s) (the first found), from Triton's caches."""
    try:
        for obj in vars(mod).values():
            if isinstance(obj, triton.runtime.jit.JITFunction):
                for cache in obj.device_caches.values():
                    for compiled in cache[0].values():
                        return kernel_info(compiled)
    except Exception as e:
        return {"info_error": failure_reason(e, 120)}
    return {}


def fmt(v: float | None, spec: str) -> str:
    return format(v, spec) if isinstance(v, (int, float)) else "-"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    ap.add_argument("--small", action="store_true",
                    help="K=2048 N=512 and correctness checks only (no timing): the CPU smoke test")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default=None,
                    help="activation dtype (default bf16 on a GPU, fp16 on the CPU: the interpreter miscomputes bf16)")
    ap.add_argument("--budget-s", type=float, default=80.0,
                    help="start no new variant after this many seconds (the run stays under ~90 s)")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        ap.error("the CPU device needs TRITON_INTERPRET=1")
    if device.type == "cpu" and not args.small:
        ap.error("timing needs a GPU; on the CPU pass --small (correctness checks only)")
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype or ("bf16" if device.type == "cuda" else "fp16")]
    k, n = (2048, 512) if args.small else (8192, 8192)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    b = Bench(args, device, dt, k, n)
    path = os.path.join(args.out, "w8_bound.json")

    def save() -> None:
        report = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (interpreter)",
                  "torch": torch.__version__, "triton": triton.__version__, "dtype": str(dt), "M": M, "K": k, "N": n,
                  "timed": b.timing, "copy_us": b.copy_us, "copy_bytes": b.copy_bytes, "weight_bytes": b.weight_bytes,
                  "plan_config": asdict(PLAN_CFG), "families": FAMILIES, "rows": b.rows, "seconds": time.time() - t0}
        with open(path, "w") as f:
            json.dump(report, f, indent=1, default=str)

    print(f"w8 bound: M={M} K={k} N={n} {dt} on {device}, {'timed' if b.timing else 'checks only'}", flush=True)
    # 1. the most telling comparison first: copy, the plan, and every hand-written kernel on the plan's tiling
    b.copy()
    b.plan(PLAN_CFG.split_k)
    for family in FAMILIES:
        b.hand(family, PLAN_TILING)
    save()
    # 2. the plan at other split-K; one factor at a time for the loads-only kernels and stream_dot
    for split in (1, 2, 8):
        b.plan(split)
    sweeps = one_at_a_time(PLAN_TILING)[1:]
    for family in ("stream_acc", "stream_sum", "stream_dot"):
        for t in sweeps:
            b.hand(family, t)
        save()
    # 3. each swept family on its best factors combined; the dots on the best loads-only tiling; the
    #    no-scale and bf16 references on the dot's and the stream's best tilings
    done = {(r["family"], r["config"]) for r in b.rows}
    for family in ("stream_acc", "stream_sum", "stream_dot"):
        t = b.combined(family, PLAN_TILING)
        if (family, t.label()) not in done:
            b.hand(family, t)
            done.add((family, t.label()))
    stream_best, dot_best = b.best("stream_acc"), b.best("stream_dot")
    for family in ("stream_dot", "stream_dot_noscale", "bf16_dot"):
        for t in (dot_best, stream_best):
            if t is not None and (family, t.label()) not in done:
                b.hand(family, t)
                done.add((family, t.label()))
    save()

    failed = [r for r in b.rows if not r.get("ok")]
    checked = [r for r in b.rows if r.get("ok") and r["family"] != "copy"]
    print(f"\n{len(checked)} variants checked ok, {len(failed)} failed or skipped, {time.time() - t0:.0f} s; "
          f"wrote {path}")
    for r in failed:
        print(f"   {r['family']} {r['config']}: {r.get('error', '')[:150]}")
    # the short table: the copy, the plan rows, and per hand-written family its best and the plan's tiling
    table = [r for r in b.rows if r["family"] in ("copy", "plan") and r.get("ok")]
    for family in FAMILIES:
        rows = b.family_rows(family)
        at_plan = [r for r in rows if r["config"] == PLAN_TILING.label()]
        timed = [r for r in rows if r.get("us")]
        best = [min(timed, key=lambda r: r["us"])] if timed else []
        for r in best + [r for r in at_plan if r not in best]:
            table.append({**r, "family": family + (" (best)" if r in best else " (plan tiling)")})
    if not b.timing:
        print(f"checks only: {len(checked)} ok; no timings (--small)")
        if failed:
            raise SystemExit(1)
        return
    print("\n| variant | config | us | weight GB/s | total GB/s | x copy | regs/spills |")
    print("|---|---|---|---|---|---|---|")
    for r in table:
        rs = f"{r['regs']}/{r['spills']}" if "regs" in r else "-"
        print(f"| {r['family']} | {r['config']} | {fmt(r.get('us'), '.1f')} | {fmt(r.get('weight_gbs'), '.0f')} | "
              f"{fmt(r.get('total_gbs'), '.0f')} | {fmt(r.get('x_copy'), '.2f')} | {rs} |")


if __name__ == "__main__":
    main()
