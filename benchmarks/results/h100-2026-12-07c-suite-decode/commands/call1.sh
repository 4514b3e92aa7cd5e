# issue 27, session 09: the suite's decode rows with the wave-split search (12, 13 first: the int4 goal rows),
# then w8 M1/M4 and the small-M reference rows (no case slower), then decode rows for the learned model with what time is left.
LIMIT=${LIMIT:-560}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
W=/tmp/res1; rm -rf $W; mkdir -p $W/commands; cp gpu/call1.sh $W/commands/
pack() { tar czf $OUT/all.tar.gz -C $W . ; }
left() { echo $((LIMIT - SECONDS)); }
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $W/gpu.txt; cat $W/gpu.txt
git log -1 --format=%H > $W/commit.txt 2>/dev/null
timeout $(( $(left) - 20 )) python3 benchmarks/suite.py --out $W/suite_a --cases 12,13 > $W/suite_a.log 2>&1
echo "suite_a rc $? at ${SECONDS}s"; grep -v "Warning\|warn" $W/suite_a.log | tail -4; pack
[ $(left) -gt 200 ] && { timeout $(( $(left) - 60 )) python3 benchmarks/suite.py --out $W/suite_b --cases 10,11,0,4,3,8 > $W/suite_b.log 2>&1
  echo "suite_b rc $? at ${SECONDS}s"; grep -v "Warning\|warn" $W/suite_b.log | tail -5; pack; }
[ $(left) -gt 60 ] && { timeout $(( $(left) - 15 )) python3 -m fusionsearch costmodel collect --family decode --graphs 250 \
  --plans-per-graph 10 --seed 9500 --out $W/decode.jsonl.gz > $W/collect.log 2>&1; echo "collect rc $? at ${SECONDS}s"
  tail -2 $W/collect.log; pack; }
for f in $W/suite_a/suite.md $W/suite_b/suite.md; do [ -f $f ] && tail -6 $f; done
