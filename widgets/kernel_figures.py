"""Figures of the kernel chapter: where a batch's tokens sit in the pool, the predicted
bandwidth roofs per GPU, and measured GB/s.

Plain plotly figures (buttons and hover work in the static book); show them with
:func:`pagedkv_widgets.figures.show`.
"""

from __future__ import annotations

import json
from pathlib import Path

import plotly.graph_objects as go

from pagedkv.lessons.kernel import DecodeCase, random_decode_case
from pagedkv.lessons.kernel.roofline import Prediction
from pagedkv_widgets.axes import log_axis, nice_log_ticks

POOL_COLUMNS = 32  # slots per row of the pool picture


FREE, RESERVED = 0, 1  # cell values; request b is drawn as 2 + b
FREE_COLOUR, RESERVED_COLOUR = "#e6e6e6", "#555555"
REQUEST_COLOURS = ("#4477AA", "#EE6677", "#228833", "#CCBB44", "#66CCEE", "#AA3377", "#BBBBBB")


def _owners(case: DecodeCase) -> tuple[list[list[float | None]], list[list[str]]]:
    """Per slot, in rows of 32: FREE, RESERVED (page 0, never handed out) or 2 + the request
    reading it; and a hover line. Cells past the pool's end are None."""
    num_slots, p = case.k_cache.shape[0], case.page_size
    owner: list[float | None] = [float(RESERVED if s < p else FREE) for s in range(num_slots)]
    text = [f"slot {s}: page 0, withheld for padded tokens" if s < p
            else f"slot {s} = page {s // p}: free" for s in range(num_slots)]
    for b, (row, length) in enumerate(zip(case.req_pool_indices.tolist(),
                                          case.seq_lens.tolist(), strict=True)):
        for t, slot in enumerate(case.req_to_token[row, :length].tolist()):
            owner[slot] = float(2 + b)
            text[slot] = (f"slot {slot} = page {slot // p}, offset "
                          f"{slot % p}: request {b}, token {t}")
    rows = -(-num_slots // POOL_COLUMNS)
    pad = rows * POOL_COLUMNS - num_slots
    owner += [None] * pad
    text += [""] * pad
    return ([owner[r * POOL_COLUMNS:(r + 1) * POOL_COLUMNS] for r in range(rows)],
            [text[r * POOL_COLUMNS:(r + 1) * POOL_COLUMNS] for r in range(rows)])


def _discrete_scale(colours: list[str]) -> list[list[object]]:
    """A colorscale that gives value k (0 <= k < len(colours)) exactly ``colours[k]`` when
    ``zmin=-0.5`` and ``zmax=len(colours) - 0.5``."""
    m = len(colours)
    return [pair for k, c in enumerate(colours) for pair in ([k / m, c], [(k + 1) / m, c])]


def pool_map_figure(seq_lens: list[int], page_sizes: list[int], seed: int = 0) -> go.Figure:
    """The pool's slots coloured by the request whose decode reads them, one view per page size
    (buttons under the plot). Page 0 is drawn as reserved, as the allocator never hands it out.

    Each view is a seeded :func:`random_decode_case`; the title counts the table entries a
    decode step reads per token (``req_to_token``) and per page (``page_table``).
    """
    colours = [FREE_COLOUR, RESERVED_COLOUR,
               *(REQUEST_COLOURS[b % len(REQUEST_COLOURS)] for b in range(len(seq_lens)))]
    fig = go.Figure()
    buttons, max_rows = [], 1
    for i, page_size in enumerate(page_sizes):
        case = random_decode_case(seq_lens, num_q_heads=1, num_kv_heads=1, head_dim=1,
                                  page_size=page_size, seed=seed)
        z, text = _owners(case)
        max_rows = max(max_rows, len(z))
        fig.add_trace(go.Heatmap(z=z, text=text, hoverinfo="text", visible=i == 0,
                                 colorscale=_discrete_scale(colours), zmin=-0.5,
                                 zmax=len(colours) - 0.5, xgap=1, ygap=1, showscale=False,
                                 showlegend=False))
        per_page = sum(-(-n // page_size) for n in seq_lens)
        title = (f"page_size {page_size}: a pool of {case.k_cache.shape[0]} slots<br>"
                 f"<sup>a decode step reads {sum(seq_lens)} slot ids (per token) "
                 f"or {per_page} page ids (per page)</sup>")
        buttons.append({"label": f"page_size {page_size}", "method": "update",
                        "args": [{"visible": [j == i for j in range(len(page_sizes))]
                                  + [True] * len(colours)},
                                 {"title.text": title}]})
        if i == 0:
            fig.update_layout(title_text=title)
    names = ["free slot", "page 0 (reserved)",
             *(f"request {b} ({n} tokens)" for b, n in enumerate(seq_lens))]
    for name, colour in zip(names, colours, strict=True):  # legend entries only
        fig.add_scatter(x=[None], y=[None], mode="markers", name=name,
                        marker={"symbol": "square", "size": 12, "color": colour})
    fig.update_layout(
        updatemenus=[{"type": "buttons", "direction": "right", "buttons": buttons,
                      "x": 0, "y": -0.22, "xanchor": "left", "yanchor": "top",
                      "name": "page size"}],
        xaxis={"title": f"slot % {POOL_COLUMNS}", "dtick": 4, "range": [-0.5, POOL_COLUMNS - 0.5]},
        yaxis={"title": f"row (slot // {POOL_COLUMNS})", "autorange": "reversed",
               "tickmode": "linear", "tick0": 0, "dtick": 1},
        legend={"orientation": "v", "x": 1.02, "y": 1},
        height=max(360, 240 + 28 * max_rows), margin={"t": 80, "b": 110, "r": 190},
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
    """One line: which GPU, clocks, driver, library versions and commit produced ``report``
    (fields the report lacks are left out)."""
    clocks = report.get("clocks") or {}
    hardware = [report.get("compute_capability"),
                f"{report['sm_count']} SMs" if report.get("sm_count") else None,
                f"SM clock {clocks['clocks.sm']} (max {clocks.get('clocks.max.sm')})"
                if clocks.get("clocks.sm") else None]
    hardware = [h for h in hardware if h]
    git = report.get("git") or {}
    commit = (git["commit"][:12] + (" with uncommitted changes" if git.get("dirty") else "")
              if git.get("commit") else "unknown")
    return (f"{report['gpu']}" + (f" ({', '.join(hardware)})" if hardware else "")
            + f", driver {report.get('driver')}, CUDA {report.get('cuda')}, torch "
            f"{report.get('torch')}, triton {report.get('triton')}, flashinfer "
            f"{report.get('flashinfer')}, pagedkv commit {commit}; measured {report['date']} "
            f"({report.get('file', '?')})")


def bandwidth_figure(report: dict[str, object]) -> go.Figure:
    """Achieved GB/s against context length, one line per implementation and page size,
    one view per batch size; the dashed line is the GPU's peak HBM bandwidth. Launch-bound
    points and points that failed are left out (the title counts them)."""
    measured = [r for r in report["results"] if r.get("gb_per_s")]
    rows = [r for r in measured if not r.get("launch_bound")]
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
                line={"dash": "dot"} if name == "device-copy" else None,
                hovertemplate="context %{x}<br>%{y:.0f} GB/s<extra>" + name + "</extra>"))
            owner.append(batch)
    peak = report.get("peak_hbm_bytes_per_s")
    if peak:
        fig.add_hline(y=peak / 1e9, line_dash="dash",
                      annotation_text=f"peak {peak / 1e12:.2f} TB/s ({report['peak_source']})")
    left_out = len(measured) - len(rows)
    failed = sum(1 for r in report["results"] if "error" in r)
    fig.update_layout(
        updatemenus=[{"buttons": [{"label": f"batch {b}", "method": "update",
                                   "args": [{"visible": [o == b for o in owner]}]}
                                  for b in batches], "x": 0, "y": 1.15, "xanchor": "left",
                      "name": "batch"}],
        title_text=(f"Decode attention, one layer: {report['gpu']}<br><sup>{left_out} "
                    f"launch-bound and {failed} failed measurements not plotted</sup>"),
        xaxis={**log_axis(sorted({r["context"] for r in rows})), "title": "context length (tokens)"},
        yaxis={"title": "achieved GB/s (K+V+q+o bytes / time)"}, height=470, margin={"t": 100},
    )
    return fig


def _short_gpu(label: str) -> str:
    """The chip's name alone (``"H100 SXM"`` -> ``"H100"``, ``"RTX 4090"`` -> ``"4090"``): six
    one-line, upright labels fit a phone's width; longer ones wrap under the legend or turn
    sideways and shrink below 11 px. Hover gives the full name."""
    words = label.split()
    return words[1] if words[0] == "RTX" and len(words) > 1 else words[0]


def roofline_figure(predictions: dict[int, list[Prediction]]) -> go.Figure:
    """The three predicted roofs (memory, instruction issue, latency) per GPU as markers, and
    the predicted ceiling (the lowest) ringed, one view per batch size (buttons).

    Markers, not bars: on a log axis a bar's length means nothing (it starts at an arbitrary
    floor), only where it ends. The y axis labels every tick (1-2-5 in GB/s).

    Args:
        predictions: batch size -> one :class:`Prediction` per GPU, same GPUs in each.
    """
    fig = go.Figure()
    batches = list(predictions)
    roofs = (("memory", "#4477AA", "circle"), ("issue", "#CCBB44", "square"),
             ("latency", "#EE6677", "triangle-up"))
    values = [getattr(p, roof) / 1e9 for preds in predictions.values() for p in preds
              for roof, _, _ in roofs]
    for i, batch in enumerate(batches):
        preds = predictions[batch]
        gpus = [_short_gpu(p.gpu) for p in preds]
        if len(set(gpus)) < len(gpus):  # two cards of one chip: plotly would merge them
            gpus = [p.gpu for p in preds]
        full = [[p.gpu] for p in preds]
        for roof, colour, symbol in roofs:
            fig.add_scatter(x=gpus, y=[getattr(p, roof) / 1e9 for p in preds], mode="markers",
                            name=f"{roof} roof", visible=i == 0, legendgroup=roof,
                            marker={"symbol": symbol, "size": 11, "color": colour}, customdata=full,
                            hovertemplate="%{customdata[0]}: %{y:,.0f} GB/s<extra>" + roof
                            + " roof</extra>")
        fig.add_scatter(x=gpus, y=[p.ceiling / 1e9 for p in preds], mode="markers",
                        name="predicted ceiling", visible=i == 0,
                        marker={"symbol": "diamond-open", "size": 22, "color": "#888888",
                                "line": {"width": 2.5}},
                        customdata=[[p.gpu, p.bound, p.num_splits] for p in preds],
                        hovertemplate=("%{customdata[0]}: %{y:,.0f} GB/s, bound by %{customdata[1]}"
                                       " (%{customdata[2]} splits)<extra></extra>"))
    per_view = len(roofs) + 1
    fig.update_layout(
        updatemenus=[{"type": "buttons", "direction": "right", "x": 0, "y": 1.18,
                      "xanchor": "left", "buttons": [
                          {"label": f"batch {b}", "method": "update",
                           "args": [{"visible": [j // per_view == i
                                                 for j in range(per_view * len(batches))]}]}
                          for i, b in enumerate(batches)]}],
        title_text="Predicted bandwidth roofs of one decode step (a prediction, not a measurement)",
        yaxis={**log_axis(nice_log_ticks(min(values), max(values))),
               "title": "GB/s (10^9 bytes/s), log scale"},
        xaxis={"tickangle": 0}, height=460, margin={"t": 110},
    )
    return fig
