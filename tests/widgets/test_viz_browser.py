"""The memory visualizer in the built book, driven in Chromium from 127.0.0.1.

Input: the built HTML book, ``_build/html`` at the repository root (or ``$PAGEDKV_BOOK_HTML``);
the tests skip when it is missing (CI builds the book first). Every request is intercepted:
anything not addressed to 127.0.0.1 is aborted and fails the test. Screenshots go to
``test-artifacts/``.

The views are checked against each other and against the run itself: what the page table
and the pool map painted (each canvas keeps it in ``canvas.pkvDrawn``, and their pixels are
compared too), the HBM bar's bytes, and the run simulated here in Python for the same
setting. Views fed by two different runs, or by the same run at two different steps, fail.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_support import ARTIFACTS, BOOK, CHROMIUM, FLAGS, keep_local, serve

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # Chromium pages: slow too
# Console noise every Jupyter Book 1 page makes; failed loads are checked by URL instead.
BENIGN = ("THEBE_JS_URL", "invalid theme mode", "Failed to load resource")
BENIGN_404 = re.compile(r"favicon\.ico$|\.(woff2?|ttf|eot)(\?.*)?$")
VIZ = ".pkv-static[data-chapter=full]"
FREE, CACHED, SHARED = -1, -2, -3

# Everything the views show at this moment, as the page drew it.
VIEWS_JS = """(root) => {
  const drawn = (v) => root.querySelector(`[data-view=${v}] canvas`).pkvDrawn;
  const pt = drawn("pagetable"), pool = drawn("pool");
  return {
    step: Number(root.querySelector("[data-role=scrub]").value),
    label: root.querySelector("[data-role=step-label]").textContent,
    tableStep: pt.step, poolStep: pool.step, rows: pt.rows,
    owners: Array.from(pool.owners),
    partial: [...pool.partial].map(([page, [rid, used]]) => [page, rid, used]),
    hbm: Object.fromEntries([...root.querySelectorAll("[data-view=hbm] rect[data-segment]")]
      .map((r) => [r.dataset.segment, Number(r.dataset.bytes)])),
  };
}"""

# The colour painted at the centre of cell (col, row) of a view's canvas, as [r, g, b].
PIXEL_JS = """([root, view, col, row]) => {
  const c = root.querySelector(`[data-view=${view}] canvas`), d = c.dataset;
  const x = Number(d.gutter) + (col + 0.5) * Number(d.cw) - Number(d.scrollX);
  const y = (row + 0.5) * Number(d.ch) - Number(d.scrollY);
  const k = window.devicePixelRatio || 1;
  const pixel = c.getContext("2d").getImageData(Math.floor(x * k), Math.floor(y * k), 1, 1);
  return Array.from(pixel.data.slice(0, 3));
}"""


def _visualizer_page() -> Path | None:
    """The first page of the built book that holds the full visualizer."""
    if not BOOK.is_dir():
        return None
    for page in sorted(BOOK.rglob("*.html")):
        if 'class="pkv-static" data-chapter="full"' in page.read_text(errors="ignore"):
            return page
    return None


@pytest.fixture(scope="module")
def page_url() -> Iterator[str]:
    page = _visualizer_page()
    if page is None:
        pytest.skip(f"no built book with the full visualizer under {BOOK} (build the book first)")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with serve(BOOK) as url:
        yield f"{url}/{page.relative_to(BOOK).as_posix()}"


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory):
    sync_api = pytest.importorskip("playwright.sync_api")
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=FLAGS,
            viewport={"width": 1200, "height": 1400})
        yield context
        context.close()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def run():
    """The run the chapter opens on, simulated here: what the views must show."""
    from pagedkv_widgets.facts import chapter_run

    return chapter_run("full")


@pytest.fixture
def page(browser, page_url, request):
    """The visualizer page, loaded, with console errors and outside requests recorded."""
    pg = browser.new_page()
    errors: list[str] = []
    outside: list[str] = []
    failed: list[str] = []
    pg.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: errors.append(str(e)))
    keep_local(pg, outside)
    pg.goto(page_url, wait_until="load")
    pg.locator(f"{VIZ} [data-view=pool] canvas").wait_for()
    pg.wait_for_function(f"() => document.querySelector('{VIZ} [data-view=pool] canvas').pkvDrawn")
    pg.errors, pg.outside, pg.failed = errors, outside, failed
    yield pg
    ARTIFACTS.mkdir(exist_ok=True)
    pg.locator(VIZ).screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"))
    pg.close()


def _text(pg, role: str) -> str:
    return pg.locator(f"{VIZ} [data-role={role}]").first.inner_text()


def _views(pg) -> dict:
    return pg.locator(VIZ).evaluate(VIEWS_JS)


def _settled(pg) -> None:
    """Wait until the run for the current setting is shown (it may be fetched first)."""
    pg.wait_for_function(f"() => !document.querySelector('{VIZ} [data-role=status]').textContent")


def _jump(pg, kind: str, direction: str = "next") -> None:
    pg.locator(f"{VIZ} select[data-role=jump]").select_option(kind)
    pg.locator(f"{VIZ} [data-role={direction}-event]").click()


def _one_run_one_step(views: dict, run: dict) -> None:
    """Every view shows ``run`` at the step the step control is on."""
    from pagedkv_widgets.page_decoding import owners_at, rows_at

    s = views["step"]
    assert views["tableStep"] == views["poolStep"] == s
    assert views["label"].startswith(f"step {s:,} of {len(run['step']) - 1:,}")
    meta, p = run["meta"], run["meta"]["page_size"]
    owners = views["owners"]
    # the page table's rows are the run's rows at this step
    want = rows_at(run["pages"], s)
    assert {r["rid"]: (r["tokens"], r["pages"]) for r in views["rows"]} == want
    # the pool map's owners are the run's owners at this step
    assert owners == owners_at(run["pages"], s).tolist()
    # the pages the pool map paints as request r's are the own part of r's row
    for row in views["rows"]:
        own = {page for page, o in enumerate(owners) if o == row["rid"]}
        assert own == {page for page, o in zip(row["pages"], row["owners"], strict=True) if o == row["rid"]}
        assert all(owners[page] in (row["rid"], SHARED) for page in row["pages"])
    held = {page for page, o in enumerate(owners) if o >= 0}
    assert held == {page for row in views["rows"] for page, o in zip(row["pages"], row["owners"], strict=True)
                    if o >= 0}
    # partly written last pages: where the rows say
    assert sorted(views["partial"]) == sorted(
        [r["pages"][-1], r["rid"], r["tokens"] - (len(r["pages"]) - 1) * p] for r in views["rows"]
        if r["tokens"] % p)
    # the HBM bar: the rows' tokens in use, the pool map's cached pages, the trace's columns
    cell = meta["cell_size"]
    tokens = sum(r["tokens"] for r in views["rows"])
    assert tokens == run["tokens_used"][s]
    assert views["hbm"]["kv_used"] == min(tokens * cell, meta["kv_pool_bytes"])
    cached = owners[1:].count(CACHED) * p
    assert cached == run["tokens_evictable"][s]
    assert views["hbm"]["kv_cached"] == min(cached * cell, meta["kv_pool_bytes"] - views["hbm"]["kv_used"])
    assert owners[1:].count(FREE) * p == run["tokens_free"][s]
    assert owners[1:].count(SHARED) * p == run["tokens_protected"][s]


def test_all_views_show_one_run_at_one_step(page, run):
    _settled(page)
    assert _views(page)["step"] == run["open"]
    _one_run_one_step(_views(page), run)
    for kind in ("retract", "finish", "evict", "admit"):
        _jump(page, kind)
        _one_run_one_step(_views(page), run)
    for step in (1, len(run["step"]) // 3, len(run["step"]) - 1):
        page.locator(f"{VIZ} [data-role=scrub]").fill(str(step))
        views = _views(page)
        assert views["step"] == step
        _one_run_one_step(views, run)


def _pixel(pg, view: str, col: int, row: int) -> list[int]:
    return pg.evaluate(f"a => ({PIXEL_JS})([document.querySelector('{VIZ}'), ...a])", [view, col, row])


@pytest.mark.parametrize("gpu", ["rtx-4090", "h100-sxm-80gb"])  # cells of ~9 px, and of 2 px
def test_both_canvases_paint_a_page_in_its_owners_colour(page, gpu):
    """The pixels: a request's own page is painted in the same colour in its page-table row
    and in the pool map, and in a colour no other row shown has."""
    page.locator(f"{VIZ} select[data-role=gpu]").select_option(gpu)
    _settled(page)
    views = _views(page)
    geometry = page.locator(f"{VIZ} [data-view=pool] canvas").evaluate(
        "c => [Number(c.dataset.cols), c.height / (window.devicePixelRatio || 1) / Number(c.dataset.ch)]")
    cols, visible_rows = geometry
    colours = {}
    for r, row in enumerate(views["rows"][:6]):
        k, page_id = next((k, pg) for k, (pg, o) in enumerate(zip(row["pages"], row["owners"], strict=True))
                          if o == row["rid"] and pg // cols < visible_rows - 1 and k < len(row["pages"]) - 1)
        in_table = _pixel(page, "pagetable", k, r)
        in_pool = _pixel(page, "pool", page_id % cols, page_id // cols)
        assert in_table == in_pool, (row["rid"], page_id, in_table, in_pool)
        colours[row["rid"]] = tuple(in_table)
    assert len(set(colours.values())) == len(colours) >= 2


def test_retraction_step_frees_exactly_the_victims_own_pages(page, run):
    from pagedkv_widgets.facts import retraction_facts

    fact = retraction_facts(run, 0)
    _jump(page, "retract")
    after = _views(page)
    assert after["step"] == fact.step and "retract × 1" in after["label"]
    page.locator(f"{VIZ} [data-role=back]").click()
    before = _views(page)
    assert before["step"] == fact.step - 1
    victim = next(r for r in before["rows"] if r["rid"] == fact.rid)
    own = [p for p, o in zip(victim["pages"], victim["owners"], strict=True) if o == fact.rid]
    shared = [p for p, o in zip(victim["pages"], victim["owners"], strict=True) if o == SHARED]
    assert (len(own), len(shared), victim["tokens"]) == (fact.own, fact.shared, fact.tokens)
    assert fact.rid not in {r["rid"] for r in after["rows"]}
    assert fact.rid not in after["owners"]
    # the victim's own pages left it and nobody else's pages were taken from them: a page
    # another request held before is still that request's (or freed by its finish)
    for page_id, o in enumerate(before["owners"]):
        if o >= 0 and o != fact.rid:
            assert after["owners"][page_id] in (o, FREE, CACHED), page_id
    assert all(after["owners"][p] != fact.rid for p in own)
    # its tokens left the HBM bar's "in use"
    finished = {rid for s, rid in run["events"].get("finish", []) if s == fact.step}
    grew = sum(1 for r in before["rows"] if r["rid"] != fact.rid and r["rid"] not in finished)
    gone = sum(r["tokens"] for r in before["rows"] if r["rid"] in finished)
    assert (after["hbm"]["kv_used"] - before["hbm"]["kv_used"]) // run["meta"]["cell_size"] == (
        grew - victim["tokens"] - gone + sum(r["tokens"] for r in after["rows"]
                                             if r["rid"] not in {x["rid"] for x in before["rows"]}))


def test_the_step_control_moves_one_scheduler_step(page, run):
    scrub = page.locator(f"{VIZ} input[data-role=scrub]")
    assert scrub.get_attribute("max") == str(len(run["step"]) - 1)
    start = int(scrub.input_value())
    page.locator(f"{VIZ} [data-role=step]").click()
    page.locator(f"{VIZ} [data-role=step]").click()
    assert int(scrub.input_value()) == start + 2
    page.locator(f"{VIZ} [data-role=back]").click()
    assert _views(page)["step"] == start + 1
    _one_run_one_step(_views(page), run)


def test_visualizer_renders_four_views(page):
    for view in ("hbm", "timeline"):
        assert page.locator(f"{VIZ} [data-view={view}] svg").count() == 1, view
    for view in ("pagetable", "pool"):
        assert page.locator(f"{VIZ} [data-view={view}] canvas").count() == 1, view
    widths = page.locator(f"{VIZ} [data-view=hbm] rect[data-segment]").evaluate_all(
        "rs => rs.map(r => Number(r.getAttribute('width')))")
    bar = float(page.locator(f"{VIZ} [data-view=hbm] svg").get_attribute("width")) - 20
    assert len(widths) == 6 and sum(widths) == pytest.approx(bar, abs=0.01)
    assert "GiB = 2" in page.locator(VIZ).inner_text()
    assert "SGLang 0.5.23's scheduler" in _text(page, "run-name")
    # every row of event marks inside the timeline's drawing (they were cut off at its edge)
    height, bottoms = page.locator(f"{VIZ} [data-view=timeline] svg").evaluate(
        "svg => [svg.viewBox.baseVal.height, [...svg.querySelectorAll('[data-marks]')]"
        ".map(m => m.getBBox()).filter(b => b.height).map(b => b.y + b.height)]")
    assert bottoms and max(bottoms) <= height


def test_zoom_and_hover_read_a_page(page):
    pool = page.locator(f"{VIZ} [data-view=pool]")
    canvas = pool.locator("canvas")
    cw = float(canvas.get_attribute("data-cw"))
    pool.locator("[data-role=zoom-in]").click()
    pool.locator("[data-role=zoom-in]").click()
    assert pool.locator("[data-role=zoom]").inner_text() == "×4"
    assert float(canvas.get_attribute("data-cw")) == 4 * cw
    canvas.hover(position={"x": 5 * 4 * cw + 3, "y": 3})
    assert re.match(r"page 5: .*", pool.locator("[data-role=inspect]").inner_text())
    table = page.locator(f"{VIZ} [data-view=pagetable]")
    table.locator("canvas").focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowLeft")
    text = table.locator("[data-role=inspect]").inner_text()
    assert re.match(r"request \d+, logical page 0 → physical page \d+: \d+ of 16 tokens", text), text


def test_mem_fraction_slider_changes_the_run(page):
    slider = page.locator(f"{VIZ} input[data-role=mem_fraction_static]")
    before = (_text(page, "run-name"), page.locator(f"{VIZ} [data-view=hbm]").inner_html())
    slider.fill("0")  # 0.50
    _settled(page)
    after = (_text(page, "run-name"), page.locator(f"{VIZ} [data-view=hbm]").inner_html())
    assert after[0] != before[0] and after[1] != before[1]
    pools = [int(re.search(r"([\d,]+)-token pool", t).group(1).replace(",", ""))
             for t in (before[0], after[0])]
    assert pools[1] < pools[0]
    assert len(_views(page)["owners"]) == pools[1] // 16 + 1


def test_play_advances_the_step(page):
    before = int(page.locator(f"{VIZ} [data-role=scrub]").input_value())
    page.locator(f"{VIZ} [data-role=play]").click()
    page.wait_for_timeout(600)
    page.locator(f"{VIZ} [data-role=play]").click()  # pause
    after = int(page.locator(f"{VIZ} [data-role=scrub]").input_value())
    assert after > before
    assert page.locator(f"{VIZ} [data-role=step-label]").get_attribute("aria-live") == "polite"


def test_no_console_errors_and_no_outside_requests(page):
    page.locator(f"{VIZ} select[data-role=model]").select_option(index=1)
    _settled(page)
    page.locator(f"{VIZ} [data-role=play]").click()
    page.wait_for_timeout(300)
    assert [e for e in page.errors if not any(b in e for b in BENIGN)] == []
    assert page.outside == []
    assert [url for url in page.failed if not BENIGN_404.search(url)] == []


def test_only_the_opening_run_is_in_the_page(page, page_url):
    """The other settings' runs are files of their own, fetched when asked for."""
    html = (BOOK / page_url.split("/", 3)[3]).read_text()
    assert html.count("data-pkv-inline>") == 1
    assert html.count('data-src="') == html.count('data-pkv-run="') - 1 > 0
    fetched = page.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
    assert not [u for u in fetched if "/_pkv/" in u]  # nothing fetched before the reader asks
    page.locator(f"{VIZ} select[data-role=workload]").select_option("calm")
    _settled(page)
    fetched = page.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
    assert [u for u in fetched if "/_pkv/" in u]


