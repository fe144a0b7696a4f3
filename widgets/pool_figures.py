"""Chapter 9's figure: every pool SGLang 0.5.23 builds for today's models, in one GPU's HBM.

One stacked horizontal bar per card (weights, full-attention KV, sliding-window KV, state
slots, the rest), a menu picks the model; all settings are computed when the book builds
(:func:`pagedkv.lessons.todays_models.figure_splits`), so the page needs no kernel.
"""

from __future__ import annotations

import plotly.graph_objects as go

from pagedkv.lessons.todays_models import EXAMPLES, FIGURE_GPUS, SEGMENTS, figure_splits
from pagedkv.units import GiB
from pagedkv_widgets.catalog import gpu_label, model_label
from pagedkv_widgets.ink import ink_on

COLOURS = {"weights": "#4c72b0", "full KV": "#dd8452", "SWA KV": "#55a868",
           "state slots": "#c44e52", "the rest": "#bbbbbb"}


def pools_figure() -> go.Figure:
    """The figure: ``len(EXAMPLES) * len(SEGMENTS)`` bar traces, one menu entry per model
    (at its example's tp and KV dtype, SGLang 0.5.23's default ``mem_fraction_static``). A
    card where SGLang would stop at start-up is labelled "(no start)" with no bar."""
    splits = figure_splits()
    fig = go.Figure()
    for mi, name in enumerate(EXAMPLES):
        # Short names keep the plot area wide on a phone; the caption names the cards in full.
        ys = [gpu_label(g).split()[0] + ("" if splits[name][g] else " (no start)")
              for g in FIGURE_GPUS]
        for seg in SEGMENTS:
            xs = [round(s[seg] / GiB, 2) if s else 0 for s in (splits[name][g] for g in FIGURE_GPUS)]
            fig.add_bar(y=ys, x=xs, name=seg, orientation="h", visible=mi == 0,
                        marker_color=COLOURS[seg], legendgroup=seg, showlegend=True,
                        text=[f"{x:.0f}" if x >= 1 else "" for x in xs], textposition="inside",
                        insidetextfont_color=ink_on(COLOURS[seg]),
                        hovertemplate=f"{seg}: %{{x:.2f}} GiB<extra></extra>")
    n = len(SEGMENTS)
    buttons = [dict(label=f"{model_label(name).split('-Instruct')[0]}, tp {ex.tp}",
                    method="update",
                    args=[{"visible": [i // n == mi for i in range(len(EXAMPLES) * n)]}])
               for mi, (name, ex) in enumerate(EXAMPLES.items())]
    fig.update_layout(
        barmode="stack", height=380, margin=dict(t=70, l=10, r=10),
        updatemenus=[dict(buttons=buttons, x=0, y=1.25, xanchor="left", name="model")],
        legend=dict(orientation="h", y=-0.3),
        xaxis=dict(title="GiB of one GPU's memory"), yaxis=dict(automargin=True))
    return fig
