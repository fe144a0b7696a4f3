"""The live visualizer in a real JupyterLab 4, driven in headless Chromium.

Starts ``jupyter lab`` on 127.0.0.1 (no token, a temporary root and config) with a one-cell
notebook that displays ``visualizer("full")`` twice, runs it, and checks: the four views
render, a slider change re-simulates in the kernel (the pool size changes) and reaches the
other view of the same widget, a control of the other view answers too, play advances, and
the console stays clean. Skips without jupyterlab, playwright or Chromium. About a minute
(a card run with its page record takes a few seconds).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_support import CHROMIUM, FLAGS

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # Chromium pages: slow too

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
VIZ = ".pkv-root"
SOURCE = 'from pagedkv_widgets import visualizer\nw = visualizer("full")\ndisplay(w, w)'


@pytest.fixture(scope="module")
def lab_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("jupyterlab")
    pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    root = tmp_path_factory.mktemp("lab")
    notebook = {"cells": [{"cell_type": "code", "metadata": {}, "source": SOURCE, "outputs": [],
                           "execution_count": None}],
                "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                            "language": "python"}},
                "nbformat": 4, "nbformat_minor": 5}
    (root / "live.ipynb").write_text(json.dumps(notebook))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(root / ".config"),
           "JUPYTER_DATA_DIR": str(root / ".data"), "JUPYTER_RUNTIME_DIR": str(root / ".runtime")}
    env.pop("PAGEDKV_BOOK_BUILD", None)  # live, not the book's static HTML
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip=127.0.0.1",
         f"--port={port}", "--port-retries=0", "--IdentityProvider.token=",
         "--ServerApp.password=", "--LabApp.expose_app_in_browser=True",
         f"--ServerApp.root_dir={root}"],
        cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/api/status", timeout=1)
                break
            except OSError:
                if server.poll() is not None:
                    pytest.fail("jupyter lab exited at start-up")
                time.sleep(0.5)
        else:
            pytest.fail("jupyter lab did not answer within 60 s")
        yield f"{url}/lab/tree/live.ipynb"
    finally:
        server.terminate()
        server.wait(timeout=20)


def _run_names(page) -> list[str]:
    return page.locator(f"{VIZ} [data-role=run-name]").all_inner_texts()


def test_live_visualizer_in_jupyterlab(lab_url):
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        page = browser.new_page(viewport={"width": 1300, "height": 2200})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        try:
            page.goto(lab_url)
            page.wait_for_function(
                "() => window.jupyterapp?.shell.currentWidget?.sessionContext?.session?.kernel"
                "?.status === 'idle'", timeout=90_000)
            page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
            page.locator(f"{VIZ} [data-view=pool] canvas").nth(1).wait_for(timeout=120_000)
            views = page.locator(VIZ).first
            for view in ("hbm", "timeline"):
                assert views.locator(f"[data-view={view}] svg").count() == 1, view
            for view in ("pagetable", "pool"):
                assert views.locator(f"[data-view={view}] canvas").evaluate("c => c.pkvDrawn.step") >= 0

            # A slider in the first view: Python re-simulates, both views redraw.
            before = _run_names(page)
            views.locator("input[data-role=mem_fraction_static]").fill("2")  # 0.70
            page.wait_for_function(
                f"b => [...document.querySelectorAll('{VIZ} [data-role=run-name]')]"
                ".every(e => e.textContent !== b)", arg=before[0], timeout=60_000)
            after = _run_names(page)
            assert after[0] == after[1] != before[0] and "0.70" in after[0]
            assert page.locator(f"{VIZ} input[data-role=mem_fraction_static]").nth(1).input_value() == "2"

            # The second view, moved to another workload, answers too.
            second = page.locator(VIZ).nth(1)
            second.locator("select[data-role=workload]").select_option("burst")
            page.wait_for_function(
                f"() => [...document.querySelectorAll('{VIZ} select[data-role=workload]')]"
                ".every(e => e.value === 'burst') && [...document.querySelectorAll("
                f"'{VIZ} [data-role=status]')].every(e => !e.textContent)", timeout=60_000)

            views.locator("[data-role=play]").click()
            start = int(views.locator("[data-role=scrub]").input_value())
            page.wait_for_function(
                f"s => Number(document.querySelector('{VIZ} [data-role=scrub]').value) > s",
                arg=start, timeout=10_000)
            ARTIFACTS.mkdir(exist_ok=True)
            views.screenshot(path=str(ARTIFACTS / "jupyterlab-live.png"))
        finally:
            browser.close()
    assert errors == []
