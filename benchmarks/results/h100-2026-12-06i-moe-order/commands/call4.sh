# call 4: the product's search on MoE T512 with the reference that never builds the gathered expert weights;
# its plan against the cuBLAS loop in the same run
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=/tmp/fscache
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 330 python3 -m fusionsearch search moe_ffn --shape T=512,D=4096,H=14336,E=8 --dtype bfloat16 --trials 16 \
  --timeout 270 --out /tmp/search512 > $OUT/search512.log 2>&1; echo "search rc $?"
cp /tmp/search512/plan.json $OUT/plan512.json; cp /tmp/search512/report.md $OUT/report512.md
timeout 120 python3 gpu/moe_product.py /tmp/search512/plan.json 512 > $OUT/product512.log 2>&1; echo "product rc $?"
tr '\r' '\n' < $OUT/search512.log | grep -v "^ *$" | grep -v "it/s\|trial/s" | tail -30 | cut -c1-220; cat $OUT/product512.log
