#!/usr/bin/env bash
# Create .venv (if missing) and install pagedkv with everything the book and tests need.
# The CPU build of torch goes in first: a bare "torch" requirement would pull a CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# Where pip's default index would hand out a CUDA build, point TORCH_INDEX_URL at PyTorch's
# CPU index (https://download.pytorch.org/whl/cpu); by default pip's own configuration decides.
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/python -m pip install -q ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "torch==2.13.0"
fi
.venv/bin/python -m pip install -q -r requirements.txt
.venv/bin/python -m pip install -q --no-deps -e .
# The book's JavaScript from npm (package.json, pinned in package-lock.json): plotly.js's
# partial bundles, which the built pages load, and axe-core, which the browser tests run.
if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && apt-get install -y -qq npm >/dev/null) || true
fi
if command -v npm >/dev/null 2>&1; then
  npm ci --no-audit --no-fund --loglevel=error
else
  echo "npm not found: the book falls back to the full plotly.js (4.8 MB a page) and the accessibility tests are skipped"
fi