def test_live_render_talks_to_the_kernel_through_the_model(browser, tmp_path):
    """anywidget's side of live mode: ``render`` draws the ``scene`` trait, a slider writes
    the ``settings`` trait, and a new ``scene`` redraws. A stand-in model replaces the
    kernel; the scenes come from the Python widget."""
    from pagedkv_widgets import visualizer
    from pagedkv_widgets.widget import esm

    widget = visualizer("paging", static=False, prefetch=False)
    first = {"config": widget.config, "settings": widget.settings, "scene": widget.scene}
    widget.settings = {**widget.settings, "page_size": 64}
    (tmp_path / "visualizer.js").write_text(esm())
    (tmp_path / "index.html").write_text(
        '<!doctype html><meta charset="utf-8"><div id="el"></div><script type="module">'
        'import widget from "./visualizer.js";'
        f"const traits = {json.dumps(first)}, handlers = {{}};"
        "window.saved = [];"
        "const model = {get: (k) => traits[k], set: (k, v) => { traits[k] = v; },"
        " save_changes: () => window.saved.push(traits.settings),"
        " on: (e, f) => { handlers[e] = f; }, off: () => {}};"
        "window.push = (scene) => { traits.scene = scene; handlers['change:scene'](); };"
        'widget.render({model, el: document.getElementById("el")});</script>')
    pg = browser.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    with serve(tmp_path) as url:
        pg.goto(f"{url}/index.html")
        pg.wait_for_timeout(500)
        assert errors == []
        pg.locator("[data-view=pagetable] canvas").wait_for()
        assert "× 16 tokens" in pg.locator("[data-role=pool-size]").inner_text()
        pg.locator("input[data-role=page_size]").fill("2")
        assert pg.evaluate("window.saved.at(-1).page_size") == 64
        assert "re-simulating" in pg.locator("[data-role=status]").inner_text()
        pg.evaluate("(scene) => window.push(scene)", widget.scene)
        assert "× 64 tokens" in pg.locator("[data-role=pool-size]").inner_text()
        assert pg.locator("[data-role=status]").inner_text() == ""
        # A run the kernel cannot make: its reason, and the views greyed out, live too.
        failed = visualizer("memory", model="llama-3-8b", gpu="rtx-4090", mem_fraction_static=0.5,
                            static=False, prefetch=False).scene["card"]
        pg.evaluate("(scene) => window.push(scene)", {"card": None, "pool": failed})
        assert "weights take 14.96 GiB" in pg.locator("[data-role=problem]").inner_text()
        assert pg.evaluate("document.querySelector('[data-part]').inert")
        assert errors == []
    pg.close()


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_text_and_buttons_readable_in_both_themes(page, theme):
    """The book theme's dark toggle must not put light text on the light panel."""
    page.evaluate(f"document.documentElement.dataset.theme = '{theme}';"
                  f"document.documentElement.dataset.mode = '{theme}'")

    def lum(css: str) -> float:
        r, g, b = (int(x) for x in re.findall(r"\d+", css)[:3])
        return (0.299 * r + 0.587 * g + 0.114 * b) / 255

    panel = page.evaluate(f"getComputedStyle(document.querySelector('{VIZ} .pkv-mount'))"
                          ".backgroundColor")
    for sel in (".pkv-title", ".pkv-panel h3", "button[data-role=play]",
                "button[data-role=step]", "[data-role=zoom-in]", ".pkv-inspect"):
        color = page.evaluate(f"getComputedStyle(document.querySelector('{VIZ} {sel}')).color")
        back = page.evaluate(
            f"(() => {{ let n = document.querySelector('{VIZ} {sel}'); let c;"
            " while (n && (c = getComputedStyle(n).backgroundColor) === 'rgba(0, 0, 0, 0)')"
            " n = n.parentElement; return c || 'rgb(255, 255, 255)'; })()")
        assert abs(lum(color) - lum(back)) > 0.4, (theme, sel, color, back, panel)


