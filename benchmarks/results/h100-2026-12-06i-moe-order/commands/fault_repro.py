"""GPU: which of the plans the experts collection saw fault (graph seed 9404: T4 E8 H1408 D4096 float32) does
so on its own? Each plan in a fresh process (argv: plan index), run once on random inputs, then synchronised;
prints OK or the error."""
import json
import sys

import torch

import fusionsearch as fs
from fusionsearch.datasets.random_graphs import random_graph
from fusionsearch.plan import Plan

data = json.load(open("gpu/fault_plans.json"))
g = random_graph(9404, family="experts")
assert g.signature_hash() == data["graph_id"]
i = int(sys.argv[1])
plan = Plan.from_json(json.dumps(data["plans"][i]), g)
inputs = fs.random_inputs(g, seed=4, device="cuda")
try:
    out = fs.compile_plan(plan)(*inputs)
    torch.cuda.synchronize()
    ref = fs.reference(g, inputs)[0]
    o = out[0] if isinstance(out, (list, tuple)) else out
    print(f"plan {i}: OK, rel err {((o.float() - ref.float()).abs().max() / ref.float().abs().max()).item():.1e}")
except Exception as e:
    print(f"plan {i}: {type(e).__name__}: {str(e)[:300]}")
