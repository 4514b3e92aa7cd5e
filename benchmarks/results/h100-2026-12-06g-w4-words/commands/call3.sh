# ncu on the int4 GEMV (pairs vs words), the int4 M16 suite row with the words dot leading, a decode-family collection
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
mkdir -p $OUT/ncu
T=benchmarks/results/h100-2026-12-06e-ncu-decode-collect/commands/ncu_table.py
timeout 120 $NCU --clock-control none --profile-from-start off --set full -f -o /tmp/probe python3 gpu/ncu_words.py > $OUT/ncu/ncu.log 2>&1; echo "ncu rc $?"
$NCU --import /tmp/probe.ncu-rep --page raw --csv > /tmp/raw.csv 2>/dev/null; gzip -c /tmp/raw.csv > $OUT/ncu/raw.csv.gz
python3 $T /tmp/raw.csv $OUT/ncu/ncu.log > $OUT/ncu/table.txt 2>&1
timeout 40 python3 gpu/ncu_words.py --time > $OUT/ncu/timer.log 2>&1
timeout 110 python3 benchmarks/suite.py --out $OUT/suite --cases 13 > $OUT/suite.log 2>&1; echo "suite rc $?"
rm -f $OUT/suite/suite.png $OUT/suite/suite.md
timeout 250 python3 -m fusionsearch costmodel collect --family decode --graphs 100 --plans-per-graph 10 --seed 9300 \
  --out $OUT/decode.jsonl.gz > $OUT/collect.log 2>&1; echo "collect rc $?"
tail -8 $OUT/ncu/timer.log; cut -c1-330 $OUT/ncu/table.txt; grep "^| w4" $OUT/suite.log | cut -c1-200; tail -2 $OUT/collect.log | cut -c1-400
