"""Show a plotly figure so that it works both in the static HTML book and live in Jupyter.

Inside a Jupyter Book build plotly's own mime type is dropped, so the figure must also be
offered as an HTML ``<div>`` that relies on the page-level ``plotly.min.js`` which the book
serves from its own static files (no CDN). JupyterLab, Notebook 7 and VS Code prefer the
plotly mime type and render it natively; Colab gets plotly's Colab renderer.
"""

from __future__ import annotations

import json
import sys

import plotly.graph_objects as go
from IPython.display import display


def figure_bundle(fig: go.Figure) -> dict[str, object]:
    """The mime bundle: plotly JSON for live front-ends, an HTML div for the static book."""
    html = fig.to_html(include_plotlyjs=False, include_mathjax=False, full_html=False)
    return {"application/vnd.plotly.v1+json": json.loads(fig.to_json()), "text/html": html}


def show(fig: go.Figure) -> None:
    """Display ``fig`` in whichever front-end runs this code (book build, Jupyter, Colab)."""
    if "google.colab" in sys.modules:
        fig.show(renderer="colab")
        return
    display(figure_bundle(fig), raw=True)
