#!/usr/bin/env bash
# Build the virtual environment in which tests/reference/ runs SGLang's own classes on a CPU.
#
#   bash scripts/sglang_reference.sh 0.5.23        # -> .venv-sglang-0.5.23/
#   bash scripts/sglang_reference.sh 0.5.9         # -> .venv-sglang-0.5.9/
#   .venv-sglang-0.5.23/bin/python -m pytest tests/reference
#
# What goes in, in this order: the CPU build of torch 2.13.0 (first, so nothing later can pull
# a CUDA build; checked), triton (its interpreter runs SGLang's allocation kernels on CPU
# tensors), numpy, pytest, the small pure-Python modules that SGLang's imported modules
# import at load time, and SGLang itself with --no-deps (its declared dependencies are the
# GPU server's and are never used on these code paths). pagedkv is not installed: the tests
# put the repository on sys.path, and its runtime needs here are numpy and torch.
#
# Idempotent: a stamp file records what was installed; a second run with the same pins only
# checks the stamp. Delete the folder to rebuild from scratch.
set -euo pipefail
cd "$(dirname "$0")/.."

version=${1:-}
case "$version" in
  0.5.9)  extra=(transformers==4.57.1 openai==2.6.1) ;;
  0.5.23) extra=(transformers==5.19.0 openai==2.8.0) ;;   # sglang.srt.configs needs 5.x
  *) echo "usage: bash scripts/sglang_reference.sh 0.5.9|0.5.23 (got '${version}')" >&2; exit 2 ;;
esac
venv=.venv-sglang-$version
PY=${PYTHON:-python3}
# SGLang 0.5.23 ships CPython 3.11 and 3.12 wheels only (its Rust extensions).
pyver=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
case "$pyver" in
  3.11|3.12) ;;
  *) echo "scripts/sglang_reference.sh: PYTHON=$PY is Python $pyver; SGLang's wheels need 3.11 or 3.12" >&2
     exit 2 ;;
esac

torch_pin=torch==2.13.0
common=(triton==3.9.0 numpy==2.4.6 "pytest>=8"
        orjson==3.13.0 psutil==7.2.2 pybase64==1.5.1 requests==2.34.2 pyzmq==27.3.0
        packaging==26.4 pillow==13.0.0 starlette==1.10.0 typing_extensions==4.16.0
        pydantic==2.14.4 dill==0.4.1 msgspec==0.22.0 partial-json-parser==0.2.1.1.post7
        tqdm==4.70.1)
stamp_text="$($PY -c 'import sys; print(sys.version.split()[0])') $torch_pin ${common[*]} ${extra[*]} sglang==$version"
stamp=$venv/.pagedkv-reference-stamp

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$stamp_text" ] && [ -x "$venv/bin/python" ]; then
  echo "$venv: ready (sglang $version)"
  exit 0
fi

# pip's notes about sglang's undeclared dependencies are expected (--no-deps): keep them out.
quiet() { grep -v -e '^WARNING: Location' -e 'requires .*, which is not installed' \
                -e 'but you have ' -e 'dependency resolver does not' || true; }

[ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q)

# 1. CPU torch first. TORCH_INDEX_URL as in scripts/setup.sh, for machines whose default
#    index would hand out the CUDA build.
"${pip[@]}" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$torch_pin" 2>&1 | quiet
"$venv/bin/python" -W ignore - <<'EOF'
import torch
assert torch.version.cuda is None, f"a CUDA build of torch got in: {torch.__version__}"
EOF

# 2. Everything else but SGLang, torch pinned so the resolver keeps the CPU build.
"${pip[@]}" "$torch_pin" "${common[@]}" "${extra[@]}" 2>&1 | quiet

# 3. SGLang, without its dependency list.
"${pip[@]}" --no-deps "sglang==$version" 2>&1 | quiet

# 4. Smoke test: the reference tests' bootstrap imports this release.
PYTHONPATH=tests/reference "$venv/bin/python" -W ignore -c \
  "import sgl_boot; sgl_boot.load(); print('$venv: sglang', sgl_boot.VERSION, 'imports')"

printf '%s' "$stamp_text" >"$stamp"
