"""The kernel chapter's figures and the loader of benchmark results."""

from __future__ import annotations

import json
from pathlib import Path

from pagedkv.lessons.kernel.roofline import Prediction, TargetGPU
from pagedkv_widgets.kernel_figures import (
    bandwidth_figure,
    load_decode_results,
    pool_map_figure,
    provenance,
    roofline_figure,
)
from pagedkv_widgets.kernel_tables import (
    compiled_highlights,
    compiled_summary,
    compiled_table,
    contrast_table,
)


def test_pool_map_has_one_view_per_page_size() -> None:
    fig = pool_map_figure([5, 20, 9], [1, 4, 16])
    maps = [t for t in fig.data if t.type == "heatmap"]
    assert len(maps) == 3 and [t.visible for t in maps] == [True, False, False]
    assert "34 slot ids (per token)" in fig.layout.title.text
    cells = [v for row in maps[2].z for v in row if v is not None]
    assert sum(v >= 2 for v in cells) == 34  # every token's slot is coloured by its request
    assert sum(v == 1 for v in cells) == 16  # page 0 is drawn reserved, never free
    legend = [t.name for t in fig.data if t.type == "scatter"]
    assert legend == ["free slot", "page 0 (reserved)", "request 0 (5 tokens)",
                      "request 1 (20 tokens)", "request 2 (9 tokens)"]
    # every view button keeps the legend entries visible
    for button in fig.layout.updatemenus[0].buttons:
        assert button.args[0]["visible"][3:] == [True] * 5


def test_results_loader_skips_cpu_smoke_reports(tmp_path: Path) -> None:
    row = {"impl": "pagedkv-per-token", "batch": 1, "context": 512, "page_size": 16,
           "time_us": 10.0, "bytes": 1000, "gb_per_s": 0.1, "fraction_of_peak": None}
    gpu = {"gpu": "Example GPU", "date": "2026-01-01T00:00:00+00:00", "driver": "1",
           "results": [row], "peak_hbm_bytes_per_s": None}
    (tmp_path / "decode-example-2026-01-01.json").write_text(json.dumps(gpu))
    (tmp_path / "decode-cpu.json").write_text(json.dumps({**gpu, "gpu": None}))
    reports = load_decode_results(tmp_path)
    assert [r["file"] for r in reports] == ["decode-example-2026-01-01.json"]
    assert "Example GPU, driver 1" in provenance(reports[0])  # an old report: fewer fields
    full = {**reports[0], "compute_capability": "sm_90", "sm_count": 132,
            "clocks": {"clocks.sm": "1980 MHz", "clocks.max.sm": "1980 MHz"},
            "git": {"commit": "0123456789abcdef", "dirty": True}}
    assert provenance(full).startswith(
        "Example GPU (sm_90, 132 SMs, SM clock 1980 MHz (max 1980 MHz)), driver 1, ")
    assert "pagedkv commit 0123456789ab with uncommitted changes" in provenance(full)
    assert len(bandwidth_figure(reports[0]).data) == 1
    assert load_decode_results(tmp_path / "missing") == []


def _row(impl: str, context: int, gbps: float | None, launch_bound: bool = False) -> dict:
    return {"impl": impl, "batch": 64, "context": context, "page_size": None,
            "time_us": 1.0, "bytes": 1, "gb_per_s": gbps, "launch_bound": launch_bound}


def test_bandwidth_figure_leaves_out_launch_bound_and_failed_points() -> None:
    report = {"gpu": "Example GPU", "date": "2026-01-01", "peak_hbm_bytes_per_s": None,
              "results": [_row("torch-sdpa", 512, 900.0, launch_bound=True),
                          _row("torch-sdpa", 4096, 3000.0), _row("device-copy", 4096, 4000.0),
                          {**_row("flashinfer", 4096, None), "error": "ImportError()"}]}
    fig = bandwidth_figure(report)
    assert {t.name: list(t.x) for t in fig.data} == {"torch-sdpa": [4096],
                                                     "device-copy": [4096]}
    assert "1 launch-bound and 1 failed" in fig.layout.title.text


def test_roofline_figure_has_one_view_per_batch() -> None:
    a = Prediction("A", programs=8, resident_per_sm=1.0, memory=2e12, issue=8e12, latency=1e12)
    b = Prediction("B", programs=8, resident_per_sm=1.0, memory=1e12, issue=4e12, latency=3e12)
    fig = roofline_figure({1: [a, b], 64: [a, b]})
    assert len(fig.data) == 8 and [t.visible for t in fig.data[:4]] == [True] * 4
    ceilings = [t for t in fig.data if t.name == "predicted ceiling"]
    assert list(ceilings[0].y) == [1000.0, 1000.0]  # GB/s: A latency-bound, B memory-bound
    assert [c[1] for c in ceilings[0].customdata] == ["latency", "memory"]
    second = fig.layout.updatemenus[0].buttons[1].args[0]["visible"]
    assert second == [False] * 4 + [True] * 4
    # markers on a log axis that labels every tick (a bar's length means nothing there)
    assert {t.type for t in fig.data} == {"scatter"}
    y = fig.layout.yaxis
    assert y.type == "log" and len(y.ticktext) == len(y.tickvals)
    assert y.tickvals[0] <= 1000 and y.tickvals[-1] >= 8000


