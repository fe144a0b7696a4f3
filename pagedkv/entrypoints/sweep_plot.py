"""``--plot FILE.html``: a sweep's table as four bar charts in one self-contained HTML file.

plotly.js is written into the file (``include_plotlyjs=True``, about 4.5 MB), so it opens
in a browser with no network, as the book's pages do. The figure's element has a fixed id
(plotly would draw a random one), so the same sweep writes the same bytes, whether its
settings ran here, in worker processes or on Ray.
"""

from __future__ import annotations

import html
from typing import Any

from pagedkv.errors import bad_value

PANELS = (("TTFT (modelled ms)", (("p50_ttft_s", "p50"), ("p99_ttft_s", "p99")), 1000.0),
          ("output throughput (modelled tokens/s)", (("output_throughput", "output tok/s"),), 1.0),
          ("retractions", (("retractions", "retractions"),), 1.0),
          ("KV pool (tokens)", (("pool_tokens", "pool tokens"),), 1.0))


def check_plot_path(path: str) -> None:
    """Refuse a ``--plot`` name that is not an HTML file's, before a sweep runs.

    Raises:
        ConfigError: ``path`` does not end in ``.html`` or ``.htm``.
    """
    if not path.lower().endswith((".html", ".htm")):
        raise bad_value("--plot", path, "a file name ending in .html")


def write_plot(rows: list[dict[str, Any]], path: str, title: str) -> None:
    """Write the sweep's rows (:func:`pagedkv.entrypoints.sweep.sweep_row`) to ``path``, an
    HTML page titled ``title`` (its ``<title>`` too, for the browser's tab).

    Raises:
        ConfigError: ``path`` does not end in ``.html`` or cannot be written.
    """
    check_plot_path(path)
    from plotly.subplots import make_subplots  # plotly takes ~0.5 s to import: only here

    fig = make_subplots(rows=2, cols=2, subplot_titles=[p[0] for p in PANELS])
    x = [r["setting"] for r in rows]
    for i, (_, series, scale) in enumerate(PANELS):
        for key, name in series:
            y = [None if r[key] is None else r[key] * scale for r in rows]
            fig.add_bar(x=x, y=y, name=name, row=i // 2 + 1, col=i % 2 + 1,
                        showlegend=len(series) > 1)
    fig.update_layout(title=title, barmode="group", height=750,
                      legend={"orientation": "h", "y": 1.08, "x": 0})
    page = fig.to_html(include_plotlyjs=True, full_html=True, div_id="pagedkv-sweep")
    page = page.replace("<head>", f"<head><title>{html.escape(title)}</title>", 1)
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.write(page)
    except OSError as exc:
        raise bad_value("--plot", path, f"a file that can be written ({exc.strerror})") from None
