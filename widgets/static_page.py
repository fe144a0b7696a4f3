"""The visualizer as static HTML for the built book: a grid of precomputed scenes.

The output is one ``<div class="pkv-static">`` holding a ``<script type="application/json">``
with ``{"config": ..., "grid": {"card": {key: trace}, "pool": {key: trace}}}``. The page
itself loads ``visualizer.js`` once (``html_js_files`` in the book's ``_config.yml``), which
mounts every such div; no code and no request leaves the book's own files.
"""

from __future__ import annotations

import html
import json
from typing import Any

from pagedkv_widgets.chapters import grid_settings
from pagedkv_widgets.scenes import SceneRunner, runs_needed, scene_keys


def build_grid(config: dict[str, Any], runner: SceneRunner) -> dict[str, dict[str, Any]]:
    """Run every combination of the config's axes once (runs shared by several keys once)."""
    grid: dict[str, dict[str, Any]] = {part: {} for part in runs_needed(config["views"])}
    for settings in grid_settings(config):
        for part, key in scene_keys(settings).items():
            if part in grid and key not in grid[part]:
                grid[part][key] = runner.run(part, settings)
    return grid


def static_html(config: dict[str, Any], grid: dict[str, dict[str, Any]]) -> str:
    """The HTML fragment: mount point, a fallback line, and the data as JSON."""
    payload = json.dumps({"config": config, "grid": grid}, separators=(",", ":"))
    payload = payload.replace("</", "<\\/")  # a JSON string may not close the <script>
    return (
        f'<div class="pkv-static" data-chapter="{html.escape(config["chapter"])}">'
        '<div class="pkv-mount"><p>The memory visualizer needs the book\'s '
        "<code>visualizer.js</code> (JavaScript enabled).</p></div>"
        f'<script type="application/json">{payload}</script></div>'
    )
