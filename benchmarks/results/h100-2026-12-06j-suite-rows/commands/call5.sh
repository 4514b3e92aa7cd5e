# The decode suite rows (w8 M1/M4/M16, int4 M1/M16, mm_bias_gelu M16) on this code, on whichever card the call gets
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
timeout 500 python3 benchmarks/suite.py --out $OUT/suite --cases 10,11,0,12,13,4 > $OUT/suite.log 2>&1; echo "suite rc $?"
python3 -c "
import json
for r in json.load(open('$OUT/suite/suite.json'))['rows']:
    f = r['variants']['fusionsearch']
    print(r['case'], f.get('median_us'), f.get('counts'), f.get('search_best_us'), str(f.get('plan'))[-60:])
" > $OUT/picks.txt 2>&1
rm -f $OUT/suite/suite.png
cat $OUT/picks.txt; grep "^| [wgm]" $OUT/suite.log | cut -c1-240
