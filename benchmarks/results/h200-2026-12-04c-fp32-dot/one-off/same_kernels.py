"""The same fp32 matmul template kernels (same graph, plan, kernel) timed with the IEEE dot (2026-12-03/04
collection) and with tf32x3 (the 2026-12-04 re-collection): the ratio's distribution, and the extremes."""

import math
import sys
from collections import defaultdict

from fusionsearch.datasets.measurements import fp32_dot_of, read_rows

rows = read_rows(sys.argv[1] if len(sys.argv) > 1 else "fusionsearch/datasets/data/h200-measurements.jsonl.gz")
times: dict = defaultdict(dict)
info = {}
for r in rows:
    f = r["features"]
    if r["status"] == "ok" and f.get("kind_template") == 1 and f.get("a_bits") == 32:
        key = (r["graph_id"], r["plan_id"], r["kernel_index"])
        times[key][fp32_dot_of(r)] = r["time_us"]
        info[key] = r
items = sorted((v["ieee"] / v["tf32x3"], k) for k, v in times.items() if len(v) == 2)
ratios = [x for x, _ in items]
n = len(ratios)
print(f"{n} fp32 template kernels timed both ways; ieee time / tf32x3 time: geometric mean "
      f"{math.exp(sum(map(math.log, ratios)) / n):.2f}, median {ratios[n // 2]:.2f}, p10 {ratios[n // 10]:.2f}, "
      f"p90 {ratios[9 * n // 10]:.2f}, min {ratios[0]:.3f}, max {ratios[-1]:.1f}; tf32x3 faster in "
      f"{sum(x > 1 for x in ratios) / n:.1%}")
with_prologue = [x for x, k in items if info[k]["features"]["pro_a_pointwise"] + info[k]["features"]["pro_b_pointwise"]]
print(f"with a prologue fused: {len(with_prologue)} kernels, geometric mean "
      f"{math.exp(sum(map(math.log, with_prologue)) / len(with_prologue)):.2f}")
print("extremes (ratio, ieee us, tf32x3 us, problem, tile, compiled registers / stack bytes with tf32x3):")
for x, k in items[:6] + items[-6:]:
    f, res = info[k]["features"], info[k].get("resources") or {}
    print(f"  {x:7.3f} {times[k]['ieee']:10.1f} {times[k]['tf32x3']:9.1f}  m{2 ** f['log2_m']:.0f} "
          f"n{2 ** f['log2_n']:.0f} k{2 ** f['log2_k']:.0f}  {f['block_m']:.0f}x{f['block_n']:.0f}x{f['block_k']:.0f} "
          f"sk{f['split_k']:.0f} w{f['num_warps']:.0f} s{f['num_stages']:.0f}  prologue ops {f['pro_a_pointwise']:.0f}"
          f"+{f['pro_b_pointwise']:.0f}  regs {res.get('registers')} stack {res.get('stack_bytes')}")
