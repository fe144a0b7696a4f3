"""The visualizer as static HTML for the built book: a grid of precomputed scenes.

The output is one ``<div class="pkv-static">`` holding a ``<script type="application/gzip">``
with ``{"config": ..., "grid": {"card": {key: trace}, "pool": {key: trace}}}`` as gzip in
base64, followed by the renderer itself (``static/visualizer.js`` as an inline module,
``visualizer.css`` as an inline style): the fragment needs no book configuration, no file
beside the page and no network. Compressed, chapter 7's full grid (270 runs) is about 0.26 MB
of the page instead of 2 MB of JSON; the browser inflates it with its own
``DecompressionStream``. The module mounts every such div on the page (each only once).
"""

from __future__ import annotations

import base64
import gzip
import html
import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from pagedkv_widgets.chapters import grid_settings
from pagedkv_widgets.limits import explained
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
    """Run every combination of the config's axes once (runs shared by several keys once);
    a setting that cannot run holds its reason and a value that works (:func:`explained`).

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
    for ((part, key), settings), run in zip(tasks.items(), runs, strict=True):
        grid[part][key] = explained(run, runner, part, settings, config)
    return grid


def pack(data: Any) -> str:
    """JSON, gzip (no timestamp: the same data gives the same page), base64."""
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode()


def unpack(text: str) -> Any:
    """Inverse of :func:`pack` (the JavaScript ``readPayload`` is its twin)."""
    return json.loads(gzip.decompress(base64.b64decode(text)))


def static_html(config: dict[str, Any], grid: dict[str, dict[str, Any]]) -> str:
    """The HTML fragment: mount point, a fallback line, and the data, packed."""
    return (
        f'<div class="pkv-static" data-chapter="{html.escape(config["chapter"])}">'
        '<div class="pkv-mount"><p>The memory visualizer needs JavaScript.</p></div>'
        f'<script type="application/gzip">{pack({"config": config, "grid": grid})}</script></div>'
        f"<style>{(STATIC / 'visualizer.css').read_text()}</style>"
        f'<script type="module">{(STATIC / "visualizer.js").read_text()}</script>'
    )
