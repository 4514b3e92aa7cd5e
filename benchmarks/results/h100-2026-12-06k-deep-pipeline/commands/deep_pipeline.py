"""GPU: one wave of CTAs, little or no split-K, a deep pipeline: the form max-autotune picks for mm_bias_gelu
M16 (16x32x128, no split, 5 stages), tried on the w8 GEMV (M1, M16) and mm_bias_gelu in both kinds, timed
interleaved with the suite's picks (7 rounds, clean L2 flush), each validated against float64."""
import json
import os
import sys

import torch

import fusionsearch as fs
from fusionsearch.datasets.workloads import WORKLOADS
from fusionsearch.graph.reference import reference
from fusionsearch.graph.tolerance import rel_error
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
from fusionsearch.measure.bench import time_interleaved
from fusionsearch.plan import TileConfig, fully_fused

sys.path.insert(0, os.getcwd())
from benchmarks.decode_sweep_gpu import with_kernel  # noqa: E402
from benchmarks.suite import MAX_AUTOTUNE_CONFIG  # noqa: E402

D = DecodeConfig
W8 = [D(128, 64, 8, 4, 3, "dot_t"), D(64, 256, 1, 4, 4, "dot_t"), D(64, 256, 1, 4, 6, "dot_t"),
      D(64, 128, 1, 4, 8, "dot_t"), D(64, 256, 2, 4, 4, "dot_t"), D(128, 128, 2, 4, 5, "dot_t"),
      D(128, 64, 2, 4, 8, "dot_t"), D(128, 64, 4, 4, 5, "dot_t"), D(64, 256, 1, 4, 6, "dot"),
      D(32, 256, 1, 2, 6, "dot"), D(32, 512, 1, 4, 4, "dot"), D(64, 128, 2, 4, 6, "dot")]
W8_M1 = [D(64, 128, 1, 4, 6, "fma"), D(128, 64, 2, 4, 6, "fma")]
TEMPLATES = [TileConfig(16, 32, 128, 8, 1, 2, 6), TileConfig(16, 32, 256, 8, 1, 2, 4),
             TileConfig(16, 64, 128, 8, 1, 4, 6),              TileConfig(16, 64, 128, 8, 2, 4, 4)]
MBG = [D(64, 32, 8, 8, 4, "dot"), D(32, 128, 1, 2, 6, "dot"), D(32, 256, 1, 2, 5, "dot"), D(64, 128, 1, 4, 6, "dot_t"),
       D(64, 256, 1, 4, 4, "dot_t"), D(64, 128, 2, 4, 5, "dot_t")]
CASES = [("w8_dequant_mm", {"M": 1, "K": 8192, "N": 8192}, W8 + W8_M1),
         ("w8_dequant_mm", {"M": 16, "K": 8192, "N": 8192}, W8),
         ("mm_bias_gelu", {"M": 16, "K": 4096, "N": 4096}, MBG)]


def main(out):
    os.makedirs(out, exist_ok=True)
    results = {}
    for name, shape, decode in CASES:
        label = f"{name} " + " ".join(f"{k}{v}" for k, v in shape.items())
        g = fs.workload(name, dtype=torch.bfloat16, **shape)
        inputs = fs.random_inputs(g, seed=0, device="cuda")
        ref = reference(g, [t.cpu() for t in inputs], float64=True)[0]
        base = fully_fused(g)
        plans = {c.short(): with_kernel(base, lambda k, c=c: DecodeKernel(k.matmul, k.prologue_a, k.prologue_b,
                                                                          k.epilogue, c)) for c in decode}
        plans.update({"template " + c.short(): base.with_config(c) for c in TEMPLATES})
        fns, errs = {}, {}
        for key, plan in plans.items():
            try:
                run = fs.compile_plan(plan)
                y = run(*inputs)[0]
                torch.cuda.synchronize()
                errs[key] = rel_error(y.cpu(), ref)
                fns[key] = (lambda run=run, inputs=inputs: run(*inputs))
            except Exception as e:  # noqa: BLE001
                print(label, key, "failed:", str(e)[:200], flush=True)
        fn = WORKLOADS[name].torch_fn
        with torch._inductor.config.patch(MAX_AUTOTUNE_CONFIG):
            mat = torch.compile(fn, mode="max-autotune-no-cudagraphs")
            y = mat(*inputs)
        torch.cuda.synchronize()
        errs["max-autotune"] = rel_error(y.cpu(), ref)
        fns["max-autotune"] = lambda mat=mat, inputs=inputs: mat(*inputs)
        times = time_interleaved(fns, rounds=7, warmup_ms=5, rep_ms=30)
        med = {k: sorted(v)[len(v) // 2] for k, v in times.items() if v}
        results[label] = {"median_us": med, "rounds": times, "rel_err": errs}
        with open(os.path.join(out, "deep_pipeline.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "cases": results}, f, indent=1)
        print(label, flush=True)
        for k in sorted(med, key=med.get):
            print(f"  {k:40s} {med[k]:7.2f} us  rel err {errs[k]:.2e}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/deep")
