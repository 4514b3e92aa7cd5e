# issue 27, int4: (a) the group scale and zero after each K step's product ("gad", gpu/variants.py: an edit of
# the generated source) and "pair" (each byte's nibble pair one bf16x2 of B's dot operand over the whole K block,
# dequantised in bf16x2 by inline PTX) against the generated kernels, M1 and M16, same rounds each; (b) more M1 stack-form
# configs; (c) the split-K tail one / two / four partials at a time, each in its own tree (one: matmul_tile.py as
# at 5433df5; two: reduction_chunk's limit 64 registers; four: HEAD, timed in (a)/(b)); (d) the suite row w8 M1 (10).
# Results are tarred into $OUT/all.tar.gz after each step.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
W=/tmp/res; mkdir -p $W/commands; cp gpu/call2.sh gpu/variants.py $W/commands/
pack() { tar czf $OUT/all.tar.gz -C $W . ; }
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $W/gpu.txt; cat $W/gpu.txt
D="decode dot"; F="decode fma_acc"; P="w4 s3 pairs words"
V1="$F n256 k64 sk8 $P;$F n256 k64 sk8 $P|gad;decode fma n256 k128 sk4 $P|gad_rows;decode fma n128 k128 sk4 $P|gad_rows"
V1="$V1;decode fma n128 k64 sk8 $P|gad_rows;$D n256 k64 sk8 $P rows;$D n256 k128 sk4 $P rows|gad_rows;$F n128 k128 sk4 $P"
V1="$V1;$D n256 k64 sk8 $P rows|pair"
timeout 150 python3 gpu/variants.py --out $W/v1 --case w4_dequant_mm:M=1,K=4096,N=11008,G=128 --configs "$V1" > $W/v1.log 2>&1
echo "v1 rc $?"; grep -v "Warning\|warn\|{" $W/v1.log | tail -10; pack
V16="$D n256 k64 sk8 $P rows;$D n256 k64 sk8 $P rows|gad_rows;$D n256 k128 sk4 $P rows|gad_rows;$D n128 k128 sk4 $P rows|gad_rows"
V16="$V16;$D n256 k128 sk4 $P rows;$D n256 k32 sk16 $P rows;$D n256 k64 sk8 $P rows|pair;$D n256 k128 sk4 $P rows|pair"
timeout 120 python3 gpu/variants.py --out $W/v16 --case w4_dequant_mm:M=16,K=4096,N=11008,G=128 --configs "$V16" > $W/v16.log 2>&1
echo "v16 rc $?"; grep -v "Warning\|warn\|{" $W/v16.log | tail -7; pack
M1="$F n256 k64 sk8 $P;$D n256 k64 sk8 $P rows;$D n512 k64 sk4 $P rows;$F n512 k32 sk8 $P"
M1="$M1;$D n256 k64 sk8 w8 s3 pairs words rows;$F n256 k32 sk16 $P;$F n128 k64 sk8 $P;decode fma n256 k64 sk8 $P"
timeout 120 python3 benchmarks/decode_forms_gpu.py --out $W/m1 --case w4_dequant_mm:M=1,K=4096,N=11008,G=128 \
  --configs "$M1" > $W/m1.log 2>&1; echo "m1 rc $?"; grep -v "Warning\|warn" $W/m1.log | tail -9; pack
C16="$D n256 k64 sk8 $P rows;$D n256 k32 sk16 $P rows"
for tree in one two; do
  mkdir -p /tmp/$tree && cp -r fusionsearch benchmarks /tmp/$tree/ && cp gpu/matmul_tile_$tree.py /tmp/$tree/fusionsearch/kinds/triton_source/matmul_tile.py
  (cd /tmp/$tree && PYTHONPATH=/tmp/site:/tmp/$tree timeout 80 python3 benchmarks/decode_forms_gpu.py --out $W/tail16-$tree \
    --case w4_dequant_mm:M=16,K=4096,N=11008,G=128 --configs "$C16;$D n256 k128 sk4 $P rows" > $W/tail16-$tree.log 2>&1; echo "tail16 $tree rc $?")
  grep -v "Warning\|warn" $W/tail16-$tree.log | tail -4; pack
done
(cd /tmp/one && PYTHONPATH=/tmp/site:/tmp/one timeout 60 python3 benchmarks/decode_forms_gpu.py --out $W/tail1-one \
  --case w4_dequant_mm:M=1,K=4096,N=11008,G=128 --configs "$D n256 k64 sk8 $P rows;$F n256 k64 sk8 $P" > $W/tail1-one.log 2>&1; echo "tail1 one rc $?")
grep -v "Warning\|warn" $W/tail1-one.log | tail -3; pack
timeout 150 python3 benchmarks/suite.py --out $W/suite10 --cases 10 > $W/suite10.log 2>&1; echo "suite10 rc $?"
tail -3 $W/suite10/suite.md; pack
