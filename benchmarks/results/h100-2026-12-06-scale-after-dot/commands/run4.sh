python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 140 python3 benchmarks/decode_sweep_gpu.py --out $OUT/sweep --cases 3,4 > $OUT/sweep.log 2>&1; echo sweep rc $?
timeout 50 python3 gpu/w8_layout.py time --out $OUT/layout > $OUT/layout.log 2>&1; echo layout rc $?
grep -v "^\s*$" $OUT/sweep.log | tail -28
tail -16 $OUT/layout.log
