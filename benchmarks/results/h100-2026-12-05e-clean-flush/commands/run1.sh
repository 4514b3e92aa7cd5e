set -e
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
nvidia-smi --query-gpu=name --format=csv,noheader
date +%s > $OUT/t0
timeout 170 python benchmarks/read_stream_gpu.py --out $OUT/read > $OUT/read.log 2>&1 || echo "read rc $?"
date +%s >> $OUT/t0
timeout 380 python benchmarks/decode_sweep_gpu.py --out $OUT/sweep --cases 0,3,4 --tma > $OUT/sweep.log 2>&1 || echo "sweep rc $?"
date +%s >> $OUT/t0
cat $OUT/t0; tail -40 $OUT/read.log; tail -30 $OUT/sweep.log
