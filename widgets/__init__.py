"""pagedkv_widgets: the live memory visualizer (HBM bar, page table, pool map, timeline)."""

from __future__ import annotations

from IPython.display import HTML

from pagedkv.errors import bad_value
from pagedkv_widgets.catalog import CATALOG, make_runner
from pagedkv_widgets.chapters import CHAPTERS, chapter_config, resolve_settings
from pagedkv_widgets.mode import in_book_build
from pagedkv_widgets.scenes import Simulate
from pagedkv_widgets.static_page import build_grid, static_html
from pagedkv_widgets.widget import Visualizer

__all__ = ["CHAPTERS", "Visualizer", "visualizer"]


def visualizer(
    chapter: str = "full",
    *,
    model: str | None = None,
    gpu: str | None = None,
    workload: str | None = None,
    mem_fraction_static: float | None = None,
    page_size: int | None = None,
    loop: str | None = None,
    static: bool | None = None,
    simulate: Simulate | None = None,
    prefetch: bool = True,
    caption: str | None = None,
) -> Visualizer | HTML:
    """The memory visualizer for one chapter, live in Jupyter or static in the built book.

    ``chapter`` is one of ``"memory"``, ``"paging"``, ``"admission"``, ``"retraction"``,
    ``"full"``, ``"windows"`` (a sliding-window hybrid's two pools), ``"states"`` (a
    linear-attention hybrid's KV pool and state slots) and picks the views and
    controls. The keyword settings choose where the
    controls start (defaults: the chapter's in ``CATALOG.chapter_defaults``, else
    ``CATALOG.defaults``); ``loop`` is the scheduler loop, ``"overlap"`` (SGLang's default)
    or ``"normal"`` (``--disable-overlap-schedule``). ``static=None`` decides by
    :func:`pagedkv_widgets.mode.in_book_build`: inside a book build the result is HTML with
    every combination of the chapter's controls precomputed; elsewhere an anywidget that
    re-runs ``simulate`` (default ``pagedkv.entrypoints.simulate``) when a control moves;
    with ``prefetch`` it runs the sliders' other positions in a background thread first.
    ``caption`` replaces the chapter's (what the figure shows, in words; a chapter computes
    the numbers it quotes).

    Raises ``pagedkv.errors.ConfigError`` for an unknown chapter, model, GPU, workload or
    loop.
    """
    if chapter not in CHAPTERS:
        raise bad_value("chapter", chapter, f"one of {sorted(CHAPTERS)}")
    settings = resolve_settings(CATALOG, chapter, model=model, gpu=gpu, workload=workload,
                                mem_fraction_static=mem_fraction_static, page_size=page_size,
                                loop=loop)
    config = chapter_config(CATALOG, chapter, settings)
    if caption is not None:
        config["caption"] = caption
    runner = make_runner(simulate)
    if in_book_build() if static is None else static:
        return HTML(static_html(config, build_grid(config, runner)))
    return Visualizer(config, runner, prefetch=prefetch)
