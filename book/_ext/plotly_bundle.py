"""Which plotly.js a page loads, and its figures' scripts made to wait for it.

plotly.js comes in bundles: the full one that the ``plotly`` Python package ships (4.8 MB,
every trace type) and partial ones on npm (``plotly.js-basic-dist-min``: 1.2 MB, bar, pie
and scatter; ``plotly.js-cartesian-dist-min``: 1.5 MB, adds heatmap, box, histogram and
more). A page gets the smallest bundle that holds every trace type its figures draw, and
loads it with ``defer``, so no megabyte of script blocks the page from showing. A figure's
own inline script (plotly.py's ``Plotly.newPlot``, the budget explorer's ``Plotly.react``)
would then run before plotly.js is there: :func:`defer_plotly_scripts` makes each wait for
``DOMContentLoaded``, which a browser fires after the deferred scripts ran.

The partial bundles are installed by ``npm ci`` (``package.json`` pins them to the
plotly.js release the ``plotly`` Python package ships; ``tests/book/test_book_config.py``
checks). Each bundle's trace types are read from its package's README ("Contains trace
modules ...").
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

# npm package -> the minified bundle in it, smallest first.
PARTIAL_BUNDLES = {
    "plotly.js-basic-dist-min": "plotly-basic.min.js",
    "plotly.js-cartesian-dist-min": "plotly-cartesian.min.js",
}
FULL_BUNDLE = "plotly.min.js"  # the plotly Python package's, every trace type

_INLINE_SCRIPT = re.compile(r"<script(?P<attrs>[^>]*)>(?P<code>.*?)</script>", re.S)
_PLOTLY_CALL = re.compile(r"Plotly\.(?:newPlot|react)\(\s*[^,()]+,\s*")
_TYPE = re.compile(r"""["']?\btype["']?\s*:\s*["']([a-z0-9]+)["']""")
_CONTAINS = re.compile(r"Contains trace modules? (.*?)\.\s*$", re.M)


@cache
def trace_types() -> frozenset[str]:
    """Every plotly trace type name (``scatter``, ``bar``, ``heatmap``, ...)."""
    import plotly.graph_objects as go

    return frozenset(go.Figure()._data_validator.class_strs_map)


def bundle_traces(package: Path) -> frozenset[str]:
    """The trace types an npm plotly.js partial bundle holds, from its README.

    Raises ``ValueError`` if the README does not list them as the 4.x packages do.
    """
    found = _CONTAINS.search((package / "README.md").read_text(encoding="utf-8"))
    if not found:
        raise ValueError(f"{package / 'README.md'}: no 'Contains trace modules ...' line")
    return frozenset(re.findall(r"`([a-z0-9]+)`", found.group(1)))


def _plotly_scripts(body: str) -> list[re.Match[str]]:
    """The page's inline JavaScript that calls plotly.js."""
    def javascript(attrs: str) -> bool:
        return "src=" not in attrs and ("type=" not in attrs or "text/javascript" in attrs)

    return [m for m in _INLINE_SCRIPT.finditer(body)
            if javascript(m["attrs"]) and "Plotly." in m["code"]]


def _script_traces(code: str) -> set[str]:
    """The trace types one script draws. Where it hands plotly.js a JSON array of traces
    (plotly.py's ``Plotly.newPlot("id", [...], ...)``) those traces' types (``scatter``
    where none is given); the layout's template is not read, as it names every trace type
    plotly knows. Otherwise every ``type: "<trace type>"`` in the code (the budget
    explorer's JavaScript; axis and shape types are not trace names)."""
    found: set[str] = set()
    for call in _PLOTLY_CALL.finditer(code):
        try:
            traces, _ = json.JSONDecoder().raw_decode(code, call.end())
        except ValueError:
            return set(_TYPE.findall(code)) & trace_types()
        found |= {t.get("type", "scatter") for t in traces if isinstance(t, dict)}
    return found


def page_traces(body: str) -> set[str]:
    """The trace types the page's figures draw (:func:`_script_traces` of each inline
    script that calls plotly.js)."""
    return {t for m in _plotly_scripts(body) for t in _script_traces(m["code"])}


def choose_bundle(traces: set[str], bundles: dict[str, frozenset[str]]) -> str:
    """The first of ``bundles`` (file -> trace types, smallest first) that holds every trace
    in ``traces``; the full bundle if none does."""
    return next((name for name, holds in bundles.items() if traces <= holds), FULL_BUNDLE)


def defer_plotly_scripts(body: str) -> str:
    """``body`` with each inline script that calls plotly.js run on ``DOMContentLoaded``
    (after the deferred plotly.js) instead of where the parser meets it."""
    out, at = [], 0
    for m in _plotly_scripts(body):
        out += [body[at:m.start("code")],
                'document.addEventListener("DOMContentLoaded", function () {',
                m["code"], "\n});"]
        at = m.end("code")
    return "".join(out) + body[at:]
