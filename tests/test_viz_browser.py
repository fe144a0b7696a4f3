"""The memory visualizer in the built book, driven in Chromium from 127.0.0.1.

Input: the built HTML book, ``_build/html`` at the repository root (or ``$PAGEDKV_BOOK_HTML``);
the tests skip when it is missing (CI builds the book first). Every request is intercepted:
anything not addressed to 127.0.0.1 is aborted and fails the test. Screenshots go to
``test-artifacts/``.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_support import ARTIFACTS, BOOK, CHROMIUM, FLAGS, keep_local, serve

pytestmark = pytest.mark.browser
# Console noise every Jupyter Book 1 page makes; failed loads are checked by URL instead.
BENIGN = ("THEBE_JS_URL", "invalid theme mode", "Failed to load resource")
BENIGN_404 = re.compile(r"favicon\.ico$|\.(woff2?|ttf|eot)(\?.*)?$")
VIZ = ".pkv-static[data-chapter=full]"


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
    pg.locator(f"{VIZ} [data-view=pool] svg").wait_for()
    pg.errors, pg.outside, pg.failed = errors, outside, failed
    yield pg
    ARTIFACTS.mkdir(exist_ok=True)
    pg.locator(VIZ).screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"))
    pg.close()


def _text(pg, role: str) -> str:
    return pg.locator(f"{VIZ} [data-role={role}]").first.inner_text()


def test_visualizer_renders_four_views(page):
    for view in ("hbm", "timeline", "pagetable", "pool"):
        assert page.locator(f"{VIZ} [data-view={view}] svg").count() == 1, view
    widths = page.locator(f"{VIZ} [data-view=hbm] rect[data-segment]").evaluate_all(
        "rs => rs.map(r => Number(r.getAttribute('width')))")
    bar = float(page.locator(f"{VIZ} [data-view=hbm] svg").get_attribute("width")) - 20
    assert len(widths) == 5 and sum(widths) == pytest.approx(bar, abs=0.01)
    assert "GiB = 2" in page.locator(VIZ).inner_text()


def test_mem_fraction_slider_changes_pool_size(page):
    slider = page.locator(f"{VIZ} input[data-role=mem_fraction_static]")
    before = (_text(page, "pool-size"), page.locator(f"{VIZ} [data-view=hbm]").inner_html())
    slider.fill("1")  # 0.55
    after = (_text(page, "pool-size"), page.locator(f"{VIZ} [data-view=hbm]").inner_html())
    assert after[0] != before[0] and after[1] != before[1]
    assert int(re.match(r"(\d+) pages", after[0]).group(1)) < int(
        re.match(r"(\d+) pages", before[0]).group(1))


def test_page_size_changes_page_table(page):
    page.locator(f"{VIZ} [data-role=scrub]").fill("20")
    table = page.locator(f"{VIZ} [data-view=pagetable]")
    before = table.inner_html()
    page.locator(f"{VIZ} input[data-role=page_size]").fill("2")  # 64 tokens
    assert table.inner_html() != before
    assert "× 64 tokens" in _text(page, "pool-size")


def test_play_advances_the_step(page):
    before = _text(page, "step-label")
    page.locator(f"{VIZ} [data-role=play]").click()
    page.wait_for_timeout(600)
    page.locator(f"{VIZ} [data-role=play]").click()  # pause
    after = _text(page, "step-label")
    assert int(after.split()[1]) > int(before.split()[1])
    page.locator(f"{VIZ} [data-role=step]").click()
    assert int(_text(page, "step-label").split()[1]) > int(after.split()[1])
    assert page.locator(f"{VIZ} [data-role=step-label]").get_attribute("aria-live") == "polite"


def test_no_console_errors_and_no_outside_requests(page):
    page.locator(f"{VIZ} select[data-role=model]").select_option(index=1)
    page.locator(f"{VIZ} [data-role=play]").click()
    page.wait_for_timeout(300)
    assert [e for e in page.errors if not any(b in e for b in BENIGN)] == []
    assert page.outside == []
    assert [url for url in page.failed if not BENIGN_404.search(url)] == []


def test_live_render_talks_to_the_kernel_through_the_model(browser, tmp_path):
    """anywidget's side of live mode: ``render`` draws the ``scene`` trait, a slider writes
    the ``settings`` trait, and a new ``scene`` redraws. A stand-in model replaces the
    kernel; the scenes come from the Python widget."""
    from pagedkv_widgets import visualizer
    from pagedkv_widgets.widget import STATIC

    widget = visualizer("paging", static=False, prefetch=False)
    first = {"config": widget.config, "settings": widget.settings, "scene": widget.scene}
    widget.settings = {**widget.settings, "page_size": 64}
    (tmp_path / "visualizer.js").write_text((STATIC / "visualizer.js").read_text())
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
        pg.locator("[data-view=pagetable] svg").wait_for()
        assert "× 16 tokens" in pg.locator("[data-role=pool-size]").inner_text()
        pg.locator("input[data-role=page_size]").fill("2")
        assert pg.evaluate("window.saved.at(-1).page_size") == 64
        assert "re-simulating" in pg.locator("[data-role=status]").inner_text()
        pg.evaluate("(scene) => window.push(scene)", widget.scene)
        assert "× 64 tokens" in pg.locator("[data-role=pool-size]").inner_text()
        assert pg.locator("[data-role=status]").inner_text() == ""
        # A setting the kernel cannot run: its reason, and the views greyed out, live too.
        widget.settings = {**widget.settings, "mem_fraction_static": 0.5}
        pg.evaluate("(scene) => window.push(scene)", widget.scene)
        assert "teaching pool holds 128 tokens" in pg.locator("[data-role=problem]").inner_text()
        assert pg.evaluate("document.querySelector('[data-part=pool]').inert")
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
    for sel in (".pkv-title", ".pkv-panel h4", "button[data-role=play]",
                "button[data-role=step]"):
        color = page.evaluate(f"getComputedStyle(document.querySelector('{VIZ} {sel}')).color")
        back = page.evaluate(
            f"(() => {{ let n = document.querySelector('{VIZ} {sel}'); let c;"
            " while (n && (c = getComputedStyle(n).backgroundColor) === 'rgba(0, 0, 0, 0)')"
            " n = n.parentElement; return c || 'rgb(255, 255, 255)'; })()")
        assert abs(lum(color) - lum(back)) > 0.4, (theme, sel, color, back, panel)


def test_visible_owners_have_distinct_colours(page):
    """Every request shown at a step has its own owner colour (no palette wrap-around)."""
    page.locator(f"{VIZ} [data-role=scrub]").fill("60")
    owners = page.evaluate(
        f"[...document.querySelectorAll('{VIZ} [data-view=pagetable] g')].map((g) =>"
        " [g.querySelector('title').textContent.split(' ')[0],"
        " g.querySelectorAll('rect')[1].style.fill])")
    per_row = dict(owners)
    assert len(per_row) >= 2
    assert len(set(per_row.values())) == len(per_row)


def _grey(page) -> dict[str, bool]:
    return page.evaluate(
        f"Object.fromEntries([...document.querySelectorAll('{VIZ} [data-view]')].map(v => [v.dataset.view,"
        " v.closest('[data-part]').classList.contains('pkv-off') && v.closest('[data-part]').inert]))")


def test_a_setting_that_cannot_run_says_why_and_leaves_no_stale_view(page):
    """Llama-3-8B's weights do not fit in half an RTX 4090: the reason and a value that works
    appear, the card views grey out (inert), the heading names the new setting, and a
    working setting brings everything back."""
    viz = page.locator(VIZ)
    viz.locator("select[data-role=model]").select_option("llama-3-8b")
    viz.locator("select[data-role=gpu]").select_option("rtx-4090")
    viz.locator("input[data-role=mem_fraction_static]").fill("0")  # 0.50
    problem = _text(page, "problem")
    assert "weights take 14.96 GiB" in problem and "Try mem_fraction_static 0.70 or more" in problem
    assert "Error" not in problem
    assert _grey(page) == {"hbm": True, "timeline": True, "pagetable": False, "pool": False}
    # No picture of the previous setting stays: the card's views are empty boxes.
    assert page.locator(f"{VIZ} [data-view=hbm] svg, {VIZ} [data-view=timeline] svg").count() == 0
    assert _text(page, "card-step") == ""
    assert "Llama-3-8B on RTX 4090 24GB · mem_fraction_static 0.50 · cannot run" in _text(
        page, "card-name")
    viz.locator("input[data-role=page_size]").fill("2")  # 64-token pages: the teaching pool too
    assert "teaching pool holds 128 tokens" in _text(page, "problem")
    assert all(_grey(page).values())
    assert page.locator(f"{VIZ} [data-role=play]").is_disabled()
    viz.locator("input[data-role=mem_fraction_static]").fill("4")  # 0.70: both run
    assert _text(page, "problem") == ""
    assert not any(_grey(page).values())
    assert "Llama-3-8B on RTX 4090 24GB · mem_fraction_static 0.7 ·" in _text(page, "card-name")
    assert "× 64 tokens" in _text(page, "pool-size")


def test_opens_on_a_busy_step_with_a_labelled_announced_step_control(page):
    scrub = page.locator(f"{VIZ} input[data-role=scrub]")
    assert int(scrub.input_value()) > 0  # not the empty pool of step 0
    assert scrub.evaluate("s => s.labels[0].textContent.trim()") == "step"
    assert scrub.get_attribute("aria-valuetext").startswith("step ")
    assert page.locator(f"{VIZ} [data-role=step-label]").get_attribute("aria-live") == "polite"
    assert page.locator(f"{VIZ} [data-role=prev-retract]").is_disabled()
    before = int(scrub.input_value())
    page.locator(f"{VIZ} [data-role=next-retract]").click()
    after = int(scrub.input_value())
    assert after > before and "retract" in _text(page, "pool-caption")
    page.locator(f"{VIZ} [data-role=step]").click()
    assert int(scrub.input_value()) == after + 1  # one sample
    fraction = page.locator(f"{VIZ} input[data-role=mem_fraction_static]")
    assert fraction.get_attribute("aria-valuetext") == "0.80"
    assert page.locator(f"{VIZ} input[data-role=page_size]").get_attribute(
        "aria-valuetext") == "16 tokens"
