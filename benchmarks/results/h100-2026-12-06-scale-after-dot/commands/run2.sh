python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 400 python3 benchmarks/decode_sweep_gpu.py --out $OUT/sweep --cases 2,5,0 > $OUT/sweep.log 2>&1; echo sweep rc $?
tail -45 $OUT/sweep.log
