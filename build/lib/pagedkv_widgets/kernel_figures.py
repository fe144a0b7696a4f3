"""Figures of the kernel chapter: where a batch's tokens sit in the pool, and measured GB/s.

Plain plotly figures (buttons and hover work in the static book); show them with
:func:`pagedkv_widgets.figures.show`.
"""

from __future__ import annotations

import json
from pathlib import Path

import plotly.graph_objects as go

from pagedkv.kernels import DecodeCase, random_decode_case

POOL_COLUMNS = 32  # slots per row of the pool picture


def _owners(case: DecodeCase) -> tuple[list[list[float | None]], list[list[str]]]:
    """Per slot: the request reading it (None if none) and a hover line, in rows of 32."""
    num_slots = case.k_cache.shape[0]
    owner: list[float | None] = [None] * num_slots
    text = [f"slot {s}: free" for s in range(num_slots)]
    for b, (row, length) in enumerate(zip(case.req_pool_indices.tolist(),
                                          case.seq_lens.tolist(), strict=True)):
        for t, slot in enumerate(case.req_to_token[row, :length].tolist()):
            owner[slot] = float(b)
            text[slot] = (f"slot {slot} = page {slot // case.page_size}, offset "
                          f"{slot % case.page_size}: request {b}, token {t}")
    rows = -(-num_slots // POOL_COLUMNS)
    pad = rows * POOL_COLUMNS - num_slots
    owner += [None] * pad
    text += [""] * pad
    return ([owner[r * POOL_COLUMNS:(r + 1) * POOL_COLUMNS] for r in range(rows)],
            [text[r * POOL_COLUMNS:(r + 1) * POOL_COLUMNS] for r in range(rows)])


def pool_map_figure(seq_lens: list[int], page_sizes: list[int], seed: int = 0) -> go.Figure:
    """The pool's slots coloured by the request whose decode reads them, one view per page size.

    Each view is a seeded :func:`random_decode_case`; the title counts the table entries a
    decode step reads per token (``req_to_token``) and per page (``page_table``).
    """
    fig = go.Figure()
    buttons = []
    for i, page_size in enumerate(page_sizes):
        case = random_decode_case(seq_lens, num_q_heads=1, num_kv_heads=1, head_dim=1,
                                  page_size=page_size, seed=seed)
        z, text = _owners(case)
        fig.add_trace(go.Heatmap(z=z, text=text, hoverinfo="text", visible=i == 0,
                                 colorscale="Turbo", zmin=0, zmax=max(len(seq_lens) - 1, 1),
                                 xgap=1, ygap=1, showscale=False))
        per_page = sum(-(-n // page_size) for n in seq_lens)
        title = (f"page_size {page_size}: {case.k_cache.shape[0]} slots; a decode step reads "
                 f"{sum(seq_lens)} slot ids per token or {per_page} page ids per page")
        buttons.append({"label": f"page {page_size}", "method": "update",
                        "args": [{"visible": [j == i for j in range(len(page_sizes))]},
                                 {"title.text": title}]})
        if i == 0:
            fig.update_layout(title_text=title)
    fig.update_layout(
        updatemenus=[{"type": "buttons", "direction": "right", "buttons": buttons,
                      "x": 0, "y": 1.12, "xanchor": "left"}],
        xaxis={"title": f"slot % {POOL_COLUMNS}"},
        yaxis={"title": f"slot // {POOL_COLUMNS}", "autorange": "reversed"},
        height=420, margin={"t": 90},
    )
    return fig


def load_decode_results(directory: str | Path) -> list[dict[str, object]]:
    """Every ``decode-*.json`` written by ``bench/bench_decode.py`` on a GPU, oldest first.

    Reports without a GPU name (``--cpu-smoke`` runs) are skipped: they are not measurements.
    """
    reports = []
    for path in sorted(Path(directory).glob("decode-*.json")):
        report = json.loads(path.read_text())
        if report.get("gpu"):
            report["file"] = path.name
            reports.append(report)
    return sorted(reports, key=lambda r: str(r["date"]))


def provenance(report: dict[str, object]) -> str:
    """One line: which GPU, driver and library versions produced ``report``, and when."""
    return (f"{report['gpu']}, driver {report.get('driver')}, CUDA {report.get('cuda')}, "
            f"torch {report.get('torch')}, triton {report.get('triton')}, "
            f"flashinfer {report.get('flashinfer')}; measured {report['date']} "
            f"({report.get('file', '?')})")


def bandwidth_figure(report: dict[str, object]) -> go.Figure:
    """Achieved GB/s against context length, one line per implementation and page size,
    one view per batch size; the dashed line is the GPU's peak HBM bandwidth."""
    rows = [r for r in report["results"] if r.get("gb_per_s")]
    batches = sorted({r["batch"] for r in rows})
    fig = go.Figure()
    owner = []
    for batch in batches:
        series: dict[str, list[dict[str, object]]] = {}
        for r in rows:
            if r["batch"] == batch:
                name = r["impl"] + (f" (page {r['page_size']})" if r["page_size"] else "")
                series.setdefault(name, []).append(r)
        for name, points in series.items():
            points.sort(key=lambda r: r["context"])
            fig.add_trace(go.Scatter(
                x=[p["context"] for p in points], y=[p["gb_per_s"] for p in points],
                mode="lines+markers", name=name, visible=batch == batches[0],
                hovertemplate="context %{x}<br>%{y:.0f} GB/s<extra>" + name + "</extra>"))
            owner.append(batch)
    peak = report.get("peak_hbm_bytes_per_s")
    if peak:
        fig.add_hline(y=peak / 1e9, line_dash="dash",
                      annotation_text=f"peak {peak / 1e12:.2f} TB/s ({report['peak_source']})")
    fig.update_layout(
        updatemenus=[{"buttons": [{"label": f"batch {b}", "method": "update",
                                   "args": [{"visible": [o == b for o in owner]}]}
                                  for b in batches], "x": 0, "y": 1.15, "xanchor": "left"}],
        title_text=f"Decode attention, one layer: {report['gpu']}",
        xaxis={"title": "context length (tokens)", "type": "log"},
        yaxis={"title": "achieved GB/s (K+V+q+o bytes / time)"}, height=450, margin={"t": 90},
    )
    return fig

