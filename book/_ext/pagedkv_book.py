"""Sphinx extension: the book works offline and each page loads only what it uses.

- plotly.js and MathJax come from installed Python packages (``plotly`` and
  ``django-static-mathjax``), are copied into the build's static folder once, and a page
  loads plotly.js only if its body draws a Plotly figure, MathJax only if it holds math.
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
  figures keyboard controls, phone layouts and the dark theme.

No built page requests an external host.
"""

from __future__ import annotations

import os
import shutil
from importlib import resources
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx

VENDOR = "pagedkv-vendor"
HERE = Path(__file__).parent
PLOTLY_JS = f"{VENDOR}/plotly.min.js"
MATHJAX_JS = f"{VENDOR}/mathjax/startup.js"
# The MathJax components a page may request: the loader with its core, TeX input (with the
# extensions autoload may fetch), CommonHTML output with its fonts, hidden MathML for
# screen readers. Paths under MathJax's es5/ folder.
MATHJAX_PARTS = ("startup.js", "core.js", "input/tex.js", "input/tex/extensions",
                 "output/chtml.js", "output/chtml/fonts", "a11y/assistive-mml.js")
MATHJAX_CONFIG = {"loader": {"load": ["input/tex", "output/chtml", "a11y/assistive-mml"]}}


def _mathjax_root() -> Path:
    return Path(str(resources.files("mathjax") / "static" / "mathjax" / "es5"))


def _copy_vendor(app: Sphinx) -> None:
    """Copy plotly.js and the MathJax components into a static folder of the build."""
    folder = Path(app.outdir).parent / "vendor-static" / VENDOR
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(str(resources.files("plotly") / "package_data" / "plotly.min.js")),
                    folder / "plotly.min.js")
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
    config.mathjax3_config = {**(config.mathjax3_config or {}), **MATHJAX_CONFIG}
    config.templates_path.insert(0, str(HERE / "templates"))


def _page_assets(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any],
                 doctree: Any) -> None:
    """Per page: plotly.js and the figure script where a figure is drawn, MathJax (added by
    ``sphinx.ext.mathjax`` for every page of a notebook book) only where there is math."""
    body = context.get("body", "")
    if "Plotly." in body:
        app.add_js_file(PLOTLY_JS)
        app.add_js_file("pagedkv-figures.js")
    if 'class="math' not in body:
        scripts = context.get("script_files", [])
        scripts[:] = [js for js in scripts if not _is_mathjax(js)]


def _is_mathjax(js: Any) -> bool:
    """The MathJax loader and the inline ``window.MathJax = ...`` configuration before it."""
    return (str(getattr(js, "filename", js)).endswith(MATHJAX_JS) or
            str(getattr(js, "attributes", {}).get("body", "")).startswith("window.MathJax"))


def _split_visualizer_runs(app: Sphinx, exception: Exception | None) -> None:
    if exception is None and app.builder.format == "html":
        from pagedkv_widgets.static_page import split_book

        split_book(Path(app.outdir))


def setup(app: Sphinx) -> dict[str, object]:
    # Notebook kernels inherit this: figures then rely on the page's plotly.js (no inlining).
    os.environ["PAGEDKV_BOOK_BUILD"] = "1"
    app.connect("config-inited", _configure)
    app.connect("builder-inited", _copy_vendor)
    app.add_css_file("pagedkv-book.css")
    # After sphinx.ext.mathjax (priority 500) has added MathJax to the page.
    app.connect("html-page-context", _page_assets, priority=900)
    app.connect("build-finished", _split_visualizer_runs)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
