"""Sphinx extension: the book works offline and each page loads only what it uses.

- plotly.js and MathJax come from installed packages (plotly.js's partial bundles from npm,
  see ``plotly_bundle``; MathJax from ``django-static-mathjax``), are copied into the
  build's static folder once, and a page loads plotly.js only if its body draws a Plotly
  figure (the smallest bundle that draws its figures, deferred), MathJax only if it holds
  math.
  MathJax is MathJax 3's component loader with the TeX input and the CommonHTML output
  (about 0.8 MB with its fonts, against 2.1 MB for the all-in-one ``tex-svg.js``). In
  ``\\text{...}`` an underscore is written plain (``\\text{max_new_tokens}``): MathJax
  prints ``\\_`` there as a backslash and an underscore.
- The theme's ``fontawesome.js`` (1.5 MB) is left out: the theme's CSS already draws every
  icon from Font Awesome's web fonts (see ``templates/static/webpack-macros.html``).
- The memory visualizer's runs, all but the one each chapter opens on, move out of the pages
  into files of their own (``_pkv/``, fetched when a control asks for them): see
  ``pagedkv_widgets.static_page.split_book``.
- ``static/pagedkv-book.css`` (every page) keeps pages within a phone's width and styles
  figure captions; ``static/pagedkv-figures.js`` (pages with Plotly figures) gives the
  figures keyboard controls, phone layouts and the dark theme; ``static/pagedkv-book.js``
  (every page) lets a keyboard scroll what scrolls sideways (wide tables, display math).
- No console error on a page: each inline script once (Jupyter Book 1 adds sphinx-thebe's
  ``const THEBE_JS_URL`` twice, a redeclaration), a colour mode to start from on a first
  visit (``default_mode``: the theme's is empty, "invalid theme mode"), a favicon.
- The "Show code cell source" toggles are named by what they show (myst-nb's aria-label
  "Toggle hidden content" is not what a reader sees, nor what speech input can say).

No built page requests an external host.
"""

from __future__ import annotations

import os
import re
import shutil
from importlib import resources
from pathlib import Path
from typing import Any

from plotly_bundle import (
    FULL_BUNDLE,
    PARTIAL_BUNDLES,
    bundle_traces,
    choose_bundle,
    defer_plotly_scripts,
    page_traces,
)
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)
VENDOR = "pagedkv-vendor"
HERE = Path(__file__).parent
MATHJAX_JS = f"{VENDOR}/mathjax/startup.js"
# The MathJax components a page may request: the loader with its core, TeX input (with the
# extensions autoload may fetch), CommonHTML output with its fonts, hidden MathML for
# screen readers. Paths under MathJax's es5/ folder.
MATHJAX_PARTS = ("startup.js", "core.js", "input/tex.js", "input/tex/extensions",
                 "output/chtml.js", "output/chtml/fonts", "a11y/assistive-mml.js")
MATHJAX_CONFIG = {"loader": {"load": ["input/tex", "output/chtml", "a11y/assistive-mml"]}}


def _mathjax_root() -> Path:
    return Path(str(resources.files("mathjax") / "static" / "mathjax" / "es5"))


def _copy_plotly(app: Sphinx, folder: Path) -> None:
    """plotly.js's bundles into ``folder``; which trace types each draws on
    ``app.env.pagedkv_plotly`` (file -> trace types, smallest first)."""
    shutil.copyfile(Path(str(resources.files("plotly") / "package_data" / FULL_BUNDLE)),
                    folder / FULL_BUNDLE)
    bundles: dict[str, frozenset[str]] = {}
    for package, name in PARTIAL_BUNDLES.items():
        source = Path(app.srcdir) / "node_modules" / package
        if not (source / name).is_file():
            logger.warning(f"{source / name} is missing (run `npm ci`, as scripts/setup.sh does): "
                           f"pages get the full {FULL_BUNDLE}, 4.8 MB")
            continue
        shutil.copyfile(source / name, folder / name)
        bundles[name] = bundle_traces(source)
    app.env.pagedkv_plotly = bundles


def _copy_vendor(app: Sphinx) -> None:
    """Copy plotly.js and the MathJax components into a static folder of the build."""
    folder = Path(app.outdir).parent / "vendor-static" / VENDOR
    folder.mkdir(parents=True, exist_ok=True)
    _copy_plotly(app, folder)
    for part in MATHJAX_PARTS:
        source, target = _mathjax_root() / part, folder / "mathjax" / part
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copyfile(source, target)
    app.config.html_static_path.extend([str(folder.parent), str(HERE / "static")])


