"""Pictures of KV memory: slot strips (with a slider over states) and page tables.

Inputs are pagedkv state rendered as labels (``pagedkv.lessons.contiguous.ContiguousAllocator.
slot_labels``, ``pagedkv.lessons.scenarios.paged_slot_labels``): ``"A3"`` = request A's token 3,
``"A·"`` = a slot A holds but has not filled, ``"×"`` = page 0 (reserved), ``""`` = free.
Sliders switch trace
visibility, so they work in the static HTML book as well as in Jupyter. The page table is an
HTML table (:func:`page_table_html`), not a drawing: it then fits a phone's column.
"""

from __future__ import annotations

import hashlib
import html

import plotly.graph_objects as go
from IPython.display import HTML
from plotly.colors import qualitative

from pagedkv_widgets.ink import ink_on, tint

FREE_COLOR, RESERVED_COLOR, RESERVED = "#eeeeee", "#9e9e9e", "×"


def _colors(frames: list[list[str]]) -> dict[str, tuple[str, str]]:
    """Owner letter -> (filled colour, pale colour for held-but-empty slots), both opaque,
    so a slot looks the same on a light and a dark page."""
    owners = sorted({lab[0] for labels in frames for lab in labels if lab and lab != RESERVED})
    palette = qualitative.Plotly
    hexes = [palette[i % len(palette)] for i in range(len(owners))]
    return {o: (tint(c, 1.0), tint(c, 0.35)) for o, c in zip(owners, hexes, strict=True)}


def _strip(labels: list[str], colors: dict[str, tuple[str, str]], visible: bool) -> go.Bar:
    fill = [FREE_COLOR if not lab else RESERVED_COLOR if lab == RESERVED
            else colors[lab[0]][lab.endswith("·")] for lab in labels]
    return go.Bar(x=list(range(len(labels))), y=[1] * len(labels), marker_color=fill,
                  marker_line={"color": "white", "width": 2}, text=labels,
                  textfont={"color": [ink_on(f) for f in fill]},
                  textposition="inside", insidetextanchor="middle", width=1.0,
                  hovertemplate="slot %{x}: %{text}<extra></extra>", visible=visible,
                  showlegend=False)


def slot_strip_slider(frames: list[tuple[str, list[str]]], title: str,
                      page_sizes: list[int] | None = None, control: str = "event") -> go.Figure:
    """One strip of slots per frame, a slider to step through them (none for one frame).

    ``frames`` are ``(caption, labels)``; with ``page_sizes`` (one per frame) dotted
    lines mark the page boundaries of each frame. ``control`` names what the slider picks.
    """
    colors = _colors([labels for _, labels in frames])
    fig = go.Figure([_strip(labels, colors, i == len(frames) - 1)
                     for i, (_, labels) in enumerate(frames)])
    steps = []
    for i, (caption, labels) in enumerate(frames):
        p = page_sizes[i] if page_sizes else None
        lines = [{"type": "line", "x0": b - 0.5, "x1": b - 0.5, "y0": 0, "y1": 1,
                  "line": {"color": "black", "dash": "dot"}}
                 for b in range(0, len(labels) + 1, p)] if p else []
        vis = [j == i for j in range(len(frames))]
        steps.append({"label": caption, "method": "update",
                      "args": [{"visible": vis}, {"shapes": lines,
                                                  "title.text": f"{title}: {caption}"}]})
    fig.update_layout(
        title=f"{title}: {frames[-1][0]}", height=230, bargap=0, yaxis_visible=False,
        xaxis={"title": "physical slot", "dtick": 1 if len(frames[-1][1]) <= 40 else None},
        sliders=[{"active": len(frames) - 1, "steps": steps, "pad": {"t": 40}, "x": 0.08,
                  "len": 0.84, "name": control}] if len(frames) > 1 else [],
        margin={"l": 20, "r": 20, "t": 50, "b": 20}, shapes=steps[-1]["args"][1]["shapes"],
    )
    return fig


def page_table_rows(req_to_token: list[list[int]], lens: dict[int, int],
                    labels: dict[int, str], free_rows: dict[int, str] | None = None
                    ) -> tuple[list[str], list[tuple[list[str], bool]]]:
    """``req_to_token`` as the cells of a table: the header, then per row its cells and
    whether the row is on the free list. Live rows (keys of ``lens``) show their first
    ``lens[row]`` entries and ``..`` after them; rows in ``free_rows`` are on the free list and
    show every entry as it is in memory (stale or start-up zeros), described by
    ``free_rows[row]``; any other row shows ``..``."""
    free_rows = free_rows or {}
    width = len(req_to_token[0])
    rows = []
    for row, values in enumerate(req_to_token):
        n = lens.get(row, width if row in free_rows else 0)
        what = labels.get(row) or free_rows.get(row) or "free row"
        rows.append(([f"row {row}", *(str(v) if j < n else ".." for j, v in enumerate(values)), what],
                     row in free_rows))
    return ["request row", *map(str, range(width)), "holds"], rows


def page_table_html(req_to_token: list[list[int]], lens: dict[int, int], labels: dict[int, str],
                    free_rows: dict[int, str] | None = None, caption: str = "") -> HTML:
    """The page table as an HTML ``<figure>``: a real table (each cell text a screen reader
    reads and a reader can select), which on a narrow screen scrolls sideways in its own box
    while its first column stays in sight; free rows in grey italics. Cells as in
    :func:`page_table_rows`. Styled by the book's ``pagedkv-book.css`` (``.pkv-table``)."""
    header, rows = page_table_rows(req_to_token, lens, labels, free_rows)
    e = html.escape

    def row_html(values: list[str], free: bool) -> str:
        first, *rest = values
        tr = '<tr class="pkv-free-row">' if free else "<tr>"
        return (f'{tr}<th scope="row">{e(first)}</th>'
                + "".join(f"<td>{e(v)}</td>" for v in rest) + "</tr>")

    body = "".join(row_html(values, free) for values, free in rows)
    head = "".join(f'<th scope="col">{e(h)}</th>' for h in header)
    # The title above the table's scrolling box, not in it (a caption would scroll away);
    # the table takes its name from it. The id is the content's, so two tables differ.
    title_id = "pkv-page-table-" + hashlib.sha256(body.encode()).hexdigest()[:10]
    table = (f'<p class="pkv-table-title" id="{title_id}">page table req_to_token (columns: '
             f'logical token position)</p><table class="pkv-table" aria-labelledby="{title_id}">'
             f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
    text = f"<figcaption>{e(caption)}</figcaption>" if caption else ""
    return HTML(f'<figure class="pkv-figure pkv-table-figure">{table}{text}</figure>')
