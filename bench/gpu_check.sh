#!/usr/bin/env bash
# Everything that needs a GPU, in one command that ends within 7 minutes (so a rerun fits in
# a 15-minute loan): versions and clocks, the kernel and Llama tests on CUDA (not Triton's
# interpreter), then bench_decode.py's sweep, the target point first.
#
#   bash bench/gpu_check.sh            # on the GPU machine, from the repository root
#   bash bench/gpu_check.sh --dry-run  # print the plan (T4 and H100 rows too); needs no GPU
#   bash bench/gpu_check.sh --install  # no Python here sees the GPU: make .venv-gpu first
#
# It runs the checkout itself (first on PYTHONPATH, so no `pip install -e .`) with the first
# Python whose torch sees a CUDA GPU: $PYTHON if set, else the first of the candidates below,
# and says which one and what the others lacked. It installs nothing unless asked
# (--install: a .venv-gpu with torch's CUDA wheels, gigabytes, over the network), since a
# borrowed GPU machine may have no network; without such a Python it prints the command.
# triton, numpy and pytest are needed; hypothesis, transformers and flashinfer are optional:
# without one, only the tests or benchmark rows that need it are skipped (and say so).
# The sweep runs in bfloat16 from sm_80 and in float16 below (a T4 has no bf16 arithmetic).
#
# Environment:
#   PYTHON             interpreter (default: the first of GPU_CHECK_PYTHONS whose torch sees CUDA)
#   GPU_CHECK_PYTHONS  candidates, in order (default: .venv-gpu/bin/python .venv/bin/python
#                      python3 python /usr/local/bin/python3 /usr/bin/python3 /opt/conda/bin/python)
#   TORCH_CUDA_INDEX   the wheel index --install uses (default https://download.pytorch.org/whl/cu128)
#   OUT                if set, the folder every log and the benchmark JSON are written into,
#                      as they are produced (nothing is copied at the end, so nothing is lost
#                      when the run is killed)
#   GPU_CHECK_DIR      logs when OUT is not set (default: test-artifacts/gpu-check); the JSON
#                      then goes to bench/results/
#   GPU_CHECK_SECONDS  time limit for the whole run (default: 420)
# Exit status: 0 when every stage passed, 1 when one failed or ran out of time, 2 without CUDA.
set -uo pipefail

DRY_RUN=0
INSTALL=0
case "${1:-}" in
  --dry-run) DRY_RUN=1 ;;
  --install) INSTALL=1 ;;
  "") ;;
  *) echo "usage: bash bench/gpu_check.sh [--dry-run | --install]" >&2; exit 2 ;;
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

TORCH_CUDA_INDEX=${TORCH_CUDA_INDEX:-https://download.pytorch.org/whl/cu128}
INSTALL_CMD="python3 -m venv .venv-gpu && .venv-gpu/bin/pip install --index-url $TORCH_CUDA_INDEX --extra-index-url https://pypi.org/simple torch triton numpy plotly tqdm ipywidgets anywidget pytest hypothesis transformers"
CANDIDATES=${GPU_CHECK_PYTHONS:-.venv-gpu/bin/python .venv/bin/python python3 python /usr/local/bin/python3 /usr/bin/python3 /opt/conda/bin/python}
# One line about a candidate's torch; exit 0 only when it sees a CUDA device, 2 when it
# imports torch but sees none.
PROBE='
import sys
try:
    import torch
except ImportError as exc:
    print(f"no torch ({exc})")
    sys.exit(1)
cuda = torch.cuda.is_available()
print(f"torch {torch.__version__} (CUDA build {torch.version.cuda}) "
      + (f"sees {torch.cuda.get_device_name(0)}" if cuda else "sees no CUDA device"))
sys.exit(0 if cuda else 2)
'

# PY: $PYTHON as given, else the first candidate whose torch sees CUDA; PY_WHY says why and
# SKIPPED what the others said. Without one: the first that imports torch (the env stage
# then reports what it sees), else python3.
pick_python() {
  local c path out rc fallback="" seen=" "
  SKIPPED=""
  if [ -n "${PYTHON:-}" ]; then
    PY=$PYTHON
    PY_WHY="set by PYTHON: $("$PY" -c "$PROBE" 2>&1 | tail -n 1)"
    return
  fi
  for c in $CANDIDATES; do
    path=$(command -v "$c" 2>/dev/null) || continue
    case "$seen" in *" $path "*) continue ;; esac
    seen="$seen$path "
    out=$("$c" -c "$PROBE" 2>&1)
    rc=$?
    out=$(printf '%s' "$out" | tail -n 1)
    if [ "$rc" = 0 ]; then
      PY=$c
      PY_WHY="the first candidate whose torch sees the GPU: $out"
      return
    fi
    SKIPPED="$SKIPPED  $c: $out"$'\n'
    [ -z "$fallback" ] && [ "$rc" = 2 ] && fallback=$c
  done
  PY=${fallback:-python3}
  PY_WHY="no candidate's torch sees a CUDA GPU"
}
pick_python

