"""The visualizer's settings in words, for a chapter's text: which values its menus offer
(:func:`menus_text`) and which combinations its static page holds (:func:`grid_text`)."""

from __future__ import annotations

import math

from pagedkv.errors import bad_value
from pagedkv_widgets.catalog import CATALOG
from pagedkv_widgets.chapters import CHAPTERS, Catalog, chapter_config, grid_settings, resolve_settings
from pagedkv_widgets.limits import fraction_text

_CONTROL_WORDS = {"model": "model", "gpu": "GPU", "workload": "workload",
                  "mem_fraction_static": "`mem_fraction_static`", "page_size": "page size",
                  "loop": "scheduler loop"}


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def grid_text(chapter: str, catalog: Catalog | None = None) -> str:
    """One paragraph, for the chapter's text, on which settings its static visualizer holds
    (:func:`grid_settings`): every combination, or its planes and how many runs that is.

    Raises ``ConfigError`` for an unknown chapter.
    """
    if chapter not in CHAPTERS:
        raise bad_value("chapter", chapter, f"one of {sorted(CHAPTERS)}")
    catalog = catalog or CATALOG
    config = chapter_config(catalog, chapter, resolve_settings(catalog, chapter))
    held = len(grid_settings(config))
    if not config["planes"]:
        return f"The book's page holds every combination of the controls ({held} runs)."
    every = math.prod(len(v) for k, v in config["axes"].items() if k in config["controls"])
    # a plane of one control holds its every value; of several, every combination of them
    planes = [f"every {_CONTROL_WORDS[plane[0]]}" if len(plane) == 1 else
              f"every combination of {_and([_CONTROL_WORDS[k] for k in plane])}"
              for plane in config["planes"]]
    listed = "; ".join(planes[:-1]) + ("; and " if len(planes) > 1 else "") + planes[-1]
    return (f"The book's page holds {listed}, with the other "
            f"controls at the defaults: {held} runs. All {every} combinations of the controls "
            "would take the book's build far over its time budget, so a move off those takes the "
            "other controls to the nearest combination the page holds, and says so; in Jupyter "
            "or Colab the visualizer runs any combination.")


def menus_text(chapter: str, catalog: Catalog | None = None) -> str:
    """One sentence, for the chapter's text, on the values its controls offer, in the order
    of the controls (models and GPUs by their labels, fractions as SGLang prints them).

    Raises ``ConfigError`` for an unknown chapter.
    """
    if chapter not in CHAPTERS:
        raise bad_value("chapter", chapter, f"one of {sorted(CHAPTERS)}")
    catalog = catalog or CATALOG
    config = chapter_config(catalog, chapter, resolve_settings(catalog, chapter))
    axes = config["axes"]

    def listed(name: str, plural: str, values: list[str]) -> str:
        return f"{name if len(values) == 1 else plural} {_and(values)}"

    said = {
        "model": lambda: listed("the model", "the models", [v for _, v in axes["model"]]),
        "gpu": lambda: listed("the GPU", "the GPUs", [v for _, v in axes["gpu"]]),
        "workload": lambda: listed("the workload", "the workloads",
                                   [v.replace(": ", " (", 1) + ")" if ": " in v else v
                                    for _, v in axes["workload"]]),
        "mem_fraction_static": lambda: "`mem_fraction_static` " + _and(
            [fraction_text(f) for f in axes["mem_fraction_static"]]),
        "page_size": lambda: "pages of " + _and([str(p) for p in axes["page_size"]]) + " tokens",
        "loop": lambda: listed("the loop", "the loops", [v for _, v in axes["loop"]]),
    }
    return "The menus offer " + "; ".join(said[c]() for c in config["controls"]) + "."
