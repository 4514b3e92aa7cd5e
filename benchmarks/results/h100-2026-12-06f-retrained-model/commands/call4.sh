# The decode suite rows whose search picks regressed (w8 M1, int4 M1/M16) with the H100 model retrained on the decode family's rows
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
timeout 250 python3 benchmarks/suite.py --out $OUT/suite --cases 10,12,13 > $OUT/suite.log 2>&1; echo "suite rc $?"
python3 -c "
import json
for r in json.load(open('$OUT/suite/suite.json'))['rows']:
    f = r['variants']['fusionsearch']
    print(r['case'], f.get('median_us'), f.get('counts'), f.get('cost_model'), f.get('sampler'), f.get('search_best_us'), str(f.get('plan'))[:200])
" > $OUT/picks.txt 2>&1
rm -f $OUT/suite/suite.png
cat $OUT/picks.txt; grep "^| [wm]" $OUT/suite.log | cut -c1-220
