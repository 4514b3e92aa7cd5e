# Deep pipelines, one wave, little or no split-K: w8 M1/M16 and mm_bias_gelu M16 (gpu/deep_pipeline.py), then the mm_bias_gelu suite row
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
timeout 330 python3 gpu/deep_pipeline.py $OUT/deep > $OUT/deep.log 2>&1; echo "deep rc $?"
timeout 200 python3 benchmarks/suite.py --out $OUT/suite --cases 4 > $OUT/suite.log 2>&1; echo "suite rc $?"
python3 -c "
import json
for r in json.load(open('$OUT/suite/suite.json'))['rows']:
    f = r['variants']['fusionsearch']
    print(r['case'], f.get('median_us'), f.get('counts'), f.get('search_best_us'), str(f.get('plan'))[-60:])
" > $OUT/picks.txt 2>&1
rm -f $OUT/suite/suite.png
cat $OUT/deep.log | grep -v Warning | tail -60; cat $OUT/picks.txt; grep "^| [wgm]" $OUT/suite.log | cut -c1-240
