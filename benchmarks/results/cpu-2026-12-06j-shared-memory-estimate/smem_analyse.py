import json, math
import fusionsearch as fs
from fusionsearch.datasets.random_graphs import random_graph
from fusionsearch.plan import Plan
from fusionsearch.plan.matmul import template_operands, problem
rows = json.load(open("smem_rows.json"))
graphs = {}
for r in rows:
    if "plan" not in r: continue
    key = (r["family"], r["seed"])
    if key not in graphs: graphs[key] = random_graph(r["seed"], family=r["family"])
    g = graphs[key]
    p = Plan.from_json(r["plan"], g)
    k = [k for k in p.kernels if getattr(k, "config", None) is not None and k.config.short() == r["config"] and list(getattr(k,"prologue_a",()))==r["pa"]][0]
    ops = template_operands(g, k.matmul)
    c = k.config
    bm = getattr(c, "block_m", 16); bm = bm if isinstance(bm, int) else 16
    desc = []
    for side, pro in (("A", k.prologue_a), ("B", k.prologue_b)):
        if not pro:
            desc.append(f"{side}:load {str(g.node(ops[side]).dtype)[6:]}")
            continue
        leaves = sorted({i for n in pro for i in g.node(n).inputs if i not in pro})
        desc.append(f"{side}:" + ",".join(f"{l}({str(g.node(l).dtype)[6:]},{g.node(l).numel/g.node(ops[side]).numel:.2g})" for l in leaves) + f"->{str(g.node(ops[side]).dtype)[6:]}")
    a_t = bm * c.block_k; b_t = c.block_k * c.block_n
    print(f"{r['kind']:8s} {r['config']:38s} old {r['old']:7d} act {r['actual']:7d} ratio {r['actual']/r['old']:.2f} | tiles A {a_t} B {b_t} | {' '.join(desc)[:150]}")

print("=========== model G")
import networkx as nx
LIMIT = 232448
def via_gather(g, leaf, pro):
    for n in pro:
        node = g.node(n)
        if node.kind == "indexing" and node.inputs[0] == leaf:
            return True
    return False
def est(g, k, S_extra=0):
    ops = template_operands(g, k.matmul)
    c = k.config
    bm = getattr(c, "block_m", 16); bm = bm if isinstance(bm, int) else 16
    total = 0
    for side, pro, tile in (("A", k.prologue_a, bm * c.block_k), ("B", k.prologue_b, c.block_k * c.block_n)):
        op = g.node(ops[side])
        if not pro:
            total += c.num_stages * tile * op.dtype.itemsize
            continue
        leaves = sorted({i for n in pro for i in g.node(n).inputs if i not in pro})
        loads = 0
        for l in leaves:
            ln = g.node(l)
            ratio = ln.numel / op.numel
            r = 1.0 if via_gather(g, l, pro) else (min(1.0, ratio) if ratio >= 1 / 8 else 0.0)
            loads += tile * ln.dtype.itemsize * r
        total += c.num_stages * loads + tile * op.dtype.itemsize
    return int(total)
under = over_reject = 0
for r in rows:
    if "plan" not in r: continue
    g = graphs[(r["family"], r["seed"])]
    p = Plan.from_json(r["plan"], g)
    k = [k for k in p.kernels if getattr(k, "config", None) is not None and k.config.short() == r["config"] and list(getattr(k,"prologue_a",()))==r["pa"]][0]
    e = est(g, k)
    flag = ""
    if e < r["actual"]: under += 1; flag = "UNDER"
    if e > LIMIT and r["actual"] <= LIMIT: over_reject += 1; flag += " REJECTS-FITTING"
    if flag or e > 1.6 * r["actual"]:
        print(f"{flag:22s} {r['kind']:8s} {r['config']:38s} old {r['old']:7d} G {e:7d} act {r['actual']:7d}")
print("under", under, "rejects fitting", over_reject, "of", sum(1 for r in rows if "plan" in r))