def test_kernel_tables_on_a_hand_made_compile_table() -> None:
    ops = {op: 0 for op in ("HMMA", "HGMMA", "FFMA", "LDGSTS", "LDG", "STL", "LDL", "BAR", "MUFU")}
    base = {"arch": 90, "dtype": "bfloat16", "purpose": "benchmark", "dot_fp32": False,
            "registers": 80, "spill_bytes": 0, "shared_bytes": 39168, "num_warps": 4,
            "head_dim": 128, "loop_instructions": 312, "ops": ops}
    rows = [{**base, "kernel": "stage1 per-page", "page_size": 16,
             "loop_ops": {**ops, "HMMA": 16, "LDGSTS": 9}},
            {**base, "kernel": "stage2", "page_size": None, "registers": 23, "shared_bytes": 0,
             "loop_ops": ops},
            {**base, "kernel": "stage1 per-page", "page_size": 16, "dot_fp32": True,
             "registers": 255, "spill_bytes": 256, "loop_instructions": 1726,
             "loop_ops": {**ops, "FFMA": 1026}}]
    gpus = [TargetGPU("H200", 90, 132, 1.98e9, 4.8e12)]
    table = compiled_table(rows, gpus).data.splitlines()
    assert len(table) == 4  # header, rule, stage 1, stage 2: the contrast row is not launched
    assert table[2] == ("| sm_90 (H200) | stage1 per-page, page 16 | 80 | 0 | 38.2 KiB | 16 HMMA"
                        " | 9 | 312 | 5 (shared memory) |")
    assert table[3].startswith("| sm_90 (H200) | stage2 | 23 | 0 | 0.0 KiB | - | - | - |")
    contrast = contrast_table(rows, gpus).data.splitlines()
    assert contrast[3] == ("| sm_90 (H200) | fp32 (widened) | 255 | 256 | 38.2 KiB | none | 1026 | 1726 "
                           "| 2 (registers) |")
    # the count says which set it covers: the launched kernels do not spill, the contrast does
    assert compiled_summary(rows) == (
        "3 kernels compiled, 0 failed. The 2 that the benchmark and this chapter launch (2 for "
        "the benchmark in bf16 and fp16, 0 for this chapter's own examples): 0 spill; the most "
        "registers: 80 (stage1 per-page, bfloat16, head dim 128, sm_90). The 1 contrast kernels "
        "with their dots widened to fp32 (sm_90; compiled, never launched, compared below): "
        "1 spill, 256 bytes.")
    assert compiled_summary(rows[:2]).endswith("sm_90).")  # no contrast kernel, no sentence


def test_compiled_highlights_cover_the_table_s_dtype_only() -> None:
    """The lines above the table count the kernels the table shows (bf16), not fp16's too."""
    ops = {op: 0 for op in ("HMMA", "HGMMA", "FFMA", "LDGSTS", "MUFU")}
    base = {"purpose": "benchmark", "dot_fp32": False, "kernel": "stage1 per-slot",
            "page_size": None, "spill_bytes": 0}
    slow = {**base, "arch": 75, "loop_ops": {**ops, "FFMA": 1026}}
    fast = {**base, "arch": 90, "loop_ops": {**ops, "HMMA": 16, "FFMA": 2}}
    rows = [{**slow, "dtype": "bfloat16", "registers": 207, "loop_instructions": 1588},
            {**slow, "dtype": "bfloat16", "registers": 205, "loop_instructions": 1602},
            {**slow, "dtype": "float16", "registers": 204, "loop_instructions": 1534},
            {**fast, "dtype": "bfloat16", "registers": 80, "loop_instructions": 312},
            {**fast, "dtype": "float16", "registers": 64, "loop_instructions": 300}]
    assert compiled_highlights(rows).splitlines() == [
        "sm_80 and later: 16 tensor-core and 2 fp32 FMA instructions among 312 per warp per "
        "tile; 80 registers, 0 bytes spilled",
        "sm_75: 0 tensor-core and 1026 fp32 FMA instructions among 1588-1602 per warp per "
        "tile; 205-207 registers, 0 bytes spilled"]
    assert "among 1534 per warp per tile; 204 registers" in compiled_highlights(rows, "float16")
