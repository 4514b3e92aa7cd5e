# issue 27, session 10, third call: swiglu M16's searched plan against Inductor's configs kernel by kernel and
# whole, then the suite's swiglu M16 row with Inductor's two picks among the template's known-good configs.
LIMIT=${LIMIT:-400}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
W=/tmp/res3; rm -rf $W; mkdir -p $W/commands; cp gpu/call3.sh $W/commands/
pack() { tar czf $OUT/all.tar.gz -C $W . ; }
left() { echo $((LIMIT - SECONDS)); }
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $W/gpu.txt; cat $W/gpu.txt
T4="16x128x128 g8 sk1 w4 s4"; DN="decode dot_t n128 k64 sk4 w4 s4"; DS="decode dot_t n64 k32 sk4 w4 s5"; DU="decode dot_t n64 k64 sk2 w4 s3"
timeout $(( $(left) - 100 )) python3 benchmarks/compiled_kernels_gpu.py --cases 8 --out $W/kernels \
  --variant "up=$T4;gate=$T4;y=$DN" --variant "up=16x128x128 g8 sk1 w8 s4;gate=16x128x128 g8 sk1 w8 s4;y=$DN" \
  --variant "up=$T4;gate=$T4;y=16x32x128 g8 sk1 w2 s5" --variant "up=$T4;gate=$T4;y=$DS" \
  --variant "up=$DU;gate=$DU;y=$DS" > $W/kernels.log 2>&1
echo "kernels rc $? at ${SECONDS}s"; pack
[ $(left) -gt 80 ] && { timeout $(( $(left) - 10 )) python3 benchmarks/suite.py --out $W/suite_8 --cases 8 > $W/suite_8.log 2>&1
  echo "suite_8 rc $? at ${SECONDS}s"; grep "^\[" $W/suite_8.log; pack; }
grep -v AUTOTUNE $W/kernels.log | grep "^|\|^plan\|^[0-9]:\|error\|off eager" | head -40