def _grey(page) -> bool:
    return page.evaluate(f"(() => {{ const p = document.querySelector('{VIZ} [data-part]');"
                         " return p.classList.contains('pkv-off') && p.inert; })()")


def test_a_setting_that_cannot_run_says_why_and_leaves_no_stale_view(page):
    """Llama-3-8B's weights do not fit in half an RTX 4090: the reason and a value that works
    appear, the views grey out (inert), the heading names the new setting, and a working
    setting brings everything back."""
    viz = page.locator(VIZ)
    scrub = viz.locator("input[data-role=scrub]")
    viz.locator("select[data-role=model]").select_option("llama-3-8b")
    viz.locator("select[data-role=gpu]").select_option("rtx-4090")
    _settled(page)
    place = int(scrub.input_value()) / int(scrub.get_attribute("max"))
    assert place > 0
    viz.locator("input[data-role=mem_fraction_static]").fill("0")  # 0.50
    _settled(page)
    problem = _text(page, "problem")
    # the fixes it names are settings the page holds (0.70 runs, but is not precomputed)
    assert "weights take 14.96 GiB" in problem and "Try mem_fraction_static 0.80 or more" in problem
    assert "Error" not in problem
    assert _grey(page)
    # No picture of the previous setting stays: the card's views are empty boxes.
    assert page.locator(f"{VIZ} [data-view=hbm] svg, {VIZ} [data-view=timeline] svg").count() == 0
    blank = "c => c.height <= 40 * (window.devicePixelRatio || 1)"  # nothing of the old run
    assert page.locator(f"{VIZ} [data-view=pool] canvas").evaluate(blank)
    assert _text(page, "card-step") == ""
    assert ("Llama-3-8B on RTX 4090 24GB · mem_fraction_static 0.50 · overlap loop · cannot run"
            in _text(page, "run-name"))
    assert page.locator(f"{VIZ} [data-role=play]").is_disabled()
    viz.locator("input[data-role=mem_fraction_static]").fill("3")  # 0.80: runs
    _settled(page)
    assert _text(page, "problem") == ""
    assert not _grey(page)
    assert "Llama-3-8B on RTX 4090 24GB · mem_fraction_static 0.80 ·" in _text(page, "run-name")
    # The same point of the run as before the setting that could not run (it was step 0,
    # the empty pool, and stayed there through every later change), and the views at it.
    last = int(scrub.get_attribute("max"))
    assert int(scrub.input_value()) == round(place * last) > 0
    _one_run_one_step_shown(page)
    viz.locator("select[data-role=workload]").select_option("calm")
    _settled(page)
    # Llama-3-8B at calm is not precomputed: the model goes back to the one the page holds
    assert "model Qwen3-4B moved with your workload" in _text(page, "note")
    assert viz.locator("select[data-role=model]").input_value() == "qwen3-4b"
    last = int(scrub.get_attribute("max"))
    assert abs(int(scrub.input_value()) - round(place * last)) <= 1 and int(scrub.input_value()) > 0
    _one_run_one_step_shown(page)


