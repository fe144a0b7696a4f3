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
from pagedkv_widgets.scenes import scene_keys, teaching_pages, teaching_tokens
from pagedkv_widgets.static_page import build_grid, pack, static_html, unpack


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
    pool = decode_trace(grid["pool"]["observed|0.85|16"])
    assert pool["meta"]["num_pages"] == teaching_tokens(0.85) // 16
    assert pool["page_tables"] is not None


def test_static_html_carries_the_grid_packed():
    config = _config("memory")
    grid = {"card": {"k": {"note": "</script><b>" * 1000}}}
    html = static_html(config, grid)
    assert html.count("</script>") == 2  # the data, then the renderer
    payload = re.search(r'<script type="application/gzip">(.*?)</script>', html).group(1)
    assert unpack(payload) == {"config": config, "grid": grid}
    assert len(payload) < len(json.dumps(grid)) / 10
    assert pack(grid) == pack(grid)  # no timestamp: the same data, the same page


def test_static_or_live(monkeypatch):
    monkeypatch.setenv("PAGEDKV_BOOK_BUILD", "1")
    assert in_book_build()
    assert isinstance(viz.visualizer("paging"), HTML)
    monkeypatch.setenv("PAGEDKV_BOOK_BUILD", "0")
    assert not in_book_build()
    assert isinstance(viz.visualizer("paging"), viz.Visualizer)


def test_live_widget_resimulates_when_a_slider_moves():
    widget = viz.visualizer("full", static=False, prefetch=False)
    before = widget.scene["pool"]["meta"]["num_pages"]
    widget.settings = {**widget.settings, "mem_fraction_static": 0.6}
    assert widget.scene["pool"]["meta"]["num_pages"] == teaching_tokens(0.6) // 16 != before
    assert widget.scene["card"]["meta"]["mem_fraction_static"] == 0.6
    widget.settings = {**widget.settings, "page_size": 64}
    assert widget.scene["pool"]["meta"]["page_size"] == 64


def test_every_chapter_has_views_and_controls():
    for name, chapter in CHAPTERS.items():
        config = _config(name)
        assert config["views"] and set(chapter.controls) <= set(config["axes"])


def _retractions(run: dict) -> int:
    return sum(decode_trace(run)["events"].get("retract", {}).values()) if "ev" in run else 0


@pytest.mark.parametrize("chapter", ["admission", "retraction", "full"])
def test_default_card_run_over_admits_and_retracts(chapter):
    """Chapters 4, 5 and 7 say the default card-scale run retracts: it must."""
    settings = resolve_settings(CATALOG, chapter)
    assert (settings.model, settings.gpu, settings.workload) == ("qwen3-4b", "rtx-4090",
                                                                 "observed")
    card = make_runner().run("card", settings)
    assert _retractions(card) >= 1
    dec = decode_trace(card)
    assert min(dec["new_token_ratio"]) < max(dec["new_token_ratio"])  # the ratio decays


def test_default_teaching_run_retracts_and_page_size_changes_rows():
    """Chapters 5 and 7: the default teaching pool retracts; chapter 3: larger pages, fewer
    cells per row (the requests are the same tokens at every page size)."""
    runner = make_runner()
    base = resolve_settings(CATALOG, "retraction")
    assert _retractions(runner.run("pool", base)) >= 1
    widest = {}
    for p in (4, 16, 64):
        dec = decode_trace(runner.run("pool", resolve_settings(CATALOG, "paging", page_size=p)))
        widest[p] = max(len(pages) for rows in dec["page_tables"] for _, _, pages in rows)
    assert widest[4] > widest[16] > widest[64]


def test_memory_chapter_keeps_llama_on_h100():
    assert resolve_settings(CATALOG, "memory").model == "llama-3-8b"


def _watch_it(notebook: str) -> str:
    import json
    from pathlib import Path

    cells = json.loads((Path(__file__).parents[1] / "book" / notebook).read_text())["cells"]
    return next("".join(c["source"]) for c in cells
                if c["cell_type"] == "markdown" and "".join(c["source"]).startswith("## Watch it"))


