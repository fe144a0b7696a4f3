#!/usr/bin/env bash
# Install, lint, build the book (the browser tests read it), then run every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "chromium not installed: browser tests will be skipped"
  else
    echo "chromium not found and not root: browser tests will be skipped"
  fi
fi
.venv/bin/ruff check .
.venv/bin/jupyter-book build . --all -W -n --keep-going
.venv/bin/python -m pytest -q "$@"
