# call 2: the product's search on MoE T512 (new grid order, prefill blocks offered unsplit first), its plan
# against the cuBLAS loop in the same run; the suite's MoE T1/T16 rows on this code
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 220 python3 -m fusionsearch search moe_ffn --shape T=512,D=4096,H=14336,E=8 --dtype bfloat16 --trials 24 \
  --out /tmp/search512 > $OUT/search512.log 2>&1; echo "search rc $?"
cp /tmp/search512/plan.json $OUT/plan512.json; cp /tmp/search512/report.md $OUT/report512.md
timeout 90 python3 gpu/moe_product.py /tmp/search512/plan.json 512 > $OUT/product512.log 2>&1; echo "product rc $?"
timeout 230 python3 benchmarks/suite.py --out $OUT/suite --cases 14,15 > $OUT/suite.log 2>&1; echo "suite rc $?"
rm -f $OUT/suite/suite.png
grep -v "^ *$" $OUT/search512.log | tail -25 | cut -c1-200; cat $OUT/product512.log; grep -v AUTOTUNE $OUT/suite.log | tail -12 | cut -c1-250
