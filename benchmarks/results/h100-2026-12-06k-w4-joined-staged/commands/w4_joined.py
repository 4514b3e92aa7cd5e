"""CPU (SASS) and GPU (time): the int4 M16 words-dot decode kernel with its eight byte-position/parity tiles
joined into one [BLOCK_K, BLOCK_N] tile in natural order and one tl.dot a K step (one trip to the dot operand's
layout, not eight), against the kernel as generated. `--sass`: sm_90 loop figures on the CPU."""
import hashlib
import importlib.util
import json
import os
import re
import sys

import torch

import fusionsearch as fs
from fusionsearch.codegen import resources as R
from fusionsearch.codegen.module import generate_module
from fusionsearch.graph.reference import reference
from fusionsearch.graph.tolerance import rel_error
from fusionsearch.kinds.decode_matmul import DecodeConfig, DecodeKernel
from fusionsearch.measure.bench import time_interleaved
from fusionsearch.plan import fully_fused

sys.path.insert(0, ".")
from benchmarks.decode_sweep_gpu import with_kernel  # noqa: E402

JOIN = """        be = tl.reshape(tl.join(tl.join(b_e0, b_e2), tl.join(b_e1, b_e3)), (BLOCK_K // 2, BLOCK_N))
        bo = tl.reshape(tl.join(tl.join(b_o0, b_o2), tl.join(b_o1, b_o3)), (BLOCK_K // 2, BLOCK_N))
        bb = tl.reshape(tl.permute(tl.join(be, bo), (0, 2, 1)), (BLOCK_K, BLOCK_N))
        acc = tl.dot(a, bb, acc)
"""


def joined(source: str) -> str:
    """The generated words-dot module with one joined tile and one dot a K step."""
    lines = source.split("\n")
    out = []
    for line in lines:
        s = line.strip()
        if re.match(r"accw\d = tl\.zeros", s):
            if s.startswith("accw0"):
                out.append(line.replace("accw0", "acc").replace("BLOCK_N // 4", "BLOCK_N"))
            continue
        if re.match(r"accw\d = tl\.dot", s) or s.startswith("a_e, a_o = tl.split"):
            continue
        if s.startswith("acc = tl.reshape(tl.join(tl.join(accw0"):
            continue
        out.append(line)
        if s.startswith("b_o3 = "):
            out.append(JOIN.rstrip("\n"))
    return "\n".join(out)


SCALE_LOAD = re.compile(r"^(\s+)(ld\d+) = tl\.load\((in[34])_ptr \+ (\(kb\)|\(\(kb\) // \d+\)) \* in[34]_s0 \+ "
                        r"\(\(idx_w \* 4 \+ (\d)\)\) "
                        r"\* in[34]_s1\)\[None, :\]$", re.M)
# byte position j of a contiguous [BLOCK_N] row: reshape [BLOCK_N/4, 2, 2] (4w + 2a + b), split b then a
STAGE = """{ind}{t}_row = tl.load({t}_ptr + {row} * {t}_s0 + (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) * {t}_s1)
{ind}{t}_h0, {t}_h1 = tl.split(tl.reshape({t}_row, (BLOCK_N // 4, 2, 2)))
{ind}{t}_j0, {t}_j2 = tl.split({t}_h0)
{ind}{t}_j1, {t}_j3 = tl.split({t}_h1)"""


def staged(source: str) -> str:
    """The group scales and zeros loaded as contiguous [BLOCK_N] rows once a K step and split into the four
    byte positions in registers, in place of eight loads of BLOCK_N / 4 elements four apart."""
    done = set()

    def sub(m):
        ind, name, t, row, j = m.groups()
        head = "" if t in done else STAGE.format(ind=ind, t=t, row=row) + "\n"
        done.add(t)
        return f"{head}{ind}{name} = {t}_j{j}[None, :]"
    out = SCALE_LOAD.sub(sub, source)
    assert done == {"in3", "in4"}, done
    return out


def plan_for(label: str, rows: int = 16):
    g = fs.workload("w4_dequant_mm", dtype=torch.bfloat16, M=rows, K=4096, N=11008, G=128)
    cfg = DecodeConfig.from_short(label)
    return g, cfg, with_kernel(fully_fused(g), lambda k: DecodeKernel(k.matmul, k.prologue_a, k.prologue_b,
                                                                      k.epilogue, cfg))


