# issue 27, session 10, second call on the same machine: the same six cases with the code of the last committed
# suite run of them (f590537, H200 12-05), for a same-machine comparison; then swiglu M16's projections swept.
LIMIT=${LIMIT:-560}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
W=/tmp/res2; rm -rf $W; mkdir -p $W/commands; cp gpu/call*.sh $W/commands/
pack() { tar czf $OUT/all.tar.gz -C $W . ; }
left() { echo $((LIMIT - SECONDS)); }
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $W/gpu.txt; cat $W/gpu.txt
if [ "${OLD:-1}" = 1 ]; then
  (cd gpu/old && PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache_old timeout $(( LIMIT - SECONDS - 100 )) \
    python3 benchmarks/suite.py --skip-max-autotune --out $W/suite_old --cases 1,2,5,6,7,9 > $W/suite_old.log 2>&1)
  echo "suite_old rc $? at ${SECONDS}s"; grep "^\[" $W/suite_old.log; pack
fi
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
[ $(left) -gt 60 ] && { timeout $(( $(left) - 10 )) python3 benchmarks/decode_sweep_gpu.py --cases 7,8 --out $W/sweep > $W/sweep.log 2>&1
  echo "sweep rc $? at ${SECONDS}s"; pack; }
grep -v -i "warn\|autotune" $W/sweep.log | tail -8
