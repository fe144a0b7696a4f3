#!/usr/bin/env bash
# Install, lint, build the book (the browser tests read it), then run every test (one worker
# per core; PAGEDKV_TEST_WORKERS=0 runs them in this process). The reference tests
# (tests/reference/), which run SGLang's own classes beside pagedkv once per SGLang release in
# that release's venv, run in the background from the start: scripts/sglang_reference.sh builds
# each venv (mostly downloads) and its tests follow at once, beside the book build, which keeps
# one core busy at most; their output is shown at the end (PAGEDKV_REFERENCE=0 skips them,
# e.g. on a machine without a package index).
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
reference=${PAGEDKV_REFERENCE:-1}
releases=(0.5.9 0.5.23) builds=()
if [ "$reference" != 0 ]; then
  # Each release: its venv, then its tests, in the background; the log holds both.
  mkdir -p test-artifacts
  for release in "${releases[@]}"; do
    (bash scripts/sglang_reference.sh "$release" && PAGEDKV_SGLANG_RELEASE=$release \
       ".venv-sglang-$release/bin/python" -m pytest -q -p no:cacheprovider tests/reference
    ) >"test-artifacts/reference-$release.log" 2>&1 &
    builds+=($!)
  done
fi
.venv/bin/ruff check .
.venv/bin/jupyter-book build . --all -W -n --keep-going
status=0
# One worker per core (pytest-xdist); whole modules go to a worker (--dist loadscope), so a
# module's shared fixture (a served model, a local Ray, a browser) is built once.
.venv/bin/python -m pytest -q -n "${PAGEDKV_TEST_WORKERS:-auto}" --dist loadscope "$@" || status=$?
if [ "$reference" != 0 ]; then
  for i in "${!releases[@]}"; do
    wait "${builds[$i]}" || status=1
    echo "=== reference tests, SGLang ${releases[$i]} ==="
    cat "test-artifacts/reference-${releases[$i]}.log"
  done
fi
exit "$status"
