"""The book's figures: a caption in words, no mouse-only controls, readable on a phone, and
chapter 1's batch cap figure as its text describes it."""

from __future__ import annotations

import plotly.graph_objects as go

from pagedkv_widgets.capacity_figures import batch_cap_figure
from pagedkv_widgets.figures import figure_html

MODELS = ["llama-3-8b", "qwen2.5-7b", "mistral-7b-v0.3", "gemma-2-9b", "qwen3-4b"]
GPUS = ["h100-sxm-80gb", "h200-141gb", "a100-40gb", "l4"]


def test_figure_html_has_its_caption_and_no_toolbar_or_legend_switches():
    fig = go.Figure(go.Bar(x=[1], y=[2], text=["a"]))
    html = figure_html(fig, "A bar of height 2 & more")
    assert html.startswith('<figure class="pkv-figure">')
    assert "<figcaption>A bar of height 2 &amp; more</figcaption></figure>" in html
    assert '"displayModeBar": false' in html
    assert '"itemclick":false' in html and '"minsize":11' in html
    assert fig.layout.uniformtext.minsize is None  # the caller's figure is left as it was


def _by_gpu(fig, gpu_index):
    per = len(MODELS)
    return {t.name: list(t.y) for t in fig.data[gpu_index * per:(gpu_index + 1) * per]}


def test_batch_cap_lines_apart_and_qwen_on_top_with_labelled_log_axes():
    fig = batch_cap_figure(MODELS, GPUS, [2**k for k in range(10, 18)])
    assert fig.data[len(MODELS) - 1].name == "Qwen3-4B"  # drawn last: on top
    styles = {(t.line.dash, t.marker.symbol) for t in fig.data[:len(MODELS)]}
    assert len(styles) == len(MODELS)
    for axis in (fig.layout.xaxis, fig.layout.yaxis):
        assert axis.type == "log" and len(axis.tickvals) == len(axis.ticktext) > 3
    assert list(fig.layout.xaxis.ticktext)[:4] == ["1K", "2K", "4K", "8K"]
    assert fig.layout.updatemenus[0].name == "GPU"


def test_chapter_1_comparison_reads_the_figures_points():
    """Chapter 1 words the Qwen3-4B / Llama-3-8B comparison from caps_at: the figure's points."""
    from pagedkv_widgets.capacity_figures import caps_at

    contexts = [2**k for k in range(10, 18)]
    fig = batch_cap_figure(MODELS, GPUS, contexts)
    at = caps_at(["llama-3-8b", "qwen3-4b"], GPUS, 8192)
    for i, g in enumerate(GPUS):
        lines = _by_gpu(fig, i)
        assert lines["Qwen3-4B"][contexts.index(8192)] == at[g]["qwen3-4b"]
        assert lines["Llama-3-8B"][contexts.index(8192)] == at[g]["llama-3-8b"]
    # 0.5.23's reserve leaves Llama-3-8B no 8K request on an L4; the H200 favours Llama-3-8B
    assert at["l4"]["llama-3-8b"] == 0 < at["l4"]["qwen3-4b"]
    assert at["h200-141gb"]["llama-3-8b"] > at["h200-141gb"]["qwen3-4b"]


def test_a_model_that_cannot_start_keeps_its_legend_entry_without_points():
    fig = batch_cap_figure(["gemma-2-9b"], ["l4"], [1024, 2048])
    assert fig.data[0].name == "Gemma-2-9B (does not start)" and len(fig.data[0].x) == 0


def test_ink_reads_on_every_owner_colour():
    from plotly.colors import hex_to_rgb, qualitative

    from pagedkv_widgets.ink import contrast, ink_on, tint

    for colour in qualitative.Plotly:
        for fill in (tint(colour, 1.0), tint(colour, 0.35)):
            rgb = tuple(float(v) for v in fill[4:-1].split(","))
            assert contrast(rgb, hex_to_rgb(ink_on(fill))) >= 4.5, fill


def test_run_timelines_send_four_byte_numbers():
    """The run timeline (chapters 4 and 5) sends token counts as int32 and times and ratios
    as float32: float64 made chapter 4's figure 400 KB of the page; the values are the run's."""
    import base64
    import json

    import numpy as np

    from pagedkv.entrypoints import simulate
    from pagedkv.workloads.synthetic import uniform
    from pagedkv_widgets.run_figures import run_timeline_figure

    res = simulate(uniform(12, (8, 20), (30, 90), 90, rate=25.0, seed=0), model="llama-3-8b",
                   gpu="h100-sxm-80gb", page_size=4, max_total_tokens=400)
    fig = json.loads(run_timeline_figure({"a": res}, 400).to_json())
    dtypes = {(t["name"], axis): t[axis]["dtype"] for t in fig["data"][:3] for axis in ("x", "y")}
    assert set(dtypes.values()) <= {"f4", "i4", "i2", "i1", "u1", "u2"}, dtypes
    used = fig["data"][0]["y"]
    got = np.frombuffer(base64.b64decode(used["bdata"]), dtype=used["dtype"])
    assert got.tolist() == [int(v) for v in res.trace.steps["tokens_used"]]