def _configure(app: Sphinx, config: Any) -> None:
    config.mathjax_path = MATHJAX_JS
    config.html_favicon = config.html_favicon or str(HERE / "static" / "favicon.svg")
    # The colour mode of a first visit (pydata-sphinx-theme reads it from the context).
    config.html_context = {"default_mode": "auto", **(config.html_context or {})}
    config.mathjax3_config = {**(config.mathjax3_config or {}), **MATHJAX_CONFIG}
    config.templates_path.insert(0, str(HERE / "templates"))


def _page_assets(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any],
                 doctree: Any) -> None:
    """Per page: plotly.js and the figure script where a figure is drawn, MathJax (added by
    ``sphinx.ext.mathjax`` for every page of a notebook book) only where there is math,
    each inline script once, the code-cell toggles named by their text."""
    body = context.get("body", "")
    if "Plotly." in body:
        bundle = choose_bundle(page_traces(body), app.env.pagedkv_plotly)
        app.add_js_file(f"{VENDOR}/{bundle}", defer="defer")
        app.add_js_file("pagedkv-figures.js", defer="defer")
        body = defer_plotly_scripts(body)
    body = body.replace('<summary aria-label="Toggle hidden content">', "<summary>")
    context["body"] = _TABLE.sub(_row_headers, body)
    scripts = context.get("script_files", [])
    if 'class="math' not in body:
        scripts[:] = [js for js in scripts if not _is_mathjax(js)]
    scripts[:] = _once_each(scripts)


_TABLE = re.compile(r'<table class="table">.*?</table>', re.S)
_EMPTY_CORNER = re.compile(r'<thead>\s*<tr[^>]*>\s*<th class="head">(<p></p>)?</th>')
_FIRST_CELL = re.compile(r'(<tr class="row-(?:even|odd)">)\s*<td>(.*?)</td>', re.S)


def _row_headers(table: re.Match[str]) -> str:
    """A Markdown table whose top-left header is empty has row labels in its first column:
    those cells become row headers (``<th scope="row">``), so each data cell has headers both
    ways (a screen reader reads "60% of peak, retractions: 25 / 32 / 15"; axe-core's
    td-has-header). The corner, a header too, gets a name a screen reader reads and the page
    does not show (an empty header is axe-core's empty-table-header)."""
    html = table.group(0)
    corner = _EMPTY_CORNER.search(html)
    if not corner:
        return html
    html = (html[:corner.start()] + corner.group(0).replace(
        f"<th class=\"head\">{corner.group(1) or ''}</th>",
        '<th class="head"><span class="visually-hidden">row</span></th>') + html[corner.end():])
    head, tbody, rest = html.partition("<tbody>")
    return head + tbody + _FIRST_CELL.sub(r'\1<th scope="row">\2</th>', rest)


def _once_each(scripts: list[Any]) -> list[Any]:
    """``scripts`` without repeats: the same file, or the same inline code, kept once (an
    inline ``const`` declared twice stops the page's second copy with a SyntaxError)."""
    seen, kept = set(), []
    for js in scripts:
        attributes = getattr(js, "attributes", {})
        # an inline script's filename is None or "" depending on who added it
        key = (str(getattr(js, "filename", js) or ""), str(attributes.get("body", "")))
        if key not in seen:
            seen.add(key)
            kept.append(js)
    return kept


def _is_mathjax(js: Any) -> bool:
    """The MathJax loader and the inline ``window.MathJax = ...`` configuration before it."""
    return (str(getattr(js, "filename", js)).endswith(MATHJAX_JS) or
            str(getattr(js, "attributes", {}).get("body", "")).startswith("window.MathJax"))


def _finish_html(app: Sphinx, exception: Exception | None) -> None:
    """The visualizer's runs out of the pages; ``/favicon.ico`` for what asks the site's
    root (the redirecting ``index.html`` names no icon)."""
    if exception is None and app.builder.format == "html":
        from pagedkv_widgets.static_page import split_book

        split_book(Path(app.outdir))
        shutil.copyfile(HERE / "static" / "favicon.ico", Path(app.outdir) / "favicon.ico")


def setup(app: Sphinx) -> dict[str, object]:
    # Notebook kernels inherit this: figures then rely on the page's plotly.js (no inlining).
    os.environ["PAGEDKV_BOOK_BUILD"] = "1"
    app.connect("config-inited", _configure)
    app.connect("builder-inited", _copy_vendor)
    app.add_css_file("pagedkv-book.css")
    app.add_js_file("pagedkv-book.js", defer="defer")
    # After sphinx.ext.mathjax (priority 500) has added MathJax to the page.
    app.connect("html-page-context", _page_assets, priority=900)
    app.connect("build-finished", _finish_html)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
