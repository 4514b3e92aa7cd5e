# call 6: the experts family (now decode and prefill token counts) collected for the H100 cost model
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 320 python3 -m fusionsearch costmodel collect --family experts --graphs 40 --plans-per-graph 10 --seed 9400 \
  --out $OUT/experts.jsonl.gz > $OUT/collect.log 2>&1; echo "collect rc $?"
tr '\r' '\n' < $OUT/collect.log | grep -v "^ *$" | tail -6 | cut -c1-300
