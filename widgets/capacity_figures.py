"""Chapter 1's batch cap across models and GPUs: B_max against context length."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from pagedkv.configs.model_presets import load_model
from pagedkv.errors import NotEnoughMemoryError
from pagedkv.gpus import get_gpu
from pagedkv.releases import DEFAULT_SGLANG_VERSION
from pagedkv.sizing import batch_cap, plan_pool
from pagedkv_widgets.axes import log_axis, nice_log_ticks
from pagedkv_widgets.catalog import gpu_label, model_label

# Lines that run close together (Llama-3-8B, Qwen3-4B, Mistral-7B on an H100) stay apart by
# their dash and marker as well as their colour.
DASHES = ("solid", "dash", "dot", "dashdot", "longdash")
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x")


def kilo(tokens: int) -> str:
    """``8192`` -> ``"8K"``."""
    return f"{tokens // 1024}K" if tokens >= 1024 else str(tokens)


def batch_cap_figure(models: Sequence[str], gpus: Sequence[str],
                     contexts: Sequence[int]) -> go.Figure:
    """``B_max`` (requests that fit if each grows to the context) against the context per
    request, one line per model at SGLang's default ``mem_fraction_static`` for the card,
    drawn up to the model's own context length; a menu picks the GPU. Both axes are log
    scales with every tick labelled, so a cap of 0 is not drawn. Later models are drawn on
    top of earlier ones. A model whose weights exceed the default budget (SGLang would stop at
    start-up) keeps its legend entry, marked "(does not start)", with no points.
    """
    fig = go.Figure()
    caps = []
    for gi, g in enumerate(gpus):
        for mi, m in enumerate(models):
            try:
                p = plan_pool(load_model(m), gpu=get_gpu(g))
            except NotEnoughMemoryError:  # SGLang would stop at start-up: no line to draw
                xs, ys, name = [], [], f"{model_label(m)} (does not start)"
            else:
                xs = [c for c in contexts if c <= p.context_len]
                ys = [batch_cap(p.pool_bytes, c, p.cell_size) for c in xs]
                name = model_label(m)
            caps += [y for y in ys if y > 0]
            fig.add_scatter(x=xs, y=ys, name=name, visible=gi == 0, legendgroup=m,
                            mode="lines+markers", line_dash=DASHES[mi % len(DASHES)],
                            marker_symbol=SYMBOLS[mi % len(SYMBOLS)], marker_size=8,
                            hovertemplate=f"{model_label(m)}: %{{y}} requests at %{{x}} tokens"
                                          "<extra></extra>")
    buttons = [dict(label=gpu_label(g), method="update",
                    args=[{"visible": [i // len(models) == gi
                                       for i in range(len(gpus) * len(models))]}])
               for gi, g in enumerate(gpus)]
    fig.update_layout(
        updatemenus=[dict(buttons=buttons, x=0, y=1.18, xanchor="left", name="GPU")],
        height=440, margin=dict(t=60), legend=dict(orientation="h", y=-0.25),
        xaxis=dict(**log_axis(list(contexts), kilo), title="context length per request (tokens)"),
        yaxis=dict(**log_axis(nice_log_ticks(min(caps, default=1), max(caps, default=10))),
                   title="B_max (requests)"))
    return fig


def caps_at(models: Sequence[str], gpus: Sequence[str], context_len: int,
            sglang_version: str = DEFAULT_SGLANG_VERSION) -> dict[str, dict[str, int | None]]:
    """``B_max`` at ``context_len`` tokens per request, by GPU then model, at SGLang's default
    ``mem_fraction_static`` for ``sglang_version``; ``None`` where the weights exceed the
    default budget (SGLang stops at start-up). The numbers :func:`batch_cap_figure` draws.
    """
    out: dict[str, dict[str, int | None]] = {}
    for g in gpus:
        out[g] = {}
        for m in models:
            try:
                p = plan_pool(load_model(m), gpu=get_gpu(g), sglang_version=sglang_version)
            except NotEnoughMemoryError:
                out[g][m] = None
            else:
                out[g][m] = batch_cap(p.pool_bytes, context_len, p.cell_size)
    return out
