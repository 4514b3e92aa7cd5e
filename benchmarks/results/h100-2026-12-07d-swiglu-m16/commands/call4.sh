# issue 27, session 10, fourth call: swiglu M16's gate and up as one matmul of twice the columns, swept beside
# one of them alone (what fusing the two into one kernel would save).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
W=/tmp/res4; rm -rf $W; mkdir -p $W/commands; cp gpu/call4.sh $W/commands/
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $W/gpu.txt; cat $W/gpu.txt
timeout 200 python3 benchmarks/decode_sweep_gpu.py --cases 7,9 --out $W/sweep > $W/sweep.log 2>&1
echo "sweep rc $? at ${SECONDS}s"; tar czf $OUT/all.tar.gz -C $W .
grep -v -i "warn\|autotune" $W/sweep.log | tail -5
