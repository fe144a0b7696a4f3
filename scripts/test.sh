#!/usr/bin/env bash
# Install, lint, build the book (the browser tests read it), then run every test; then the
# reference tests (tests/reference/), which run SGLang's own classes beside pagedkv, once per
# SGLang release in that release's venv (scripts/sglang_reference.sh builds them;
# PAGEDKV_REFERENCE=0 skips this part, e.g. on a machine without a package index).
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
status=0
.venv/bin/python -m pytest -q "$@" || status=$?
if [ "${PAGEDKV_REFERENCE:-1}" != 0 ]; then
  # The two releases at once (each mostly waits on downloads, then on one core); their
  # output is shown whole once both are done.
  mkdir -p test-artifacts
  releases=(0.5.9 0.5.23) pids=()
  for release in "${releases[@]}"; do
    (bash scripts/sglang_reference.sh "$release" &&
     PAGEDKV_SGLANG_RELEASE=$release ".venv-sglang-$release/bin/python" -m pytest -q \
       -p no:cacheprovider tests/reference) >"test-artifacts/reference-$release.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!releases[@]}"; do
    wait "${pids[$i]}" || status=1
    echo "=== reference tests, SGLang ${releases[$i]} ==="
    cat "test-artifacts/reference-${releases[$i]}.log"
  done
fi
exit "$status"
