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

    python benchmarks/bytes_in_flight.py        # output in benchmarks/results/cpu-2026-12-06l-bytes-in-flight/"""

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
from fusionsearch.plan import FusedMatmulKernel, Plan, TileConfig
from fusionsearch.plan.matmul import problem

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.harness import md_table  # noqa: E402

SMS, REGISTERS, SHARED, THREADS, CTAS = 132, 65536, 227 * 1024, 2048, 32  # H100 SXM, sm_90
RESULTS = "benchmarks/results"
OUT = "cpu-2026-12-07c-bytes-in-flight"
# (case, workload, shape, the searched plan's matmul config, its measured us, the suite run it comes from): the
# plans of the latest suite rows of the goals not met (H100, clean L2 flush, 5 interleaved rounds).
KERNELS = [
    ("w8 M1", "w8_dequant_mm", {"M": 1, "K": 8192, "N": 8192}, "decode dot_t n128 k64 sk8 w4 s3", 29.3,
     "h100-2026-12-07c-suite-decode"),
    ("w8 M4", "w8_dequant_mm", {"M": 4, "K": 8192, "N": 8192}, "decode dot_t n128 k128 sk4 w4 s3", 29.9,
     "h100-2026-12-07c-suite-decode"),
    ("w8 M16", "w8_dequant_mm", {"M": 16, "K": 8192, "N": 8192}, "decode dot_t n128 k64 sk4 w4 s4", 29.9,
     "h100-2026-12-07c-suite-decode"),
    ("w4 M1", "w4_dequant_mm", {"M": 1, "K": 4096, "N": 11008, "G": 128},
     "decode dot n256 k128 sk3 w4 s3 pairs words rows", 17.5, "h100-2026-12-07c-suite-decode"),
    ("w4 M16", "w4_dequant_mm", {"M": 16, "K": 4096, "N": 11008, "G": 128},
     "decode dot n256 k128 sk3 w4 s3 pairs words rows", 19.4, "h100-2026-12-07c-suite-decode"),
    ("mm_bias_gelu M16", "mm_bias_gelu", {"M": 16, "K": 4096, "N": 4096}, "16x32x256 g8 sk1 w4 s4", 16.1,
     "h100-2026-12-07c-suite-decode"),
]
# Nsight Compute's DRAM read bandwidth of the same kernel (TB/s; the table it comes from, --clock-control none):
# by (case, config), as only the same kernel's figure applies
NCU = {
    ("w8 M1", "decode dot_t n128 k64 sk8 w4 s3"): (2.30, "h100-2026-12-06e-ncu-decode-collect/ncu/table.md"),
    ("w8 M16", "decode dot_t n128 k64 sk8 w4 s3"): (2.15, "h100-2026-12-06e-ncu-decode-collect/ncu/table.md"),
    ("w4 M1", "decode fma_acc n256 k64 sk8 w4 s3 pairs words"): (1.31,
                                                                 "h100-2026-12-06g-w4-words/3-ncu-collect/table.txt"),
}


def with_config(g: fs.OpGraph, label: str) -> Plan:
    base = P.fully_fused(g)
    if label.startswith("decode "):
        cfg = DecodeConfig.from_short(label)
        kernels = tuple(DecodeKernel(k.matmul, k.prologue_a, k.prologue_b, k.epilogue, cfg)
                        if isinstance(k, FusedMatmulKernel) else k for k in base.kernels)
        return dataclasses.replace(base, kernels=kernels).check()
    return base.with_config(TileConfig.from_short(label))


def figures(g: fs.OpGraph, plan: Plan, measured_us: float, floor_bytes: int) -> dict[str, float]:
    """The figures of `plan`'s one kernel, a fused matmul."""
    k = plan.kernels[0]
    res = plan_resources(plan)[0]
    cfg = k.config
    p = problem(g, k.matmul)
    weight = g.node(g.node(k.prologue_b[0]).inputs[0]).dtype.itemsize if k.prologue_b else 2
    rows_k = cfg.block_k // 2 if getattr(cfg, "pairs", False) else cfg.block_k  # the pairs form: bytes of 2 nibbles
    tile = rows_k * cfg.block_n * weight
    threads = 32 * cfg.num_warps
    held = min(REGISTERS // max(1, res.registers * threads), SHARED // max(1, res.shared_bytes),
               THREADS // threads, CTAS)
    split = max(1, min(cfg.split_k, math.ceil(p.k / cfg.block_k)))
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
    out = os.path.join(RESULTS, OUT)
    os.makedirs(out, exist_ok=True)
    rows = []
    for case, name, shape, label, us, measured_in in KERNELS:
        g = fs.workload(name, **shape)
        plan = with_config(g, label)
        ncu = NCU.get((case, label))
        rows.append({"case": case, "config": label, "measured_in": measured_in,
                     **figures(g, plan, us, least_bytes(g)),
                     "ncu_dram_read_tb_per_s": ncu[0] if ncu else None, "ncu_in": ncu[1] if ncu else None})
    with open(os.path.join(out, "bytes_in_flight.json"), "w") as f:
        json.dump(rows, f, indent=1)
    table = md_table(["case", "config", "CTAs", "regs", "smem KiB", "CTAs/SM", "tile B", "in flight/SM KiB",
                      "in flight MiB", "us", "TB/s", "ncu TB/s", "Little latency us"],
                     [[r["case"], r["config"], r["ctas"], r["registers"], f"{r['shared_kib']:.0f}", r["ctas_per_sm"],
                       r["tile_bytes"], f"{r['in_flight_per_sm_kib']:.0f}", f"{r['in_flight_mib']:.1f}",
                       f"{r['measured_us']:.1f}", f"{r['tb_per_s']:.2f}",
                       f"{r['ncu_dram_read_tb_per_s']:.2f}" if r.get("ncu_dram_read_tb_per_s") else "",
                       f"{r['little_latency_us']:.2f}"]
                      for r in rows])
    text = "\n".join(table)
    with open(os.path.join(out, "output.md"), "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
