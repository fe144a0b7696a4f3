"""Every page of the built book as a reader gets it, in a real Chromium from 127.0.0.1: no
sideways scroll on a 390 px phone, figures readable there, page weights (at most 2.5 MB
transferred, plotly.js included; no blocking script over 1 MB), no console error and no
failed request (a first visit too), no serious or critical axe-core violation at 390 px and
1280 px, controls at least 24 px tall, keyboard operation of every control, WCAG AA contrast
of every text item in both themes, a caption under every figure, math without stray
backslashes, labelled log axes, figures in the dark theme.

Each page is opened afresh (an empty cache, so what it transfers is what it needs) once for each
width and theme a test asks for, and the tests that only read a page share that one load: the
tests run page by page (``name`` is parametrized at module scope, so pytest groups them by
page), the weight test first on its load, and the keyboard test, which operates every control,
last. About two minutes on two cores.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser_support import (
    ARTIFACTS,
    AXE_JS,
    BOOK,
    CHROMIUM,
    FLAGS,
    SETTLED_JS,
    axe_violations,
    chapter_pages,
    keep_local,
    serve,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # Chromium pages: slow too

PAGES = chapter_pages() if (BOOK / "book").is_dir() else []
CONTRAST_JS = (Path(__file__).parent / "contrast.js").read_text()
MB = 1_000_000
# A page's HTML; all it transfers, plotly.js included, from a host that gzips text (as the
# test server does, browser_support.QuietHandler); all it transfers once unpacked.
MAX_HTML, MAX_PAGE, MAX_UNPACKED = 1 * MB, 2.5 * MB, 4.5 * MB
MAX_BLOCKING = 1 * MB  # a script that holds up the page (not defer, async or a module)
MIN_CONTROL_PX = 24  # WCAG 2.5.8's target size, as a height


@pytest.fixture(scope="module")
def site():
    if not PAGES:
        pytest.skip(f"no built book under {BOOK} (build the book first)")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with serve(BOOK) as url:
        yield url


@pytest.fixture(scope="module")
def chromium():
    """``chromium()``: the module's browser, launched again if it has died since the last
    test, so that a browser lost mid-run fails the test it was lost in, not every test after
    it (each would otherwise report only "Target page, context or browser has been closed")."""
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        browsers = []

        def connected():
            if not browsers or not browsers[-1].is_connected():
                browsers.append(p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                                  args=FLAGS))
            return browsers[-1]

        yield connected
        for browser in browsers:
            if browser.is_connected():
                browser.close()


@pytest.fixture(scope="module")
def load(site, chromium):
    """``load(page, width, theme)``: the page loaded and drawn in a fresh context (empty cache)
    with the theme chosen as a reader would (pydata-sphinx-theme keeps it in localStorage;
    ``theme=None``: a first visit, nothing chosen), or the same page again if a test of this
    page has asked for it at that width and theme already. Moving on to another page closes
    the last one's. ``page.errors``: uncaught errors and console errors; ``page.failed``:
    requests answered 400 or worse; ``page.outside``: requests to other hosts."""
    opened: dict[tuple[str, int, str | None], object] = {}

    def close_all():
        for page in opened.values():
            context = page.context
            if context.browser is not None and context.browser.is_connected():  # else gone with it
                context.close()
        opened.clear()

    def open_page(name: str, width: int = 1280, theme: str | None = "light"):
        if any(key[0] != name for key in opened):
            close_all()
        page = opened.get((name, width, theme))
        if page is not None and page.context.browser.is_connected():
            return page
        context = chromium().new_context(viewport={"width": width, "height": 900})
        if theme:
            context.add_init_script(f"localStorage.setItem('mode', '{theme}');"
                                    f"localStorage.setItem('theme', '{theme}');")
        page = context.new_page()
        page.outside, page.errors, page.failed = [], [], []
        page.on("pageerror", lambda e: page.errors.append(str(e)))
        page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
        page.on("response", lambda r: page.failed.append(r.url) if r.status >= 400 else None)
        keep_local(page, page.outside)
        page.goto(f"{site}/{name}", wait_until="load")
        page.evaluate(SETTLED_JS)
        opened[(name, width, theme)] = page
        return page

    yield open_page
    close_all()


def by_page(test):
    """Parametrize ``test`` over the book's pages at module scope: pytest then runs every test
    of one page before the next page's, and the tests of a page share its loads."""
    return pytest.mark.parametrize("name", PAGES, scope="module")(test)


