"""The live visualizer: one anywidget whose JavaScript is the book's renderer.

Traits: ``config`` (views, controls, axes; Python to JS), ``settings`` (the controls; JS to
Python) and ``scene`` (the encoded runs for the current settings; Python to JS). A change of
``settings`` re-runs the simulator in the kernel, only the runs whose key changed (the card
run ignores the page size, the teaching run the model and GPU: see ``scene_keys``); runs
already seen are kept, so going back to a setting is instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anywidget
import traitlets

from pagedkv_widgets.scenes import SceneRunner, Settings, runs_needed, scene_keys

STATIC = Path(__file__).parent / "static"


class Visualizer(anywidget.AnyWidget):
    """Live memory visualizer (JupyterLab, Notebook 7, VS Code, Colab)."""

    _esm = STATIC / "visualizer.js"
    _css = STATIC / "visualizer.css"
    config = traitlets.Dict().tag(sync=True)
    settings = traitlets.Dict().tag(sync=True)
    scene = traitlets.Dict().tag(sync=True)

    def __init__(self, config: dict[str, Any], runner: SceneRunner) -> None:
        self._runner = runner
        self._parts = runs_needed(config["views"])
        self._cache: dict[tuple[str, str], dict[str, Any]] = {}
        initial = Settings(**config["settings"])
        super().__init__(config=config, settings=initial.as_dict(), scene=self._scene(initial))
        self.observe(self._on_settings, names="settings")

    def _scene(self, settings: Settings) -> dict[str, Any]:
        scene: dict[str, Any] = {"card": None, "pool": None}
        for part, key in scene_keys(settings).items():
            if part in self._parts:
                if (part, key) not in self._cache:
                    self._cache[part, key] = self._runner.run(part, settings)
                scene[part] = self._cache[part, key]
        return scene

    def _on_settings(self, change: dict[str, Any]) -> None:
        self.scene = self._scene(Settings(**change["new"]))