def test_the_page_size_control_pages_the_run_itself(page):
    """Page size 64 and 1 are runs of their own: the pool's pages, the rows' cells and every
    view follow; a move the page does not hold brings the page size back, and says so."""
    from pagedkv_widgets.facts import chapter_run

    size = page.locator(f"{VIZ} input[data-role=page_size]")
    assert size.get_attribute("aria-valuetext") == "16 tokens"
    for position, p in (("2", 64), ("0", 1)):
        size.fill(position)
        _settled(page)
        run = chapter_run("full", page_size=p)
        assert f"pages of {p} ·" in _text(page, "run-name")
        assert len(_views(page)["owners"]) == run["meta"]["num_pages"] + 1
        _one_run_one_step(_views(page), run)
        _jump(page, "finish")
        _one_run_one_step(_views(page), run)
    page.locator(f"{VIZ} select[data-role=gpu]").select_option("h100-sxm-80gb")
    _settled(page)
    assert size.get_attribute("aria-valuetext") == "16 tokens"
    assert "page size 16 tokens moved with your GPU" in _text(page, "note")
    assert "H100 SXM 80GB" in _text(page, "run-name") and "pages of 16 ·" in _text(page, "run-name")
    size.fill("2")  # 64 at the H100: the GPU goes back to the one the page holds
    _settled(page)
    assert "RTX 4090" in _text(page, "run-name") and "pages of 64 ·" in _text(page, "run-name")


