# Sourced at the top of a device-call script (`W=/tmp/res1; . benchmarks/device_call.sh`, run from the repository
# root on the GPU machine, `.whl` and the script's folder carried): installs the optuna wheels that
# ../shared/device/wheels.sh fetched into .whl/, puts them and the work tree on PYTHONPATH, makes a fresh results
# folder $W (the calling script's path and arguments in $W/command.txt: the script itself is at the commit the
# results' COMMAND.md names, not copied) and writes the GPU's name to $W/gpu.txt. `pack` puts
# everything under $W into $OUT/all.tar.gz (call it after each step: a killed call keeps what it measured);
# `left` says how many of the call's $LIMIT seconds (default 560) are left.
LIMIT=${LIMIT:-560}
W=${W:?set W to the results folder, e.g. W=/tmp/res1}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD FUSIONSEARCH_CACHE_DIR=${FUSIONSEARCH_CACHE_DIR:-/tmp/fscache}
rm -rf "$W"; mkdir -p "$W"; echo "$0 $*" > "$W/command.txt"
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv > "$W/gpu.txt"; cat "$W/gpu.txt"
pack() { tar czf "$OUT/all.tar.gz" -C "$W" . ; }
left() { echo $((LIMIT - SECONDS)); }
