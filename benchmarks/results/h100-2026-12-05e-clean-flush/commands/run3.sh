python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
nvidia-smi --query-gpu=name --format=csv,noheader
date +%s > $OUT/t0
timeout 130 python gpu/w8_gap.py --out $OUT/gap > $OUT/gap.log 2>&1 || echo "gap rc $?"
date +%s >> $OUT/t0
timeout 230 python benchmarks/suite.py --out $OUT/suite --cases 12,13,14,15 > $OUT/suite.log 2>&1 || echo "suite rc $?"
date +%s >> $OUT/t0
cat $OUT/t0; tail -24 $OUT/gap.log; tail -9 $OUT/suite/suite.md