def _one_run_one_step_shown(pg) -> None:
    """The views and the readout show the step the step control is on."""
    views = _views(pg)
    assert views["tableStep"] == views["poolStep"] == views["step"]
    assert views["label"].startswith(f"step {views['step']:,} of ")


def test_on_a_phone_the_controls_stay_in_sight_of_the_views(browser, page_url):
    """On a 390 px phone the visualizer is two screens tall: with the pool map or the page
    table in sight, the controls that change them are on the same screen (they stick under
    the book's header), and leave most of it to the view."""
    pg = browser.new_page()
    pg.set_viewport_size({"width": 390, "height": 844})
    pg.goto(page_url, wait_until="load")
    pg.wait_for_function(f"() => document.querySelector('{VIZ} [data-view=pool] canvas')?.pkvDrawn")
    for view in ("pagetable", "pool"):
        pg.locator(f"{VIZ} [data-view={view}] canvas").evaluate("c => c.scrollIntoView({block: 'end'})")
        pg.wait_for_timeout(100)
        seen = pg.evaluate(f"""() => {{
          const box = (sel) => document.querySelector('{VIZ} ' + sel).getBoundingClientRect();
          const control = box('input[data-role=mem_fraction_static]'), sticky = box('.pkv-sticky');
          const view = box('[data-view={view}] canvas');
          return {{top: control.top, bottom: control.bottom, screen: innerHeight, sticky: sticky.height,
                   shown: Math.min(view.bottom, innerHeight) - Math.max(view.top, sticky.bottom)}};
        }}""")
        assert seen["top"] >= 0 and seen["bottom"] <= seen["screen"], (view, seen)
        assert seen["shown"] >= 120, (view, seen)
        assert seen["sticky"] <= 0.5 * seen["screen"], (view, seen)
    # the default pool's pages are cells of 6 px or more on a phone (they were 4)
    cell = float(pg.locator(f"{VIZ} [data-view=pool] canvas").get_attribute("data-cw"))
    assert cell >= 6, cell
    # each id once on the page (the HBM bar and the timeline each defined one hatch pattern)
    ids = pg.evaluate("[...document.querySelectorAll('[id]')].map(e => e.id)")
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)[:5]
    ARTIFACTS.mkdir(exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / "phone-visualizer-pool.png"))
    pg.close()


