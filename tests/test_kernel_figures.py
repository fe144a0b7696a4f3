"""The kernel chapter's figures and the loader of benchmark results."""

from __future__ import annotations

import json
from pathlib import Path

from pagedkv_widgets.kernel_figures import (
    bandwidth_figure,
    load_decode_results,
    pool_map_figure,
    provenance,
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
    assert "Example GPU, driver 1" in provenance(reports[0])
    assert len(bandwidth_figure(reports[0]).data) == 1
    assert load_decode_results(tmp_path / "missing") == []
