"""GPU (issue 53, item 10): what the gathers' index check costs. Each plan that gathers rows by an index input
(gather_mm fully fused; moe_ffn under each mix of kernel kinds the space offers) is generated twice: as the
package generates it (rows clamped, a bad index sets a flag and fails a device assert, kernels compiled with
debug=True) and with the check stripped from the source; both are validated equal on the same inputs, then timed
kernel by kernel (launched directly) and whole, replayed from a CUDA graph, L2 flushed (time_callable). `--bad`
also runs each plan with one index out of range and says what it raised (the device assert stops the kernel:
a process that later fails every CUDA call, so it runs in a child process per plan).

Run on the GPU machine:  PYTHONPATH=. python benchmarks/index_check_gpu.py --out $OUT [--bad]
Writes index_check.json; prints one line per plan (µs checked / unchecked), a table last."""

from __future__ import annotations

import argparse
import itertools
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import torch

import fusionsearch as fs
from fusionsearch import plan as P
from fusionsearch.codegen.module import generate_module
from fusionsearch.codegen.runtime import load_source
from fusionsearch.measure.bench import time_callable
from fusionsearch.search.space import enumerate_space

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.harness import add_out, md_table, out_file, run_facts, write_json  # noqa: E402


def unchecked(source: str) -> str:
    """`source` without the index checks: the flag's branch, the row clamp and the debug launch options."""
    s = re.sub(r"\n( *)out_of_table\d+ = .*\n\1if tl\.max\(out_of_table.*\n.*\n.*\n", "\n", source)
    s = re.sub(r"(row\d+) = tl\.minimum\(tl\.maximum\((row\d+), 0\), \d+\)", r"\1 = \2", s)
    return s.replace(", debug=True, sanitize_overflow=False", "")


def plans() -> Iterator[tuple[str, fs.OpGraph, P.Plan]]:
    """gather_mm fully fused, then one moe_ffn plan per mix of kernel kinds among the space's first 300."""
    g = fs.workload("gather_mm", dtype=torch.bfloat16)
    yield "gather_mm fused", g, P.fully_fused(g)
    for tokens in (1, 16):
        g = fs.workload("moe_ffn", dtype=torch.bfloat16, T=tokens)
        space = enumerate_space(g)
        seen: dict[str, P.Plan] = {}
        for _, plan in space.distinct_plans(itertools.islice(space.every_params(), 300)):
            seen.setdefault("+".join(sorted({k.kind for k in plan.kernels})), plan)
        for kinds, plan in seen.items():
            yield f"moe_ffn T{tokens} {kinds}", g, plan


def timed(module: Any, inputs: list[torch.Tensor]) -> dict[str, float]:
    """The kernels' µs summed (each launched alone) and the whole plan's µs replayed from a CUDA graph, both with
    the harness every figure uses (time_callable: medians, L2 flushed clean before each call)."""
    calls, _ = module.steps(*inputs)
    kernels = sum(time_callable(c).median_us for c in calls)
    module.run(*inputs)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        module.run(*inputs)
    return {"kernels_us": kernels, "graph_us": time_callable(graph.replay).median_us}


def bad_index(name: str, value: int) -> None:
    """Run plan `name` with its first index set to `value`; print what happened (a child process's work)."""
    for label, g, plan in plans():
        if label == name:
            module = load_source(generate_module(plan).source)
            inputs = fs.random_inputs(g, device="cuda")
            inputs[g.inputs.index("idx")].view(-1)[0] = value
            try:
                module.run(*inputs)
                torch.cuda.synchronize()
                print("NO ERROR")
            except Exception as e:
                print("raised", type(e).__name__, str(e).splitlines()[0][:200])


def main() -> None:
    ap = argparse.ArgumentParser()
    add_out(ap, "index_check.json")
    ap.add_argument("--bad", action="store_true", help="also run each plan with an index out of range")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        bad_index(args.child[0], int(args.child[1]))
        return
    report: dict[str, Any] = {**run_facts("device", "torch", "triton", date="utc"), "plans": []}
    rows = []
    for name, g, plan in plans():
        source = generate_module(plan).source
        stripped = unchecked(source)
        if stripped == source or "out_of_table" in stripped:
            raise SystemExit(f"{name}: the check was not stripped; unchecked() no longer matches the source")
        inputs = fs.random_inputs(g, device="cuda")
        checked_mod, unchecked_mod = load_source(source), load_source(stripped)
        same = all(torch.equal(a, b) for a, b in zip(checked_mod.run(*inputs), unchecked_mod.run(*inputs),
                                                     strict=True))
        row = {"plan": name, "same_outputs": same, "checked": timed(checked_mod, inputs),
               "unchecked": timed(unchecked_mod, inputs)}
        if args.bad:
            for value in (10**9, -(10**6)):
                r = subprocess.run([sys.executable, __file__, "--out", args.out, "--child", name, str(value)],
                                   capture_output=True, text=True, timeout=300)
                row[f"bad {value}"] = (r.stdout.strip().splitlines() or [r.stderr.strip()[-200:]])[-1]
        report["plans"].append(row)
        write_json(report, out_file(args.out, "index_check.json"))
        c, u = row["checked"], row["unchecked"]
        print(f"{name}: graph {c['graph_us']:.1f} / {u['graph_us']:.1f} us, kernels {c['kernels_us']:.1f} / "
              f"{u['kernels_us']:.1f} us (checked / unchecked), outputs equal {same}", flush=True)
        rows.append([name, f"{c['graph_us']:.1f}", f"{u['graph_us']:.1f}", f"{c['graph_us'] / u['graph_us']:.3f}",
                     f"{c['kernels_us']:.1f}", f"{u['kernels_us']:.1f}"])
    print("\n".join(md_table(["plan", "checked us (graph)", "unchecked us", "ratio", "checked kernels us",
                              "unchecked kernels us"], rows)))


if __name__ == "__main__":
    main()
