"""The decode family's rows (two collections of 2026-12-06 e) split by graph: every other graph id (sorted) held
out, the rest appended to the H100 dataset of before for training.

    python split_halves.py /work/.device/7/decode.jsonl.gz /work/.device/8/decode-2.jsonl.gz
    cat h100-measurements-before.jsonl.gz decode-trainhalf.jsonl.gz > half-train.jsonl.gz"""
import gzip
import json
import sys

rows = []
for path in sys.argv[1:]:
    with gzip.open(path, "rt") as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # the torn last batch of a collection killed by its timeout
                pass
held = set(sorted({r["graph_id"] for r in rows})[::2])
for name, keep in (("decode-heldout", True), ("decode-trainhalf", False)):
    with gzip.open(f"{name}.jsonl.gz", "wt") as f:
        for r in rows:
            if (r["graph_id"] in held) == keep:
                f.write(json.dumps(r) + "\n")
print(len({r["graph_id"] for r in rows}), "graphs,", len(held), "held out")
