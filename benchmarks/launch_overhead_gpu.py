"""Is a small-M plan bound by the host's launch cost? For a few small-M reference plans (one and two
launches), on the GPU: do_bench of the plan's run (what the search measures; L2 flushed before each call),
the host's own time per call (calls issued back to back without synchronising, so the host is the limit
when it is slower than the GPU), each with launches through Triton's `kernel[grid](...)` and with the
generated module's direct launches, and the same kernels replayed from a CUDA graph (no host launch cost,
but L2 not flushed either: weights that fit in L2 stay there). Also one empty Triton launch's host cost,
both ways. Writes launch.json under --out and prints a table last.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/launch_overhead_gpu.py --out $OUT"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import torch
import triton
import triton.testing

import fusionsearch as fs
from fusionsearch.codegen.runtime import compile_plan
from fusionsearch.datasets.workloads import case_name
from fusionsearch.measure import validate
from fusionsearch.plan import fully_fused, heuristic, unfused

CASES = [("mm_bias_gelu", {"M": 16, "K": 4096, "N": 4096}), ("w8_dequant_mm", {"M": 16, "K": 8192, "N": 8192}),
         ("gather_mm", {"M": 64, "K": 4096, "N": 4096, "T": 32000}), ("swiglu", {"M": 16, "D": 4096, "H": 11008})]


@triton.jit
def _empty(x_ptr):
    pass


def host_us(fn: Any, calls: int = 2000) -> float:
    """Host time per call with nothing synchronised between calls (the queue absorbs GPU time while it has
    room, so this is the host's own cost when the GPU is faster)."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - start) / calls * 1e6
    torch.cuda.synchronize()
    return host


def graph_us(fn: Any) -> float:
    """The kernels replayed from a CUDA graph, do_bench_cudagraph's median."""
    return triton.testing.do_bench_cudagraph(fn, rep=100) * 1e3


def measure(name: str, shape: dict[str, int], label: str, plan: Any, inputs: Any, **options: Any) -> dict[str, Any]:
    """One plan compiled with codegen `options`: validated, then timed three ways."""
    compiled = compile_plan(plan, **options)
    run = compiled.module.run
    src = compiled.source
    fn = lambda: run(*inputs)  # noqa: E731
    launches = src[src.index("def run("):src.index("def steps(")].count("[(")  # one grid per launch
    row: dict[str, Any] = {"case": case_name({"workload": name, "shape": shape}), "plan": label,
                           "describe": plan.describe(), "launches": launches,
                           "rel_err": validate(plan, plan.graph, inputs, **options).rel_err}
    module = compiled.module
    for fast, suffix in ((False, "_triton"), (True, "")):  # through kernel[grid], then direct launches
        module._FAST_LAUNCH = fast
        row["do_bench" + suffix + "_us"] = triton.testing.do_bench(fn, warmup=25, rep=100) * 1e3
        row["host" + suffix + "_us"] = host_us(fn)
    module._FAST_LAUNCH = False
    slow = [o.clone() for o in run(*inputs)]
    module._FAST_LAUNCH = True
    first = [o.clone() for o in run(*inputs)]
    row["direct_equals_triton_launch"] = all(torch.equal(a, b) for a, b in zip(first, slow, strict=True))
    # A race between the splits of a tile would show as outputs that change from call to call.
    row["same_output_in_200_calls"] = all(all(torch.equal(a, b) for a, b in zip(run(*inputs), first, strict=True))
                                          for _ in range(200))
    try:
        row["cuda_graph_us"] = graph_us(fn)
    except Exception as e:
        row["cuda_graph_error"] = str(e)[:200]
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    x = torch.empty(16, device="cuda")
    ck = _empty[(1,)](x)
    stream = triton.runtime.driver.active.get_current_stream(x.device.index)
    rows: list[dict[str, Any]] = [{"case": "empty Triton kernel", "plan": "", "launches": 1,
                                   "host_triton_us": host_us(lambda: _empty[(1,)](x)),
                                   "host_us": host_us(lambda: ck.run(1, 1, 1, stream, ck.function, ck.packed_metadata,
                                                                     None, None, None, x))}]
    for name, shape in CASES:
        g = fs.workload(name, **shape)
        inputs = fs.random_inputs(g, seed=0, device="cuda")
        for label, make in (("unfused", unfused), ("fully fused", fully_fused), ("heuristic", heuristic)):
            try:
                plan = make(g)
            except Exception as e:  # a plan the graph cannot have
                rows.append({"case": case_name({"workload": name, "shape": shape}), "plan": label,
                             "error": str(e)[:200]})
                continue
            split = any(getattr(k, "config", None) is not None and k.config.split_k > 1 for k in plan.kernels)
            for serial in (False, True) if split else (False,):
                rows.append(measure(name, shape, label + (" serial split-K" if serial else ""), plan, inputs,
                                    serial_split_k=serial))
                print(rows[-1], flush=True)
    with open(os.path.join(args.out, "launch.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "triton": triton.__version__, "rows": rows}, f, indent=1)
    print("| case | plan | launches in run | rel err | do_bench us: kernel[grid] / direct | host us per call: "
          "kernel[grid] / direct | CUDA graph us (L2 warm) | direct = kernel[grid] |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        cell = lambda k, r=r: f"{r[k]:.1f}" if isinstance(r.get(k), float) else str(r.get(k, ""))  # noqa: E731
        cells = [f"{r['rel_err']:.1e}" if "rel_err" in r else "",
                 f"{cell('do_bench_triton_us')} / {cell('do_bench_us')}",
                 f"{cell('host_triton_us')} / {cell('host_us')}", cell("cuda_graph_us"),
                 cell("direct_equals_triton_launch")]
        print(f"| {r['case']} | {r['plan']} | {r.get('launches', '')} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
