"""GPU: named decode configs of one case timed in the same interleaved rounds (issue 27), each the fully fused
plan with its matmul on that config, validated against float64; beside them the floor, a device copy of the
floor's bytes and, with --probe, a handwritten kernel's launcher (a probe's `launcher(x, w, s, z, bn, bk,
split, warps, stages, form)` for the int4 GEMV) in the same rounds. What a new config form is worth against the
form it refines, without a search's choice in between. A label ending in `|notail` is that config with its split-K
reduction cut off (each slice stores its partial and stops: no arrival counter, no last-slice sum or epilogue),
timed though its output is not the product: what the reduction costs the whole kernel.

Run on the GPU machine:
    PYTHONPATH=. python benchmarks/decode_forms_gpu.py --out $OUT --case w4_dequant_mm:M=16,K=4096,N=11008,G=128 \\
        --configs "decode dot n256 k64 sk8 w4 s3 pairs words rows;decode dot n128 k128 sk4 w4 s3 pairs words"
Writes forms.json under --out; prints each config's median, ratio to the floor and error, fastest first."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from typing import Any

import torch

import fusionsearch as fs
from fusionsearch.codegen.module import generate_module
from fusionsearch.codegen.runtime import load_source
from fusionsearch.costmodel.analytic import least_bytes, matmul_flops
from fusionsearch.errors import failure_reason
from fusionsearch.graph.spec import load_graph
from fusionsearch.graph.tolerance import output_tolerances, rel_error
from fusionsearch.measure.bench import measure_ceilings, time_interleaved

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.bytes_in_flight import with_config  # noqa: E402
from benchmarks.harness import add_out, floor_us, out_file, run_facts, write_json  # noqa: E402
from benchmarks.suite import measure_copy  # noqa: E402


def parse_case(text: str) -> tuple[str, dict[str, int]]:
    """`workload:K=V,K=V` as (workload, shape)."""
    name, _, shape = text.partition(":")
    return name, {k: int(v) for k, v in (kv.split("=") for kv in shape.split(",") if kv)}


def probe_runs(path: str, inputs: list[torch.Tensor], specs: list[str]) -> dict[str, Any]:
    """The probe's kernels, one per spec `form bn bk split warps stages` (form: the launcher's last argument,
    `magic` for its dot form, `read` for a bare read of the weight on that grid: timed, never valid), as
    callables on the int4 GEMV's inputs: (x, w, s, z), or (x, w, shifts, s, z) where the shifts are an input."""
    spec = importlib.util.spec_from_file_location("probe", path)
    assert spec and spec.loader
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    x, w, s, z = inputs if len(inputs) == 4 else (inputs[0], inputs[1], inputs[3], inputs[4])  # shifts: constant
    runs = {}
    for text in specs:
        form, *numbers = text.split()
        bn, bk, split, warps, stages = map(int, numbers)
        runs[f"probe {text}"] = probe.launcher(x, w, s, z, bn, bk, split, warps, stages,
                                               {"magic": False, "magic-fma": "fma", "magic-fma3": "fma3",
                                                "read": "read"}[form])
    return runs


def without_tail(source: str) -> str:
    """A split-K kernel's source with everything after its slice's partial store removed (the arrival counter,
    the last slice's sum and epilogue)."""
    start = source.index("\n    tl.debug_barrier()\n    sem_off = ")
    return source[:start] + source[source.index("\n\n", start):]


def build(g: fs.OpGraph, text: str) -> tuple[Any, bool]:
    """The loaded module of a config label (`label|notail`: without its split-K tail), and whether its output is
    the product (False: timed only)."""
    label, _, variant = (part.strip() for part in text.partition("|"))
    if variant not in ("", "notail"):
        raise SystemExit(f"unknown variant {variant!r}: use label|notail")
    source = generate_module(with_config(g, label)).source
    return load_source(without_tail(source) if variant else source), not variant


def main() -> None:
    ap = argparse.ArgumentParser()
    add_out(ap, "forms.json")
    ap.add_argument("--case", required=True, help="workload:K=V,... (bf16), or a graph spec .json")
    ap.add_argument("--configs", required=True, help="';'-separated decode config labels")
    ap.add_argument("--probe", default="", help="a probe script with launcher() (the int4 GEMV's)")
    ap.add_argument("--probe-configs", default="", help="';'-separated 'form bn bk split warps stages'")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if args.case.endswith(".json"):  # a graph spec file (a probe's variant of a workload)
        name, shape, g = args.case, {}, load_graph(args.case)
    else:
        name, shape = parse_case(args.case)
        g = fs.workload(name, **shape)
    inputs = fs.random_inputs(g, seed=0, device="cuda")
    (ref,) = fs.reference(g, inputs, float64=True)
    tol = output_tolerances(g)[0]
    fns, rows = {}, {}
    for label in (c.strip() for c in args.configs.split(";") if c.strip()):
        try:
            mod, product = build(g, label)
            (y,) = mod.run(*inputs)
            err = rel_error(y.double().cpu(), ref.cpu())
            rows[label] = {"rel_err": err, "ok": err <= tol, "timed_only": not product}
            if err <= tol or not product:
                fns[label] = lambda mod=mod: mod.run(*inputs)
        except Exception as e:  # noqa: BLE001 - a config that fails is a row saying why
            rows[label] = {"ok": False, "reason": failure_reason(e, 300)}
    if args.probe:
        for label, run in probe_runs(args.probe, inputs, [c for c in args.probe_configs.split(";") if c]).items():
            y = run()
            err = rel_error(y.double().cpu(), ref.cpu())
            rows[label] = {"rel_err": err, "ok": err <= tol}
            fns[label] = run
    nbytes = least_bytes(g)
    floor = floor_us(nbytes, matmul_flops(g), measure_ceilings())
    copy = measure_copy(nbytes)["median_us"]
    times = time_interleaved(fns, rounds=args.rounds, warmup_ms=5, rep_ms=25)
    for label, t in times.items():
        rows[label].update({"rounds_us": t, "median_us": sorted(t)[len(t) // 2] if t else None})
    report = {**run_facts("device", "torch", "triton"), "case": args.case, "floor_us": floor, "floor_bytes": nbytes,
              "copy_same_bytes_us": copy, "rounds": args.rounds, "rows": rows}
    write_json(report, out_file(args.out, "forms.json"))
    print(f"{args.case}: floor {floor:.2f} us, copy {copy:.2f} us")
    for label in sorted(rows, key=lambda k: rows[k].get("median_us") or 1e9):
        r = rows[label]
        if r.get("median_us"):
            print(f"  {r['median_us']:7.2f} us  {r['median_us'] / floor:5.2f}x floor  err {r['rel_err']:.2e}  {label}  "
                  f"(rounds {min(r['rounds_us']):.2f}-{max(r['rounds_us']):.2f})"
                  + ("  timed only: not the product" if r.get("timed_only") else ""))
        else:
            print(f"  failed: {label}: {r.get('reason') or r.get('rel_err')}")


if __name__ == "__main__":
    main()
