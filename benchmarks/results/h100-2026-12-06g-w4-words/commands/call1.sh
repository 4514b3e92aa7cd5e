# int4 words-form prototype timing; the w8 M4/M16 and mm_bias_gelu suite rows with the retrained H100 model; MoE T512 split sweep
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $OUT/gpu.txt
timeout 170 python3 gpu/w4_words.py --out $OUT/w4 > $OUT/w4_words.log 2>&1; echo "w4 rc $?"
timeout 220 python3 benchmarks/suite.py --out $OUT/suite --cases 11,0,4 > $OUT/suite.log 2>&1; echo "suite rc $?"
python3 -c "
import json
for r in json.load(open('$OUT/suite/suite.json'))['rows']:
    f = r['variants']['fusionsearch']
    print(r['case'], f.get('median_us'), f.get('counts'), f.get('search_best_us'), str(f.get('plan'))[:300])
" > $OUT/picks.txt 2>&1
rm -f $OUT/suite/suite.png $OUT/suite/suite.md
timeout 150 python3 benchmarks/grouped_sweep_gpu.py --out $OUT/grouped --cases 2 --splits 1,2 > $OUT/grouped.log 2>&1; echo "grouped rc $?"
tail -45 $OUT/w4_words.log; cat $OUT/picks.txt; grep "^| [wm]" $OUT/suite.log | cut -c1-200; tail -15 $OUT/grouped.log
