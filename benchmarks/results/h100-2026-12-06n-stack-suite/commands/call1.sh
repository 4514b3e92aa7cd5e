# issue 27, int4: the stack-form w4_dequant_mm (e0d9235) on named decode configs, M16 and M1, same rounds (m16, m1);
# old16: the M16 configs at the split-K reduction before 1da243e (one partial at a time where they do not all
# fit 128 registers: n256 k64 sk8 and n256 k32 sk16 change; n128 k128 sk4 and n256 k128 sk4 do not, controls);
# then the suite rows 13,12. Results are tarred into $OUT/all.tar.gz after each step.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
W=/tmp/res; mkdir -p $W/commands; cp gpu/call1.sh $W/commands/
pack() { tar czf $OUT/all.tar.gz -C $W . ; }
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $W/gpu.txt; cat $W/gpu.txt
D="decode dot"
M16="$D n256 k64 sk8 w4 s3 pairs words rows;$D n128 k128 sk4 w4 s3 pairs words;$D n256 k128 sk4 w4 s3 pairs words rows"
M16="$M16;$D n128 k64 sk8 w4 s3 pairs words rows;$D n256 k64 sk8 w4 s4 pairs words rows;decode dot_t n64 k128 sk4 w4 s3 pairs"
M16="$M16;$D n128 k128 sk4 w4 s3 pairs words rows;$D n256 k32 sk16 w4 s3 pairs words rows"
timeout 150 python3 benchmarks/decode_forms_gpu.py --out $W/m16 --case w4_dequant_mm:M=16,K=4096,N=11008,G=128 \
  --configs "$M16" > $W/m16.log 2>&1; echo "m16 rc $?"; grep -v "Warning\|warn" $W/m16.log | tail -10; pack
mkdir -p /tmp/old && cp -r fusionsearch benchmarks /tmp/old/ && cp gpu/matmul_tile_old.py /tmp/old/fusionsearch/kinds/triton_source/matmul_tile.py
O16="$D n256 k64 sk8 w4 s3 pairs words rows;$D n128 k128 sk4 w4 s3 pairs words;$D n256 k128 sk4 w4 s3 pairs words rows;$D n256 k32 sk16 w4 s3 pairs words rows"
(cd /tmp/old && PYTHONPATH=/tmp/site:/tmp/old timeout 100 python3 benchmarks/decode_forms_gpu.py --out $W/old16 \
  --case w4_dequant_mm:M=16,K=4096,N=11008,G=128 --configs "$O16" > $W/old16.log 2>&1); echo "old16 rc $?"
grep -v "Warning\|warn" $W/old16.log | tail -6; pack
timeout 200 python3 benchmarks/suite.py --out $W/suite --cases 13,12 > $W/suite.log 2>&1; echo "suite rc $?"
tail -6 $W/suite/suite.md; pack
M1="decode fma_acc n256 k64 sk8 w4 s3 pairs words;decode fma_acc n256 k32 sk16 w4 s3 pairs words;$D n256 k64 sk8 w4 s3 pairs words rows"
M1="$M1;decode fma_acc n128 k64 sk8 w4 s3 pairs words;$D n128 k128 sk4 w4 s3 pairs words rows"
timeout 100 python3 benchmarks/decode_forms_gpu.py --out $W/m1 --case w4_dequant_mm:M=1,K=4096,N=11008,G=128 \
  --configs "$M1" > $W/m1.log 2>&1; echo "m1 rc $?"; grep -v "Warning\|warn" $W/m1.log | tail -8; pack
