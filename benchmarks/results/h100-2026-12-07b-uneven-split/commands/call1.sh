# issue 27, int4, H100 (session 08): (m1, m16) the decode kind's uneven split-K grids (sk3 / sk6 / sk12: 43 column
# blocks x 3 = 129 CTAs on 132 SMs) against the power-of-two splits measured fastest, and `|notail` (the split-K
# tail cut off, timed only) for what the reduction costs; the suite row 12 (w4 M1, every PyTorch mode) before the M16 configs.
# Steps are guarded by LIMIT (seconds); results are tarred into $OUT/all.tar.gz after each step.
LIMIT=${LIMIT:-560}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
W=/tmp/res1; rm -rf $W; mkdir -p $W/commands; cp gpu/call1.sh $W/commands/
pack() { tar czf $OUT/all.tar.gz -C $W . ; }
left() { echo $((LIMIT - SECONDS)); }
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $W/gpu.txt; cat $W/gpu.txt
F="decode fma_acc"; D="decode dot"; P="pairs words"
M1="$F n256 k64 sk8 w4 s3 $P;$F n256 k64 sk3 w4 s3 $P;$F n256 k64 sk6 w4 s3 $P;$F n256 k64 sk3 w4 s6 $P"
M1="$M1;$F n256 k64 sk3 w8 s4 $P;$D n256 k64 sk8 w4 s3 $P rows;$D n256 k64 sk3 w4 s3 $P rows;$D n256 k64 sk6 w4 s3 $P rows"
M1="$M1;$F n128 k64 sk6 w4 s3 $P;$F n512 k64 sk6 w8 s3 $P"
M1="$M1;$F n256 k64 sk8 w4 s3 $P|notail;$D n256 k64 sk8 w4 s3 $P rows|notail"
timeout $(( $(left) < 200 ? $(left) : 200 )) python3 benchmarks/decode_forms_gpu.py --out $W/m1 \
  --case w4_dequant_mm:M=1,K=4096,N=11008,G=128 --configs "$M1" > $W/m1.log 2>&1; echo "m1 rc $? at ${SECONDS}s"
grep -v "Warning\|warn" $W/m1.log | tail -16; pack
[ $(left) -gt 150 ] && { timeout $(( $(left) - 40 )) python3 benchmarks/suite.py --out $W/suite12 --cases 12 > $W/suite12.log 2>&1
  echo "suite12 rc $? at ${SECONDS}s"; tail -3 $W/suite12/suite.md; pack; }
M16="$D n256 k64 sk8 w4 s3 $P rows;$D n256 k64 sk3 w4 s3 $P rows;$D n256 k64 sk6 w4 s3 $P rows"
M16="$M16;$D n256 k32 sk16 w4 s3 $P rows;$D n256 k32 sk12 w4 s3 $P rows;$D n256 k128 sk4 w4 s3 $P rows"
M16="$M16;$D n256 k128 sk3 w4 s3 $P rows;$D n256 k64 sk8 w4 s3 $P rows|notail;$D n256 k32 sk16 w4 s3 $P rows|notail"
M16="$M16;$D n256 k128 sk4 w4 s3 $P rows|notail"
[ $(left) -gt 60 ] && { timeout $(( $(left) < 160 ? $(left) : 160 )) python3 benchmarks/decode_forms_gpu.py --out $W/m16 \
  --case w4_dequant_mm:M=16,K=4096,N=11008,G=128 --configs "$M16" > $W/m16.log 2>&1; echo "m16 rc $? at ${SECONDS}s"
  grep -v "Warning\|warn" $W/m16.log | tail -11; pack; }
