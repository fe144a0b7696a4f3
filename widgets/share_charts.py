"""Charts of measured memory shares and of the page-size trade-off."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pagedkv_widgets.axes import log_axis, nice_log_ticks

CATEGORY_COLORS = {"tokens": "#2ca02c", "held_ahead": "#1f77b4", "internal": "#ff7f0e",
                   "external": "#d62728", "free": "#cccccc"}


def shares_bar(shares: Sequence[object], title: str,
               reference: dict[str, float] | None = None) -> go.Figure:
    """Stacked horizontal bars, one per scheme, of ``pagedkv.lessons.fragmentation.MemoryShare``.

    ``reference`` adds dashed vertical lines (percent of memory holding token states,
    e.g. the vLLM paper's figures), labelled above the plot by key (keep keys short).
    """
    names = [getattr(s, "label", s.scheme) for s in shares]
    fig = go.Figure([go.Bar(y=names, x=[100 * getattr(s, c) for s in shares], name=c.replace("_", " "),
                            orientation="h", marker_color=color,
                            hovertemplate="%{y}: %{x:.1f} % " + c.replace("_", " ") + "<extra></extra>")
                     for c, color in CATEGORY_COLORS.items()])
    for label, pct in (reference or {}).items():
        fig.add_vline(x=pct, line_dash="dash", annotation_text=label,
                      annotation_position="top")
    fig.update_layout(barmode="stack", title=title, xaxis_title="% of the KV pool",
                      yaxis={"autorange": "reversed"}, height=380,
                      legend={"orientation": "h", "y": -0.25})
    return fig


def tradeoff_figure(page_sizes: Sequence[int], waste_pct: Sequence[float],
                    entries: Sequence[int], title: str) -> go.Figure:
    """Waste (% of held slots left empty, left axis) and page-table entries (right axis, log
    scale: one entry per page held) against page size."""
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_scatter(x=list(page_sizes), y=list(waste_pct), name="empty slots in last pages (%)",
                    mode="lines+markers")
    fig.add_scatter(x=list(page_sizes), y=list(entries),
                    name="page-table entries (one per page held)",
                    mode="lines+markers", secondary_y=True)
    fig.update_xaxes(**log_axis(list(page_sizes)), title="page size p (slots per page)")
    fig.update_yaxes(title="% of held slots wasted", ticksuffix=" %", rangemode="tozero",
                     secondary_y=False)
    fig.update_yaxes(title="page-table entries (pages held)",
                     **log_axis(nice_log_ticks(min(entries), max(entries))), showgrid=False,
                     secondary_y=True)
    fig.update_layout(title=title, height=420, legend={"orientation": "h", "y": -0.25})
    return fig
