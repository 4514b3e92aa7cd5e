# The decode suite rows with the words form and the H100 model retrained on its rows; the MoE T512 split sweep
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
timeout 260 python3 benchmarks/suite.py --out $OUT/suite --cases 10,11,0,12,13,4 > $OUT/suite.log 2>&1; echo "suite rc $?"
python3 -c "
import json
for r in json.load(open('$OUT/suite/suite.json'))['rows']:
    f = r['variants']['fusionsearch']
    print(r['case'], f.get('median_us'), f.get('counts'), f.get('search_best_us'), str(f.get('plan'))[-60:])
" > $OUT/picks.txt 2>&1
rm -f $OUT/suite/suite.png
timeout 200 python3 benchmarks/grouped_sweep_gpu.py --out $OUT/grouped --cases 2 --splits 1,2 --workers 4 > $OUT/grouped.log 2>&1; echo "grouped rc $?"
cat $OUT/picks.txt; grep "^| [wgm]" $OUT/suite.log | cut -c1-220; tail -12 $OUT/grouped.log | cut -c1-250
