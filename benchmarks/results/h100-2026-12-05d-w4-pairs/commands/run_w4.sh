set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
python benchmarks/decode_sweep_gpu.py --out $OUT/sweep --cases 3,4 > $OUT/sweep.log 2>&1 || echo "sweep rc $?"
python benchmarks/suite.py --out $OUT/suite --cases 12,13 > $OUT/suite.log 2>&1 || echo "suite rc $?"
tail -25 $OUT/sweep.log; tail -20 $OUT/suite.log
