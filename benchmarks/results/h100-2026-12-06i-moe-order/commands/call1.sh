# call 1: int4 scale-load prototype; MoE T512 (SiLU*up standalone) block-fastest grid order against the old
# order (the package at 328eecb, gpu/old) on the same configs; T16 both orders; ncu of T512's gate and down bmm
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 150 python3 gpu/w4_scales.py > $OUT/w4_scales.md 2>&1; echo "w4 rc $?"
CFG="128,256,64,8,3;128,256,64,8,4;128,128,64,4,3;128,128,64,8,3;256,128,64,8,3;64,256,64,8,3"
timeout 150 python3 benchmarks/grouped_sweep_gpu.py --out $OUT/new512 --cases 2 --silu-standalone --configs "$CFG" \
  --splits 1,2,4 --workers 4 > $OUT/new512.log 2>&1; echo "new512 rc $?"
(cd gpu/old && PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache_old timeout 150 python3 \
  benchmarks/grouped_sweep_gpu.py --out $OUT/old512 --cases 2 --silu-standalone --configs "$CFG" --splits 1,2,4 \
  --workers 4 > $OUT/old512.log 2>&1; echo "old512 rc $?")
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
mkdir -p $OUT/ncu
timeout 120 $NCU --clock-control none --profile-from-start off --kernel-name regex:'fs_kernel_(0|3)$' --set full -f \
  -o /tmp/moe python3 gpu/ncu_moe.py > $OUT/ncu/ncu.log 2>&1; echo "ncu rc $?"
$NCU --import /tmp/moe.ncu-rep --page raw --csv > /tmp/raw.csv 2>/dev/null; gzip -c /tmp/raw.csv > $OUT/ncu/raw.csv.gz
python3 benchmarks/results/h100-2026-12-06e-ncu-decode-collect/commands/ncu_table.py /tmp/raw.csv $OUT/ncu/ncu.log > $OUT/ncu/table.txt 2>&1
python3 gpu/ncu_extra.py /tmp/raw.csv > $OUT/ncu/extra.txt 2>&1
D16="16,64,256,4,4;16,128,256,4,3;16,256,64,4,4"
timeout 45 python3 benchmarks/grouped_sweep_gpu.py --out $OUT/new16 --cases 1 --configs "$D16" --workers 4 > $OUT/new16.log 2>&1; echo "new16 rc $?"
(cd gpu/old && PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache_old timeout 45 python3 \
  benchmarks/grouped_sweep_gpu.py --out $OUT/old16 --cases 1 --configs "$D16" --workers 4 > $OUT/old16.log 2>&1; echo "old16 rc $?")
cat $OUT/w4_scales.md | grep "^|"
for f in new512 old512 new16 old16; do echo "== $f"; grep -A12 "grouped plans" $OUT/$f.log | cut -c1-160; done
cut -c1-300 $OUT/ncu/table.txt; cut -c1-400 $OUT/ncu/extra.txt
