"""The visualizer as static HTML for the built book: a grid of precomputed runs.

The output is one ``<div class="pkv-static">`` holding

- ``<script type="application/gzip" data-pkv="index">``: ``{"config": ..., "grid": {part:
  {key: {"id": run id} or {"error", "fix"}}}}``;
- one ``<script type="application/gzip" data-pkv-run="ID">`` per run: the encoded run
  (:func:`pagedkv_widgets.encoding.encode_run`), the one the chapter opens on marked
  ``data-pkv-inline``;

each as JSON, gzip, base64 (:func:`pack`), followed by the renderer itself (the JavaScript
as an inline module, the CSS as an inline style). As written, the fragment needs no book
configuration, no file beside the page and no network. A run with its page record is
~60 KB packed and a chapter has 15-90 runs, so the book build moves every run but the
opening one into a file of its own (:func:`split_runs`, called by the book's Sphinx
extension): the page stays small and the renderer fetches a run the first time a control
asks for it (and the runs next to it on the controls, ahead of time). The browser inflates
the data with its own ``DecompressionStream``.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import html
import json
import multiprocessing
import os
import re
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from pagedkv_widgets.chapters import every_setting, grid_settings
from pagedkv_widgets.limits import explained, fix, problem
from pagedkv_widgets.scenes import SceneRunner, Settings, parts, scene_keys
from pagedkv_widgets.widget import STATIC, esm

RUN_SCRIPT = re.compile(
    r'<script type="application/gzip" data-pkv-run="([^"]+)">([A-Za-z0-9+/=]+)</script>')
RUN_FOLDER = "_pkv"  # under the build's root: the runs moved out of the pages


def _one_thread() -> None:
    """Worker set-up: the processes are the parallelism, so torch (the allocator's free
    lists) gets one thread each; several threads per worker oversubscribe the CPUs and run
    an order of magnitude slower."""
    import torch

    torch.set_num_threads(1)


def build_grid(
    config: dict[str, Any], runner: SceneRunner, workers: int | None = None
) -> dict[str, dict[str, Any]]:
    """Run every setting of :func:`grid_settings` once (runs shared by several keys once);
    a setting that cannot run holds its reason and a value that works (:func:`explained`).
    A config with ``planes`` also holds every other combination of its axes that cannot run
    (found without simulating, :func:`pagedkv_widgets.limits.problem`), and its fixes name
    only settings the grid holds.

    Returns ``{part: {key: encoded run or {"error", "fix"}}}`` for the part of
    :func:`pagedkv_widgets.scenes.parts`. Runs the runner already holds (a chapter's text
    asked for them, or its disk cache has them: :mod:`pagedkv_widgets.run_cache`) are not
    run again. The others are independent, so where processes can
    be forked (Linux, where books are built) they spread over ``workers`` processes
    (default: one per CPU); ``workers=1`` or another platform runs them here.
    """
    need = parts(config)
    tasks: dict[tuple[str, str], Settings] = {}
    for settings in grid_settings(config):
        for part, key in scene_keys(settings).items():
            if part in need:
                tasks.setdefault((part, key), settings)
    args = [(p, s, need[p]) for (p, _), s in tasks.items()]
    todo = [a for a in args if not runner.has(*a)]  # a chapter's text or its cache has some
    workers = min(workers or os.cpu_count() or 1, len(todo))
    if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_one_thread) as pool:
            done = list(pool.map(runner.compute, *zip(*todo, strict=True), chunksize=1))
    else:
        done = [runner.compute(*a) for a in todo]
    for a, run in zip(todo, done, strict=True):
        runner.keep(*a, run)
    grid: dict[str, dict[str, Any]] = {part: {} for part in need}
    held = set(grid_settings(config))
    for (part, key), settings in tasks.items():
        run = runner.run(part, settings, need[part])
        grid[part][key] = explained(run, runner, part, settings, config, held)
    if config.get("planes"):  # a setting that cannot run costs nothing to hold: hold them all
        for settings in every_setting(config):
            for part, key in scene_keys(settings).items():
                if part in need and key not in grid[part]:
                    why = problem(runner, part, settings, config)
                    if why is not None:
                        grid[part][key] = {"error": why,
                                           "fix": fix(runner, part, settings, config, held)}
    return grid


def pack(data: Any) -> str:
    """JSON, gzip (no timestamp: the same data gives the same page), base64."""
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode()


def unpack(text: str) -> Any:
    """Inverse of :func:`pack` (the JavaScript ``readPayload`` is its twin)."""
    return json.loads(gzip.decompress(base64.b64decode(text)))


def static_html(config: dict[str, Any], grid: dict[str, dict[str, Any]]) -> str:
    """The HTML fragment: mount point, a fallback line, the index and the runs, packed."""
    opening = scene_keys(Settings(**config["settings"]))
    index: dict[str, dict[str, Any]] = {}
    runs = []
    for part, entries in grid.items():
        index[part] = {}
        for key, run in entries.items():
            if "error" in run:
                index[part][key] = run
                continue
            run_id = f"{part}:{key}"
            index[part][key] = {"id": run_id}
            inline = " data-pkv-inline" if opening[part] == key else ""
            runs.append(f'<script type="application/gzip" data-pkv-run="{html.escape(run_id)}"'
                        f"{inline}>{pack(run)}</script>")
    return (
        f'<div class="pkv-static" data-chapter="{html.escape(config["chapter"])}">'
        '<div class="pkv-mount"><p>The memory visualizer needs JavaScript.</p></div>'
        f'<script type="application/gzip" data-pkv="index">{pack({"config": config, "grid": index})}'
        f'</script>{"".join(runs)}</div>'
        f"<style>{(STATIC / 'visualizer.css').read_text()}</style>"
        f'<script type="module">{esm()}</script>'
    )


def split_runs(page: str, store: Callable[[str], str]) -> str:
    """``page`` (HTML) with every run not marked ``data-pkv-inline`` moved out: ``store``
    keeps the packed text and returns the URL to fetch it from, which replaces it
    (``data-src``)."""
    def out(match: re.Match[str]) -> str:
        run_id, payload = match.groups()
        return (f'<script type="application/gzip" data-pkv-run="{run_id}" '
                f'data-src="{html.escape(store(payload))}"></script>')

    return RUN_SCRIPT.sub(out, page)


def split_book(outdir: Path) -> int:
    """Split every HTML page under ``outdir`` (:func:`split_runs`), the runs written once
    each to ``outdir/_pkv/<hash>.txt`` (the same run in two chapters is one file); return
    the number of runs moved out."""
    moved = 0
    for page in sorted(outdir.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        if 'data-pkv-run="' not in text:
            continue

        def store(payload: str, page: Path = page) -> str:
            nonlocal moved
            moved += 1
            name = hashlib.sha256(payload.encode()).hexdigest()[:20] + ".txt"
            target = outdir / RUN_FOLDER / name
            if not target.exists():
                target.parent.mkdir(exist_ok=True)
                target.write_text(payload, encoding="ascii")
            return os.path.relpath(target, page.parent).replace(os.sep, "/")

        page.write_text(split_runs(text, store), encoding="utf-8")
    return moved
