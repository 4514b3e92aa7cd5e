#!/bin/bash
# T16 search diagnosis, then the experts-family collection on this GPU (resumable; killed by timeout is fine)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv
( while sleep 5; do nvidia-smi --query-gpu=memory.used --format=csv,noheader; done ) > $OUT/mem.txt &
timeout 200 python3 -m fusionsearch search moe_ffn --shape T=16,D=4096,H=14336,E=8 --dtype bfloat16 --backend gpu \
  --trials 4 --out $OUT/t16 > $OUT/t16.log 2>&1; echo "search rc $?"
kill %1
tail -25 $OUT/t16.log; sort -n $OUT/mem.txt | tail -1
cp gpu/h100-experts.jsonl.gz $OUT/ 2>/dev/null
timeout 330 python3 -m fusionsearch costmodel collect --family experts --graphs 30 --plans-per-graph 10 --seed 5000 \
  --out $OUT/h100-experts.jsonl.gz > $OUT/collect-experts.log 2>&1; echo "collect rc $?"
tail -8 $OUT/collect-experts.log