@by_page
def test_phone_no_sideways_scroll_and_readable_figures(load, name):
    page = load(name, width=390)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390, "page wider than 390 px"
    # Plotly figures: a plot area that is not crushed, the legend under it.
    for w, h, legend_y, orient in page.evaluate(
            "[...document.querySelectorAll('.js-plotly-plot')].map(g => [g._fullLayout._size.w,"
            " g._fullLayout._size.h, g._fullLayout.legend?.y, g._fullLayout.legend?.orientation])"):
        assert w >= 200 and h >= 100, (name, w, h)
        assert legend_y is None or (orient == "h" and legend_y <= 0), (name, legend_y, orient)
    # Every SVG text (figures and visualizer), and each styled run in it, at 11 px or more
    # as drawn.
    small = page.evaluate(
        "[...document.querySelectorAll('svg text, svg tspan')].filter(t => t.textContent.trim() &&"
        " t.checkVisibility()).map(t => [t.textContent.trim().slice(0, 30),"
        " parseFloat(getComputedStyle(t).fontSize) * (t.getScreenCTM()?.a || 1)])"
        ".filter(([, px]) => px < 10.95)")
    assert small == [], (name, small[:10])
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"phone-{Path(name).stem}.png"), full_page=True)


@by_page
def test_page_weight_what_it_loads_captions_math_and_log_axes(load, name):
    assert (BOOK / name).stat().st_size <= MAX_HTML, "HTML over 1 MB"
    page = load(name)
    entries = page.evaluate(
        "[performance.getEntriesByType('navigation')[0], ...performance.getEntriesByType('resource')]"
        ".map(e => [e.name, e.transferSize, e.decodedBodySize])")
    sizes = [(url, size) for url, size, _ in entries]
    total, unpacked = sum(size for _, size in sizes), sum(d for *_, d in entries)
    assert total <= MAX_PAGE, (name, total, sorted(sizes, key=lambda s: -s[1])[:5])
    assert unpacked <= MAX_UNPACKED, (name, unpacked)
    blocking = page.evaluate(
        "[...document.querySelectorAll('script[src]')].filter(s => !s.defer && !s.async &&"
        " s.type !== 'module').map(s => s.src)")
    heavy = [(url, d) for url, _, d in entries if url in blocking and d > MAX_BLOCKING]
    assert heavy == [], f"blocking scripts over 1 MB: {heavy}"
    urls = " ".join(url for url, _ in sizes)
    html = (BOOK / name).read_text()
    assert ("/plotly" in urls) == ("Plotly." in html), "plotly.js only where a figure is"
    assert ("mathjax" in urls) == ('class="math' in html), "MathJax only where there is math"
    assert "fontawesome.js" not in urls
    assert page.outside == []
    assert page.errors == [] and page.failed == []
    # A caption under every figure; log axes with a label on every tick; math that renders
    # (no stray backslash, no MathJax error).
    uncaptioned = page.evaluate(
        "[...document.querySelectorAll('.js-plotly-plot')].filter(g => !g.closest('figure')"
        "?.querySelector('figcaption')?.textContent.trim()).length"
        " + [...document.querySelectorAll('.pkv-static')].filter(v =>"
        " !v.querySelector('.pkv-figcaption')?.textContent.trim()).length")
    assert uncaptioned == 0
    unlabelled = page.evaluate(
        "[...document.querySelectorAll('.js-plotly-plot')].flatMap(g => Object.entries(g._fullLayout)"
        ".filter(([k, a]) => /^[xy]axis\\d*$/.test(k) && a.type === 'log' && !(a.tickmode === 'array'"
        " && a.ticktext?.length === a.tickvals?.length)).map(([k]) => k))")
    assert unlabelled == [], "log axes need a label on every tick"
    if page.evaluate("Boolean(window.MathJax?.startup?.document)"):
        wrong = page.evaluate(
            "MathJax.startup.document.getMathItemsWithin(document.body).map(m =>"
            " MathJax.startup.toMML(m.root)).filter(mml => mml.includes('\\\\') ||"
            " mml.includes('merror'))")
        assert wrong == [], wrong[:3]


