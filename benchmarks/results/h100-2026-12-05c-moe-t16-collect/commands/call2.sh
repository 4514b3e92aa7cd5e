#!/bin/bash
# The suite's moe T16 row (its search failed twice last session: now the error names the trials' reasons),
# then more of the experts-family collection (no float16 now) on this GPU
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
( while sleep 3; do nvidia-smi --query-gpu=memory.used --format=csv,noheader; done ) > $OUT/mem.txt &
timeout 300 python3 benchmarks/suite.py --cases 15 --out $OUT/suite-15 > $OUT/suite-15.log 2>&1; echo "suite rc $?"
kill %1
tail -6 $OUT/suite-15.log; sort -n $OUT/mem.txt | tail -1
python3 -c "
import json; r=json.load(open('$OUT/suite-15/suite.json'))['rows'][0]['variants']['fusionsearch']
print({k: r.get(k) for k in ('error','median_us','counts','plan')})" 2>&1 | cut -c1-1500
timeout 270 python3 -m fusionsearch costmodel collect --family experts --graphs 30 --plans-per-graph 10 --seed 6000 \
  --out $OUT/h100-experts-2.jsonl.gz > $OUT/collect-experts-2.log 2>&1; echo "collect rc $?"
tail -3 $OUT/collect-experts-2.log
