"""Chapter 9's visualizer of a linear-attention hybrid (a KV pool and state slots) in
Chromium, from 127.0.0.1.

The static page is built here, not taken from the book: chapter 9's ``states`` views over
Qwen3-Next-80B-A3B runs (tp 4) on a smaller KV pool (``max_total_tokens``) and fewer, shorter requests,
so the page builds in seconds. At several steps the HBM bar's state segments must be the
run's state slots (read here in Python) times a slot's bytes, the slots view's legend the
same counts, and the KV pool's map the run's page owners; and so after a move of the GPU, the
fraction and the page size, each to its own run.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from browser_support import CHROMIUM, FLAGS, cut_short, keep_local, serve

from pagedkv.entrypoints import simulate
from pagedkv_widgets.limits import fraction_text

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # Chromium pages: slow too
ROOT = ".pkv-static[data-chapter=states]"

DRAWN_JS = """(root) => ({
  step: Number(root.querySelector("[data-role=scrub]").value),
  pool: Array.from(root.querySelector("[data-view=pool] canvas").pkvDrawn.owners),
  poolStep: root.querySelector("[data-view=pool] canvas").pkvDrawn.step,
  hbm: Object.fromEntries([...root.querySelectorAll("[data-view=hbm] rect[data-segment]")]
    .map((r) => [r.dataset.segment, Number(r.dataset.bytes)])),
  slots: root.querySelector("[data-view=slots] svg")?.getAttribute("aria-label")
    ?? root.querySelector("[data-view=slots] svg title")?.textContent,
  areas: root.querySelectorAll("[data-view=slots] polygon[data-slots]").length,
  caption: root.querySelector("[data-role=pool-caption]").textContent,
  heads: [...root.querySelectorAll("h4, h5, h6")].map((h) => h.textContent),
})"""

GOTO_JS = """([root, s]) => {
  const scrub = root.querySelector("[data-role=scrub]");
  scrub.value = String(s);
  scrub.dispatchEvent(new Event("input", { bubbles: true }));
}"""


def _small(requests, **options):
    """Chapter 9's runs on a 65,536-token KV pool, cut short (:func:`browser_support.cut_short`)."""
    return simulate(cut_short(requests), **{**options, "max_total_tokens": 65_536})


RUN_SHOWN_JS = """(root) => !root.querySelector("[data-role=status]").textContent"""


def _shows_the_run(page, root, run: dict) -> None:
    """At several steps of ``run`` (decoded), the HBM bar's state segments are its state slots
    times a slot's bytes, the slots view and the caption its counts, the KV pool's map its
    page owners, and a heading its state pool's size."""
    from pagedkv_widgets.page_decoding import owners_at
    from pagedkv_widgets.state_slots import slots_at

    meta, pages = run["meta"], run["pages"]
    series = pages["state_slots"]
    n = len(run["step"])
    for s in (0, 5, n // 3, 2 * n // 3, n - 1):
        page.evaluate(GOTO_JS, [root, s])
        got = page.evaluate(DRAWN_JS, root)
        assert got["step"] == got["poolStep"] == s
        assert got["pool"] == owners_at(pages, s).tolist()
        c = slots_at(series, s)
        for part in ("live", "track", "tree", "free"):
            assert got["hbm"][f"state_{part}"] == c[part] * meta["state_bytes"], (s, part)
        assert sum(got["hbm"].values()) == meta["gpu_memory_bytes"]
        assert got["slots"] == (f"state slots at step {s}: {c['live']} of running requests, "
                                f"{c['track']} track, {c['tree']} in the radix cache, "
                                f"{c['free']} free of {meta['mamba_slots']}")
        assert got["areas"] == 3
        assert f"of {meta['mamba_slots']:,} state slots: {c['live']:,} held by running" in got["caption"]
    assert any(f"{meta['mamba_slots']:,} slots" in h for h in got["heads"])


def test_the_bar_and_the_slots_view_show_the_runs_state_slots(tmp_path: Path) -> None:
    """The opening run, then a move of the GPU, the fraction and the page size: each shows its
    own run (pagedkv's, at that setting), the state pool included."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    from pagedkv_widgets import visualizer
    from pagedkv_widgets.catalog import CATALOG
    from pagedkv_widgets.chapters import resolve_settings
    from pagedkv_widgets.encoding import decode_run
    from pagedkv_widgets.scenes import SceneRunner

    html = visualizer("states", static=True, simulate=_small).data
    (tmp_path / "index.html").write_text(
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>states</title></head>'
        f"<body>{html}</body></html>", encoding="utf-8")
    settings = resolve_settings(CATALOG, "states")
    runner = SceneRunner(_small, CATALOG.workloads, CATALOG.defaults.model, CATALOG.defaults.gpu,
                         tp=dict(CATALOG.tp))
    run = decode_run(runner.run("card", settings, True))
    series = run["pages"]["state_slots"]
    assert max(series["live"]) > 1 and max(series["tree"]) > 0  # requests and the tree hold slots
    low = resolve_settings(CATALOG, "states").mem_fraction_static - 0.05
    # each move, from the setting before it: (control, value, the setting now shown, whether
    # the page moves another control back to the setting it holds)
    moves = [("gpu", "h100-sxm-80gb", replace(settings, gpu="h100-sxm-80gb"), False),
             ("mem_fraction_static", "0", replace(settings, mem_fraction_static=round(low, 2)), True),
             ("page_size", "2", replace(settings, mem_fraction_static=round(low, 2), page_size=256),
              False)]
    with serve(tmp_path) as url, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        page = browser.new_page(viewport={"width": 1200, "height": 1400})
        errors: list[str] = []
        outside: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        keep_local(page, outside)
        page.goto(f"{url}/index.html", wait_until="load")
        page.wait_for_function(f"() => document.querySelector('{ROOT} [data-view=slots] polygon')")
        root = page.locator(ROOT).element_handle()
        _shows_the_run(page, root, run)
        viz = page.locator(ROOT)
        # the view runs one model: its menu shows it but offers no choice (not operable)
        model = viz.locator("select[data-role=model]")
        assert model.locator("option").count() == 1 and model.is_disabled()
        for control, value, now, snapped in moves:
            if control == "gpu":
                viz.locator(f"select[data-role={control}]").select_option(value)
            else:
                viz.locator(f"input[data-role={control}]").fill(value)
            page.wait_for_function(RUN_SHOWN_JS, arg=root)
            assert ("moved with your" in viz.locator("[data-role=note]").inner_text()) == snapped
            name = viz.locator("[data-role=run-name]").inner_text()
            assert name.startswith(f"{CATALOG.hybrid_models[now.model]} on {CATALOG.gpus[now.gpu]} ·")
            assert f"mem_fraction_static {fraction_text(now.mem_fraction_static)} ·" in name
            assert f"pages of {now.page_size} ·" in name
            _shows_the_run(page, root, decode_run(runner.run("card", now, True)))
        browser.close()
    assert errors == [] and outside == []
