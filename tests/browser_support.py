"""Shared by the browser tests: where the built book and Chromium are, a quiet local server
(which gzips text, as static web hosts do), a page loader that refuses every other host, and
axe-core.

The book is ``_build/html`` at the repository root (or ``$PAGEDKV_BOOK_HTML``); Chromium is
``/usr/bin/chromium`` (or ``$PAGEDKV_CHROMIUM``). Tests skip when either is missing (CI
builds the book first); the accessibility checks also need axe-core (``npm ci``).
"""

from __future__ import annotations

import gzip
import http.server
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import lru_cache, partial
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
BOOK = Path(os.environ.get("PAGEDKV_BOOK_HTML", ROOT / "_build" / "html"))
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("PAGEDKV_CHROMIUM", "/usr/bin/chromium")
# axe-core, the accessibility checker the browser tests inject (npm: package.json, `npm ci`).
AXE_JS = ROOT / "node_modules" / "axe-core" / "axe.min.js"
# --disable-dev-shm-usage: Chromium keeps its shared memory in /tmp, not /dev/shm, which a
# container gives 64 MB by default: too little for the several browsers the tests run at once
# (one per xdist worker), and a full /dev/shm kills the browser mid-run.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage"]


@lru_cache(maxsize=512)
def _gzipped(path: Path, mtime_ns: int) -> bytes:
    """``path``'s bytes gzipped, once per version of the file (the tests load each page
    many times)."""
    return gzip.compress(path.read_bytes(), compresslevel=6, mtime=0)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files as a static web host does (GitHub Pages among them): text gzip-encoded
    for a browser that accepts it, so what a page transfers is what a reader downloads."""

    COMPRESSED = (".html", ".js", ".css", ".json", ".svg", ".txt", ".map")

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        path = Path(self.translate_path(self.path))
        if not (path.is_file() and path.suffix in self.COMPRESSED
                and "gzip" in self.headers.get("Accept-Encoding", "")):
            super().do_GET()
            return
        body = _gzipped(path, path.stat().st_mtime_ns)
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


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


def axe_violations(page, impacts: tuple[str, ...] = ("serious", "critical")) -> list[dict]:
    """axe-core's violations on ``page`` as it is now, of the given impacts, every rule but
    WCAG AAA's run:
    rule id, impact, how many nodes, and the first few nodes' selectors and summaries."""
    if not page.evaluate("Boolean(window.axe)"):
        page.add_script_tag(content=AXE_JS.read_text(encoding="utf-8"))
    # Every rule up to WCAG AA, the experimental ones included (label-content-name-mismatch
    # is one); AAA's (color-contrast-enhanced: 7:1) stay off.
    found = page.evaluate("async () => (await axe.run(document, {resultTypes: ['violations'],"
                          " rules: Object.fromEntries(axe.getRules().map(r =>"
                          " [r.ruleId, {enabled: !r.tags.includes('wcag2aaa')}]))}))"
                          ".violations.map(v => ({id: v.id, impact: v.impact, count: v.nodes.length,"
                          " nodes: v.nodes.slice(0, 4).map(n => [n.target.join(' '),"
                          " (n.failureSummary || '').slice(0, 160)])}))")
    return [v for v in found if v["impact"] in impacts]


def cut_short(requests: list, n: int = 12, max_tokens: int = 512) -> list:
    """The first ``n`` of a chapter's requests, each answering at most ``max_tokens`` tokens:
    the visualizer tests build their pages from runs of these (a chapter's own runs decode for
    thousands of steps; a few hundred show every pool's pages taken, freed and reused)."""
    return [replace(r, output_len=min(r.output_len, max_tokens),
                    max_new_tokens=min(r.max_new_tokens, max_tokens)) for r in requests[:n]]
