"""GPU: what the L2 flush between timed calls costs the timed kernel. triton.testing.do_bench zeroes 256 MB,
leaving L2 full of dirty lines whose write-back the next kernel pays; fusionsearch's timer reads 256 MB
(fusionsearch.measure.l2_flush), leaving it clean. Times reads and copies of several sizes after each flush
and after none: a read that fits L2 (16 MB) shows whether a flush evicts (after none it hits L2); the 67 MB
int8 weight of w8_dequant_mm K=N=8192 shows what a decode GEMV is charged.

Run on the GPU machine:  PYTHONPATH=. python benchmarks/l2_flush_gpu.py --out $OUT
Prints a table; writes l2_flush.json under --out."""

from __future__ import annotations

import argparse
import os
import sys

import torch

from fusionsearch.measure.l2_flush import (
    FLUSH_BLOCK,
    FLUSH_BYTES,
    FLUSH_PROGRAMS,
    CleanFlush,
    call_times_ms,
    quantiles,
    read_words,
)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.harness import add_out, md_table, out_file, run_facts, write_json  # noqa: E402

MB = 1 << 20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_out(ap, "l2_flush.json")
    args = ap.parse_args()
    dirty = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    flushes = {"zero 256 MB (do_bench)": dirty.zero_, "read 256 MB (fusionsearch)": CleanFlush(), "none": lambda: None}
    big = torch.randint(-2**31, 2**31 - 1, (1 << 28,), dtype=torch.int32, device="cuda")  # 1 GiB
    sink = torch.zeros(FLUSH_PROGRAMS, dtype=torch.int32, device="cuda")

    def read(nbytes: int):
        return lambda: read_words()[(sink.numel(),)](big, sink, nbytes // 4, FLUSH_BLOCK)

    def copy(nbytes: int):
        src, dst = big[:nbytes // 8], big[nbytes // 8:nbytes // 4]
        return lambda: dst.copy_(src)

    fns = {f"read {mb} MB": (read(mb * MB), mb) for mb in (16, 64, 128, 1024)}
    fns.update({f"copy {mb} MB ({mb // 2} read, {mb // 2} written)": (copy(mb * MB), mb) for mb in (64, 1024)})
    rows = []
    for name, (fn, mb) in fns.items():
        for flush_name, flush in flushes.items():
            us = quantiles(call_times_ms(fn, 25, 100, flush=flush), [0.5])[0] * 1e3
            rows.append({"call": name, "flush": flush_name, "us": us, "tb_per_s": mb * MB / us / 1e6})
            print(f"{name:36s} {flush_name:28s} {us:8.1f} us", file=sys.stderr, flush=True)
    facts = run_facts("device", "torch", "triton", date="utc")
    write_json({**facts, "rows": rows}, out_file(args.out, "l2_flush.json"))
    print("\n".join(md_table(["call", *flushes], [[name, *(f"{r['us']:.1f} µs ({r['tb_per_s']:.2f} TB/s)"
                                                           for r in rows if r["call"] == name)] for name in fns])))


if __name__ == "__main__":
    main()
