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

pytestmark = pytest.mark.slow  # runs the benchmark's every path through the interpreter

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_decode.py"
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="the smoke mode is for CPU machines")


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


@NO_GPU
def test_cpu_smoke_writes_a_report_without_gpu_numbers(tmp_path: Path) -> None:
    assert _load().main(["--cpu-smoke", "--out-dir", str(tmp_path)]) == 0
    (out,) = tmp_path.glob("decode-cpu-*.json")  # --out-dir keeps the default file name
    report = json.loads(out.read_text())
    assert report["gpu"] is None and report["peak_hbm_bytes_per_s"] is None
    assert report["git"]["commit"] and report["triton"] and report["launch_floor_us"] > 0
    rows = report["results"]
    assert {r["impl"] for r in rows} == {"pagedkv-per-token", "pagedkv-per-page",
                                         "pagedkv-contiguous", "torch-sdpa", "device-copy"}
    assert all(r["gb_per_s"] is None and r["launch_bound"] is False for r in rows)
    kernel_rows = [r for r in rows if r["impl"].startswith("pagedkv")]
    assert all(r["num_splits"] == 1 for r in kernel_rows)  # the interpreter never splits
    assert all(r["equals_per_token"] for r in rows if r["impl"] == "pagedkv-per-page")
    (flat,) = [r for r in rows if r["impl"] == "pagedkv-contiguous"]
    assert flat["agrees"] and flat["max_diff_vs_sdpa"] <= flat["diff_bound"]
    (copy,) = [r for r in rows if r["impl"] == "device-copy"]
    # the K pool (page 0, then 40 + 1 one-slot pages per request), read and written
    assert copy["bytes"] == 2 * (1 + 2 * 41) * 2 * 64 * 4
    assert report["complete"] is True


@NO_GPU
def test_an_error_at_one_point_is_recorded_and_the_sweep_goes_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _load()
    run = bench.kernel_run

    def fail_on_pages_of_16(case, per_page: bool):
        if case.page_size == 16:
            raise torch.cuda.OutOfMemoryError("pretend")
        return run(case, per_page)

    monkeypatch.setattr(bench, "kernel_run", fail_on_pages_of_16)
    out = tmp_path / "errors.json"
    assert bench.main(["--cpu-smoke", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["results"]
    failed = [r for r in rows if "error" in r]
    assert {(r["impl"], r["page_size"]) for r in failed} == {
        ("pagedkv-per-token", 16), ("pagedkv-per-page", 16)}
    assert "OutOfMemoryError" in failed[0]["error"]
    assert {r["impl"] for r in rows if "error" not in r} >= {"pagedkv-contiguous", "device-copy"}


@NO_GPU
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


@NO_GPU
def test_the_time_budget_skips_the_points_it_cannot_start(tmp_path: Path) -> None:
    out = tmp_path / "budget.json"
    assert _load().main(["--cpu-smoke", "--time-budget", "0", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["results"] == [] and report["complete"] is True
    assert report["skipped"] == [{"batch": 2, "context": 40, "why": "--time-budget"}]


def test_the_target_point_runs_first() -> None:
    order = _load().sweep_order([1, 64, 256], [512, 4096])
    assert order[0] == (64, 4096) and sorted(order) == sorted(
        (b, c) for b in (1, 64, 256) for c in (512, 4096))
    assert order[1:] == sorted(order[1:])


def test_peak_bandwidth_comes_from_pagedkv_gpus() -> None:
    bench = _load()
    assert bench.peak_bandwidth("NVIDIA H100 80GB HBM3") == (3.35e12,
                                                             "pagedkv.gpus['h100-sxm-80gb']")
    assert bench.peak_bandwidth("NVIDIA H100 PCIe") == (None, None)  # not the SXM part
    assert bench.peak_bandwidth("NVIDIA H100 PCIe", "h100-sxm-80gb")[0] == 3.35e12
    with pytest.raises(ConfigError, match=r"gpu='nope' is invalid"):
        bench.peak_bandwidth("NVIDIA H100 PCIe", "nope")


def test_dtype_by_compute_capability_and_the_t4_row(capsys: pytest.CaptureFixture[str]) -> None:
    bench = _load()
    assert [bench.default_dtype(c) for c in ((7, 5), (8, 0), (8, 9), (9, 0))] == [
        "float16", "bfloat16", "bfloat16", "bfloat16"]  # a T4 has no bf16
    assert bench.peak_bandwidth("Tesla T4") == (320e9, "pagedkv.gpus['t4']")  # T4 datasheet
    assert bench.main(["--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Tesla T4 (sm_75): --dtype float16, peak 320 GB/s")
    assert lines[1].startswith("NVIDIA H100 80GB HBM3 (sm_90): --dtype bfloat16, peak 3,350 GB/s")
