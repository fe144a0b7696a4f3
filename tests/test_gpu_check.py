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

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_check.sh"

# Answers the script's three kinds of Python call: the version probe (-c) says a GPU is there,
# pytest is replaced by a line and a JUnit file, and the benchmark runs for real in its CPU
# smoke mode with the arguments the script passed (so --out-dir and --time-budget are used).
FAKE_PYTHON = """#!/usr/bin/env bash
if [ "$1" = "-c" ]; then
  echo "torch fake CUDA 12.8 cuda available True"; echo "gpu FakeGPU sm_90 132 SMs 139.8 GiB"
  exit 0
fi
if [ "$1" = "-m" ] && [ "$2" = "pytest" ]; then
  for a in "$@"; do case $a in --junitxml=*) echo "<testsuite/>" >"${a#--junitxml=}";; esac; done
  echo "fake pytest: $*"; exit 0
fi
shift  # bench/bench_decode.py
exec "%s" "%s" --cpu-smoke "$@"
"""


def _run(*args: str, tmp_path: Path, python: str = sys.executable,
         out: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": python, "GPU_CHECK_DIR": str(tmp_path / "logs")}
    env.pop("OUT", None)
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
    tests = re.findall(r"tests/test_\w+\.py", run.stdout)
    assert {"tests/test_llama.py", "tests/test_kernel.py", "tests/test_kernel_props.py"} <= set(tests)
    assert all((ROOT / t).is_file() for t in tests)
    assert f"--out-dir {tmp_path / 'out'}" in run.stdout
    assert (ROOT / "bench" / "bench_decode.py").is_file()
    assert not (tmp_path / "logs").exists() and not (tmp_path / "out").exists()  # writes nothing


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_without_cuda_it_stops_after_the_versions(tmp_path: Path) -> None:
    run = _run(tmp_path=tmp_path)
    assert run.returncode == 2
    assert "No CUDA GPU usable" in run.stderr and "2. tests" in run.stderr
    out = tmp_path / "out"
    assert "cuda available False" in (out / "env.txt").read_text()  # written into $OUT itself
    assert "env: FAIL" in (out / "summary.txt").read_text()
    assert not (out / "pytest-gpu.log").exists() and not (tmp_path / "logs").exists()


def test_a_claimed_gpu_runs_every_stage_into_out(tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON % (sys.executable, ROOT / "bench" / "bench_decode.py"))
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    run = _run(tmp_path=tmp_path, python=str(fake))
    out = tmp_path / "out"
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    summary = (out / "summary.txt").read_text()
    assert all(f"{s}: PASS" in summary for s in ("env", "tests", "bench")), summary
    assert "fake pytest" in (out / "pytest-gpu.log").read_text()
    assert (out / "pytest-gpu.xml").is_file()
    bench_log = (out / "bench.log").read_text()
    assert re.search(r"--time-budget \d+", run.stdout) and "wrote " in bench_log
    (report,) = out.glob("decode-*.json")
    assert json.loads(report.read_text())["complete"] is True
    assert f"bench JSON: {report}" in summary
    assert not (ROOT / "bench" / "results" / report.name).exists()  # $OUT only
