#!/usr/bin/env bash
# Everything that needs a GPU, in one command that ends within about 9 minutes: versions,
# the kernel and Llama tests on CUDA (not Triton's interpreter), then bench_decode.py's sweep.
#
#   bash bench/gpu_check.sh            # on the GPU machine, from the repository root
#   bash bench/gpu_check.sh --dry-run  # print the plan; needs no GPU
#
# It installs nothing, since a borrowed GPU machine may have no network and torch's CUDA
# wheels are gigabytes: it runs the checkout itself (first on PYTHONPATH, so no
# `pip install -e .`) with a Python that already has a CUDA build of torch, triton, numpy,
# pytest and hypothesis, plus transformers for the Llama check (skipped without it).
#
# Environment:
#   PYTHON             interpreter (default: .venv/bin/python if it imports torch, else python3)
#   GPU_CHECK_DIR      logs and JUnit XML (default: test-artifacts/gpu-check)
#   GPU_CHECK_SECONDS  time limit for the whole run (default: 540)
#   OUT                if set, a folder the logs and the benchmark JSON are copied into
# The benchmark JSON goes to bench/results/ as usual. Exit status: 0 when every stage
# passed, 1 when one failed or ran out of time, 2 without CUDA.
set -uo pipefail

DRY_RUN=0
case "${1:-}" in
  --dry-run) DRY_RUN=1 ;;
  "") ;;
  *) echo "usage: bash bench/gpu_check.sh [--dry-run]" >&2; exit 2 ;;
esac

[ -n "${OUT:-}" ] && OUT=$(realpath -m "$OUT")  # before the cd below
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
LOG_DIR=${GPU_CHECK_DIR:-test-artifacts/gpu-check}
TOTAL=${GPU_CHECK_SECONDS:-540}
KILL_AFTER=20  # after SIGINT, time to write reports before SIGKILL

if [ -n "${PYTHON:-}" ]; then
  PY=$PYTHON
elif [ -x .venv/bin/python ] && .venv/bin/python -c "import torch" 2>/dev/null; then
  PY=.venv/bin/python
else
  PY=python3
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# pagedkv.layers.attention turns the interpreter on only without CUDA; an exported value would
# keep it on and the kernels would refuse CUDA tensors.
unset TRITON_INTERPRET

GPU_TESTS=(tests/test_kernel.py tests/test_kernel_checks.py tests/test_llama.py
           tests/test_bench_decode.py)
PYTEST=("$PY" -m pytest -q -o faulthandler_timeout=120 --junitxml="$LOG_DIR/pytest-gpu.xml"
        "${GPU_TESTS[@]}")
BENCH=("$PY" bench/bench_decode.py)

plan() {
  echo "python:  $PY (PYTHONPATH=$PYTHONPATH, TRITON_INTERPRET unset)"
  echo "1. env   (60 s):  nvidia-smi; python, torch, CUDA, triton, transformers versions"
  echo "2. tests (240 s): ${PYTEST[*]}"
  echo "3. bench (rest):  ${BENCH[*]}  -> bench/results/decode-<gpu>-<date>.json"
  echo "logs:    $LOG_DIR/{env.txt,pytest-gpu.log,pytest-gpu.xml,bench.log,summary.txt}"
  echo "copy to: ${OUT:-(OUT not set: no copy)}; overall limit ${TOTAL} s"
}

copy_out() {
  [ -n "${OUT:-}" ] || return 0
  mkdir -p "$OUT"
  local f
  for f in env.txt pytest-gpu.log pytest-gpu.xml bench.log summary.txt; do
    [ -f "$LOG_DIR/$f" ] && cp "$LOG_DIR/$f" "$OUT/"
  done
  [ -z "${json:-}" ] || cp "$json" "$OUT/"
  echo "copied to $OUT"
}

if [ "$DRY_RUN" = 1 ]; then
  plan
  exit 0
fi

mkdir -p "$LOG_DIR"
DEADLINE=$((SECONDS + TOTAL))
STATUS=0
: >"$LOG_DIR/summary.txt"

# Run one stage under `timeout`: its own cap or what is left of the overall limit, whichever
# is less. SIGINT first, so pytest still writes its summary and JUnit file.
stage() {
  local name=$1 cap=$2 log=$3 left rc verdict
  shift 3
  left=$((DEADLINE - SECONDS - KILL_AFTER))
  [ "$left" -lt "$cap" ] && cap=$left
  if [ "$cap" -lt 10 ]; then
    echo "$name: SKIPPED (no time left)" | tee -a "$LOG_DIR/summary.txt"
    STATUS=1
    return
  fi
  echo "== $name (limit ${cap} s): $*"
  local start=$SECONDS
  timeout -s INT -k "$KILL_AFTER" "$cap" "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  case $rc in
    0) verdict=PASS ;;
    124 | 137) verdict="TIMEOUT after ${cap} s" ;;
    *) verdict="FAIL (exit $rc)" ;;
  esac
  [ "$rc" = 0 ] || STATUS=1
  echo "$name: $verdict in $((SECONDS - start)) s" | tee -a "$LOG_DIR/summary.txt"
}

ENV_PY='
import importlib, os, sys
import torch
print("python", sys.version.split()[0], sys.executable)
print("torch", torch.__version__, "CUDA", torch.version.cuda,
      "cuda available", torch.cuda.is_available())
for name in ("triton", "numpy", "pytest", "hypothesis", "transformers", "flashinfer"):
    try:
        print(name, getattr(importlib.import_module(name), "__version__", "?"))
    except ImportError:
        print(name, "MISSING")
if not torch.cuda.is_available():
    sys.exit(3)
props = torch.cuda.get_device_properties(0)
print("gpu", props.name, f"sm_{props.major}{props.minor}", props.multi_processor_count, "SMs",
      f"{props.total_memory / 2**30:.1f} GiB")
import pagedkv
from pagedkv.layers.attention.checks import interpreted
print("pagedkv", pagedkv.__file__, "TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET"),
      "interpreted", interpreted())
sys.exit(4 if interpreted() else 0)
'

env_info() {
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  uname -srm
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    nvidia-smi
  else
    echo "nvidia-smi: not found"
  fi
  "$PY" -c "$ENV_PY"
}

export PY ENV_PY
export -f env_info  # `timeout` runs programs, so the function goes through bash -c
stage env 60 "$LOG_DIR/env.txt" bash -c env_info
if ! grep -q "^gpu " "$LOG_DIR/env.txt"; then
  echo "No CUDA GPU usable from $PY (see $LOG_DIR/env.txt): nothing was run on a GPU." >&2
  echo "This is what would run:" >&2
  plan >&2
  copy_out
  exit 2
fi

stage tests 240 "$LOG_DIR/pytest-gpu.log" "${PYTEST[@]}"

marker=$(mktemp)
stage bench 600 "$LOG_DIR/bench.log" "${BENCH[@]}"
# The newest report this run wrote; complete=false in it means the limit stopped the sweep.
json=$(find bench/results -maxdepth 1 -name 'decode-*.json' -newer "$marker" 2>/dev/null | sort |
       tail -n 1)
rm -f "$marker"
echo "bench JSON: ${json:-none written}" | tee -a "$LOG_DIR/summary.txt"
echo "total: $SECONDS s" | tee -a "$LOG_DIR/summary.txt"

copy_out
exit "$STATUS"
