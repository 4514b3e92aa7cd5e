# issue 27 follow-up, session 10, fifth call: swiglu M16 with gate and up in one kernel (up in gate's epilogue,
# sharing its K loop) on several tiles, beside the unjoined plan on Inductor's configs and max-autotune.
W=/tmp/res5; . benchmarks/device_call.sh
DN="decode dot_t n128 k64 sk4 w4 s4"; T4="16x128x128 g8 sk1 w4 s4"
timeout $(( $(left) - 10 )) python3 benchmarks/compiled_kernels_gpu.py --cases 8 --out $W/kernels --rounds 7 \
  --variant "up=$T4;gate=$T4;y=$DN" --variant "gate+up=16x128x128 g8 sk1 w4 s3;y=$DN" \
  --variant "gate+up=16x64x128 g8 sk1 w4 s4;y=$DN" --variant "gate+up=16x64x256 g8 sk1 w4 s3;y=$DN" \
  --variant "gate+up=16x32x128 g8 sk1 w2 s5;y=$DN" --variant "gate+up=16x128x64 g8 sk1 w4 s4;y=$DN" \
  --variant "gate+up=16x64x128 g8 sk1 w8 s4;y=$DN" --variant "gate+up=16x32x256 g8 sk1 w4 s3;y=$DN" > $W/kernels.log 2>&1
echo "kernels rc $? at ${SECONDS}s"; pack
grep -v AUTOTUNE $W/kernels.log | grep "sum; whole\|^plan\|error\|off eager\|Error" | sed 's/decode dot_t n128 k64 sk4 w4 s4/DN/g' | head -30
