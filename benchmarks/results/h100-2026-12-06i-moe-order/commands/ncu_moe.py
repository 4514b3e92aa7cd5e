"""GPU (issue 27): Nsight Compute on the MoE T512 grouped bmms (gate: K 4096 N 14336; down: K 14336 N 4096),
SiLU*up standalone, at the sweep's best block shape and several split-K. Run under
    ncu --clock-control none --profile-from-start off --kernel-name regex:'fs_kernel_(0|3)$' --set full ...
Prints the JSON list of labels, one per profiled launch (gate then down, per plan)."""
import json
import os
import sys

import torch

import fusionsearch as fs

sys.path.insert(0, os.getcwd())
from benchmarks.grouped_sweep_gpu import base_plan, grouped_plan  # noqa: E402

CONFIGS = [(128, 256, 64, 8, 3, "sk1"), (128, 256, 64, 8, 3, "sk2"), (128, 256, 64, 8, 3, "sk4")]


def main():
    g = fs.workload("moe_ffn", T=512, D=4096, H=14336, E=8, dtype=torch.bfloat16)
    base = base_plan(g, a_prologues=False)
    inputs = fs.random_inputs(g, seed=0, device="cuda")
    labels, runs = [], []
    for bm, bn, bk, w, s, pick in CONFIGS:
        plan = grouped_plan(base, g, bm, bn, bk, w, s, pick)
        run = fs.compile_plan(plan).module.run
        run(*inputs)
        runs.append(run)
        labels += [f"{name} m{bm} n{bn} k{bk} w{w} s{s} {pick}" for name in ("gate", "down")]
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for run in runs:
        run(*inputs)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print(json.dumps(labels))


if __name__ == "__main__":
    main()
