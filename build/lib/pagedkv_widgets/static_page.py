"""The visualizer as static HTML for the built book: a grid of precomputed scenes.

The output is one ``<div class="pkv-static">`` holding a ``<script type="application/json">``
with ``{"config": ..., "grid": {"card": {key: trace}, "pool": {key: trace}}}``, followed by
the renderer itself (``static/visualizer.js`` as an inline module, ``visualizer.css`` as an
inline style): the fragment needs no book configuration, no file beside the page and no
network. The module mounts every such div on the page (each only once).
"""

from __future__ import annotations

import html
import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from pagedkv_widgets.chapters import grid_settings
from pagedkv_widgets.scenes import SceneRunner, Settings, runs_needed, scene_keys
from pagedkv_widgets.widget import STATIC


def _one_thread() -> None:
    """Worker set-up: the processes are the parallelism, so torch (the allocator's free
    lists) gets one thread each; several threads per worker oversubscribe the CPUs and run
    an order of magnitude slower."""
    import torch

    torch.set_num_threads(1)


def build_grid(
    config: dict[str, Any], runner: SceneRunner, workers: int | None = None
) -> dict[str, dict[str, Any]]:
    """Run every combination of the config's axes once (runs shared by several keys once).

    The runs are independent, so where processes can be forked (Linux, where books are
    built) they spread over ``workers`` processes (default: one per CPU); ``workers=1`` or
    another platform runs them here.
    """
    parts = runs_needed(config["views"])
    tasks: dict[tuple[str, str], Settings] = {}
    for settings in grid_settings(config):
        for part, key in scene_keys(settings).items():
            if part in parts:
                tasks.setdefault((part, key), settings)
    workers = min(workers or os.cpu_count() or 1, len(tasks))
    if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_one_thread) as pool:
            runs = list(pool.map(runner.run, *zip(*[(p, s) for (p, _), s in tasks.items()],
                                                  strict=True), chunksize=4))
    else:
        runs = [runner.run(part, s) for (part, _), s in tasks.items()]
    grid: dict[str, dict[str, Any]] = {part: {} for part in parts}
    for (part, key), run in zip(tasks, runs, strict=True):
        grid[part][key] = run
    return grid


def static_html(config: dict[str, Any], grid: dict[str, dict[str, Any]]) -> str:
    """The HTML fragment: mount point, a fallback line, and the data as JSON."""
    payload = json.dumps({"config": config, "grid": grid}, separators=(",", ":"))
    payload = payload.replace("</", "<\\/")  # a JSON string may not close the <script>
    return (
        f'<div class="pkv-static" data-chapter="{html.escape(config["chapter"])}">'
        '<div class="pkv-mount"><p>The memory visualizer needs JavaScript.</p></div>'
        f'<script type="application/json">{payload}</script></div>'
        f"<style>{(STATIC / 'visualizer.css').read_text()}</style>"
        f'<script type="module">{(STATIC / "visualizer.js").read_text()}</script>'
    )
