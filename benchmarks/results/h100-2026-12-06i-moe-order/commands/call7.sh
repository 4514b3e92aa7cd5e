# call 7: does a plan the experts collection saw fault do so alone? (each plan in its own process), then the
# first faulting one under compute-sanitizer
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
for i in 0 1 2 3; do timeout 60 python3 gpu/fault_repro.py $i 2>&1 | tail -1; done | tee $OUT/fault_repro.txt
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
echo "sanitizer: $CS"
F=$(grep -m1 -v OK $OUT/fault_repro.txt | sed 's/plan \([0-9]\).*/\1/')
if [ -n "$F" ] && [ -n "$CS" ]; then timeout 150 $CS --tool memcheck --print-limit 5 python3 gpu/fault_repro.py $F > $OUT/sanitizer.txt 2>&1; head -40 $OUT/sanitizer.txt | cut -c1-250; fi
