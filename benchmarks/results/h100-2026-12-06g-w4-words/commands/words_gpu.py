"""GPU (issue 27): the decode kind's words form against its pairs form on the int4 GEMV (w4_dequant_mm K4096
N11008 G128, bf16) at 1, 4 and 16 rows: every pairs and words config the search offers (decode_candidates),
compiled in parallel, validated against float64 and timed with fusionsearch's timer (clean L2 flush); then the
words plans on shift amounts other than the workload's (validated only: the GPU's byte-permute path)."""
import json
import os
import sys

import torch

import fusionsearch as fs
from fusionsearch.kinds.decode_matmul import DecodeKernel
from fusionsearch.kinds.decode_matmul.configs import decode_candidates
from fusionsearch.measure import validate
from fusionsearch.measure.isolate import CompilePool
from fusionsearch.plan import fully_fused

sys.path.insert(0, os.getcwd())
from benchmarks.decode_sweep_gpu import timed, with_kernel  # noqa: E402

out = sys.argv[sys.argv.index("--out") + 1]
os.makedirs(out, exist_ok=True)
pool = CompilePool(14)
rows = []
for M in (1, 4, 16):
    g = fs.workload("w4_dequant_mm", dtype=torch.bfloat16, M=M, K=4096, N=11008, G=128)
    base = fully_fused(g)
    cfgs = [c for c in decode_candidates(g, "y") if c.pairs]
    plans = [with_kernel(base, lambda k, c=c: DecodeKernel(k.matmul, k.prologue_a, k.prologue_b, k.epilogue, c))
             for c in cfgs]
    failures = pool.warm(g.to_dict(), [p.to_json() for p in plans])
    inputs = fs.random_inputs(g, seed=0, device="cuda")
    refs = fs.reference(g, inputs, float64=True)
    for c, p, failure in zip(cfgs, plans, failures, strict=True):
        row = {"M": M, "config": c.short(), "median_us": None, "reason": failure}
        if not failure:
            row.update(timed(p, g, inputs, refs, 20))
        rows.append(row)
        print(json.dumps(row), flush=True)
    x, w, _, s, z = inputs
    for amounts in ((0, 4), (3, 7), (9, 2)):
        shifts = torch.tensor(amounts, dtype=torch.uint8, device="cuda").reshape(2, 1)
        odd_refs = fs.reference(g, [x, w, shifts, s, z], float64=True)
        for c, p, failure in list(zip(cfgs, plans, failures, strict=True)):
            if c.words and not failure:
                v = validate(p, g, [x, w, shifts, s, z], refs=odd_refs)
                rows.append({"M": M, "config": c.short(), "shifts": amounts, "ok": v.ok, "rel_err": v.rel_err,
                             "reason": v.reason})
                if not v.ok:
                    print("INVALID", json.dumps(rows[-1]), flush=True)
    del inputs, refs
    torch.cuda.empty_cache()
pool.close()
with open(os.path.join(out, "words.json"), "w") as f:
    json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
odd = [r for r in rows if "shifts" in r]
print(f"odd shift validations: {sum(r['ok'] for r in odd)} ok of {len(odd)}")
print(f"{'M':>2} {'best pairs':45s} {'us':>6}   {'best words':45s} {'us':>6}")
for M in (1, 4, 16):
    timed_rows = [r for r in rows if r["M"] == M and "shifts" not in r and r["median_us"]]
    best = {}
    for words in (False, True):
        cand = sorted((r for r in timed_rows if r["config"].endswith(" words") == words), key=lambda r: r["median_us"])
        best[words] = cand[0] if cand else {"config": "-", "median_us": float("nan")}
    print(f"{M:>2} {best[False]['config']:45s} {best[False]['median_us']:6.1f}   {best[True]['config']:45s} "
          f"{best[True]['median_us']:6.1f}")
    for r in sorted(timed_rows, key=lambda r: r["median_us"])[:6]:
        print(f"     {r['config']:50s} {r['median_us']:6.1f}")
