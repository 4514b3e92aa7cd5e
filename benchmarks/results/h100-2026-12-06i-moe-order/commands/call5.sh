# call 5: L2 prefetch of each CTA's weight range at the start of the decode GEMVs (prototype, text-patched)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 300 python3 gpu/l2_prefetch.py > $OUT/l2_prefetch.md 2>&1; echo "rc $?"
cat $OUT/l2_prefetch.md
