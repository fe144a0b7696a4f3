"""Figures of the prefix cache: the radix tree step by step, and the pool's split over a run.

Both use sliders that switch trace visibility, so they work in the static HTML book.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import plotly.graph_objects as go

from pagedkv.errors import bad_value
from pagedkv.lessons.prefix_examples import NodeView, TreeFrame
from pagedkv.lessons.prefix_runs import PrefixRun

LOCKED, EVICTABLE = "#EE7733", "#33BBEE"  # protected (a running request holds it) / evictable
SPLIT_COLORS = {"own": "#4477AA", "protected": LOCKED, "evictable": EVICTABLE,
                "free": "#DDDDDD"}
SPLIT_NAMES = {"own": "running requests' own tokens", "protected": "tree, locked",
               "evictable": "tree, evictable (finished requests)", "free": "free"}


def _layout(nodes: Sequence[NodeView]) -> dict[int, tuple[int, float]]:
    """(depth, row) per node id: leaves take rows in order, a parent sits at its
    children's mean row."""
    kids: dict[int | None, list[NodeView]] = {}
    for n in nodes:
        kids.setdefault(n.parent, []).append(n)
    place: dict[int, tuple[int, float]] = {}
    next_row = [0.0]

    def visit(n: NodeView, depth: int) -> float:
        rows = [visit(c, depth + 1) for c in kids.get(n.id, [])]
        row = sum(rows) / len(rows) if rows else next_row[0]
        if not rows:
            next_row[0] += 1
        place[n.id] = (depth, row)
        return row

    visit(next(n for n in nodes if n.parent is None), 0)
    return place


def _short(slots: Sequence[int], keep: int = 4) -> str:
    """``1,2,3`` or, for long runs, ``1,2,3,4,…``."""
    return ",".join(map(str, slots[:keep])) + (",…" if len(slots) > keep else "")


def _tree_frame(frame: TreeFrame, visible: bool) -> tuple[list[go.Scatter], list[dict]]:
    """Edge lines and hover points (traces) plus one labelled box per node (annotations)."""
    place = _layout(frame.nodes)
    ex: list[float | None] = []
    ey: list[float | None] = []
    for n in frame.nodes:
        if n.parent is not None:
            (x0, y0), (x1, y1) = place[n.parent], place[n.id]
            ex += [x0, x1, None]
            ey += [y0, y1, None]
    edges = go.Scatter(x=ex, y=ey, mode="lines", line={"color": "#999999"}, hoverinfo="skip",
                       showlegend=False, visible=visible)
    hover = ["root (never evicted)" if n.parent is None else
             f"key: {' '.join(n.words)}<br>slots: {list(n.slots)}<br>lock_ref: {n.lock_ref}"
             f"<br>last access: {n.last_access_time}" for n in frame.nodes]
    points = go.Scatter(x=[place[n.id][0] for n in frame.nodes],
                        y=[place[n.id][1] for n in frame.nodes], mode="markers",
                        marker={"size": 40, "opacity": 0}, hovertext=hover, hoverinfo="text",
                        showlegend=False, visible=visible)
    boxes = [{"x": place[n.id][0], "y": place[n.id][1], "showarrow": False,
              "text": "root" if n.parent is None else
              f"{' '.join(n.words)}<br><span style='font-size:11px'>slots "
              f"{_short(n.slots)}</span>",
              "bgcolor": "#FFFFFF" if n.parent is None else LOCKED if n.lock_ref else EVICTABLE,
              "bordercolor": "#444444", "borderpad": 4, "font": {"color": "#111111"}}
             for n in frame.nodes]
    return [edges, points], boxes


def radix_tree_slider(frames: Sequence[TreeFrame], title: str) -> go.Figure:
    """The tree after each frame's event; a slider steps through them. Orange nodes are
    locked by a running request, blue ones are evictable; hover shows slots and locks."""
    if not frames:
        raise bad_value("frames", list(frames), "at least one TreeFrame")
    fig, steps = go.Figure(), []
    for i, f in enumerate(frames):
        traces, boxes = _tree_frame(f, i == len(frames) - 1)
        fig.add_traces(traces)
        steps.append({"label": str(i), "method": "update",
                      "args": [{"visible": [j // 2 == i for j in range(2 * len(frames))]},
                               {"annotations": boxes,
                                "title.text": f"{title}<br><sub>{f.caption} | tree: "
                                              f"{f.evictable} evictable, {f.protected} "
                                              f"locked | {f.free} free</sub>"}]})
    rows = max(len(_layout(f.nodes)) for f in frames)
    depth = max(x for f in frames for x, _ in _layout(f.nodes).values())
    fig.update_layout(
        title=steps[-1]["args"][1]["title.text"], annotations=steps[-1]["args"][1]["annotations"],
        height=150 + 60 * rows, plot_bgcolor="white",
        xaxis={"visible": False, "range": [-0.4, depth + 0.6]},
        yaxis={"visible": False, "autorange": "reversed"},
        margin={"l": 10, "r": 10, "t": 70, "b": 10},
        sliders=[{"active": len(frames) - 1, "steps": steps,
                  "currentvalue": {"prefix": "event "}, "pad": {"t": 10}, "name": "event"}])
    return fig


def pool_split_slider(runs: Mapping[str, PrefixRun], title: str) -> go.Figure:
    """Stacked areas of the pool's slots over steps (``PrefixRun.split``), one run per
    slider position: running requests' own tokens, tree locked, tree evictable, free."""
    if not runs:
        raise bad_value("runs", dict(runs), "at least one labelled PrefixRun")
    fig = go.Figure()
    labels = list(runs)
    for i, label in enumerate(labels):
        split = runs[label].split
        x = split.step
        for key, color in SPLIT_COLORS.items():
            fig.add_scatter(x=x, y=getattr(split, key), name=SPLIT_NAMES[key],
                            stackgroup="pool", line={"width": 0.5, "color": color},
                            fillcolor=color, visible=i == 0, legendgroup=key,
                            showlegend=True, hovertemplate="step %{x}: %{y:,} slots")
    per = len(SPLIT_COLORS)
    steps = [{"label": label, "method": "update",
              "args": [{"visible": [j // per == i for j in range(per * len(labels))]}]}
             for i, label in enumerate(labels)]
    fig.update_layout(title={"text": title, "y": 0.98, "yanchor": "top"}, height=500,
                      xaxis_title="scheduler step", yaxis_title="KV slots (tokens)",
                      margin={"t": 120},
                      legend={"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},
                      sliders=[{"active": 0, "steps": steps, "pad": {"t": 50},
                                "currentvalue": {"prefix": "run: "}, "name": "run"}])
    return fig
