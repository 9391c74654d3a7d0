#!/usr/bin/env bash
# The one command a device session runs for the GPU collection (issues 28 and 29); see benchmarks/README.md
# "GPU collection".
#
#   here, once, before the device call:  bash benchmarks/gpu_run.sh prepare
#       (copies NAS-Bench-201's arch_index,arch_str columns from ../shared into .gpucarry/ (.gitignore):
#        ../shared does not travel to the device machine)
#   the device call:  run(command="bash benchmarks/gpu_run.sh", carry=[".gpucarry"], timeout_s=420)
#       (budget 330 s + start-up stays under 7 minutes; 15 minutes of device time leave room for one rerun)
#
# The GPU image has torch, numpy, PyYAML, rich and click; `import dnnsat` needs nothing else (z3 and
# pydantic are imported on first use only), so no wheels are carried. The JSON file and the log land in
# $OUT (benchmarks/data when OUT is unset); commit the JSON file under benchmarks/data/.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = prepare ]; then
    src="${NB201_CSV:-../shared/data/nasbench201/nb201.csv}"
    [ -f "$src" ] || { echo "gpu_run.sh prepare: $src not found (set NB201_CSV)" >&2; exit 1; }
    mkdir -p .gpucarry
    cut -d, -f1,2 "$src" >.gpucarry/nb201.csv
    echo "gpu_run.sh prepare: .gpucarry/nb201.csv ($(wc -l <.gpucarry/nb201.csv) lines)"
    exit 0
fi
out="${OUT:-benchmarks/data}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv || true
python3 -m benchmarks.gpu_collect --out "$out" --budget-s "${BUDGET_S:-330}" --nb201 .gpucarry/nb201.csv \
    2>&1 | tee "$out/gpu_collect.log"
