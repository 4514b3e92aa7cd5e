# mm_bias_gelu M16: template configs around max-autotune's pick, interleaved with max-autotune (gpu/mbg_configs.py)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
timeout 280 python3 gpu/mbg_configs.py $OUT/mbg > $OUT/mbg.log 2>&1; echo "mbg rc $?"
grep -v "^AUTOTUNE\|^  \|^strides\|^dtypes\|^Single\|^{" $OUT/mbg.log | tail -16
