#!/usr/bin/env bash
# One e2e case on the GPU machine with per-mode step profiles and the generation loop (issue 52):
#   CASE="llama-int8 decode b1" MODES=eager,max_autotune,fusionsearch_control,fusionsearch LIMIT=570 W=/tmp/res1 \
#     bash benchmarks/results/h100-2026-12-07e-e2e-step/commands/e2e_case.sh
. benchmarks/device_call.sh
CASE=${CASE:-llama-int8 decode b1}
MODES=${MODES:-eager,max_autotune,fusionsearch_control,fusionsearch}
PYTHONUNBUFFERED=1 timeout $(( $(left) - 20 )) python3 benchmarks/e2e.py --out "$W/e2e" --layers ${LAYERS:-4} \
  --trials ${TRIALS:-8} --cases "$CASE" --modes "$MODES" --profile --generate 128 -v > "$W/e2e.log" 2>&1
echo "e2e rc=$? after ${SECONDS}s" | tee -a "$W/e2e.log"
pack
grep -v "it/s\]\|region/s\]\|Warning\|warn(" "$W/e2e.log" | grep -i "kept\|fusionsearch backend\|error\|Traceback\|rc=" | cut -c1-300 | tail -40
cat "$W/e2e/e2e.md"
