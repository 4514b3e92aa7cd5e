python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
nvidia-smi --query-gpu=name --format=csv,noheader
date +%s > $OUT/t0
timeout 90 python benchmarks/l2_flush_gpu.py --out $OUT/flush > $OUT/flush.md 2> $OUT/flush.log || echo "flush rc $?"
date +%s >> $OUT/t0
timeout 440 python benchmarks/suite.py --out $OUT/suite --cases 10,11,0,3,4 > $OUT/suite.log 2>&1 || echo "suite rc $?"
date +%s >> $OUT/t0
cat $OUT/t0; cat $OUT/flush.md; tail -4 $OUT/flush.log; grep -v AUTOTUNE $OUT/suite.log | tail -30