def test_opens_before_the_first_retraction_with_labelled_announced_controls(page, run):
    scrub = page.locator(f"{VIZ} input[data-role=scrub]")
    first = run["events"]["retract"][0][0]
    assert 0 < int(scrub.input_value()) < first  # not the empty pool of step 0
    assert scrub.evaluate("s => s.labels[0].textContent.trim()") == "step"
    assert scrub.get_attribute("aria-valuetext").startswith("step ")
    assert page.locator(f"{VIZ} [data-role=step-label]").get_attribute("aria-live") == "polite"
    page.locator(f"{VIZ} select[data-role=jump]").select_option("retract")
    assert page.locator(f"{VIZ} [data-role=next-event]").get_attribute("aria-label") == "next retraction"
    assert page.locator(f"{VIZ} [data-role=prev-event]").is_disabled()
    page.locator(f"{VIZ} [data-role=next-event]").click()
    assert int(scrub.input_value()) == first and "retract × 1" in _text(page, "pool-caption")
    fraction = page.locator(f"{VIZ} input[data-role=mem_fraction_static]")
    assert fraction.get_attribute("aria-valuetext") == "0.80"


AHEAD_JS = """(root) => {
  const drawn = (v) => root.querySelector(`[data-view=${v}] canvas`).pkvDrawn;
  const pool = drawn("pool"), pt = drawn("pagetable");
  return {step: pool.step, ahead: [...pool.ahead].map(([page, [a, b]]) => [page, a, b]),
          rows: pt.rows.map((r) => [r.rid, r.ahead, r.unseen]),
          label: root.querySelector("[data-view=pool] canvas").getAttribute("aria-label")};
}"""


