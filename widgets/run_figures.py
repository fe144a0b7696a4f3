"""Figures of simulated scheduler runs (chapters 4 and 5): ratio decay, memory over time,
policy bars. Each takes pagedkv results and returns a plotly figure with its controls (a
dropdown picks the run), which works in the static HTML book."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pagedkv.lessons.admission import ratio_curve
from pagedkv.lessons.analysis import retraction_steps
from pagedkv.managers.config import SchedulerConfig

MAX_POINTS = 1500  # lines are thinned to about this many points to keep the page light
COLORS = {"used": "#4477AA", "reserved": "#EE6677", "ratio": "#228833"}
POOL_LINE = "#444444"


def _dropdown(labels: Sequence[str], per_run: int, shared: int = 0) -> list[dict[str, object]]:
    """``per_run`` traces per run, one button per run showing only its traces (and the
    ``shared`` traces after them, which every run shows)."""
    total = per_run * len(labels)
    return [dict(label=label, method="update",
                 args=[{"visible": [j // per_run == i for j in range(total)] + [True] * shared}])
            for i, label in enumerate(labels)]


def ratio_decay_figure(conservativeness: Sequence[float], steps: int = 800) -> go.Figure:
    """``new_token_ratio`` against decode steps without a retraction, one line per setting."""
    x = np.arange(0, steps + 1)
    fig = go.Figure()
    for c in conservativeness:
        k = SchedulerConfig(schedule_conservativeness=c)
        fig.add_scatter(x=x, y=ratio_curve(k, x),
                        name=f"conservativeness {c}: {k.init_ratio:.2f} -> {k.min_ratio:.3f}",
                        hovertemplate="step %{x}: ratio %{y:.4f}<extra></extra>")
    decay = SchedulerConfig().new_token_ratio_decay_steps
    fig.add_vline(x=decay, line_dash="dot", annotation_text=f"{decay} decode steps")
    fig.update_layout(height=360, xaxis_title="decode steps without a retraction",
                      yaxis_title="new_token_ratio", margin=dict(t=30),
                      legend=dict(x=0.45, y=0.95))
    return fig


def run_timeline_figure(runs: Mapping[str, object], pool_tokens: int,
                        show_reserved: bool = True, visible: str | None = None) -> go.Figure:
    """Tokens used (and used + reserved), ``new_token_ratio`` and retractions over modeled
    time, for each ``EngineResult`` in ``runs``; a dropdown picks the run (first, or ``visible``).
    """
    names = ["used"] + (["used + reserved"] if show_reserved else []) + ["new_token_ratio",
                                                                         "retraction"]
    first = visible if visible is not None else next(iter(runs))
    fig = go.Figure()
    for label, res in runs.items():
        s, vis = res.trace.steps, label == first
        # Token counts as int32 and times and ratios as float32 (7 digits, more than a plot
        # shows): plotly.py sends arrays in their dtype, and float64 doubled the page's bytes.
        t = np.asarray(s["time_s"], dtype=np.float32)
        used = np.asarray(s["tokens_used"]).astype(np.int32)
        every = slice(None, None, max(1, len(t) // MAX_POINTS))
        fig.add_scatter(x=t[every], y=used[every], name="used", visible=vis,
                        line_color=COLORS["used"])
        if show_reserved:
            resv = used + np.asarray(s["tokens_reserved"]).astype(np.int32)
            fig.add_scatter(x=t[every], y=resv[every], name="used + reserved", visible=vis,
                            line_color=COLORS["reserved"])
        fig.add_scatter(x=t[every], y=np.asarray(s["new_token_ratio"], dtype=np.float32)[every],
                        name="new_token_ratio", visible=vis, yaxis="y2",
                        line_color=COLORS["ratio"])
        marks = retraction_steps(res.trace)
        fig.add_scatter(x=t[marks], y=used[marks], name="retraction", visible=vis,
                        mode="markers", marker=dict(symbol="x", size=9, color="black"))
    # The pool line is named in the legend, not labelled on the plot, where the curves and
    # the retraction marks (all just under it) would cover the label.
    fig.add_hline(y=pool_tokens, line_dash="dot", line_color=POOL_LINE)
    fig.add_scatter(x=[None], y=[None], mode="lines", line=dict(dash="dot", color=POOL_LINE),
                    name=f"pool: {pool_tokens:,} tokens", hoverinfo="skip")
    fig.update_layout(height=440, margin=dict(t=70, r=80), xaxis_title="modeled time (s)",
                      yaxis_title="tokens",
                      updatemenus=[dict(buttons=_dropdown(list(runs), len(names), shared=1),
                                        x=0, y=1.2, xanchor="left", name="run",
                                        active=list(runs).index(first))],
                      yaxis2=dict(overlaying="y", side="right", range=[0, 1.05],
                                  tickmode="array", tickvals=[0, 0.2, 0.4, 0.6, 0.8, 1.0],
                                  tickformat=".1f", showgrid=False, title="new_token_ratio"),
                      legend=dict(orientation="h", y=-0.2))
    return fig


POLICY_METRICS = (("output_tokens_per_s", "output<br>tokens/s"), ("num_retractions", "retractions"),
                  ("recomputed_tokens", "recomputed<br>tokens"),
                  ("mean_queue_s", "mean<br>queueing (s)"))


def policy_bars_figure(metrics: Mapping[tuple[str, str], object]) -> go.Figure:
    """Bars of :data:`POLICY_METRICS` per policy; a dropdown picks what clients send.

    ``metrics`` maps ``(clients send, policy)`` to ``Metrics`` (``examples.policy_comparison``).
    """
    workloads = list(dict.fromkeys(w for w, _ in metrics))
    policies = list(dict.fromkeys(p for _, p in metrics))
    fig = make_subplots(rows=1, cols=len(POLICY_METRICS),
                        subplot_titles=[t for _, t in POLICY_METRICS], horizontal_spacing=0.1)
    fig.update_annotations(font_size=13)
    for wi, w in enumerate(workloads):
        for col, (field, title) in enumerate(POLICY_METRICS, start=1):
            fig.add_bar(x=policies, y=[getattr(metrics[w, p], field) for p in policies],
                        visible=wi == 0, showlegend=False, row=1, col=col,
                        marker_color=["#4477AA", "#228833", "#EE6677"][:len(policies)],
                        hovertemplate=f"%{{x}}: %{{y:,.1f}} {title.replace('<br>', ' ')}"
                                      "<extra></extra>")
    fig.update_layout(height=380, margin=dict(t=110),
                      updatemenus=[dict(buttons=_dropdown([f"clients send {w}" for w in workloads],
                                                          len(POLICY_METRICS)),
                                        x=0, y=1.42, xanchor="left", name="workload")])
    return fig


LIFE_COLORS = {"own": "#4477AA", "locked": "#222255", "cached": "#BBBBBB"}


def request_life_figure(lives: Sequence[object]) -> go.Figure:
    """One panel per :class:`pagedkv.lessons.request_life.RequestLife`: its own pages, its pages
    in the radix cache locked while it runs, and its cached, evictable pages after it lets go,
    stacked per step, with its events marked and named on the panel."""
    fig = make_subplots(rows=len(lives), cols=1, shared_xaxes=True, vertical_spacing=0.12,
                        subplot_titles=[f"request {life.rid}" for life in lives])
    names = {"own": "its own pages", "locked": "its prompt in the tree, locked",
             "cached": "cached after it let go (evictable)"}
    for row, life in enumerate(lives, start=1):
        x = np.arange(len(life.own))
        for key in ("locked", "own", "cached"):
            fig.add_bar(x=x, y=getattr(life, key), name=names[key], marker_color=LIFE_COLORS[key],
                        legendgroup=key, showlegend=row == 1, row=row, col=1,
                        hovertemplate=f"step %{{x}}: %{{y}} pages {names[key]}<extra></extra>")
        top = int(max(np.max(life.own + life.locked), np.max(life.cached), 1))
        for k, (step, what) in enumerate(life.events):
            fig.add_vline(x=step, line_dash="dot", line_color=POOL_LINE, row=row, col=1)
            fig.add_annotation(x=step, y=top * (1.75 - 0.2 * (k % 3)), text=what, showarrow=False,
                               xanchor="left", font=dict(size=11), row=row, col=1)
        fig.update_yaxes(title_text="pages", range=[0, top * 1.85], row=row, col=1)
    fig.update_layout(barmode="stack", bargap=0, height=260 * len(lives) + 80,
                      margin=dict(t=40, l=60, r=10, b=40),
                      legend=dict(orientation="h", y=-0.12))
    fig.update_xaxes(title_text="step", row=len(lives), col=1)
    return fig
