#!/usr/bin/env bash
# Install (scripts/setup.sh) and build the book to _build/html/index.html.
# -W turns warnings into errors and a failing cell fails the build; --all re-reads every page.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/jupyter-book build . --all -W -n --keep-going
echo "Book built: $(pwd)/_build/html/index.html"
