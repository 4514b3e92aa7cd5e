#!/bin/bash
# More mixed-family graphs for the H100 dataset (resumes the same seeded collection)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
cp gpu/h100-mixed.jsonl.gz $OUT/
timeout 300 python3 -m fusionsearch costmodel collect --graphs 90 --plans-per-graph 10 --seed 7000 \
  --out $OUT/h100-mixed.jsonl.gz > $OUT/collect-mixed-2.log 2>&1; echo "collect rc $?"
grep "^graph" $OUT/collect-mixed-2.log | tail -2
