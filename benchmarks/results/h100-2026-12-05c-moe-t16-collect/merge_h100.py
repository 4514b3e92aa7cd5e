"""One H100 dataset from this session's three collections. The first experts collection ran before the H100
had its own profile (it was priced at the H200's 4.27e12 B/s): its rows take the H100 profile (3.00e12) and
are re-featured from the graph, plan and compiled resources they carry, as a schema change would be.

    python benchmarks/results/h100-2026-12-05c-moe-t16-collect/merge_h100.py \
        /work/.device/1/h100-experts.jsonl.gz /work/.device/2/h100-experts-2.jsonl.gz \
        /work/.device/4/h100-mixed.jsonl.gz fusionsearch/datasets/data/h100-measurements.jsonl.gz
"""

import gzip
import json
import sys

from fusionsearch.costmodel.features import FEATURE_SCHEMA_VERSION, recompute_features
from fusionsearch.hardware import H100

*sources, out = sys.argv[1:]
rows = []
for path in sources:
    with gzip.open(path, "rt") as f:
        part = [json.loads(line) for line in f]
    old = [r for r in part if r["hardware"]["profile"]["bandwidth_bytes_per_s"] != H100.bandwidth_bytes_per_s]
    for r in old:
        r["hardware"]["profile"] = H100.to_dict()
        r["schema_version"] = FEATURE_SCHEMA_VERSION - 1  # re-featured on the profile it now carries
    fixed, dropped = recompute_features(part)
    assert dropped == 0 and len(fixed) == len(part), (path, dropped)
    print(f"{path}: {len(part)} rows, {len({r['graph_id'] for r in part})} graphs, {len(old)} re-featured")
    rows += fixed
with gzip.open(out, "wt") as f:
    for r in rows:
        f.write(json.dumps(r) + "\n")
print(f"{out}: {len(rows)} rows, {len({r['graph_id'] for r in rows})} graphs")
