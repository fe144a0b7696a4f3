"""Visualizer speed: a slider change to the redraw in the static page, and a live re-simulation.

Targets: static redraw within one frame, <= 16 ms (the renderer looks a precomputed scene
up, decodes it and draws four views at card scale; the step scrubber redraws a step), live
re-simulation <= 300 ms (Python runs both simulations for a setting not seen before and
encodes them). Prints median and worst per measure.

    PYTHONPATH=. python bench/bench_visualizer.py [--chromium /usr/bin/chromium]

The static half needs Chromium and the ``playwright`` package; it is skipped without them.
"""

from __future__ import annotations

import argparse
import http.server
import statistics
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

from pagedkv_widgets import visualizer
from pagedkv_widgets.chapters import MEM_FRACTIONS

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# Runs in the page: set a slider, let the input handler redraw, and force style and layout
# of the new drawing; the time is the work the frame must fit (waiting for the next frame's
# start would add up to 16 ms of idle vsync time to every figure).
MEASURE_JS = """async ([role, value]) => {
  await new Promise((resolve) => requestAnimationFrame(() => resolve()));
  const input = document.querySelector(`.pkv-static [data-role=${role}]`);
  const t0 = performance.now();
  input.value = value;
  input.dispatchEvent(new Event("input"));
  document.querySelector(".pkv-static .pkv-root").getBoundingClientRect();
  return performance.now() - t0;
}"""


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


def report(name: str, ms: list[float], target: float) -> None:
    """Print median and worst against the target."""
    med, worst = statistics.median(ms), max(ms)
    verdict = "ok" if worst <= target else "over target"
    print(f"{name:<44} median {med:7.1f} ms   worst {worst:7.1f} ms   "
          f"target <= {target:.0f} ms: {verdict}  (n={len(ms)})")


def bench_live() -> None:
    """Time ``settings`` changes of the live widget in Python. Cold: each to a setting not
    seen before, no prefetch; a fraction change (at page size 16) re-runs both simulations,
    a page-size change only the teaching one. Warm: the same moves once the widget's
    background prefetch has run the sliders' positions. A real front-end adds its round
    trip (~60-100 ms in JupyterLab 4)."""
    for label, prefetch in (("cold", False), ("prefetched", True)):
        widget = visualizer("full", static=False, prefetch=prefetch)
        widget.prefetched.wait()
        both, teaching = [], {4: [], 64: []}
        for f in MEM_FRACTIONS[:5]:
            for p in (16, 64, 4):
                start = time.perf_counter()
                widget.settings = {**widget.settings, "mem_fraction_static": f, "page_size": p}
                ms = (time.perf_counter() - start) * 1000
                (both if p == 16 else teaching[p]).append(ms)
        report(f"live, {label}: mem_fraction_static -> both runs", both, 300)
        for p, ms in teaching.items():
            report(f"live, {label}: page size {p} -> teaching run", ms, 300)


def bench_static(chromium: str) -> None:
    """Build the full static visualizer into a page and time slider changes in Chromium."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("static: skipped (no playwright)")
        return
    if not Path(chromium).exists():
        print(f"static: skipped (no Chromium at {chromium})")
        return
    start = time.perf_counter()
    fragment = visualizer("full", static=True).data
    print(f"static: grid precomputed in {time.perf_counter() - start:.1f} s, "
          f"fragment {len(fragment.encode()) / 1024:.0f} KB")
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "index.html").write_text(f"<!doctype html><meta charset=utf-8>{fragment}")
        handler = partial(_QuietHandler, directory=tmp)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=FLAGS)
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{server.server_port}/index.html")
            page.locator(".pkv-static [data-view=pool] svg").wait_for()
            fractions, sizes, steps = [], [], []
            for _ in range(2):  # the second pass hits the renderer's scene cache
                for k in range(len(MEM_FRACTIONS)):
                    fractions.append(page.evaluate(MEASURE_JS, ["mem_fraction_static", str(k)]))
                for k in (0, 1, 2, 1):
                    sizes.append(page.evaluate(MEASURE_JS, ["page_size", str(k)]))
            for k in range(0, 200, 10):
                steps.append(page.evaluate(MEASURE_JS, ["scrub", str(k)]))
            browser.close()
        server.shutdown()
    report("static: mem_fraction_static slider -> redraw", fractions, 16)
    report("static: page size slider -> redraw", sizes, 16)
    report("static: step scrubber -> redraw", steps, 16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    bench_static(args.chromium)
    bench_live()


if __name__ == "__main__":
    main()
