"""Shared by the browser tests: where the built book and Chromium are, a quiet local server,
and a page loader that refuses every other host.

The book is ``_build/html`` at the repository root (or ``$PAGEDKV_BOOK_HTML``); Chromium is
``/usr/bin/chromium`` (or ``$PAGEDKV_CHROMIUM``). Tests skip when either is missing (CI
builds the book first).
"""

from __future__ import annotations

import http.server
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
BOOK = Path(os.environ.get("PAGEDKV_BOOK_HTML", ROOT / "_build" / "html"))
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("PAGEDKV_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def serve(directory: Path) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` serving ``directory`` while the block runs."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             partial(QuietHandler, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()


def chapter_pages() -> list[str]:
    """The book's pages a reader reads (intro and chapters), relative to :data:`BOOK`."""
    return sorted(p.relative_to(BOOK).as_posix() for p in (BOOK / "book").glob("*.html"))


def keep_local(page, outside: list[str]) -> None:
    """Abort (and record) every request not addressed to 127.0.0.1."""
    def route(r):
        if urlparse(r.request.url).hostname == "127.0.0.1" or r.request.url.startswith("data:"):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()

    page.route("**/*", route)


# Waits until what the page draws after load is drawn: every static visualizer mounted
# (its data is inflated asynchronously), MathJax done typesetting.
SETTLED_JS = """async () => {
  for (let k = 0; k < 100; k++) {
    const want = document.querySelectorAll('.pkv-static').length;
    if (document.querySelectorAll('.pkv-static .pkv-root').length >= want) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  if (window.MathJax?.startup?.promise) await window.MathJax.startup.promise;
  // Plotly draws after MathJax; the book's figure script then adapts each figure.
  for (let k = 0; k < 200; k++) {
    const figures = [...document.querySelectorAll('.plotly-graph-div, .js-plotly-plot')];
    if (figures.every((g) => g.dataset.pkvEnhanced)) break;
    await new Promise((r) => setTimeout(r, 50));
  }
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
}"""