def _expected_ahead(run: dict, s: int) -> list[list[int]]:
    """``[page, first, end)`` token offsets of every slot allocated ahead after step ``s``."""
    from pagedkv_widgets.in_flight_encoding import ahead_at
    from pagedkv_widgets.page_decoding import rows_at

    p, rows, out = run["meta"]["page_size"], rows_at(run["pages"], s), []
    for rid, n in ahead_at(run["pages"], s).items():
        tokens, pages = rows[rid]
        start = tokens - n
        out += [[pages[k], max(0, start - k * p), min(p, tokens - k * p)]
                for k in range(start // p, len(pages))]
    return sorted(out)


def test_the_loop_control_and_the_slots_allocated_ahead(page, run):
    """The page opens on SGLang's default overlap loop: after a decode step every running
    request's last slot is allocated ahead, marked in both views where the run says, in the
    legend and in the canvases' text; the normal loop (--disable-overlap-schedule) is a run
    of its own with nothing ahead."""
    from pagedkv_widgets.facts import chapter_run
    from pagedkv_widgets.in_flight_encoding import ahead_at

    loop = page.locator(f"{VIZ} select[data-role=loop]")
    assert loop.input_value() == "overlap"
    assert "--disable-overlap-schedule" in loop.locator("option[value=normal]").inner_text()
    assert "overlap loop" in _text(page, "run-name")
    drawn = page.locator(VIZ).evaluate(AHEAD_JS)
    s = drawn["step"]
    want = ahead_at(run["pages"], s)
    assert run["kind"][s] == "decode" and want and set(want.values()) == {1}
    assert sorted(drawn["ahead"]) == _expected_ahead(run, s)
    assert {rid: n for rid, n, _ in drawn["rows"] if n} == want
    assert f"{len(want)} of them hold slots allocated ahead" in drawn["label"]
    assert f"overlap loop: {len(want)} slots of {len(want)} requests allocated ahead" in _text(
        page, "pool-caption")
    assert "allocated ahead" in page.locator(f"{VIZ} .pkv-legend-row").last.inner_text()
    _jump(page, "finish")  # the finish is seen a step after the GPU sampled the last token
    step = _views(page)["step"]
    seen = [rid for t, rid in run["events"]["finish"] if t == step]
    page.locator(f"{VIZ} [data-role=back]").click()
    drawn = page.locator(VIZ).evaluate(AHEAD_JS)
    assert drawn["step"] == step - 1 and seen
    assert sorted(rid for rid, _, unseen in drawn["rows"] if unseen) == sorted(seen)
    loop.select_option("normal")
    _settled(page)
    normal = chapter_run("full", loop="normal")
    assert "normal loop" in _text(page, "run-name")
    _one_run_one_step(_views(page), normal)
    drawn = page.locator(VIZ).evaluate(AHEAD_JS)
    assert drawn["ahead"] == [] and not any(n or u for _, n, u in drawn["rows"])
    assert "normal loop: every slot is written by the end of its step" in _text(page, "pool-caption")
    assert not page.errors
