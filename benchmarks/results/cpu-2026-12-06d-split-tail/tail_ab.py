"""GPU: the decode kind's serial split-K tail with its loop over the splits unrolled (tl.static_range, now) or
a runtime loop (range, before), w8 M16/M1 on the suite's configs; 3 interleaved rounds, L2 flushed clean."""
import json
import os
import sys

import torch

import fusionsearch as fs
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
from fusionsearch.kinds.triton_source import emit
from fusionsearch.measure import validate
from fusionsearch.measure.bench import benchmark
from fusionsearch.plan import fully_fused

sys.path.insert(0, os.getcwd())
from benchmarks.decode_sweep_gpu import with_kernel  # noqa: E402

ROLLED = {"on": False}
_line = emit.Source.line


def line(self, text):
    if ROLLED["on"]:
        text = text.replace("for s in tl.static_range(", "for s in range(")
    return _line(self, text)


emit.Source.line = line
out = sys.argv[sys.argv.index("--out") + 1]
rows = []
for M, cfg in ((16, DecodeConfig(128, 64, 8, 4, 3, "dot_t")), (16, DecodeConfig(64, 128, 4, 4, 3, "dot_t")),
               (1, DecodeConfig(128, 64, 8, 4, 3, "dot_t"))):
    g = fs.workload("w8_dequant_mm", M=M, K=8192, N=8192)
    plan = with_kernel(fully_fused(g), lambda k, cfg=cfg: DecodeKernel(k.matmul, k.prologue_a, k.prologue_b,
                                                                   k.epilogue, cfg))
    inputs = fs.random_inputs(g, seed=0, device="cuda")
    refs = fs.reference(g, inputs, float64=True)
    mods = {}
    for rolled in (False, True):
        ROLLED["on"] = rolled
        mods[rolled] = fs.compile_plan(plan)
        assert ("tl.static_range(" in mods[rolled].source) != rolled
        v = validate(plan, g, inputs, refs=refs)
        assert v.ok, v.reason
    times = {False: [], True: []}
    for _ in range(3):
        for rolled in (False, True):
            ROLLED["on"] = rolled
            times[rolled].append(benchmark(plan, inputs, 5, 40).median_us)
    for rolled in (False, True):
        ts = sorted(times[rolled])
        rows.append({"M": M, "config": cfg.short(), "tail": "range" if rolled else "static_range", "us": ts[1],
                     "rounds": ts})
        print(f"M{M} {cfg.short():34s} {'range' if rolled else 'static_range':13s} {ts[1]:6.1f} {ts}", flush=True)
os.makedirs(out, exist_ok=True)
with open(os.path.join(out, "tail_ab.json"), "w") as f:
    json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
