"""compare.md: the six large cases, this code (suite_new) against f590537 (suite_old), raw and over cuBLAS bare.
Run from the repository root: python benchmarks/results/h100-2026-12-07d-large-cases/commands/compare.py"""

import json
import sys

sys.path.insert(0, ".")
from benchmarks.suite import time_of  # noqa: E402

D = "benchmarks/results/h100-2026-12-07d-large-cases"


def rows(name: str) -> dict:
    with open(f"{D}/{name}/suite.json") as f:
        return {r["case"]: r for r in json.load(f)["rows"]}


def one_line(plan: str) -> str:
    return plan.replace("\n", "; ")


old, new = rows("suite_old"), rows("suite_new")
print("| case | plan f590537 | µs | cuBLAS bare | plan 9a8e63e (this code) | µs | cuBLAS bare | new ÷ old "
      "| new ÷ old, each ÷ its run's cuBLAS bare | same plan |")
print("|---|---|---|---|---|---|---|---|---|---|")
for case, n in new.items():
    o = old[case]
    po, pn = o["variants"]["fusionsearch"]["plan"], n["variants"]["fusionsearch"]["plan"]
    to, tn = time_of(o, "fusionsearch"), time_of(n, "fusionsearch")
    co, cn = time_of(o, "cublas_bare"), time_of(n, "cublas_bare")
    print(f"| {case} | {one_line(po)} | {to:.1f} | {co:.1f} | {one_line(pn)} | {tn:.1f} | {cn:.1f} | {tn / to:.3f} "
          f"| {(tn / cn) / (to / co):.3f} | {'yes' if po == pn else 'no'} |")