@by_page
def test_a_first_visit_logs_no_error_and_requests_nothing_missing(load, name):
    """No colour mode chosen yet (pydata-sphinx-theme then logged "invalid theme mode"), the
    site's root asked for its favicon."""
    page = load(name, theme=None)
    assert page.evaluate("document.documentElement.dataset.mode") == "auto"
    assert page.evaluate("document.querySelector('link[rel=icon]')?.href")
    root = page.url.rsplit("/book/", 1)[0]
    assert page.request.get(f"{root}/favicon.ico").ok  # for what asks the site's root
    assert page.errors == [] and page.failed == [] and page.outside == []


@pytest.mark.parametrize("width", [390, 1280])
@by_page
def test_no_serious_axe_violation_and_controls_24_px(load, name, width):
    """axe-core finds no serious or critical violation (nor a skipped heading level, nor two
    regions with one name); every control shown is at least 24 px
    tall; every figure and table fits the column (a wide one scrolls in its own box)."""
    if not AXE_JS.is_file():
        pytest.skip(f"no axe-core at {AXE_JS} (npm ci)")
    page = load(name, width=width)
    # Serious and critical ones, and lesser ones that once were there: headings that skip a
    # level (the visualizer's), regions of one page with one name, content outside every
    # landmark (the sidebar's book title), table headers without a name (chapter 1's math).
    found = axe_violations(page, ("minor", "moderate", "serious", "critical"))
    assert [v for v in found if v["impact"] in ("serious", "critical") or v["id"] in (
        "heading-order", "landmark-unique", "region", "empty-table-header")] == []
    small = page.evaluate(
        "[...document.querySelectorAll('button, select, input:not([type=hidden]), summary')]"
        ".filter(c => c.checkVisibility({visibilityProperty: true}) && !c.closest('[inert]'))"
        ".map(c => [c.outerHTML.slice(0, 90), c.getBoundingClientRect().height])"
        f".filter(([, h]) => h < {MIN_CONTROL_PX} - 0.01)")
    assert small == [], small[:8]
    column = page.evaluate("document.querySelector('.bd-article').getBoundingClientRect().right")
    wide = page.evaluate(
        "[...document.querySelectorAll('.bd-article figure, .bd-article table')]"
        f".filter(f => f.checkVisibility() && f.getBoundingClientRect().right > {column} + 0.5)"
        ".map(f => f.outerHTML.slice(0, 90))")
    assert wide == [], wide[:5]


@pytest.mark.parametrize("theme", ["light", "dark"])
@by_page
def test_every_text_item_meets_wcag_aa_contrast(load, name, theme):
    page = load(name, theme=theme)
    assert page.evaluate("document.documentElement.dataset.theme") == theme
    result = page.evaluate(CONTRAST_JS, 4.5)
    low = result["bad"]
    assert low == [], f"{len(low)} text items below 4.5:1 ({theme}): {low[:8]}"
    assert result["checked"] > 50  # the page's text was found and measured
    if theme == "dark":  # figures and the visualizer follow the theme, not white panels
        backs = page.evaluate(
            "[...document.querySelectorAll('.js-plotly-plot')].map(g => g._fullLayout.paper_bgcolor)"
            ".concat([...document.querySelectorAll('.pkv-root')].map(r =>"
            " getComputedStyle(r).backgroundColor))")
        light = [b for b in backs if _brightness(b) > 0.4]
        assert light == [], light


