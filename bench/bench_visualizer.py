"""Visualizer speed: a control's change to the redraw in the static page, and live re-simulation.

Targets: static redraw within one frame, <= 16 ms, at card scale (chapter 7's visualizer:
Qwen3-4B on an RTX 4090, a 5,323-page pool, ~17,000 steps; the HBM bar, the timeline, the
page table and the pool map all redrawn) for every control once the run it lands on is in
the page (warm: the renderer fetches the runs next to the current one while the reader looks);
live re-simulation <= 300 ms (Python runs a setting not seen before and encodes it).
Prints median and worst per control, warm and cold (cold: the run is fetched, inflated and
decoded first, as on a reader's first move to a setting far from the current one).

    PYTHONPATH=. python bench/bench_visualizer.py [--chromium /usr/bin/chromium] [--quick]

``--quick`` builds a smaller grid (Qwen3-4B on the RTX 4090 only: workloads by fractions),
~30 s instead of a few minutes. The static half needs Chromium and the ``playwright``
package; it is skipped without them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from browser_support import FLAGS, serve

from pagedkv_widgets import visualizer
from pagedkv_widgets.catalog import CATALOG, make_runner
from pagedkv_widgets.chapters import chapter_config, resolve_settings
from pagedkv_widgets.static_page import build_grid, split_book, static_html

# Runs in the page: change a control as a reader would (an input event), wait until the
# viewer shows the setting's run (at once when it is in memory; after fetching otherwise),
# and force style and layout of the new drawing. The time is the work the frame must fit
# (waiting for the next frame's start would add up to 16 ms of idle vsync time).
MEASURE_JS = """async ([role, value]) => {
  await new Promise((resolve) => requestAnimationFrame(() => resolve()));
  const root = document.querySelector(".pkv-static .pkv-root");
  const input = root.querySelector(`[data-role=${role}]`), status = root.querySelector("[data-role=status]");
  const t0 = performance.now();
  if (input.tagName === "BUTTON") input.click();
  else {
    input.value = value;
    input.dispatchEvent(new Event("input"));
  }
  while (status.textContent) await new Promise((resolve) => setTimeout(resolve, 1));
  root.getBoundingClientRect();
  return performance.now() - t0;
}"""


def report(name: str, ms: list[float], target: float | None) -> None:
    """Print median and worst against the target."""
    med, worst = statistics.median(ms), max(ms)
    verdict = "" if target is None else (
        f"target <= {target:.0f} ms: {'ok' if worst <= target else 'over target'}")
    print(f"{name:<52} median {med:7.1f} ms   worst {worst:7.1f} ms   {verdict}  (n={len(ms)})")


def bench_live() -> None:
    """Time ``settings`` changes of the live widget in Python (chapter 7: a card run with
    its page record per setting). Cold: each to a setting not seen before, no prefetch. A
    real front-end adds its round trip (~60-100 ms in JupyterLab 4)."""
    widget = visualizer("full", static=False, prefetch=False)

    def moves() -> list[float]:
        times = []
        for f in (0.7, 0.9, 0.6):
            start = time.perf_counter()
            widget.settings = {**widget.settings, "mem_fraction_static": f}
            times.append((time.perf_counter() - start) * 1000)
        return times

    report("live, cold: mem_fraction_static -> card run", moves(), 300)
    report("live, seen before: mem_fraction_static", moves(), 300)


def static_page(folder: Path, quick: bool) -> Path:
    """Chapter 7's static visualizer in ``folder/book/index.html``, its runs split out as
    the book build does; returns the page."""
    settings = resolve_settings(CATALOG, "full")
    config = chapter_config(CATALOG, "full", settings)
    if quick:
        for axis in ("model", "gpu"):
            config["axes"][axis] = [v for v in config["axes"][axis] if v[0] == getattr(settings, axis)]
    start = time.perf_counter()
    grid = build_grid(config, make_runner())
    page = folder / "book" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(f"<!doctype html><meta charset=utf-8><body>{static_html(config, grid)}</body>")
    moved = split_book(folder)
    runs = sorted((folder / "_pkv").iterdir())
    print(f"static: {len(grid['card'])} settings run in {time.perf_counter() - start:.0f} s; page "
          f"{page.stat().st_size / 1024:.0f} KB with the opening run; {moved} runs moved out, "
          f"{sum(r.stat().st_size for r in runs) / len(runs) / 1024:.0f} KB each on average "
          f"(largest {max(r.stat().st_size for r in runs) / 1024:.0f} KB)")
    return page


def bench_static(chromium: str, quick: bool) -> None:
    """Time every control of chapter 7's static visualizer in Chromium, cold and warm."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("static: skipped (no playwright)")
        return
    if not Path(chromium).exists():
        print(f"static: skipped (no Chromium at {chromium})")
        return
    with tempfile.TemporaryDirectory() as tmp, serve(Path(tmp)) as url, sync_playwright() as p:
        static_page(Path(tmp), quick)
        browser = p.chromium.launch(executable_path=chromium, args=FLAGS)
        page = browser.new_page(viewport={"width": 1200, "height": 1400})
        page.goto(f"{url}/book/index.html")
        page.locator(".pkv-static [data-view=pool] canvas").wait_for()
        measure = lambda role, value="": page.evaluate(MEASURE_JS, [role, value])  # noqa: E731
        n = int(page.locator(".pkv-static input[data-role=mem_fraction_static]").get_attribute("max")) + 1
        # Cold: the first visit of each setting (fetch, inflate, decode, draw).
        cold = {"mem_fraction_static": [measure("mem_fraction_static", str(k)) for k in range(n)],
                "workload": [measure("workload", w) for w in ("calm", "burst", "busy")]}
        # Warm: the same settings again, each run in memory (decoded once, kept).
        warm = {"mem_fraction_static": [], "workload": [], "model": [], "gpu": []}
        for _ in range(2):
            warm["mem_fraction_static"] += [measure("mem_fraction_static", str(k)) for k in range(n)]
            warm["workload"] += [measure("workload", w) for w in ("calm", "burst", "busy")]
        if not quick:
            for model in ("llama-3-8b", "qwen3-4b"):
                cold.setdefault("model", []).append(measure("model", model))
            for gpu in ("h100-sxm-80gb", "h200-141gb", "rtx-4090"):
                cold.setdefault("gpu", []).append(measure("gpu", gpu))
            for _ in range(2):
                warm["model"] += [measure("model", m) for m in ("llama-3-8b", "qwen3-4b")]
                warm["gpu"] += [measure("gpu", g) for g in ("h100-sxm-80gb", "h200-141gb", "rtx-4090")]
        steps = int(page.locator(".pkv-static input[data-role=scrub]").get_attribute("max"))
        warm["step slider"] = [measure("scrub", str(k)) for k in range(0, steps, steps // 40)]
        warm["step button (one step)"] = [measure("step") for _ in range(20)]
        measure("scrub", "0")
        page.locator(".pkv-static select[data-role=jump]").select_option("finish")
        warm["jump to the next finish"] = [measure("next-event") for _ in range(10)]
        warm["zoom in (pool map)"] = [page.evaluate(
            MEASURE_JS.replace("[data-role=${role}]", "[data-view=pool] [data-role=${role}]"),
            ["zoom-in", ""]) for _ in range(4)]
        browser.close()
    for name, ms in cold.items():
        report(f"static, cold: {name} -> fetch + decode + redraw", ms, None)
    for name, ms in warm.items():
        if ms:
            report(f"static, warm: {name} -> redraw", ms, 16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--quick", action="store_true", help="the default card only")
    args = parser.parse_args()
    os.environ["PAGEDKV_RUN_CACHE"] = "off"  # cold means simulated, not read from disk
    bench_static(args.chromium, args.quick)
    bench_live()


if __name__ == "__main__":
    main()
