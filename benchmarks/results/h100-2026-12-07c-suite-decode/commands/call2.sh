# issue 27, session 09, second call: MoE T1/T16/T512 with every mode, then the large reference rows without
# max-autotune (the comparison with the last committed suite run of the same GPU).
LIMIT=${LIMIT:-560}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
W=/tmp/res2; rm -rf $W; mkdir -p $W/commands; cp gpu/call2.sh $W/commands/
pack() { tar czf $OUT/all.tar.gz -C $W . ; }
left() { echo $((LIMIT - SECONDS)); }
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $W/gpu.txt; cat $W/gpu.txt
timeout $(( $(left) - 20 )) python3 benchmarks/suite.py --out $W/suite_c --cases 14,15,16 > $W/suite_c.log 2>&1
echo "suite_c rc $? at ${SECONDS}s"; grep -v "Warning\|warn" $W/suite_c.log | tail -4; pack
[ $(left) -gt 150 ] && { timeout $(( $(left) - 15 )) python3 benchmarks/suite.py --skip-max-autotune --out $W/suite_d \
  --cases 1,2,5,6,7,9 > $W/suite_d.log 2>&1; echo "suite_d rc $? at ${SECONDS}s"; grep -v "Warning\|warn" $W/suite_d.log | tail -7; pack; }
for f in $W/suite_c/suite.md $W/suite_d/suite.md; do [ -f $f ] && tail -8 $f; done
