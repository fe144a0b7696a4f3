"""The live visualizer: one anywidget whose JavaScript is the book's renderer.

Traits: ``config`` (views, controls, axes; Python to JS), ``settings`` (the controls; JS to
Python) and ``scene`` (the encoded run for the current settings; Python to JS). A change of
``settings`` re-runs the simulator in the kernel, only if the run's key changed (the
teaching run ignores the model and GPU: see ``scene_keys``); runs
already seen are kept, so going back to a setting is instant.

A card run with its page record takes a few seconds, more than a slider should wait. So,
once the widget is shown, a background thread runs the neighbouring settings ahead of time:
every ``mem_fraction_static`` (and page size, for the teaching pool) on the sliders, nearest
first, for the current model, GPU, workload and (card runs) page size: a card run at page
size 1 takes several seconds more, so other card page sizes are run when asked for. A
slider move that lands on a prefetched setting then only swaps data.

The renderer is several files (:data:`JS_PARTS`) that share one module scope; :func:`esm`
joins them into the one ES module that anywidget loads and the static page inlines.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from pagedkv_widgets.limits import explained
from pagedkv_widgets.scenes import SceneRunner, Settings, parts, scene_keys

STATIC = Path(__file__).parent / "static"
# In order: decoding, the drawings, the viewer and its entry points (which export).
JS_PARTS = ("decode.js", "draw.js", "pagemap.js", "viewer.js")


def esm() -> str:
    """The renderer as one ES module (the files of :data:`JS_PARTS`, in order)."""
    return "\n".join((STATIC / name).read_text() for name in JS_PARTS)


class Visualizer(anywidget.AnyWidget):
    """Live memory visualizer (JupyterLab, Notebook 7, VS Code, Colab)."""

    _esm = esm()
    _css = STATIC / "visualizer.css"
    config = traitlets.Dict().tag(sync=True)
    settings = traitlets.Dict().tag(sync=True)
    scene = traitlets.Dict().tag(sync=True)

    def __init__(self, config: dict[str, Any], runner: SceneRunner, prefetch: bool = True) -> None:
        self._runner = runner
        self._config = config  # the trait is set only by super().__init__, after the first scene
        self._parts = parts(config)
        self._cache: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()  # one simulation at a time; the cache stays consistent
        initial = Settings(**config["settings"])
        super().__init__(config=config, settings=initial.as_dict(), scene=self._scene(initial))
        self.observe(self._on_settings, names="settings")
        self.prefetched = threading.Event()
        if prefetch:
            threading.Thread(target=self._prefetch, args=(initial,), daemon=True).start()
        else:
            self.prefetched.set()

    def _scene(self, settings: Settings) -> dict[str, Any]:
        scene: dict[str, Any] = {"card": None, "pool": None}
        for part, key in scene_keys(settings).items():
            if part in self._parts:
                with self._lock:
                    if (part, key) not in self._cache:
                        run = self._runner.run(part, settings, self._parts[part])
                        self._cache[part, key] = explained(run, self._runner, part, settings,
                                                           self._config)
                scene[part] = self._cache[part, key]
        return scene

    def _prefetch(self, around: Settings) -> None:
        """Run the slider positions next to ``around``, nearest first, into the cache."""
        axes = self.config["axes"]
        fractions = sorted(axes["mem_fraction_static"],
                           key=lambda f: abs(f - around.mem_fraction_static))
        sizes = [around.page_size]
        if "pool" in self._parts:
            sizes += [p for p in axes["page_size"] if p != around.page_size]
        for f in fractions:
            for p in sizes:
                self._scene(replace(around, mem_fraction_static=f, page_size=p))
        self.prefetched.set()

    def _on_settings(self, change: dict[str, Any]) -> None:
        self.scene = self._scene(Settings(**change["new"]))
