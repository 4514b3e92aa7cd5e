"""GPU: mm_bias_gelu M16 K4096 N4096 (bf16), the fully fused template plan on tile configs around the one
max-autotune's autotuner picked (16x32x128, 2 warps, 5 stages, no split), timed interleaved with max-autotune
itself and the suite's pick (7 rounds, clean L2 flush), each validated against float64."""
import json
import os
import sys

import torch

import fusionsearch as fs
from fusionsearch.datasets.workloads import WORKLOADS
from fusionsearch.graph.reference import reference
from fusionsearch.graph.tolerance import rel_error
from fusionsearch.measure.bench import time_interleaved
from fusionsearch.plan import TileConfig, fully_fused

sys.path.insert(0, os.getcwd())
from benchmarks.suite import MAX_AUTOTUNE_CONFIG  # noqa: E402

CONFIGS = [(16, 64, 128, 8, 2, 4, 4), (16, 32, 128, 8, 1, 2, 5), (16, 32, 128, 8, 1, 2, 4), (16, 32, 128, 8, 2, 2, 5),
           (16, 32, 256, 8, 1, 2, 4), (16, 32, 128, 8, 1, 4, 5), (16, 32, 64, 8, 1, 2, 6), (16, 64, 128, 8, 1, 4, 5),
           (16, 32, 128, 8, 1, 2, 6), (16, 32, 256, 8, 2, 2, 4)]


def main(out):
    os.makedirs(out, exist_ok=True)
    g = fs.workload("mm_bias_gelu", dtype=torch.bfloat16, M=16, K=4096, N=4096)
    inputs = fs.random_inputs(g, seed=0, device="cuda")
    ref = reference(g, [t.cpu() for t in inputs], float64=True)[0]
    fns, errs = {}, {}
    for c in CONFIGS:
        cfg = TileConfig(*c)
        try:
            run = fs.compile_plan(fully_fused(g).with_config(cfg))
            y = run(*inputs)[0]
            torch.cuda.synchronize()
            errs[cfg.short()] = rel_error(y.cpu(), ref)
            fns[cfg.short()] = (lambda run=run: run(*inputs))
        except Exception as e:  # noqa: BLE001
            print(cfg.short(), "failed:", str(e)[:200], flush=True)
    fn = WORKLOADS["mm_bias_gelu"].torch_fn
    with torch._inductor.config.patch(MAX_AUTOTUNE_CONFIG):
        mat = torch.compile(fn, mode="max-autotune-no-cudagraphs")
        y = mat(*inputs)
    torch.cuda.synchronize()
    errs["max-autotune"] = rel_error(y.cpu(), ref)
    fns["max-autotune"] = lambda: mat(*inputs)
    times = time_interleaved(fns, rounds=7, warmup_ms=5, rep_ms=30)
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    with open(os.path.join(out, "mbg_configs.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "median_us": med, "rounds": times, "rel_err": errs}, f,
                  indent=1)
    for k in sorted(med, key=med.get):
        print(f"{k:34s} {med[k]:7.2f} us  rel err {errs[k]:.2e}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/mbg")
