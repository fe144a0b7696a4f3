"""bench/bench_decode.py: refuses to run without CUDA; --cpu-smoke exercises every path."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
import torch

import pagedkv.layers.attention  # noqa: F401  (sets TRITON_INTERPRET before the script imports triton)
from pagedkv.errors import ConfigError

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "bench_decode.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_decode", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA refusal")
def test_refuses_without_cuda(capsys: pytest.CaptureFixture[str]) -> None:
    assert _load().main([]) == 2
    assert "needs CUDA" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the smoke mode is for CPU machines")
def test_cpu_smoke_writes_a_report_without_gpu_numbers(tmp_path: Path) -> None:
    out = tmp_path / "smoke.json"
    assert _load().main(["--cpu-smoke", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["gpu"] is None and report["peak_hbm_bytes_per_s"] is None
    impls = {row["impl"] for row in report["results"]}
    assert impls == {"pagedkv-per-token", "pagedkv-per-page", "pagedkv-contiguous", "torch-sdpa"}
    assert all(row["gb_per_s"] is None for row in report["results"])
    assert report["complete"] is True


@pytest.mark.skipif(torch.cuda.is_available(), reason="the smoke mode is for CPU machines")
def test_a_stopped_sweep_keeps_the_points_it_measured(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _load()
    measured, parse = bench.bench_point, bench.parse_args
    calls = []

    def two_points(argv: list[str] | None) -> object:
        args = parse(argv)
        args.context = [40, 48]
        return args

    def stop_at_the_second_point(*args: object) -> list[dict[str, object]]:
        calls.append(args)
        if len(calls) == 2:
            raise KeyboardInterrupt  # what a time limit's signal looks like to the sweep
        return measured(*args)

    monkeypatch.setattr(bench, "bench_point", stop_at_the_second_point)
    monkeypatch.setattr(bench, "parse_args", two_points)
    out = tmp_path / "partial.json"
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--cpu-smoke", "--out", str(out)])
    report = json.loads(out.read_text())
    assert report["complete"] is False
    assert {row["context"] for row in report["results"]} == {40}


def test_peak_bandwidth_comes_from_pagedkv_gpus() -> None:
    bench = _load()
    assert bench.peak_bandwidth("NVIDIA H100 80GB HBM3") == (3.35e12,
                                                             "pagedkv.gpus['h100-sxm-80gb']")
    assert bench.peak_bandwidth("NVIDIA H100 PCIe") == (None, None)  # not the SXM part
    assert bench.peak_bandwidth("NVIDIA H100 PCIe", "h100-sxm-80gb")[0] == 3.35e12
    with pytest.raises(ConfigError, match=r"gpu='nope' is invalid"):
        bench.peak_bandwidth("NVIDIA H100 PCIe", "nope")
