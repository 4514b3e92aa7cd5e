"""CPU (issue 27): bytes in flight and achieved bandwidth of the kernels behind the goals not met, from the GPU
runs committed under benchmarks/results/ (their measured times) and the kernels compiled here for sm_90 (their
registers and shared memory, so how many CTAs a multiprocessor holds).

Per kernel: CTAs launched; CTAs an SM holds (H100: 65,536 registers, 227 KiB shared memory, 2,048 threads, 32
CTAs); the weight bytes one CTA loads a K step; the bytes in flight a multiprocessor can have, CTAs held x the
K steps prefetched (num_stages - 1, at least 1) x that tile; the whole GPU's, at most what the launched CTAs
hold; the bandwidth achieved (the floor's bytes over the measured time); and the latency Little's law gives for
that pair (bytes in flight / bandwidth): what a load would take to make that bandwidth all that in-flight
bytes can give. A latency far above the GPU's loaded DRAM latency (~1 us) says the bytes in flight are not what
bounds the kernel.

    python benchmarks/bytes_in_flight.py        # output in benchmarks/results/cpu-2026-12-05d-bytes-in-flight/"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen.resources import plan_resources
from fusionsearch.costmodel.analytic import least_bytes
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
from fusionsearch.kinds.grouped_matmul import GroupedKernel
from fusionsearch.kinds.grouped_matmul.source import blocks_bound, routing
from fusionsearch.plan import FusedMatmulKernel, Plan, TileConfig
from fusionsearch.plan.matmul import problem

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.harness import md_table  # noqa: E402

SMS, REGISTERS, SHARED, THREADS, CTAS = 132, 65536, 227 * 1024, 2048, 32  # H100 SXM, sm_90
RESULTS = "benchmarks/results"
# (case, workload, shape, the plan's matmul config, measured us, where it was measured)
KERNELS = [
    ("w8 M1", "w8_dequant_mm", {"M": 1, "K": 8192, "N": 8192}, "decode fma n256 k16 sk16 w8 s4", 37.1,
     "h100-2026-12-05b-suite-rows/cases-10-13"),
    ("w8 M4", "w8_dequant_mm", {"M": 4, "K": 8192, "N": 8192}, "16x64x256 g8 sk2 w4 s3", 41.0,
     "h100-2026-12-05b-suite-rows/cases-10-13"),
    ("w8 M16", "w8_dequant_mm", {"M": 16, "K": 8192, "N": 8192}, "16x64x256 g8 sk2 w4 s3", 41.5,
     "h100-2026-12-05b-decode-grouped/sweep"),
    ("w4 M1", "w4_dequant_mm", {"M": 1, "K": 4096, "N": 11008, "G": 128}, "decode dot_t n64 k128 sk4 w4 s3 pairs",
     35.2, "h100-2026-12-05d-w4-pairs/suite"),
    ("w4 M16", "w4_dequant_mm", {"M": 16, "K": 4096, "N": 11008, "G": 128}, "decode dot_t n128 k128 sk8 w8 s3 pairs",
     41.9, "h100-2026-12-05d-w4-pairs/suite"),
]
T512 = "h100-2026-12-05b-decode-grouped/grouped-T512/sweep.json"  # the fastest T512 plan, each kernel timed alone


def with_config(g: fs.OpGraph, label: str) -> Plan:
    base = P.fully_fused(g)
    if label.startswith("decode "):
        cfg = DecodeConfig.from_short(label)
        kernels = tuple(DecodeKernel(k.matmul, k.prologue_a, k.prologue_b, k.epilogue, cfg)
                        if isinstance(k, FusedMatmulKernel) else k for k in base.kernels)
        return dataclasses.replace(base, kernels=kernels).check()
    return base.with_config(TileConfig.from_short(label))


def figures(g: fs.OpGraph, plan: Plan, index: int, measured_us: float, floor_bytes: int) -> dict[str, float]:
    k = plan.kernels[index]
    res = plan_resources(plan)[index]
    cfg = k.config
    p = problem(g, k.matmul)
    weight = g.node(g.node(k.prologue_b[0]).inputs[0]).dtype.itemsize if k.prologue_b else 2
    rows_k = cfg.block_k // 2 if getattr(cfg, "pairs", False) else cfg.block_k  # the pairs form: bytes of 2 nibbles
    tile = rows_k * cfg.block_n * weight
    threads = 32 * cfg.num_warps
    held = min(REGISTERS // max(1, res.registers * threads), SHARED // max(1, res.shared_bytes),
               THREADS // threads, CTAS)
    split = max(1, min(cfg.split_k, math.ceil(p.k / cfg.block_k)))
    if isinstance(k, GroupedKernel):  # (column blocks, K slices, blocks of pairs): the bound it launches
        launched = math.ceil(routing(g, k.matmul).cols / cfg.block_n) * split * blocks_bound(routing(g, k.matmul),
                                                                                             cfg.block_m)
    else:
        m_blocks = 1 if isinstance(k, DecodeKernel) else math.ceil(p.m / cfg.block_m)
        launched = math.ceil(p.n / cfg.block_n) * split * p.batch * m_blocks
    steps = math.ceil(p.k / cfg.block_k / split)
    per_sm = held * max(1, min(cfg.num_stages - 1, steps)) * tile
    gpu = min(per_sm * SMS, launched * max(1, min(cfg.num_stages - 1, steps)) * tile)
    bandwidth = floor_bytes / (measured_us * 1e-6)
    return {"ctas": launched, "registers": res.registers, "shared_kib": res.shared_bytes / 1024, "ctas_per_sm": held,
            "tile_bytes": tile, "in_flight_per_sm_kib": per_sm / 1024, "in_flight_mib": gpu / 2**20,
            "measured_us": measured_us, "tb_per_s": bandwidth / 1e12, "little_latency_us": gpu / bandwidth * 1e6}


def main() -> None:
    out = os.path.join(RESULTS, "cpu-2026-12-05d-bytes-in-flight")
    os.makedirs(out, exist_ok=True)
    rows = []
    for case, name, shape, label, us, where in KERNELS:
        g = fs.workload(name, **shape)
        plan = with_config(g, label)
        rows.append({"case": case, "config": label, "measured_in": where,
                     **figures(g, plan, 0, us, least_bytes(g))})
    sweep = json.load(open(os.path.join(RESULTS, T512)))["cases"][0]
    best = sweep["others"]["fastest, SiLU*up standalone"]
    g = fs.workload("moe_ffn", T=512, D=4096, H=14336, E=8)
    plan = Plan.from_json(best["plan"], g)
    touched = sweep["floor_bytes"] // 3  # each of the three bmms: a third of the layer's floor (its experts)
    for i, k in enumerate(plan.kernels):
        if isinstance(k, FusedMatmulKernel):
            rows.append({"case": f"moe T512 {k.matmul}", "config": k.config.short(), "measured_in": T512,
                         **figures(g, plan, i, best["kernels_us"][i], touched)})
    with open(os.path.join(out, "bytes_in_flight.json"), "w") as f:
        json.dump(rows, f, indent=1)
    table = md_table(["case", "config", "CTAs", "regs", "smem KiB", "CTAs/SM", "tile B", "in flight/SM KiB",
                      "in flight MiB", "us", "TB/s", "Little latency us"],
                     [[r["case"], r["config"], r["ctas"], r["registers"], f"{r['shared_kib']:.0f}", r["ctas_per_sm"],
                       r["tile_bytes"], f"{r['in_flight_per_sm_kib']:.0f}", f"{r['in_flight_mib']:.1f}",
                       f"{r['measured_us']:.1f}", f"{r['tb_per_s']:.2f}", f"{r['little_latency_us']:.2f}"]
                      for r in rows])
    text = "\n".join(table)
    with open(os.path.join(out, "output.md"), "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
