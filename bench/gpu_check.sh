#!/usr/bin/env bash
# Everything that needs a GPU, in one command that ends within 7 minutes (so a rerun fits in
# a 15-minute loan): versions and clocks, the kernel and Llama tests on CUDA (not Triton's
# interpreter), then bench_decode.py's sweep, the target point first.
#
#   bash bench/gpu_check.sh            # on the GPU machine, from the repository root
#   bash bench/gpu_check.sh --dry-run  # print the plan; needs no GPU
#
# It installs nothing, since a borrowed GPU machine may have no network and torch's CUDA
# wheels are gigabytes: it runs the checkout itself (first on PYTHONPATH, so no
# `pip install -e .`) with a Python that already has a CUDA build of torch, triton, numpy and
# pytest. hypothesis, transformers and flashinfer are optional: without one, only the tests
# or benchmark rows that need it are skipped (and say so).
#
# Environment:
#   PYTHON             interpreter (default: .venv/bin/python if it imports torch, else python3)
#   OUT                if set, the folder every log and the benchmark JSON are written into,
#                      as they are produced (nothing is copied at the end, so nothing is lost
#                      when the run is killed)
#   GPU_CHECK_DIR      logs when OUT is not set (default: test-artifacts/gpu-check); the JSON
#                      then goes to bench/results/
#   GPU_CHECK_SECONDS  time limit for the whole run (default: 420)
# Exit status: 0 when every stage passed, 1 when one failed or ran out of time, 2 without CUDA.
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
if [ -n "${OUT:-}" ]; then
  LOG_DIR=$OUT
  RESULTS_DIR=$OUT
else
  LOG_DIR=${GPU_CHECK_DIR:-test-artifacts/gpu-check}
  RESULTS_DIR=bench/results
fi
TOTAL=${GPU_CHECK_SECONDS:-420}
KILL_AFTER=15  # after SIGINT, time to write reports before SIGKILL

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
export TRITON_DEFAULT_FP_FUSION=1  # Triton 3.9's default, said out loud

GPU_TESTS=(tests/test_kernel.py tests/test_kernel_props.py tests/test_kernel_checks.py
           tests/test_baselines.py tests/test_llama.py tests/test_bench_decode.py
           tests/model_executor/test_model_runner.py)
PYTEST=("$PY" -m pytest -q -rs -o faulthandler_timeout=100 --junitxml="$LOG_DIR/pytest-gpu.xml"
        "${GPU_TESTS[@]}")
BENCH=("$PY" bench/bench_decode.py --out-dir "$RESULTS_DIR")

plan() {
  echo "python:  $PY (PYTHONPATH=$PYTHONPATH, TRITON_INTERPRET unset)"
  echo "1. env   (30 s):  nvidia-smi (clocks, driver); python, torch, CUDA, triton versions"
  echo "2. tests (150 s): ${PYTEST[*]}"
  echo "3. bench (rest):  ${BENCH[*]} --time-budget <rest - 60 s>"
  echo "                  -> $RESULTS_DIR/decode-<gpu>-<date>.json, rewritten after every point"
  echo "logs:    $LOG_DIR/{env.txt,pytest-gpu.log,pytest-gpu.xml,bench.log,summary.txt}"
  echo "overall limit ${TOTAL} s"
}

if [ "$DRY_RUN" = 1 ]; then
  plan
  exit 0
fi

mkdir -p "$LOG_DIR" "$RESULTS_DIR"
DEADLINE=$((SECONDS + TOTAL))
STATUS=0
: >"$LOG_DIR/summary.txt"

# Run one stage under `timeout`: its own cap or what is left of the overall limit, whichever
# is less. SIGINT first, so pytest still writes its summary and JUnit file. Output goes
# straight to its log (tee), line by line.
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
  git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo "git: no commit"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,clocks.max.mem,power.limit,pstate --format=csv
    nvidia-smi
  else
    echo "nvidia-smi: not found"
  fi
  "$PY" -c "$ENV_PY"
}

export PY ENV_PY ROOT
export -f env_info  # `timeout` runs programs, so the function goes through bash -c
stage env 30 "$LOG_DIR/env.txt" bash -c env_info
if ! grep -q "^gpu " "$LOG_DIR/env.txt"; then
  echo "No CUDA GPU usable from $PY (see $LOG_DIR/env.txt): nothing was run on a GPU." >&2
  echo "This is what would run:" >&2
  plan >&2
  exit 2
fi

stage tests 150 "$LOG_DIR/pytest-gpu.log" "${PYTEST[@]}"

# The sweep stops starting points a minute before the limit, so its report ends complete.
budget=$((DEADLINE - SECONDS - KILL_AFTER - 60))
[ "$budget" -lt 0 ] && budget=0
stage bench 600 "$LOG_DIR/bench.log" "${BENCH[@]}" --time-budget "$budget"
json=$(find "$RESULTS_DIR" -maxdepth 1 -name 'decode-*.json' -newer "$LOG_DIR/env.txt" \
       2>/dev/null | sort | tail -n 1)
echo "bench JSON: ${json:-none written}" | tee -a "$LOG_DIR/summary.txt"
echo "total: $SECONDS s" | tee -a "$LOG_DIR/summary.txt"
exit "$STATUS"
