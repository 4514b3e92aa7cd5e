# int4 one-row GEMV: register prefetch of the next K tile (no smem staging) against Triton's cp.async pipeline (gpu/w4_prefetch.py)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
timeout 300 python3 gpu/w4_prefetch.py --out $OUT/w4pf > $OUT/w4_prefetch.log 2>&1; echo "w4pf rc $?"
grep -v "^{" $OUT/w4_prefetch.log | tail -40
