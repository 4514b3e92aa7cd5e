# int4 tensor-core prototype: the scale/zero loads contiguous (pipelined, form 4) or prefetched a step ahead (form 5)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
timeout 300 python3 gpu/w4_tc.py --out $OUT/w4tc --ms 16,1 > $OUT/w4_tc.log 2>&1; echo "w4tc rc $?"
tail -32 $OUT/w4_tc.log
