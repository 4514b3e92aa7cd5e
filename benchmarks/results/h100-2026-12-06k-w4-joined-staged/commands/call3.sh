# int4 M16 words-dot kernel (the generator now joins the tiles; the per-tile form made by switching that off): the generated form against one joined tile + one dot a K step (2 barriers, not 16),
# the group scale/zero rows staged contiguously, and both (gpu/w4_joined.py --gpu), 6 configs, 7 interleaved rounds
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > $OUT/gpu.txt; cat $OUT/gpu.txt
timeout 400 python3 gpu/w4_joined.py --gpu $OUT/joined > $OUT/joined.log 2>&1; echo "joined rc $?"
grep -v "Warning\|warn" $OUT/joined.log | tail -40
timeout 150 python3 gpu/read_occupancy.py $OUT/read > $OUT/read.log 2>&1; echo "read rc $?"
tail -26 $OUT/read.log
timeout 240 python3 benchmarks/suite.py --out $OUT/suite --cases 13 > $OUT/suite.log 2>&1; echo "suite rc $?"
python3 -c "
import json
for r in json.load(open('$OUT/suite/suite.json'))['rows']:
    f = r['variants']['fusionsearch']
    print(r['case'], f.get('median_us'), f.get('counts'), f.get('search_best_us'), str(f.get('plan'))[-60:])
" > $OUT/picks.txt 2>&1
rm -f $OUT/suite/suite.png
cat $OUT/picks.txt; grep "^| [wgm]" $OUT/suite.log | cut -c1-240