def test_chapter_texts_match_the_default_runs():
    """The numbers the 'Watch it' cells of chapters 3-5 quote are the default runs'."""
    import re

    runner = make_runner()
    admission = resolve_settings(CATALOG, "admission")
    card = decode_trace(runner.run("card", admission))
    text4 = _watch_it("04-admission.ipynb")
    assert f"{_retractions(runner.run('card', admission))} retractions" in text4
    assert f"{card['meta']['max_total_num_tokens']:,}-token pool" in text4
    assert f"up to\n{max(card['num_waiting'])} requests wait" in text4
    calm = runner.run("card", resolve_settings(CATALOG, "admission", workload="calm"))
    assert "calm workload" in text4 and _retractions(calm) == 0
    assert _retractions(runner.run("card", resolve_settings(CATALOG, "admission",
                                                            workload="burst"))) >= 24

    text5 = _watch_it("05-retraction.ipynb")
    retraction = resolve_settings(CATALOG, "retraction")
    assert f"Its {_retractions(runner.run('card', retraction))}\nretractions" in text5
    pool = decode_trace(runner.run("pool", retraction))
    at = {k: sorted(pool["step"][i] for i in v) for k, v in pool["events"].items()}
    assert "retracts twice" in text5 and len(at["retract"]) == 2
    assert "at steps\n{} and {}".format(*at["retract"]) in text5
    assert "at steps {} and {}".format(*at["reprefill"]) in text5
    assert f"teaching pool of {pool['meta']['max_total_num_tokens']} tokens" in text5

    text3 = _watch_it("03-paging.ipynb")
    for p in (4, 16, 64):
        dec = decode_trace(runner.run("pool", resolve_settings(CATALOG, "paging", page_size=p)))
        widest = max(len(pages) for rows in dec["page_tables"] for _, _, pages in rows)
        pages = dec["meta"]["num_pages"]
        assert re.search(rf"{pages} pages\D[^.;]*?{widest} cell", text3.replace("\n", " ")), p


def test_memory_chapter_default_run_never_waits_or_retracts():
    """Chapter 1's text says so: at most 42 running on a 432,064-token pool, none waiting,
    no retraction; Qwen3-4B on the RTX 4090 at the same fraction does retract."""
    runner = make_runner()
    settings = resolve_settings(CATALOG, "memory")
    card = decode_trace(runner.run("card", settings))
    assert card["meta"]["max_total_num_tokens"] == 432_064
    assert max(card["num_running"]) == 42 and max(card["num_waiting"]) == 0
    assert _retractions(runner.run("card", settings)) == 0
    small = resolve_settings(CATALOG, "memory", model="qwen3-4b", gpu="rtx-4090")
    assert _retractions(runner.run("card", small)) >= 1


def test_things_to_try_hold_at_the_defaults():
    """Chapter 7's 'Things to try' quote these runs of the default settings."""
    import json
    from pathlib import Path

    cells = json.loads((Path(__file__).parents[1] / "book" / "07-visualizer.ipynb").read_text())
    text = next("".join(c["source"]) for c in cells["cells"]
                if "".join(c["source"]).startswith("## Things to try")).replace("\n", " ")
    runner = make_runner()
    card = lambda **o: decode_trace(runner.run("card", resolve_settings(CATALOG, "full", **o)))  # noqa: E731
    base = card()
    assert f"retracts {sum(base['events']['retract'].values())} times" in text
    low = card(mem_fraction_static=0.5)
    assert f"pool shrinks to {low['meta']['max_total_num_tokens']:,} tokens" in text
    assert f"up to {max(low['num_waiting'])} requests wait" in text
    assert f"retractions rise to {sum(low['events']['retract'].values())}" in text
    calm, burst, h100 = card(workload="calm"), card(workload="burst"), card(gpu="h100-sxm-80gb")
    assert not calm["events"].get("retract") and max(calm["num_waiting"]) == 0
    assert max(burst["num_waiting"]) > 100 and sum(burst["events"]["retract"].values()) >= 24
    assert f"({h100['meta']['max_total_num_tokens']:,} tokens)" in text
    assert not h100["events"].get("retract") and max(h100["num_waiting"]) == 0


def test_prefetch_runs_every_slider_position_once():
    widget = viz.visualizer("paging", static=False)
    assert widget.prefetched.wait(timeout=300)
    axes = widget.config["axes"]
    pool_keys = {key for part, key in widget._cache if part == "pool"}
    assert len(pool_keys) == len(axes["mem_fraction_static"]) * len(axes["page_size"])
    widget.settings = {**widget.settings, "mem_fraction_static": 0.6, "page_size": 64}
    assert widget.scene["pool"]["meta"]["page_size"] == 64  # served from the prefetched runs
    assert len({key for part, key in widget._cache if part == "pool"}) == len(pool_keys)
