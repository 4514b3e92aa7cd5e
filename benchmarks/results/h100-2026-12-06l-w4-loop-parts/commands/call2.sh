# int4 GEMV probe, call 2 (gpu/w4_magic.py --gpu2): the scale fix once a group (magic-g; strided or row scale
# loads), what the loop costs without each part (ablations: loads+dots only, without the split-K reduction), a
# bare read of the packed weight on the same grids and a copy of it; 5 interleaved rounds, M16 then M1.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
mkdir -p $OUT/commands; cp gpu/call2.sh gpu/w4_magic.py $OUT/commands/
timeout 330 python3 gpu/w4_magic.py --gpu2 $OUT/magic2 > $OUT/magic2.log 2>&1; echo "magic2 rc $?"
grep -v "Warning\|warn" $OUT/magic2.log | tail -60