# What the reader sees of the article: its markup, and the state of its controls (a select's
# choice is not in the markup).
ARTICLE_JS = """() => document.querySelector('.bd-article').innerHTML + JSON.stringify(
  [...document.querySelectorAll('.bd-article input, .bd-article select')].map(c => c.value))"""
CONTROLS_JS = """() => [...document.querySelectorAll(
  '.bd-article input, .bd-article select, .bd-article button')].filter(e => e.checkVisibility()
  && !e.closest('.cell_input, .highlight, [inert]') && !e.classList.contains('copybtn'))"""


@by_page
def test_every_control_is_labelled_reachable_and_operable_by_keyboard(load, name):
    page = load(name)
    # Plotly's own sliders and menus cannot be reached with a keyboard: none may remain.
    assert page.locator(".js-plotly-plot .slider-container, .js-plotly-plot .updatemenu-container"
                        ).count() == 0
    controls = page.evaluate_handle(CONTROLS_JS)
    count = page.evaluate("cs => cs.length", controls)
    if not count:
        return
    # A label for each, and each slider reads out a value, not its position.
    unnamed = page.evaluate("""cs => cs.filter(c => !(c.labels?.length || c.getAttribute('aria-label')
      || (c.tagName === 'BUTTON' && c.textContent.trim()))).map(c => c.outerHTML.slice(0, 80))""",
                            controls)
    assert unnamed == [], unnamed
    raw = page.evaluate("""cs => cs.filter(c => c.type === 'range' && (!c.getAttribute('aria-valuetext')
      || c.getAttribute('aria-valuetext') === c.value)).map(c => c.outerHTML.slice(0, 80))""", controls)
    assert raw == [], raw
    # Tab from the first control reaches every other one, in order.
    page.evaluate("cs => cs[0].focus()", controls)
    reached = {page.evaluate("cs => cs.indexOf(document.activeElement)", controls)}
    for _ in range(count * 6 + 40):
        page.keyboard.press("Tab")
        reached.add(page.evaluate("cs => cs.indexOf(document.activeElement)", controls))
        if len(reached - {-1}) == count:
            break
    enabled = set(page.evaluate("cs => cs.map((c, i) => c.disabled ? -1 : i)", controls)) - {-1}
    assert enabled <= reached, f"not reached by Tab: {sorted(enabled - reached)}"
    # Each enabled control, used from the keyboard, changes what the page shows.
    for i in sorted(enabled):
        if page.evaluate("([cs, i]) => cs[i].disabled", [controls, i]):
            continue  # an earlier control disabled it (the step buttons at a run's end)
        kind = page.evaluate("([cs, i]) => cs[i].type || cs[i].tagName", [controls, i])
        if page.evaluate("([cs, i]) => cs[i].getAttribute('aria-pressed') === 'true'",
                         [controls, i]):
            continue  # the view already shown: pressing it again changes nothing
        before = page.evaluate(ARTICLE_JS)
        page.evaluate("([cs, i]) => cs[i].focus()", [controls, i])
        at_end = page.evaluate("([cs, i]) => cs[i].type === 'range' && cs[i].value === cs[i].max",
                               [controls, i])
        key = {"range": "ArrowLeft" if at_end else "ArrowRight",
               "select-one": "ArrowDown"}.get(kind, "Enter")
        if kind == "select-one" and page.evaluate(
                "([cs, i]) => cs[i].selectedIndex === cs[i].options.length - 1", [controls, i]):
            key = "ArrowUp"
        page.keyboard.press(key)
        page.wait_for_timeout(60)
        after = page.evaluate(ARTICLE_JS)
        assert after != before, (name, i, kind, key)
        if page.evaluate("([cs, i]) => cs[i].textContent.includes('pause')", [controls, i]):
            page.keyboard.press("Enter")  # stop playback again


def _brightness(css: str) -> float:
    """0 (black) to 1 (white) for ``#rrggbb`` or ``rgb(...)``."""
    rgb = ([int(css[i:i + 2], 16) for i in (1, 3, 5)] if css.startswith("#")
           else [int(x) for x in re.findall(r"\d+", css)[:3]])
    return sum(rgb) / 765
