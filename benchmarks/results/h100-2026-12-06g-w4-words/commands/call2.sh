# The decode words form on the GPU: every pairs/words candidate at 1/4/16 rows (validated, timed), then the int4 suite rows
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
timeout 280 python3 gpu/words_gpu.py --out $OUT/words > $OUT/words.log 2>&1; echo "words rc $?"
timeout 250 python3 benchmarks/suite.py --out $OUT/suite --cases 12,13 > $OUT/suite.log 2>&1; echo "suite rc $?"
python3 -c "
import json
for r in json.load(open('$OUT/suite/suite.json'))['rows']:
    f = r['variants']['fusionsearch']
    print(r['case'], f.get('median_us'), f.get('counts'), f.get('search_best_us'), str(f.get('plan'))[:300])
" > $OUT/picks.txt 2>&1
rm -f $OUT/suite/suite.png $OUT/suite/suite.md
grep -v '^{' $OUT/words.log | tail -40; cat $OUT/picks.txt; grep "^| w4" $OUT/suite.log | cut -c1-200
