# issue 27, int4: (1) the decode groups form against the rows form and the 06 l probe, M16 and M1, same rounds;
# (2) the same configs on the int4 graph with a constant shift amount (benchmarks/results/cpu-2026-12-06m-runtime-shift-sass/w4_const_shift.py): on sm_90 SASS the
# runtime shift amounts of w4_dequant_mm keep B's dot operand from registers (a shared-memory round trip a tile)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
mkdir -p $OUT/commands; cp gpu/call1.sh $OUT/commands/
P=benchmarks/results/h100-2026-12-06l-w4-loop-parts/commands/w4_magic.py
D="decode dot"
M16="$D n256 k64 sk8 w4 s3 pairs words rows;$D n256 k64 sk8 w4 s3 pairs words rows groups;$D n256 k64 sk8 w4 s3 pairs words groups"
M16="$M16;$D n128 k128 sk4 w4 s3 pairs words;$D n128 k128 sk4 w4 s3 pairs words groups;$D n128 k128 sk4 w4 s3 pairs words rows groups"
M16="$M16;$D n256 k128 sk4 w4 s3 pairs words rows groups;$D n128 k64 sk8 w4 s3 pairs words rows groups"
M16="$M16;$D n256 k64 sk8 w4 s4 pairs words rows groups;$D n256 k32 sk16 w4 s3 pairs words rows groups"
timeout 200 python3 benchmarks/decode_forms_gpu.py --out $OUT/m16 --case w4_dequant_mm:M=16,K=4096,N=11008,G=128 \
  --configs "$M16" --probe $P --probe-configs "magic 256 64 8 4 3;magic 128 128 4 4 3" > $OUT/m16.log 2>&1; echo "m16 rc $?"
M1="decode fma_acc n256 k64 sk8 w4 s3 pairs words;$D n256 k64 sk8 w4 s3 pairs words rows"
M1="$M1;$D n256 k64 sk8 w4 s3 pairs words rows groups;$D n128 k128 sk4 w4 s3 pairs words groups"
timeout 150 python3 benchmarks/decode_forms_gpu.py --out $OUT/m1 --case w4_dequant_mm:M=1,K=4096,N=11008,G=128 \
  --configs "$M1" --probe $P --probe-configs "magic 256 64 8 4 4" > $OUT/m1.log 2>&1; echo "m1 rc $?"
for m in 16 1; do
  python3 benchmarks/results/cpu-2026-12-06m-runtime-shift-sass/w4_const_shift.py $m $OUT/w4c$m.json
  timeout 150 python3 benchmarks/decode_forms_gpu.py --out $OUT/c$m --case $OUT/w4c$m.json --configs "$([ $m = 16 ] && echo "$M16" || echo "$M1")" \
    > $OUT/c$m.log 2>&1; echo "const m$m rc $?"
done
for f in m16 m1 c16 c1; do grep -v "Warning\|warn" $OUT/$f.log | tail -14; done
