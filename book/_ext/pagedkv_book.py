"""Sphinx extension that makes the book work offline: plotly.js and MathJax from local files.

Both come from installed Python packages (``plotly`` and ``django-static-mathjax``), are
copied into the build's static folder once, and are loaded by every page. No built page
requests an external host.
"""

from __future__ import annotations

import os
import shutil
from importlib import resources
from pathlib import Path

from sphinx.application import Sphinx

VENDOR = "pagedkv-vendor"


def _vendor_files() -> dict[str, Path]:
    plotly_js = resources.files("plotly") / "package_data" / "plotly.min.js"
    mathjax_js = resources.files("mathjax") / "static" / "mathjax" / "es5" / "tex-svg.js"
    return {"plotly.min.js": Path(str(plotly_js)), "tex-svg.js": Path(str(mathjax_js))}


def _copy_vendor(app: Sphinx) -> None:
    folder = Path(app.outdir).parent / "vendor-static" / VENDOR
    folder.mkdir(parents=True, exist_ok=True)
    for name, source in _vendor_files().items():
        shutil.copyfile(source, folder / name)
    app.config.html_static_path.append(str(folder.parent))


def setup(app: Sphinx) -> dict[str, object]:
    # Notebook kernels inherit this: figures then rely on the page's plotly.js (no inlining).
    os.environ["PAGEDKV_BOOK_BUILD"] = "1"
    app.connect("builder-inited", _copy_vendor)
    app.add_js_file(f"{VENDOR}/plotly.min.js")
    app.config.mathjax_path = f"{VENDOR}/tex-svg.js"
    return {"parallel_read_safe": True, "parallel_write_safe": True}
