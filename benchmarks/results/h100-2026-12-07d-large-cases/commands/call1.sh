# issue 27, session 10, first call: the six large reference cases with the current code (no max-autotune: the
# comparison is fusionsearch against its last run), then where swiglu M16 loses to max-autotune kernel by kernel.
LIMIT=${LIMIT:-560}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
W=/tmp/res1; rm -rf $W; mkdir -p $W/commands; cp gpu/call*.sh $W/commands/
pack() { tar czf $OUT/all.tar.gz -C $W . ; }
left() { echo $((LIMIT - SECONDS)); }
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $W/gpu.txt; cat $W/gpu.txt
timeout $(( $(left) - 120 )) python3 benchmarks/suite.py --skip-max-autotune --out $W/suite_new --cases 1,2,5,6,7,9 > $W/suite_new.log 2>&1
echo "suite_new rc $? at ${SECONDS}s"; grep "^\[" $W/suite_new.log; pack
[ $(left) -gt 80 ] && { timeout $(( $(left) - 10 )) python3 benchmarks/compiled_kernels_gpu.py --cases 8 --out $W/kernels > $W/kernels.log 2>&1
  echo "kernels rc $? at ${SECONDS}s"; pack; }
grep -A30 "^## \[" $W/kernels.log | grep -v AUTOTUNE | head -30
