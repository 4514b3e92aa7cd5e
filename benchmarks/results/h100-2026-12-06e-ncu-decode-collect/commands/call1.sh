python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
mkdir -p $OUT/tail $OUT/ncu $OUT/suite
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
timeout 300 python3 benchmarks/suite.py --out $OUT/suite --cases 10,11,0,12,13,4 > $OUT/suite.log 2>&1
timeout 90 python3 benchmarks/results/cpu-2026-12-06d-split-tail/tail_ab.py --out $OUT/tail > $OUT/tail.log 2>&1
timeout 150 $NCU --clock-control none --profile-from-start off --set full -f -o $OUT/ncu/probe python3 gpu/ncu_probe.py > $OUT/ncu/ncu.log 2>&1
$NCU --import $OUT/ncu/probe.ncu-rep --page raw --csv > $OUT/ncu/raw.csv 2>$OUT/ncu/import.err
python3 gpu/ncu_table.py $OUT/ncu/raw.csv $OUT/ncu/ncu.log > $OUT/ncu/table.txt 2>&1
timeout 40 python3 gpu/ncu_probe.py --time --out $OUT/ncu > $OUT/ncu/timer.log 2>&1
cat $OUT/gpu.txt; tail -8 $OUT/tail.log; tail -14 $OUT/ncu/timer.log; tail -3 $OUT/ncu/ncu.log; cut -c1-330 $OUT/ncu/table.txt; grep "^| [wgm]" $OUT/suite.log | cut -c1-200; tail -1 $OUT/suite.log