LABELS = ["decode dot n128 k128 sk4 w4 s3 pairs words", "decode dot n64 k128 sk4 w4 s3 pairs words",
          "decode dot n128 k64 sk8 w4 s3 pairs words", "decode dot n256 k64 sk8 w4 s3 pairs words",
          "decode dot n64 k128 sk4 w4 s4 pairs words", "decode dot n128 k128 sk4 w8 s3 pairs words"]

FORMS = {"per-tile": lambda s: s, "joined": joined, "staged": staged, "joined+staged": lambda s: joined(staged(s))}


def per_tile_source(plan) -> str:
    """The module as generated before the generator joined the words-dot tiles (each tile's own dot)."""
    from fusionsearch.kinds.decode_matmul import source as decode_source
    keep = decode_source.joins_tiles
    decode_source.joins_tiles = lambda c: False
    try:
        return generate_module(plan).source
    finally:
        decode_source.joins_tiles = keep


def load_module(src: str, tag: str):
    path = f"/tmp/fsvar/m_{tag}_{hashlib.sha1(src.encode()).hexdigest()[:10]}.py"
    os.makedirs("/tmp/fsvar", exist_ok=True)
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def gpu(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    g, _, _ = plan_for(LABELS[0])
    inputs = fs.random_inputs(g, seed=0, device="cuda")
    ref = reference(g, [t.cpu() for t in inputs], float64=True)[0]
    fns, errs = {}, {}
    for label in LABELS:
        _, _, plan = plan_for(label)
        src, generated = per_tile_source(plan), generate_module(plan).source
        assert joined(src) != src and "accw" not in generated
        for form, edit in FORMS.items():
            key = f"{label[7:-12]} {form}"
            try:
                mod = load_module(edit(src), form.replace("+", "_"))
                if form == "joined":  # the generator's own, beside the hand edit
                    gen = load_module(generated, "generated")
                    y = gen.run(*inputs)[0]
                    torch.cuda.synchronize()
                    errs[f"{label[7:-12]} generator's joined"] = rel_error(y.cpu(), ref)
                    fns[f"{label[7:-12]} generator's joined"] = (lambda gen=gen: gen.run(*inputs))
                y = mod.run(*inputs)[0]
                torch.cuda.synchronize()
                errs[key] = rel_error(y.cpu(), ref)
                fns[key] = (lambda mod=mod: mod.run(*inputs))
            except Exception as e:  # noqa: BLE001
                print(key, "failed:", str(e)[:300], flush=True)
    times = time_interleaved(fns, rounds=7, warmup_ms=5, rep_ms=30)
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items() if v}
    with open(os.path.join(out, "w4_joined.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "median_us": med, "rounds": times, "rel_err": errs}, f,
                  indent=1)
    for k in sorted(med, key=med.get):
        print(f"  {k:48s} {med[k]:7.2f} us  rel err {errs[k]:.2e}", flush=True)


if __name__ == "__main__" and "--gpu" in sys.argv:
    gpu(sys.argv[-1])

if __name__ == "__main__" and "--sass" in sys.argv:
    for label in LABELS:
        g, cfg, plan = plan_for(label)
        mod = generate_module(plan)
        mod = type("M", (), {"source": per_tile_source(plan), "kernels": mod.kernels})
        per = cfg.block_n * cfg.block_k / (32 * cfg.num_warps)
        for form, edit in FORMS.items():
            src = edit(mod.source)
            sass = R._sass(R.compile_kernel(g, mod.kernels[0], src, 90)[0])
            regs = R._usage(R.compile_kernel(g, mod.kernels[0], src, 90)[0])
            ops = R.loop_opcodes(sass)
            n = sum(ops.values())
            print(f"{label} {form}: regs/stack {regs}, {n} loop instr = {n / per:.2f}/elem; "
                  f"BAR {ops.get('BAR', 0)} STS {ops.get('STS', 0)} LDS {ops.get('LDS', 0)} LDSM {ops.get('LDSM', 0)} "
                  f"HMMA {ops.get('HMMA', 0)} LDG {ops.get('LDG', 0)}", flush=True)
