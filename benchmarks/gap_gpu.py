"""GPU: where a library plan's time goes against eager PyTorch's and torch.compile's, kernel by kernel.

On the M >= 2048 reference cases the search runs the matmuls in cuBLAS beside one Triton pointwise kernel,
and the suite of 2026-12-03 found those plans 1-3% slower than PyTorch's best while their pointwise kernels
alone were no slower than eager's. This profiles each variant as do_bench times it (the L2 flushed by zeroing
a 256 MB buffer before every call, no synchronisation between calls) under torch.profiler, and splits each
call's time after the flush into: the idle time before its first kernel (host time the flush did not
hide), each kernel's duration in place (its name says which cuBLAS kernel ran), and the idle gaps between
kernels. Variants: eager, torch.compile, and the searched plan's shape (every matmul in the library, the
pointwise work in one Triton kernel).

Run on the GPU machine:  PYTHONPATH=. TORCH_LOGS=output_code python benchmarks/gap_gpu.py --out $OUT
(Inductor's generated code then goes to stderr: what its pointwise kernels do differently.)
Writes gap.json (every call's kernels) and prints one table per case last."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from collections.abc import Callable
from typing import Any

import torch
import triton

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen.runtime import compile_plan
from fusionsearch.datasets.workloads import REFERENCE_CASES, WORKLOADS, case_name

FLUSH_BYTES = 256 * 2**20  # as triton.testing.do_bench's cache buffer


def library_plan(g: Any) -> Any:
    """The searched plans' shape on these cases: every matmul in PyTorch's matmul, the pointwise work in one
    Triton kernel."""
    return P.build_plan(g, {n: ("group", "pw") for n in g.nodes_of_kind("pointwise")},
                        library=g.nodes_of_kind("template"))


def device_events(trace_path: str) -> list[dict[str, Any]]:
    """The GPU-side events (kernels, memsets, memcopies) of a chrome trace, by start time."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy") and "dur" in e]
    return sorted(gpu, key=lambda e: e["ts"])


def profile(fn: Callable[[], object], calls: int) -> list[dict[str, Any]]:
    """`calls` calls of fn, each after an L2 flush, under the profiler: per call, its kernels (name, start
    after the flush's end, duration; µs), the idle time before the first, the span to the last one's end."""
    cache = torch.empty(FLUSH_BYTES, dtype=torch.int8, device="cuda")
    for _ in range(3):
        cache.zero_()
        fn()
    torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as tmp:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            cache.zero_()
            torch.cuda.synchronize()
        prof.export_chrome_trace(os.path.join(tmp, "flush.json"))
        flush_names = {e["name"] for e in device_events(os.path.join(tmp, "flush.json"))}
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(calls):
                cache.zero_()
                fn()
            torch.cuda.synchronize()
        prof.export_chrome_trace(os.path.join(tmp, "calls.json"))
        events = device_events(os.path.join(tmp, "calls.json"))
    out: list[dict[str, Any]] = []
    flush_end = None
    current: list[dict[str, Any]] = []
    for e in events + [{"name": None}]:
        if e["name"] in flush_names or e["name"] is None:
            if flush_end is not None and current:
                out.append(call_record(flush_end, current))
            if e["name"] is not None:
                flush_end, current = e["ts"] + e["dur"], []
        elif flush_end is not None:
            current.append(e)
    return out


def call_record(flush_end: float, kernels: list[dict[str, Any]]) -> dict[str, Any]:
    """One call's kernels relative to the end of the flush before it."""
    ks = [{"name": k["name"], "start_us": k["ts"] - flush_end, "dur_us": k["dur"]} for k in kernels]
    end = max(k["start_us"] + k["dur_us"] for k in ks)
    busy = sum(k["dur_us"] for k in ks)
    return {"kernels": ks, "lead_us": ks[0]["start_us"], "span_us": end, "busy_us": busy,
            "gaps_us": end - ks[0]["start_us"] - busy}


def summary(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over calls: lead idle, span, busy, gaps, and each kernel position's duration and name."""
    n = statistics.median(len(c["kernels"]) for c in calls)
    same = [c for c in calls if len(c["kernels"]) == n]
    return {"calls": len(calls), **{k: statistics.median(c[k] for c in same)
                                    for k in ("lead_us", "span_us", "busy_us", "gaps_us")},
            "kernels": [{"name": same[0]["kernels"][i]["name"],
                         "dur_us": statistics.median(c["kernels"][i]["dur_us"] for c in same)}
                        for i in range(int(n))]}


def measure_case(case: dict[str, Any], calls: int) -> dict[str, Any]:
    """Every variant of one case: its do_bench median, then its profiled calls and their medians."""
    g = fs.workload(case["workload"], dtype=torch.bfloat16, **case["shape"])
    inputs = fs.random_inputs(g, seed=0, device="cuda")
    fn = WORKLOADS[case["workload"]].torch_fn
    torch._dynamo.reset()
    compiled = torch.compile(fn)
    plan_run = compile_plan(library_plan(g)).module.run
    variants = {"eager": lambda: fn(*inputs), "torch.compile": lambda: compiled(*inputs),
                "plan": lambda: plan_run(*inputs)}
    row: dict[str, Any] = {"case": case_name(case), "variants": {}}
    for name, call in variants.items():
        call()
        torch.cuda.synchronize()
        bench = triton.testing.do_bench(call, warmup=25, rep=100) * 1e3
        profiled = profile(call, calls)
        row["variants"][name] = {"do_bench_us": bench, **summary(profiled), "all_calls": profiled}
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="out")
    ap.add_argument("--cases", default="1,5,6,7,9", help="REFERENCE_CASES indices (default: the library picks)")
    ap.add_argument("--calls", type=int, default=40)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for index in [int(i) for i in args.cases.split(",")]:
        rows.append(measure_case(REFERENCE_CASES[index], args.calls))
        with open(os.path.join(args.out, "gap.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "triton": triton.__version__, "rows": rows}, f, indent=1)
    for row in rows:
        print(f"\n{row['case']}  (µs: do_bench median; profiled medians over calls after an L2 flush)")
        for name, v in row["variants"].items():
            print(f"  {name:<14} do_bench {v['do_bench_us']:7.1f}  span {v['span_us']:7.1f}  lead idle "
                  f"{v['lead_us']:5.1f}  busy {v['busy_us']:7.1f}  gaps {v['gaps_us']:5.1f}")
            for k in v["kernels"]:
                print(f"      {k['dur_us']:7.1f}  {k['name'][:110]}")


if __name__ == "__main__":
    main()
