"""Shared memory: the plan check's estimate against what Triton allocates (sm_90, compiled on the CPU)."""
import json
import random
import sys

import fusionsearch.hardware as H
from fusionsearch.codegen.resources import many_plan_resources
from fusionsearch.datasets.random_graphs import random_graph
from fusionsearch.plan import FusedMatmulKernel
from fusionsearch.plan.matmul import template_operands
from fusionsearch.search.collect import sample_plans


def main():
    hw = H.H100 if hasattr(H, "H100") else H.DEFAULT
    rows = []
    specs = ([("experts", s) for s in (9404, 11, 12, 13, 14, 15)] + [("decode", s) for s in (1, 2, 3)]
             + [("mixed", s) for s in (1, 2, 3, 4)])
    for family, seed in specs:
        g = random_graph(seed, family=family)
        plans = sample_plans(g, int(sys.argv[1]) if len(sys.argv) > 1 else 6, random.Random(seed), hw)
        res = many_plan_resources(plans, 90, workers=2)
        for p, rr in zip(plans, res, strict=True):
            if rr is None:
                rows.append({"family": family, "seed": seed, "compile": "failed"})
                continue
            for k, r in zip(p.kernels, rr, strict=True):
                if r is None or not isinstance(k, FusedMatmulKernel):
                    continue
                a = g.node(template_operands(g, k.matmul)["A"]).dtype
                rows.append({"family": family, "seed": seed, "kind": k.kind, "config": k.config.short(),
                             "dtype": str(a),
                             "pa": list(k.prologue_a), "pb": list(k.prologue_b), "ep": len(k.epilogue),
                             "old": k.config.shared_memory_bytes(a.itemsize), "actual": r.shared_bytes,
                             "plan": p.to_json()})
                print(family, seed, k.kind, k.config.short(), str(a)[6:], len(k.prologue_a), len(k.prologue_b),
                      "old", rows[-1]["old"], "actual", r.shared_bytes, flush=True)
    json.dump(rows, open("smem_rows.json", "w"))


if __name__ == '__main__':
    main()
