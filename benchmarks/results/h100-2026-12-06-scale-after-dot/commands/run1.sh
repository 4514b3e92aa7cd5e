python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 python3 gpu/sad.py --out $OUT/sad > $OUT/sad.log 2>&1; echo sad rc $?
timeout 300 python3 benchmarks/suite.py --out $OUT/suite --cases 10,11,0,12,13 > $OUT/suite.log 2>&1; echo suite rc $?
timeout 90 python3 benchmarks/w4_gap_gpu.py --out $OUT/gap > $OUT/gap.log 2>&1; echo gap rc $?
tail -22 $OUT/sad.log
tail -25 $OUT/gap.log
tail -25 $OUT/suite.log
