# int4 GEMV on tensor cores, scale and zero after each K tile's dot (prototype gpu/w4_tc.py), M1 and M16
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $OUT/gpu.txt
timeout 500 python3 gpu/w4_tc.py --out $OUT/w4tc --ms 1,16 > $OUT/w4_tc.log 2>&1; echo "w4tc rc $?"
tail -32 $OUT/w4_tc.log
