#!/bin/bash
# The decode family (fe47440) for the H100 dataset: w8 / int4 / 16-bit / gathered matmuls at 1-16 rows
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
timeout 545 python3 -m fusionsearch costmodel collect --family decode --graphs 120 --plans-per-graph 10 --seed 9000 \
  --out $OUT/decode.jsonl.gz > $OUT/collect-decode.log 2>&1; echo "collect rc $?"
tail -3 $OUT/collect-decode.log | cut -c1-600
