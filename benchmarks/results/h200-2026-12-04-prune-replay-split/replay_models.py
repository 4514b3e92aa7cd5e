"""Blind-order replays of the whole-space runs c-f (CPU) for model files given on the command line: geomean /
worst regret at a tenth of the space per run, and w8_dequant_mm M16's regret in each run.

    python benchmarks/results/h200-2026-12-04-prune-replay-split/replay_models.py MODEL.skops ...
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "h200-2026-12-04-prune-replay-236", "one-off"))
from replay_checks import cases, report  # noqa: E402

from fusionsearch.costmodel.learned import load  # noqa: E402

if __name__ == "__main__":
    all_cases = cases("cdef")
    for path in sys.argv[1:]:
        report(os.path.basename(path), load(path), all_cases)