if [ "$INSTALL" = 1 ]; then
  if "$PY" -c "$PROBE" >/dev/null 2>&1; then
    echo "python: $PY ($PY_WHY): nothing to install"
    exit 0
  fi
  echo "installing a CUDA build of torch into .venv-gpu: $INSTALL_CMD"
  bash -c "$INSTALL_CMD" || { echo "the install failed (no network?)" >&2; exit 2; }
  exec bash "$0"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# pagedkv.layers.attention turns the interpreter on only without CUDA; an exported value would
# keep it on and the kernels would refuse CUDA tensors.
unset TRITON_INTERPRET
export TRITON_DEFAULT_FP_FUSION=1  # Triton 3.9's default, said out loud

GPU_TESTS=(tests/layers/attention/test_kernel.py tests/layers/attention/test_kernel_props.py
           tests/layers/attention/test_kernel_checks.py tests/layers/attention/test_decode_sync_free.py
           tests/lessons/kernel/test_baselines.py tests/lessons/kernel/test_llama.py
           tests/bench/test_bench_decode.py tests/model_executor/test_model_runner.py)
PYTEST=("$PY" -m pytest -q -rs -o faulthandler_timeout=100 --junitxml="$LOG_DIR/pytest-gpu.xml"
        "${GPU_TESTS[@]}")
BENCH=("$PY" bench/bench_decode.py --out-dir "$RESULTS_DIR")

plan() {
  echo "python:  $PY ($PY_WHY)"
  [ -n "$SKIPPED" ] && printf 'passed over:\n%s' "$SKIPPED"
  echo "         PYTHONPATH=$PYTHONPATH, TRITON_INTERPRET unset"
  echo "1. env   (30 s):  nvidia-smi (clocks, driver); python, torch, CUDA, triton versions"
  echo "2. tests (150 s): ${PYTEST[*]}"
  echo "3. bench (rest):  ${BENCH[*]} --dtype <float16 below sm_80, else bfloat16> --time-budget <rest - 60 s>"
  echo "                  -> $RESULTS_DIR/decode-<gpu>-<date>.json, rewritten after every point"
  echo "logs:    $LOG_DIR/{env.txt,pytest-gpu.log,pytest-gpu.xml,bench.log,summary.txt}"
  echo "overall limit ${TOTAL} s"
  echo "the sweep on a T4 and an H100, with $PY (dtype; the peak it compares against):"
  "$PY" bench/bench_decode.py --dry-run 2>&1 | sed 's/^/  /'
  echo "no Python here sees a GPU? bash bench/gpu_check.sh --install, which runs: $INSTALL_CMD"
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
echo "python: $PY ($PY_WHY)"
stage env 30 "$LOG_DIR/env.txt" bash -c env_info
if ! grep -q "^gpu " "$LOG_DIR/env.txt"; then
  echo "No CUDA GPU usable from $PY (see $LOG_DIR/env.txt): nothing was run on a GPU." >&2
  [ -n "$SKIPPED" ] && printf 'Pythons tried:\n%s' "$SKIPPED" >&2
  echo "Install a CUDA build of torch (bash bench/gpu_check.sh --install does it):" >&2
  echo "  $INSTALL_CMD" >&2
  echo "then rerun, or set PYTHON=... This is what would run:" >&2
  plan >&2
  exit 2
fi
# bfloat16 from sm_80, float16 below: a T4 (sm_75) has no bf16 arithmetic
SM=$(sed -n 's/^gpu .* sm_\([0-9]*\) .*/\1/p' "$LOG_DIR/env.txt" | head -n 1)
DTYPE=bfloat16
if [ -n "$SM" ] && [ "$SM" -lt 80 ]; then DTYPE=float16; fi
BENCH+=(--dtype "$DTYPE")
echo "sweep dtype: $DTYPE (sm_${SM:-?})" | tee -a "$LOG_DIR/summary.txt"

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
