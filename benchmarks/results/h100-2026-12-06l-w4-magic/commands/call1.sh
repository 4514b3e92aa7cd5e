# int4 GEMV probe: group scale/zero after the dot, B as exact bf16 magic values (gpu/w4_magic.py), against the
# generated kernels, M1 and M16, 5 interleaved rounds; then the mm_bias_gelu M16 suite row again (1.296x in 06 k)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
mkdir -p $OUT/commands; cp gpu/call1.sh gpu/w4_magic.py $OUT/commands/
timeout 300 python3 gpu/w4_magic.py --gpu $OUT/magic > $OUT/magic.log 2>&1; echo "magic rc $?"
grep -v "Warning\|warn" $OUT/magic.log | tail -50
timeout 200 python3 benchmarks/suite.py --out $OUT/suite --cases 4 > $OUT/suite.log 2>&1; echo "suite rc $?"
rm -f $OUT/suite/suite.png
grep "^| [wgm]" $OUT/suite.log | cut -c1-300
