"""Show a plotly figure so that it works both in the static HTML book and live in Jupyter.

Inside a Jupyter Book build plotly's own mime type is dropped, so the figure must also be
offered as an HTML ``<figure>``: the plotly ``<div>`` (which relies on the page-level
``plotly.min.js`` that the book serves from its own static files, no CDN) and a caption
that says in words what the figure shows. JupyterLab, Notebook 7 and VS Code prefer the
plotly mime type and render it natively, with the caption as a line below; Colab gets
plotly's Colab renderer.

In the book a figure has no toolbar and its legend is a key, not a switch: both are mouse-
only controls a keyboard cannot reach. Its sliders and menus become native controls there
(``book/_ext/static/pagedkv-figures.js``). Text that cannot fit a bar at 11 px is hidden
rather than shrunk.
"""

from __future__ import annotations

import html
import json
import sys

import plotly.graph_objects as go
from IPython.display import Markdown, display

from pagedkv_widgets.mode import in_book_build

MIN_FONT_PX = 11
BOOK_CONFIG = {"displayModeBar": False, "responsive": True}


def figure_html(fig: go.Figure, caption: str | None = None) -> str:
    """The book's ``<figure>``: the plotly ``<div>`` and, if given, the caption."""
    book = go.Figure(fig)
    book.update_layout(legend_itemclick=False, legend_itemdoubleclick=False)
    if book.layout.uniformtext.minsize is None:
        book.update_layout(uniformtext_minsize=MIN_FONT_PX, uniformtext_mode="hide")
    div = book.to_html(include_plotlyjs=False, include_mathjax=False, full_html=False,
                       config=BOOK_CONFIG)
    text = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
    return f'<figure class="pkv-figure">{div}{text}</figure>'


def figure_bundle(fig: go.Figure, caption: str | None = None) -> dict[str, object]:
    """The mime bundle: plotly JSON for live front-ends, the ``<figure>`` for the book."""
    return {"application/vnd.plotly.v1+json": json.loads(fig.to_json()),
            "text/html": figure_html(fig, caption)}


def show(fig: go.Figure, caption: str | None = None) -> None:
    """Display ``fig`` in whichever front-end runs this code (book build, Jupyter, Colab).

    ``caption`` says in words what the figure shows; every figure of the book has one.
    """
    if "google.colab" in sys.modules:
        fig.show(renderer="colab")
    else:
        display(figure_bundle(fig, caption), raw=True)
    if caption and not in_book_build():
        display(Markdown(f"*Figure: {caption}*"))
