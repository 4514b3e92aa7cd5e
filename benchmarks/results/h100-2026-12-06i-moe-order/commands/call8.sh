# call 8: Triton's warp specialisation on the decode GEMVs' K loop (prototype, text-patched)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
timeout 150 python3 gpu/ws_probe.py > $OUT/ws_probe.md 2>&1; echo "rc $?"
cat $OUT/ws_probe.md
