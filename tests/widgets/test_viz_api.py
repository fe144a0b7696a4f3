"""The visualizer's Python side: chapters, the static grid, static-or-live, the live widget,
and the chapter texts written from the runs the visualizer plays."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from IPython.display import HTML

import pagedkv_widgets as viz
from pagedkv.errors import ConfigError
from pagedkv_widgets.catalog import CATALOG, make_runner
from pagedkv_widgets.chapters import CHAPTERS, chapter_config, grid_settings, resolve_settings
from pagedkv_widgets.encoding import count_events, decode_run
from pagedkv_widgets.mode import in_book_build
from pagedkv_widgets.page_decoding import rows_at
from pagedkv_widgets.scenes import parts, scene_keys, teaching_pages, teaching_tokens
from pagedkv_widgets.static_page import build_grid, pack, split_book, split_runs, static_html, unpack

BOOK = Path(__file__).parents[2] / "book"


def _config(chapter: str, **overrides):
    return chapter_config(CATALOG, chapter, resolve_settings(CATALOG, chapter, **overrides))


def test_hidden_controls_pin_their_axis():
    config = _config("paging")
    assert len(config["axes"]["model"]) == 1
    assert len(config["axes"]["page_size"]) == 3
    assert len(grid_settings(config)) == 10 * 3


def test_chapters_with_a_card_page_table_show_one_run_at_card_scale():
    for chapter in ("retraction", "full"):
        config = _config(chapter)
        assert parts(config) == {"card": True}
        assert config["axes"]["mem_fraction_static"] == [0.5, 0.6, 0.7, 0.8, 0.9]
    assert "page_size" not in _config("retraction")["controls"]
    assert _config("full")["axes"]["page_size"] == [1, 16, 64]
    assert parts(_config("paging")) == {"pool": True}
    assert parts(_config("memory")) == parts(_config("admission")) == {"card": False}


def test_an_initial_fraction_off_the_grid_joins_the_axis():
    config = _config("memory", mem_fraction_static=0.83)
    assert 0.83 in config["axes"]["mem_fraction_static"]


def test_unknown_values_name_the_parameter():
    from pagedkv_widgets.facts import chapter_run

    with pytest.raises(ConfigError, match="model='gpt-9'"):
        _config("memory", model="gpt-9")
    with pytest.raises(ConfigError, match="chapter='nope'"):
        viz.visualizer("nope", static=True)
    with pytest.raises(ConfigError, match="chapter='nope'"):
        chapter_run("nope")


def test_the_full_chapter_grid_is_four_planes_through_its_opening_setting():
    config = _config("full")
    opening = resolve_settings(CATALOG, "full")
    assert opening.loop == "overlap"  # SGLang's default loop
    grid = grid_settings(config)
    # workload x fraction, model x GPU, workload x page, loop x fraction (the normal loop's 5)
    assert len(grid) == len(set(grid)) == 15 + 5 + 6 + 5
    for s in grid:  # each differs from the opening setting only along one plane's controls
        moved = {k for k, v in s.as_dict().items() if v != opening.as_dict()[k]}
        assert any(moved <= set(plane) for plane in config["planes"]), s
    assert {s.page_size for s in grid} == {1, 16, 64}
    assert {(s.model, s.gpu) for s in grid} == {(m, g) for m in CATALOG.models for g in CATALOG.gpus}
    assert {s.mem_fraction_static for s in grid if s.loop == "normal"} == set(
        config["axes"]["mem_fraction_static"])
    assert len(grid_settings(_config("retraction"))) == 3 * 5  # no planes: every combination


@pytest.mark.parametrize("page_size", [1, 64])
def test_a_card_run_is_paged_at_the_chosen_page_size(page_size):
    """The page size control changes the run's pool, not a label: the pool's pages, the
    rows' cells and the page ids all follow it."""
    settings = resolve_settings(CATALOG, "full", page_size=page_size)
    assert scene_keys(settings)["card"].endswith(f"|{page_size}|overlap")
    dec = decode_run(make_runner().run("card", settings, True))
    meta = dec["meta"]
    assert meta["page_size"] == page_size
    assert meta["num_pages"] == meta["max_total_num_tokens"] // page_size
    rows = rows_at(dec["pages"], dec["open"])
    assert rows and all(len(pages) == -(-n // page_size) for n, pages in rows.values())
    assert max(p for _, pages in rows.values() for p in pages) <= meta["num_pages"]


def test_teaching_pool_follows_the_fraction():
    assert teaching_pages(0.83) == 53
    assert teaching_pages(0.50) < teaching_pages(0.95) == 65


def test_grid_holds_one_run_per_key_with_its_page_record():
    config = _config("paging")
    grid = build_grid(config, make_runner())
    assert set(grid) == {"pool"}
    assert set(grid["pool"]) == {scene_keys(s)["pool"] for s in grid_settings(config)}
    pool = decode_run(grid["pool"]["busy|0.85|16|overlap"])
    assert pool["meta"]["num_pages"] == teaching_tokens(0.85) // 16
    assert pool["pages"] is not None and pool["pages"]["lifetimes"]


def test_the_grid_reuses_the_runs_a_chapter_text_asked_for():
    """A chapter's text runs some settings first (facts.chapter_run); the grid does not run
    them again, and a runner goes to worker processes without the runs it keeps."""
    import pickle

    from pagedkv_widgets.scenes import default_simulate

    calls = []

    def counting(*args, **kwargs):
        calls.append(kwargs["mem_fraction_static"])
        return default_simulate()(*args, **kwargs)

    runner = make_runner(counting)
    config = _config("paging")
    first = runner.run("pool", resolve_settings(CATALOG, "paging"))
    grid = build_grid(config, runner, workers=1)
    assert len(calls) == len(grid["pool"]) == 30 and grid["pool"]["busy|0.85|16|overlap"] is first
    shared = make_runner()
    shared.run("pool", resolve_settings(CATALOG, "paging"))
    assert pickle.loads(pickle.dumps(shared)).memo == {} and shared.memo


def _fragment() -> tuple[dict, str]:
    config = _config("paging")
    settings = resolve_settings(CATALOG, "paging")
    grid = {"pool": {scene_keys(settings)["pool"]: {"n": 1, "note": "</script><b>" * 100},
                     "other": {"n": 2}, "bad": {"error": "too small", "fix": "more"}}}
    return config, static_html(config, grid)


def test_static_html_carries_an_index_and_each_run_packed():
    config, html = _fragment()
    index = re.search(r'<script type="application/gzip" data-pkv="index">(.*?)</script>', html)
    assert unpack(index.group(1))["config"] == config
    entries = unpack(index.group(1))["grid"]["pool"]
    assert entries["bad"] == {"error": "too small", "fix": "more"}
    runs = dict(re.findall(r'data-pkv-run="([^"]+)"[^>]*>([^<]*)</script>', html))
    assert {entries[k]["id"] for k in ("other", "busy|0.85|16|overlap")} == set(runs)
    assert unpack(runs["pool:other"]) == {"n": 2}
    assert html.count("data-pkv-inline") == 1  # the run the chapter opens on
    assert pack({"a": 1}) == pack({"a": 1})  # no timestamp: the same data, the same page


def test_the_book_build_moves_all_runs_but_the_opening_one_into_shared_files(tmp_path):
    _, html = _fragment()
    for name in ("a.html", "sub/b.html"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(html)
    assert split_book(tmp_path) == 2
    files = list((tmp_path / "_pkv").iterdir())
    assert len(files) == 1 and unpack(files[0].read_text()) == {"n": 2}  # one file, two pages
    page = (tmp_path / "sub/b.html").read_text()
    assert f'data-src="../_pkv/{files[0].name}"' in page and "data-pkv-inline>" in page
    assert split_runs(page, lambda _: "x") == page  # nothing left to move


def test_static_or_live(monkeypatch):
    monkeypatch.setenv("PAGEDKV_BOOK_BUILD", "1")
    assert in_book_build()
    assert isinstance(viz.visualizer("paging"), HTML)
    monkeypatch.setenv("PAGEDKV_BOOK_BUILD", "0")
    assert not in_book_build()
    assert isinstance(viz.visualizer("paging"), viz.Visualizer)


def test_live_widget_resimulates_when_a_slider_moves():
    widget = viz.visualizer("paging", static=False, prefetch=False)
    before = widget.scene["pool"]["meta"]["num_pages"]
    widget.settings = {**widget.settings, "mem_fraction_static": 0.6}
    assert widget.scene["pool"]["meta"]["num_pages"] == teaching_tokens(0.6) // 16 != before
    widget.settings = {**widget.settings, "page_size": 64}
    assert widget.scene["pool"]["meta"]["page_size"] == 64
    card = viz.visualizer("memory", static=False, prefetch=False)
    card.settings = {**card.settings, "mem_fraction_static": 0.6}
    assert card.scene["card"]["meta"]["mem_fraction_static"] == 0.6 and card.scene["pool"] is None
    full = viz.visualizer("full", static=False, prefetch=False)
    full.settings = {**full.settings, "page_size": 64, "gpu": "h100-sxm-80gb"}  # any combination
    meta = full.scene["card"]["meta"]
    assert meta["page_size"] == 64 and meta["num_pages"] == meta["max_total_num_tokens"] // 64
    assert full.settings["loop"] == "overlap" and full.scene["card"]["pages"]["loop"] == "overlap"
    full.settings = {**full.settings, "loop": "normal"}  # the loop too, with any other control
    assert full.scene["card"]["pages"]["loop"] == "normal" and full.scene["card"]["pages"]["ahead"] == []
    assert full.scene["card"]["meta"]["page_size"] == 64


def test_every_chapter_has_views_and_controls():
    for name, chapter in CHAPTERS.items():
        config = _config(name)
        assert config["views"] and set(chapter.controls) <= set(config["axes"])


@pytest.mark.parametrize("chapter", ["admission", "retraction", "full"])
def test_default_card_run_over_admits_and_retracts(chapter):
    """Chapters 4, 5 and 7 say the default card-scale run retracts: it must."""
    settings = resolve_settings(CATALOG, chapter)
    assert (settings.model, settings.gpu, settings.workload) == ("qwen3-4b", "rtx-4090",
                                                                 "busy")
    card = make_runner().run("card", settings, parts(_config(chapter))["card"])
    assert count_events(card, "retract") >= 1
    ratio = decode_run(card)["new_token_ratio"]
    assert min(ratio) < max(ratio)  # the ratio decays


def test_default_teaching_run_page_size_changes_rows():
    """Chapter 3: larger pages, fewer cells per row (the requests are the same tokens at
    every page size)."""
    widest = {}
    for p in (4, 16, 64):
        dec = decode_run(make_runner().run("pool", resolve_settings(CATALOG, "paging", page_size=p)))
        widest[p] = max(len(life.pages) for life in dec["pages"]["lifetimes"])
    assert widest[4] > widest[16] > widest[64]


def _cells(notebook: str) -> list[dict]:
    return json.loads((BOOK / notebook).read_text())["cells"]


def _rendered(notebook: str, heading: str) -> tuple[str, str]:
    """The heading cell of a section and the text its computed cell (the code cell right
    after it, hidden in the book) renders, with ``Markdown`` captured."""
    from IPython.display import Markdown

    cells = _cells(notebook)
    i = next(k for k, c in enumerate(cells) if "".join(c["source"]).startswith(heading))
    assert "remove-input" in cells[i + 1]["metadata"]["tags"]
    shown: list = []
    source = "".join(cells[i + 1]["source"]).replace("from IPython.display import Markdown, display\n", "")
    exec(source, {"Markdown": Markdown, "display": shown.append})
    return "".join(cells[i]["source"]), " ".join(m.data for m in shown).replace("\n", " ")


def _facts(chapter: str, **overrides) -> dict:
    """What a test knows of a run, read straight from the run (not from pagedkv_widgets.facts)."""
    config = _config(chapter, **overrides)
    settings = resolve_settings(CATALOG, chapter, **overrides)
    (part, pages), = parts(config).items()
    run = decode_run(make_runner().run(part, settings, pages))
    retracts = [s for s, _ in run["events"].get("retract", [])]
    return {"run": run, "pool": run["meta"]["max_total_num_tokens"], "steps": len(run["step"]),
            "waiting": max(run["num_waiting"]), "running": max(run["num_running"]),
            "retracts": retracts}


def test_watch_it_texts_are_the_default_runs():
    """Chapters 1, 4 and 5 write their 'Watch it' paragraph from the runs their visualizer
    plays: the heading cell holds no number, the rendered text the runs' numbers."""
    for notebook, heading in (("01-memory-arithmetic.ipynb", "## Watch it: requests"),
                              ("04-admission.ipynb", "## Watch it: reservation"),
                              ("05-retraction.ipynb", "## Watch it: a retraction")):
        head, _ = _rendered(notebook, heading)
        assert not re.search(r"\d", head.split("\n", 1)[-1]), notebook

    _, text1 = _rendered("01-memory-arithmetic.ipynb", "## Watch it: requests")
    mem, small = _facts("memory"), _facts("memory", model="qwen3-4b", gpu="rtx-4090")
    assert mem["waiting"] == 0 and not mem["retracts"]
    assert f"{mem['pool']:,}-token pool" in text1 and "nobody waits and nothing is retracted" in text1
    assert f"at most {mem['running']} requests run at once" in text1
    assert (f"{small['pool']:,}-token pool: up to {small['waiting']} wait and "
            f"{len(small['retracts'])}") in text1
    assert ("mem_fraction_static` 0.80 (the book's running-case fraction, used wherever the book "
            "replays the running case; chapter 3's toy teaching pool and the sizing examples at "
            "SGLang's default use others; SGLang 0.5.23's default for this card is 0.830)") in text1

    _, text4 = _rendered("04-admission.ipynb", "## Watch it: reservation")
    adm = _facts("admission")
    calm, burst = _facts("admission", workload="calm"), _facts("admission", workload="burst")
    assert f"a pool of {adm['pool']:,} tokens in pages of 16" in text4
    assert f"up to {adm['waiting']} requests wait" in text4
    assert f"{len(adm['retracts'])} retractions in this run of {adm['steps']:,} steps" in text4
    assert f"(between steps {adm['retracts'][0]:,} and {adm['retracts'][-1]:,})" in text4
    assert not calm["retracts"] and "never retracts" in text4
    assert f"retracts {len(burst['retracts'])} times" in text4 and len(burst["retracts"]) >= 10
    assert "SGLang 0.5.23's default for this card is 0.704" in text4

    _, text5 = _rendered("05-retraction.ipynb", "## Watch it: a retraction")
    ret = _facts("retraction")
    step = ret["retracts"][0]
    rid = dict(ret["run"]["events"]["retract"])[step]
    tokens, row = rows_at(ret["run"]["pages"], step - 1)[rid]
    assert f"reach step {step:,}, where request {rid} is retracted" in text5
    assert f"its row held {tokens:,} tokens in {len(row)} pages" in text5
    assert f"Its {len(ret['retracts'])} retractions" in text5 and f"of its {ret['steps']:,} steps" in text5


def test_paging_text_matches_the_teaching_runs():
    """Chapter 3: the text its computed cell writes gives, per page size, the pool's pages and
    the widest row of the run the visualizer plays (read straight from that run)."""
    _, text = _rendered("03-paging.ipynb", "## Watch it")
    for p in (4, 16, 64):
        dec = decode_run(make_runner().run("pool", resolve_settings(CATALOG, "paging", page_size=p)))
        widest = max(len(life.pages) for life in dec["pages"]["lifetimes"])
        pages = dec["meta"]["num_pages"]
        assert re.search(rf"pages of {p} it holds \d+ tokens in {pages} pages and the longest row "
                         rf"has {widest} cells", text), (p, text[:300])


def test_memory_chapter_default_run_never_waits_or_retracts():
    """At most 42 running on a 399,440-token pool (the running case's fraction on the H100),
    none waiting, no retraction; Qwen3-4B on the RTX 4090 at the same fraction does retract."""
    mem = _facts("memory")
    assert (mem["pool"], mem["running"], mem["waiting"], mem["retracts"]) == (399_440, 42, 0, [])
    assert _facts("memory", model="qwen3-4b", gpu="rtx-4090")["retracts"]


def test_things_to_try_are_the_runs_of_the_default_settings():
    """Chapter 7's defaults paragraph and 'Things to try' are written from its runs."""
    cells = _cells("07-visualizer.ipynb")
    heading = "## Things to try"
    head, text = _rendered("07-visualizer.ipynb", heading)
    assert not re.search(r"\d", head.split("\n", 1)[-1])
    base, low = _facts("full"), _facts("full", mem_fraction_static=0.5)
    calm, burst = _facts("full", workload="calm"), _facts("full", workload="burst")
    h100 = _facts("full", gpu="h100-sxm-80gb")
    assert f"the run retracts {len(base['retracts'])} times" in text
    assert f"the first retraction (step {base['retracts'][0]:,})" in text
    assert f"the pool shrinks to {low['pool']:,} tokens" in text
    assert f"up to {low['waiting']} requests wait, and retractions rise to {len(low['retracts'])}" in text
    assert not calm["retracts"] and not calm["waiting"] and "never wait and are never retracted" in text
    assert f"holds up to {burst['waiting']} requests and the run retracts {len(burst['retracts'])}" in text
    assert f"KV pool ({h100['pool']:,} tokens), and the same requests never wait" in text
    one, big = _facts("full", page_size=1), _facts("full", page_size=64)
    assert f"set the page size to 1 (SGLang's default page size): the pool holds {one['pool']:,} " \
           f"tokens in as many pages" in text and one["run"]["meta"]["num_pages"] == one["pool"]
    assert f"retracts {len(one['retracts'])} times. At 64 the same card holds {big['pool']:,} tokens in " \
           f"{big['run']['meta']['num_pages']:,} pages" in text
    assert "up to 63 tokens unused" in text
    assert f"retracts {len(big['retracts'])} times ({len(base['retracts'])} at 16)" in text
    intro = next(k for k, c in enumerate(cells) if "".join(c["source"]).startswith("# 7."))
    _, defaults = _rendered("07-visualizer.ipynb", "# 7.")
    prose = "".join(cells[intro]["source"]).split("\n", 1)[-1]
    for formula in ("2<sup>30</sup>", "1 - mem_fraction_static"):
        prose = prose.replace(formula, "")
    assert not re.search(r"\d", prose)
    assert f"a pool of {base['pool']:,} tokens in {base['run']['meta']['num_pages']:,} pages" in defaults
    assert "SGLang 0.5.23 would pick 0.704 for this card" in defaults


def test_prefetch_runs_every_slider_position_once():
    widget = viz.visualizer("paging", static=False)
    assert widget.prefetched.wait(timeout=300)
    axes = widget.config["axes"]
    pool_keys = {key for part, key in widget._cache if part == "pool"}
    assert len(pool_keys) == len(axes["mem_fraction_static"]) * len(axes["page_size"])
    widget.settings = {**widget.settings, "mem_fraction_static": 0.6, "page_size": 64}
    assert widget.scene["pool"]["meta"]["page_size"] == 64  # served from the prefetched runs
    assert len({key for part, key in widget._cache if part == "pool"}) == len(pool_keys)


def test_every_run_names_its_scheduler_loop():
    """The loop is passed to the simulator explicitly (never left to its default), is in the
    run's key, and only SGLang's two loops are accepted."""
    from pagedkv_widgets.scenes import default_simulate

    seen = []

    def recording(*args, **kwargs):
        seen.append(kwargs["disable_overlap_schedule"])
        return default_simulate()(*args, **kwargs)

    runner = make_runner(recording)
    for loop in ("overlap", "normal"):
        settings = resolve_settings(CATALOG, "paging", loop=loop)
        runner.run("pool", settings)
        assert scene_keys(settings)["pool"].endswith(f"|{loop}")
    assert seen == [False, True]
    assert _config("full")["axes"]["loop"] == [
        ["overlap", "overlap (SGLang's default)"], ["normal", "normal (--disable-overlap-schedule)"]]
    with pytest.raises(ConfigError, match="loop='fast'"):
        resolve_settings(CATALOG, "full", loop="fast")
