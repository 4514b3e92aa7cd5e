# (a) the decode GEMVs' weight load under cache hints (gpu/load_hints.py); (b) int4 tensor-core prototype with A loaded contiguously (gpu/w4_tc.py)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
timeout 200 python3 gpu/load_hints.py --out $OUT/hints > $OUT/load_hints.log 2>&1; echo "hints rc $?"
timeout 300 python3 gpu/w4_tc.py --out $OUT/w4tc --ms 1,16 > $OUT/w4_tc.log 2>&1; echo "w4tc rc $?"
grep -v "^{" $OUT/load_hints.log | tail -12; tail -26 $OUT/w4_tc.log
