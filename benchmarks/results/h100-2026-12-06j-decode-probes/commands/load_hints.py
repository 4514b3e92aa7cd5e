"""GPU: the decode GEMVs' weight stream under cache hints (prototype). The generated module of each case's
searched config, its K loop's weight load given an eviction policy / cache modifier by text, loaded from a file,
validated against float64 and timed interleaved with the unmodified module (5 rounds, clean L2 flush)."""
import argparse
import hashlib
import importlib.util
import json
import os
import re
import sys

import torch

import fusionsearch as fs
from fusionsearch.codegen.module import generate_module
from fusionsearch.graph.reference import reference
from fusionsearch.graph.tolerance import rel_error
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
from fusionsearch.measure.bench import time_interleaved
from fusionsearch.plan import fully_fused

sys.path.insert(0, os.getcwd())
from benchmarks.decode_sweep_gpu import with_kernel  # noqa: E402

CASES = [("w8_dequant_mm", {"M": 1, "K": 8192, "N": 8192}, "decode dot_t n128 k64 sk8 w4 s3"),
         ("w8_dequant_mm", {"M": 4, "K": 8192, "N": 8192}, "decode dot_t n128 k64 sk8 w4 s3"),
         ("w8_dequant_mm", {"M": 16, "K": 8192, "N": 8192}, "decode dot_t n128 k64 sk8 w4 s3"),
         ("mm_bias_gelu", {"M": 16, "K": 4096, "N": 4096}, "decode dot n64 k32 sk8 w8 s4")]
VARIANTS = {"base": None, "evict_first": "eviction_policy='evict_first'", "cg": "cache_modifier='.cg'",
            "cg_evict_first": "cache_modifier='.cg', eviction_policy='evict_first'"}
WEIGHT_LOAD = re.compile(r"^(\s+ld1 = tl\.load\(in1_ptr \+ .*)\)$", re.M)


def load_module(src: str, tag: str):
    path = f"/tmp/fsvar/m_{tag}_{hashlib.sha1(src.encode()).hexdigest()[:10]}.py"
    os.makedirs("/tmp/fsvar", exist_ok=True)
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(out):
    os.makedirs(out, exist_ok=True)
    rows = []
    for name, shape, label in CASES:
        g = fs.workload(name, dtype=torch.bfloat16, **shape)
        cfg = DecodeConfig.from_short(label)
        plan = with_kernel(fully_fused(g), lambda k, cfg=cfg: DecodeKernel(k.matmul, k.prologue_a, k.prologue_b,
                                                                           k.epilogue, cfg))
        src = generate_module(plan).source
        assert len(WEIGHT_LOAD.findall(src)) == 1, WEIGHT_LOAD.findall(src)
        inputs = fs.random_inputs(g, seed=0, device="cuda")
        ref = reference(g, [t.cpu() for t in inputs], float64=True)[0]
        fns = {}
        for v, hint in VARIANTS.items():
            s = src if hint is None else WEIGHT_LOAD.sub(lambda m, h=hint: f"{m.group(1)}, {h})", src)
            mod = load_module(s, v)
            y = mod.run(*inputs)[0]
            torch.cuda.synchronize()
            err = rel_error(y.cpu(), ref)
            print(name, shape, v, "rel err", err, flush=True)
            fns[v] = (lambda mod=mod, inputs=inputs: mod.run(*inputs))
        times = time_interleaved(fns, rounds=7, warmup_ms=5, rep_ms=30)
        med = {v: sorted(ts)[len(ts) // 2] for v, ts in times.items()}
        row = {"case": name, "shape": shape, "config": label, "median_us": med, "rounds": times}
        rows.append(row)
        print(json.dumps({k: row[k] for k in ("case", "shape", "median_us")}), flush=True)
        with open(os.path.join(out, "load_hints.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    print(f"{'case':34s} " + " ".join(f"{v:>15s}" for v in VARIANTS))
    for r in rows:
        label = r["case"] + " M" + str(r["shape"]["M"])
        print(f"{label:34s} " + " ".join(f"{r['median_us'][v]:15.1f}" for v in VARIANTS))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/load_hints")
    main(ap.parse_args().out)
