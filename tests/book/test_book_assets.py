"""The book's Sphinx extension picks each page's plotly.js: the smallest bundle that draws the
page's figures, deferred, with the figures' own scripts waiting for it
(``book/_ext/plotly_bundle.py``); the npm bundles are plotly.js's release that the
``plotly`` Python package ships."""

from __future__ import annotations

import json
import re
import sys
from importlib import resources
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "book" / "_ext"))

from plotly_bundle import (  # noqa: E402
    FULL_BUNDLE,
    PARTIAL_BUNDLES,
    bundle_traces,
    choose_bundle,
    defer_plotly_scripts,
    page_traces,
)

BASIC, CARTESIAN = "plotly-basic.min.js", "plotly-cartesian.min.js"
BUNDLES = {BASIC: frozenset({"bar", "pie", "scatter"}),
           CARTESIAN: frozenset({"bar", "pie", "scatter", "heatmap", "box"})}
FIGURE = ('<div id="f1" class="plotly-graph-div"></div><script type="text/javascript">'
          'window.PLOTLYENV=window.PLOTLYENV || {}; if (document.getElementById("f1")) {'
          ' Plotly.newPlot("f1", [{"type":"heatmap","z":[[1]]},{"type":"scatter"}],'
          ' {"xaxis":{"type":"log"},"shapes":[{"type":"line"}],'
          ' "template":{"data":{"table":[{"type":"table"}]}}}) };</script>')
BUDGET = ('<script type="application/json" id="b-data">{"type": "table"}</script>'
          '<script>function draw() { Plotly.react(chart, [{ type: "bar", x: [1] }]); } draw();</script>')


def test_a_page_gets_the_smallest_bundle_that_draws_its_traces():
    # not the axis's "log", the shape's "line" nor the template's every trace type
    assert page_traces(FIGURE) == {"heatmap", "scatter"}
    assert page_traces(BUDGET) == {"bar"}  # JavaScript objects too; not a JSON data block
    assert choose_bundle(page_traces(FIGURE), BUNDLES) == CARTESIAN
    assert choose_bundle(page_traces(BUDGET), BUNDLES) == BASIC
    assert choose_bundle({"table"}, BUNDLES) == FULL_BUNDLE
    assert choose_bundle({"bar"}, {}) == FULL_BUNDLE  # no npm bundles installed


def test_figure_scripts_wait_for_the_deferred_plotly_js():
    page = "<p>text</p><script>var x = 1;</script>" + FIGURE + BUDGET
    out = defer_plotly_scripts(page)
    scripts = re.findall(r"<script[^>]*>(.*?)</script>", out, re.S)
    assert scripts[0] == "var x = 1;"  # no Plotly: left as it is
    assert scripts[2] == '{"type": "table"}'  # data, not code
    for code in (scripts[1], scripts[3]):
        assert code.startswith('document.addEventListener("DOMContentLoaded", function () {')
        assert code.endswith("\n});")
    assert out.replace('document.addEventListener("DOMContentLoaded", function () {', "").replace(
        "\n});", "") == page


NODE_MODULES = ROOT / "node_modules"


@pytest.mark.skipif(not NODE_MODULES.is_dir(), reason="npm ci not run")
def test_npm_bundles_are_the_plotly_js_release_of_the_python_package():
    full = (resources.files("plotly") / "package_data" / FULL_BUNDLE).read_text()[:200]
    release = re.search(r"plotly\.js v(\d+\.\d+\.\d+)", full).group(1)
    pinned = json.loads((ROOT / "package.json").read_text())["devDependencies"]
    for package, name in PARTIAL_BUNDLES.items():
        assert pinned[package] == release, package
        head = (NODE_MODULES / package / name).read_text()[:200]
        assert f"v{release}" in head, package
    basic = bundle_traces(NODE_MODULES / "plotly.js-basic-dist-min")
    cartesian = bundle_traces(NODE_MODULES / "plotly.js-cartesian-dist-min")
    assert basic == {"bar", "pie", "scatter"} and {"heatmap"} | basic <= cartesian


def test_a_markdown_table_with_row_labels_gets_row_headers():
    import pagedkv_book

    def table(corner: str) -> str:
        return ('<table class="table">\n<thead>\n<tr class="row-odd"><th class="head">'
                f'{corner}</th>\n<th class="head"><p>60% of peak</p></th>\n</tr>\n</thead>\n<tbody>\n'
                '<tr class="row-even"><td><p>retractions</p></td>\n<td><p>25</p></td>\n</tr>\n'
                '<tr class="row-odd"><td><p>ratio</p></td>\n<td><p>0.39</p></td>\n</tr>\n'
                '</tbody>\n</table>')

    out = pagedkv_book._TABLE.sub(pagedkv_book._row_headers, "<p>x</p>" + table("<p></p>"))
    assert out.count('<th scope="row">') == 2
    assert '<th scope="row"><p>retractions</p></th>\n<td><p>25</p></td>' in out
    # the corner header has a name for screen readers (axe-core: empty-table-header)
    assert '<th class="head"><span class="visually-hidden">row</span></th>' in out
    labelled = table("<p>setting</p>")  # a header over the first column: left as it is
    assert pagedkv_book._TABLE.sub(pagedkv_book._row_headers, labelled) == labelled
