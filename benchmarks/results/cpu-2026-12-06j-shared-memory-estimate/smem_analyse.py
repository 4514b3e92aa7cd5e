"""The shared-memory estimates of smem_probe.py's kernels: the plan check's against what Triton allocated
(per kernel: the sides' loaded values, their dtypes and size against the operand), then model G (each K-loop
load's tile in its own dtype, times the stages, plus a conversion tile where the operand is computed)."""
import gzip
import json

from fusionsearch.datasets.random_graphs import random_graph
from fusionsearch.plan import Plan
from fusionsearch.plan.matmul import template_operands

LIMIT = 232448  # the H100's shared memory a block may opt in to


def kernel_of(row, plan):
    return next(k for k in plan.kernels if getattr(k, "config", None) is not None
                and k.config.short() == row["config"] and list(getattr(k, "prologue_a", ())) == row["pa"])


def block_m(cfg):
    bm = getattr(cfg, "block_m", 16)
    return bm if isinstance(bm, int) else 16


def via_gather(g, leaf, prologue):
    return any(g.node(n).kind == "indexing" and g.node(n).inputs[0] == leaf for n in prologue)


def model_g(g, k):
    ops, c, total = template_operands(g, k.matmul), k.config, 0
    for side, pro, tile in (("A", k.prologue_a, block_m(k.config) * c.block_k), ("B", k.prologue_b,
                                                                                 c.block_k * c.block_n)):
        op = g.node(ops[side])
        if not pro:
            total += c.num_stages * tile * op.dtype.itemsize
            continue
        loads = 0.0
        for leaf in sorted({i for n in pro for i in g.node(n).inputs if i not in pro}):
            node = g.node(leaf)
            ratio = node.numel / op.numel
            r = 1.0 if via_gather(g, leaf, pro) else (min(1.0, ratio) if ratio >= 1 / 8 else 0.0)
            loads += tile * node.dtype.itemsize * r
        total += c.num_stages * loads + tile * op.dtype.itemsize
    return int(total)


def sides(g, k):
    ops, out = template_operands(g, k.matmul), []
    for side, pro in (("A", k.prologue_a), ("B", k.prologue_b)):
        op = g.node(ops[side])
        if not pro:
            out.append(f"{side}:load {str(op.dtype)[6:]}")
            continue
        leaves = sorted({i for n in pro for i in g.node(n).inputs if i not in pro})
        out.append(f"{side}:" + ",".join(f"{x}({str(g.node(x).dtype)[6:]},{g.node(x).numel / op.numel:.2g})"
                                         for x in leaves) + f"->{str(op.dtype)[6:]}")
    return " ".join(out)


def main():
    rows = [r for r in json.load(gzip.open("smem_rows.json.gz")) if "plan" in r]
    graphs, under, rejects = {}, 0, 0
    for r in rows:
        key = (r["family"], r["seed"])
        if key not in graphs:
            graphs[key] = random_graph(r["seed"], family=r["family"])
        g = graphs[key]
        k = kernel_of(r, Plan.from_json(r["plan"], g))
        est = model_g(g, k)
        flag = ("UNDER " if est < r["actual"] else "") + ("REJECTS-FITTING" if est > LIMIT >= r["actual"] else "")
        under += est < r["actual"]
        rejects += est > LIMIT >= r["actual"]
        print(f"{r['kind']:8s} {r['config']:38s} check {r['old']:7d} G {est:7d} allocated {r['actual']:7d} "
              f"{flag:22s} | {sides(g, k)[:150]}")
    print(f"model G: under {under}, would refuse {rejects} that fit, of {len(rows)}")


if __name__ == "__main__":
    main()
