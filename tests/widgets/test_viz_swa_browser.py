"""Chapter 9's visualizer (a sliding-window hybrid's two pools) in Chromium, from 127.0.0.1.

The static page is built here, not taken from the book: chapter 9's views over gpt-oss-20b
runs on a smaller full pool (``max_total_tokens``) and fewer, shorter requests, so the page builds in
seconds. At several steps the SWA pool's map must paint the run's SWA owners (replayed here in
Python), the FULL pool's map the full owners, and the HBM bar's SWA segment the SWA pages held;
and so after a move of the GPU, the model and the page size, each to its own run.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from browser_support import CHROMIUM, FLAGS, cut_short, keep_local, serve

from pagedkv.entrypoints import simulate

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # Chromium pages: slow too
ROOT = ".pkv-static[data-chapter=windows]"

DRAWN_JS = """(root) => {
  const drawn = (v) => root.querySelector(`[data-view=${v}] canvas`).pkvDrawn;
  return {
    step: Number(root.querySelector("[data-role=scrub]").value),
    full: Array.from(drawn("pool").owners), swa: Array.from(drawn("swapool").owners),
    fullStep: drawn("pool").step, swaStep: drawn("swapool").step,
    hbm: Object.fromEntries([...root.querySelectorAll("[data-view=hbm] rect[data-segment]")]
      .map((r) => [r.dataset.segment, Number(r.dataset.bytes)])),
    heads: [...root.querySelectorAll("h4, h5, h6")].map((h) => h.textContent),
  };
}"""

GOTO_JS = """([root, s]) => {
  const scrub = root.querySelector("[data-role=scrub]");
  scrub.value = String(s);
  scrub.dispatchEvent(new Event("input", { bubbles: true }));
}"""


def _small(requests, **options):
    """Chapter 9's runs on a 16,384-token full pool, cut short (:func:`browser_support.cut_short`)."""
    return simulate(cut_short(requests), **{**options, "max_total_tokens": 16_384})


RUN_SHOWN_JS = """(root) => !root.querySelector("[data-role=status]").textContent"""


def _shows_the_run(page, root, run: dict) -> None:
    """At several steps of ``run`` (decoded), both pool maps paint its owners, the HBM bar's
    SWA segment is its SWA pages held, the bar sums to its card, and the headings give its
    two pools' sizes."""
    from pagedkv_widgets.page_decoding import owners_at
    from pagedkv_widgets.swa_encoding import swa_owners_at

    meta, pages = run["meta"], run["pages"]
    n = len(run["step"])
    for s in (0, n // 3, 2 * n // 3, n - 1):
        page.evaluate(GOTO_JS, [root, s])
        got = page.evaluate(DRAWN_JS, root)
        assert got["step"] == got["fullStep"] == got["swaStep"] == s
        assert got["full"] == owners_at(pages, s).tolist()
        swa = swa_owners_at(pages["swa"], meta["swa_num_pages"], s)
        assert got["swa"] == swa.tolist()
        held = int((swa[1:] != -1).sum()) * meta["page_size"] * meta["swa_cell_size"]
        assert got["hbm"]["kv_swa_used"] == held
        assert got["hbm"]["kv_swa_used"] + got["hbm"]["kv_swa_free"] == meta["swa_kv_pool_bytes"]
        assert sum(got["hbm"].values()) == meta["gpu_memory_bytes"]
    heads = " ".join(got["heads"])
    assert f"{meta['max_total_num_tokens']:,} tokens" in heads
    assert f"{meta['swa_max_total_num_tokens']:,} tokens" in heads
    assert "FULL pool" in heads and "SWA pool" in heads
    assert np.any(np.asarray(got["swa"]) == -1)


def test_both_pool_maps_and_the_bar_show_the_run(tmp_path: Path) -> None:
    """The opening run, then a move of the GPU, the model and the page size: each shows its
    own run (pagedkv's, at that setting), both pools included."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    from pagedkv_widgets import visualizer
    from pagedkv_widgets.catalog import CATALOG
    from pagedkv_widgets.chapters import resolve_settings
    from pagedkv_widgets.encoding import decode_run
    from pagedkv_widgets.scenes import SceneRunner, scene_keys

    html = visualizer("windows", static=True, simulate=_small).data
    (tmp_path / "index.html").write_text(
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>windows</title></head>'
        f"<body>{html}</body></html>", encoding="utf-8")
    settings = resolve_settings(CATALOG, "windows")
    runner = SceneRunner(_small, CATALOG.workloads, CATALOG.defaults.model, CATALOG.defaults.gpu,
                         tp=dict(CATALOG.tp))
    assert scene_keys(settings)["card"] in html or "data-pkv-inline" in html
    big = replace(settings, model="gpt-oss-120b")
    # each move, from the setting before it: (control, value, the setting now shown, or None
    # where it cannot run: gpt-oss-120b's weights leave an H100 no pool at 0.73)
    moves = [("gpu", "h200-141gb", replace(settings, gpu="h200-141gb")),
             ("model", "gpt-oss-120b", replace(big, gpu="h200-141gb")),
             ("gpu", "h100-sxm-80gb", big),
             ("mem_fraction_static", "0", None),
             ("mem_fraction_static", "2", big),
             ("page_size", "0", replace(settings, page_size=16))]  # off the model x GPU plane
    with serve(tmp_path) as url, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        page = browser.new_page(viewport={"width": 1200, "height": 1400})
        errors: list[str] = []
        outside: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        keep_local(page, outside)
        page.goto(f"{url}/index.html", wait_until="load")
        page.wait_for_function(f"() => document.querySelector('{ROOT} [data-view=swapool] canvas')?.pkvDrawn")
        root = page.locator(ROOT).element_handle()
        _shows_the_run(page, root, decode_run(runner.run("card", settings, True)))
        viz = page.locator(ROOT)
        for control, value, now in moves:
            if control in ("page_size", "mem_fraction_static"):
                viz.locator(f"input[data-role={control}]").fill(value)
            else:
                viz.locator(f"select[data-role={control}]").select_option(value)
            page.wait_for_function(RUN_SHOWN_JS, arg=root)
            note = viz.locator("[data-role=note]").inner_text()
            # the page holds page sizes at the opening model and GPU only, and says so
            assert ("moved with your page size" in note) == (control == "page_size")
            name = viz.locator("[data-role=run-name]").inner_text()
            if now is None:  # the reason and a value that works, and nothing of the last run
                problem = viz.locator("[data-role=problem]").inner_text()
                assert "gpt-oss-120b's weights take" in problem and "mem_fraction_static 0.73" in problem
                assert "Try mem_fraction_static 0.83 or more" in problem
                assert name.endswith("· cannot run")
                assert viz.locator("[data-view=hbm] svg").count() == 0
                continue
            assert viz.locator("[data-role=problem]").inner_text() == ""
            run = decode_run(runner.run("card", now, True))
            assert name.startswith(f"{CATALOG.hybrid_models[now.model]} on {CATALOG.gpus[now.gpu]} ·")
            assert f"pages of {now.page_size} ·" in name
            _shows_the_run(page, root, run)
        browser.close()
    assert errors == [] and outside == []
