"""The rows `costmodel train --fp32-dot ieee` reads from today's dataset are exactly the dataset as it was before
the fp32 re-collection (git show de12809:fusionsearch/datasets/data/h200-measurements.jsonl.gz > OLD), in the same
order, and the file begins with them unchanged: the older models rebuild from this file (training is
deterministic: `--graphs 272` rebuilt run i's model with max relative difference 0.0).

    python benchmarks/results/h200-2026-12-04c-fp32-dot/one-off/ieee_rows.py OLD
"""

import sys

from fusionsearch.datasets.measurements import read_rows, rows_for_fp32_dot

old = read_rows(sys.argv[1])
new = read_rows("fusionsearch/datasets/data/h200-measurements.jsonl.gz")
ieee = rows_for_fp32_dot(new, "ieee")
print(f"rows: before {len(old)}, now {len(new)}, read with --fp32-dot ieee {len(ieee)}; the same rows in the same "
      f"order: {ieee == old}; the file begins with the old rows: {new[:len(old)] == old}")
