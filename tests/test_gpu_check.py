"""bench/gpu_check.sh: its plan names files that exist, and without CUDA it runs nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_check.sh"


def _run(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable, "GPU_CHECK_DIR": str(tmp_path / "logs"),
           "OUT": str(tmp_path / "out")}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_dry_run_plans_every_stage_on_existing_files(tmp_path: Path) -> None:
    run = _run("--dry-run", tmp_path=tmp_path)
    assert run.returncode == 0, run.stderr
    for stage in ("1. env", "2. tests", "3. bench"):
        assert stage in run.stdout
    tests = re.findall(r"tests/test_\w+\.py", run.stdout)
    assert "tests/test_llama.py" in tests and "tests/test_kernel.py" in tests
    assert all((ROOT / t).is_file() for t in tests)
    assert (ROOT / "bench" / "bench_decode.py").is_file()
    assert not (tmp_path / "logs").exists()  # a dry run writes nothing


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without CUDA")
def test_without_cuda_it_stops_after_the_versions(tmp_path: Path) -> None:
    run = _run(tmp_path=tmp_path)
    assert run.returncode == 2
    assert "No CUDA GPU usable" in run.stderr and "2. tests" in run.stderr
    assert "cuda available False" in (tmp_path / "out" / "env.txt").read_text()
    assert not (tmp_path / "logs" / "pytest-gpu.log").exists()
