#!/bin/bash
# The suite's moe T16 row again (the float64 reference now falls back to the host when the GPU is short),
# then mixed-family graphs (dense decode matmuls among them) for the H100 dataset
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
timeout 330 python3 benchmarks/suite.py --cases 15 --out $OUT/suite-15 > $OUT/suite-15.log 2>&1; echo "suite rc $?"
tail -5 $OUT/suite-15.log | cut -c1-1500
python3 -c "
import json; r=json.load(open('$OUT/suite-15/suite.json'))['rows'][0]['variants']['fusionsearch']
print({k: r.get(k) for k in ('error','median_us','counts','search_s','kernels')}); print(r.get('plan'))" 2>&1 | cut -c1-2500
timeout 200 python3 -m fusionsearch costmodel collect --graphs 40 --plans-per-graph 10 --seed 7000 \
  --out $OUT/h100-mixed.jsonl.gz > $OUT/collect-mixed.log 2>&1; echo "collect rc $?"
tail -2 $OUT/collect-mixed.log
