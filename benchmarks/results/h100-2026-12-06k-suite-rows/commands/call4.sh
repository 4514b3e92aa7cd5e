# The suite's int4 M16 / M1 and mm_bias_gelu rows on the committed code: the decode 'rows' form, and the ranked sampler measuring each kind's known-good plan first
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
timeout 420 python3 benchmarks/suite.py --out $OUT/suite --cases 13,12,4 > $OUT/suite.log 2>&1; echo "suite rc $?"
python3 -c "
import json
for r in json.load(open('$OUT/suite/suite.json'))['rows']:
    f = r['variants']['fusionsearch']
    print(r['case'], f.get('median_us'), f.get('counts'), f.get('search_best_us'), str(f.get('plan'))[-60:])
    for x in f.get('finalists', []): print('   ', x['params'].get('mm0.config'), x.get('first_us'), x.get('final_us'))
" > $OUT/picks.txt 2>&1
rm -f $OUT/suite/suite.png $OUT/suite/suite.md
cat $OUT/picks.txt; grep "^| [wgm]" $OUT/suite.log | cut -c1-260
