"""bench/gpu_check.sh: its plan names files that exist; without CUDA it runs nothing; with a
stand-in Python that claims a GPU it writes every log and the benchmark JSON into $OUT."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow  # runs bench/gpu_check.sh, which starts Python with torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu_check.sh"

# Answers the script's three kinds of Python call: the version probe (-c) says a GPU is there,
# pytest is replaced by a line and a JUnit file, and the benchmark runs for real in its CPU
# smoke mode with the arguments the script passed (so --out-dir and --time-budget are used).
FAKE_PYTHON = """#!/usr/bin/env bash
if [ "$1" = "-c" ]; then
  echo "torch fake CUDA 12.8 cuda available True"; echo "gpu FakeGPU sm_%s 132 SMs 139.8 GiB"
  exit 0
fi
if [ "$1" = "-m" ] && [ "$2" = "pytest" ]; then
  for a in "$@"; do case $a in --junitxml=*) echo "<testsuite/>" >"${a#--junitxml=}";; esac; done
  echo "fake pytest: $*"; exit 0
fi
shift  # bench/bench_decode.py
exec "%s" "%s" --cpu-smoke "$@"
"""


def _run(*args: str, tmp_path: Path, python: str | None = sys.executable,
         out: bool = True, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPU_CHECK_DIR": str(tmp_path / "logs"), **extra}
    env.pop("OUT", None)
    env.pop("PYTHON", None)
    if python is not None:
        env["PYTHON"] = python
    if out:
        env["OUT"] = str(tmp_path / "out")
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=180, check=False)


def test_dry_run_plans_every_stage_on_existing_files(tmp_path: Path) -> None:
    run = _run("--dry-run", tmp_path=tmp_path)
    assert run.returncode == 0, run.stderr
    for stage in ("1. env", "2. tests", "3. bench"):
        assert stage in run.stdout
    assert "overall limit 420 s" in run.stdout  # 7 minutes, so a rerun fits in a 15-minute loan
    tests = re.findall(r"tests/[\w/]*test_\w+\.py", run.stdout)
    assert {"tests/lessons/kernel/test_llama.py", "tests/layers/attention/test_kernel.py",
            "tests/layers/attention/test_kernel_props.py"} <= set(tests)
    assert all((ROOT / t).is_file() for t in tests)
    assert f"--out-dir {tmp_path / 'out'}" in run.stdout
    assert (ROOT / "bench" / "bench_decode.py").is_file()
    assert not (tmp_path / "logs").exists() and not (tmp_path / "out").exists()  # writes nothing
    # the torch it would use, and for a T4 and an H100 the sweep's dtype and peak row
    assert f"python:  {sys.executable} (set by PYTHON: torch {torch.__version__}" in run.stdout
    assert ("Tesla T4 (sm_75): --dtype float16, peak 320 GB/s from pagedkv.gpus['t4'] "
            "(NVIDIA T4 datasheet") in run.stdout
    assert ("NVIDIA H100 80GB HBM3 (sm_90): --dtype bfloat16, peak 3,350 GB/s from "
            "pagedkv.gpus['h100-sxm-80gb'] (NVIDIA H100 Tensor Core GPU datasheet") in run.stdout
    assert "bash bench/gpu_check.sh --install" in run.stdout


def _fake(tmp_path: Path, sm: int = 90) -> Path:
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON % (sm, sys.executable, ROOT / "bench" / "bench_decode.py"))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return fake


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a Python whose torch has no CUDA")
def test_it_picks_the_first_python_whose_torch_sees_the_gpu(tmp_path: Path) -> None:
    fake = _fake(tmp_path)
    run = _run("--dry-run", tmp_path=tmp_path, python=None,
               GPU_CHECK_PYTHONS=f"/no/such/python {sys.executable} {fake}")
    assert run.returncode == 0, run.stderr
    assert f"python:  {fake} (the first candidate whose torch sees the GPU: " in run.stdout
    assert (f"passed over:\n  {sys.executable}: torch {torch.__version__} (CUDA build None) "
            "sees no CUDA device\n") in run.stdout
    assert "/no/such/python" not in run.stdout  # not there: not a candidate
    assert f"{fake} -m pytest" in run.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_without_cuda_it_stops_after_the_versions(tmp_path: Path) -> None:
    run = _run(tmp_path=tmp_path)
    assert run.returncode == 2
    assert "No CUDA GPU usable" in run.stderr and "2. tests" in run.stderr
    assert ("Install a CUDA build of torch (bash bench/gpu_check.sh --install does it):\n"
            "  python3 -m venv .venv-gpu && .venv-gpu/bin/pip install --index-url "
            "https://download.pytorch.org/whl/cu128") in run.stderr
    out = tmp_path / "out"
    assert "cuda available False" in (out / "env.txt").read_text()  # written into $OUT itself
    assert "env: FAIL" in (out / "summary.txt").read_text()
    assert not (out / "pytest-gpu.log").exists() and not (tmp_path / "logs").exists()


@pytest.mark.parametrize(("sm", "dtype"), [(90, "bfloat16"), (75, "float16")])
def test_a_claimed_gpu_runs_every_stage_into_out(tmp_path: Path, sm: int, dtype: str) -> None:
    fake = _fake(tmp_path, sm)
    run = _run(tmp_path=tmp_path, python=str(fake))
    out = tmp_path / "out"
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    summary = (out / "summary.txt").read_text()
    assert all(f"{s}: PASS" in summary for s in ("env", "tests", "bench")), summary
    assert "fake pytest" in (out / "pytest-gpu.log").read_text()
    assert (out / "pytest-gpu.xml").is_file()
    bench_log = (out / "bench.log").read_text()
    assert re.search(rf"--dtype {dtype} --time-budget \d+", run.stdout) and "wrote " in bench_log
    assert f"sweep dtype: {dtype} (sm_{sm})" in summary
    (report,) = out.glob("decode-*.json")
    assert json.loads(report.read_text())["complete"] is True
    assert f"bench JSON: {report}" in summary
    assert not (ROOT / "bench" / "results" / report.name).exists()  # $OUT only
