"""The live visualizer: one anywidget whose JavaScript is the book's renderer.

Traits: ``config`` (views, controls, axes; Python to JS), ``settings`` (the controls; JS to
Python) and ``scene`` (the encoded runs for the current settings; Python to JS). A change of
``settings`` re-runs the simulator in the kernel; the scenes already seen are kept, so going
back to a setting is instant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anywidget
import traitlets

from pagedkv_widgets.scenes import SceneRunner, Settings, runs_needed

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
        self._cache: dict[Settings, dict[str, Any]] = {}
        initial = Settings(**config["settings"])
        super().__init__(config=config, settings=initial.as_dict(), scene=self._scene(initial))
        self.observe(self._on_settings, names="settings")

    def _scene(self, settings: Settings) -> dict[str, Any]:
        if settings not in self._cache:
            self._cache[settings] = self._runner.scene(settings, self._parts)
        return self._cache[settings]

    def _on_settings(self, change: dict[str, Any]) -> None:
        self.scene = self._scene(Settings(**change["new"]))
