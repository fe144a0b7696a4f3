"""The visualizer's Python side: chapters, the static grid, static-or-live, the live widget."""

from __future__ import annotations

import json
import re

import pytest
from IPython.display import HTML

import pagedkv_widgets as viz
from pagedkv.errors import ConfigError
from pagedkv_widgets.catalog import CATALOG, make_runner
from pagedkv_widgets.chapters import CHAPTERS, chapter_config, grid_settings, resolve_settings
from pagedkv_widgets.encoding import decode_trace
from pagedkv_widgets.mode import in_book_build
from pagedkv_widgets.scenes import scene_keys, teaching_pages
from pagedkv_widgets.static_page import build_grid, static_html


def _config(chapter: str, **overrides):
    settings = resolve_settings(CATALOG, **overrides) if overrides else CATALOG.defaults
    return chapter_config(CATALOG, chapter, settings)


def test_hidden_controls_pin_their_axis():
    config = _config("paging")
    assert len(config["axes"]["model"]) == 1
    assert len(config["axes"]["page_size"]) == 3
    assert len(grid_settings(config)) == 10 * 3


def test_an_initial_fraction_off_the_grid_joins_the_axis():
    config = _config("memory", mem_fraction_static=0.83)
    assert 0.83 in config["axes"]["mem_fraction_static"]


def test_unknown_values_name_the_parameter():
    with pytest.raises(ConfigError, match="model='gpt-9'"):
        _config("memory", model="gpt-9")
    with pytest.raises(ConfigError, match="chapter='nope'"):
        viz.visualizer("nope", static=True)


def test_teaching_pool_follows_the_fraction():
    assert teaching_pages(0.83) == 53
    assert teaching_pages(0.50) < teaching_pages(0.95) == 65


def test_grid_holds_one_run_per_key_and_only_the_views_needs():
    config = _config("paging")
    grid = build_grid(config, make_runner())
    assert set(grid) == {"pool"}
    assert set(grid["pool"]) == {scene_keys(s)["pool"] for s in grid_settings(config)}
    pool = decode_trace(grid["pool"]["busy|0.85|16"])
    assert pool["meta"]["num_pages"] == teaching_pages(0.85)
    assert pool["page_tables"] is not None


def test_static_html_carries_the_grid_as_json():
    config = _config("memory")
    grid = {"card": {"k": {"note": "</script><b>"}}}
    html = static_html(config, grid)
    assert html.count("</script>") == 2  # the data, then the renderer
    payload = re.search(r'<script type="application/json">(.*?)</script>', html).group(1)
    assert json.loads(payload) == {"config": config, "grid": grid}


def test_static_or_live(monkeypatch):
    monkeypatch.setenv("PAGEDKV_BOOK_BUILD", "1")
    assert in_book_build()
    assert isinstance(viz.visualizer("paging"), HTML)
    monkeypatch.setenv("PAGEDKV_BOOK_BUILD", "0")
    assert not in_book_build()
    assert isinstance(viz.visualizer("paging"), viz.Visualizer)


def test_live_widget_resimulates_when_a_slider_moves():
    widget = viz.visualizer("full", static=False)
    before = widget.scene["pool"]["meta"]["num_pages"]
    widget.settings = {**widget.settings, "mem_fraction_static": 0.6}
    assert widget.scene["pool"]["meta"]["num_pages"] == teaching_pages(0.6) != before
    assert widget.scene["card"]["meta"]["mem_fraction_static"] == 0.6
    widget.settings = {**widget.settings, "page_size": 64}
    assert widget.scene["pool"]["meta"]["page_size"] == 64


def test_every_chapter_has_views_and_controls():
    for name, chapter in CHAPTERS.items():
        config = _config(name)
        assert config["views"] and set(chapter.controls) <= set(config["axes"])
