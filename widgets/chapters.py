"""What the visualizer shows in each chapter: views, controls, and the values each control
offers. The same catalogue drives the live widget and the precomputed static grid.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any

from pagedkv.errors import bad_value
from pagedkv_widgets.scenes import LOOPS, PAGE_VIEWS, Settings, Workload

VIEWS = ("hbm", "timeline", "pagetable", "pool")
# A sliding-window hybrid's views: the HBM bar (full and SWA pools), the timeline, and the
# pool maps of both pools ("swapool": the full pool's map and the SWA pool's, one above the other).
SWA_VIEWS = ("hbm", "timeline", "swapool")
# A linear-attention hybrid's views: the HBM bar (the KV pool and the state pool), the
# timeline, the KV pool's map and the state slots ("slots": the state pool's parts over the run).
STATE_VIEWS = ("hbm", "timeline", "pool", "slots")
MEM_FRACTIONS = tuple(round(0.50 + 0.05 * k, 2) for k in range(10))  # 0.50 ... 0.95
# Chapters with a card-scale page table record every page of every step (no fast-forward, a
# few seconds a run), so their slider moves in steps of 0.10: half the runs to build.
PAGE_FRACTIONS = tuple(round(0.50 + 0.10 * k, 2) for k in range(5))  # 0.50 ... 0.90
PAGE_SIZES = (4, 16, 64)  # the teaching pool's (chapter 3): a row of 30-90 tokens reads at each
# Chapter 7's page size control, at card scale: SGLang's default page size (1, one token a
# page), the book's (16) and a large one (64).
CARD_PAGE_SIZES = (1, 16, 64)
# The loop control's labels (scenes.LOOPS): SGLang's default and the flag that turns it off.
LOOP_LABELS = {"overlap": "overlap (SGLang's default)",
               "normal": "normal (--disable-overlap-schedule)"}
# Chapter 9's menus. Models: the sliding-window hybrids SGLang 0.5.23 gives a SWA pool
# (``is_hybrid_swa_model``) that fit one H100 or H200 (Llama-4-Scout, the other one pagedkv
# sizes, needs four), and the linear-attention hybrids pagedkv sizes (Qwen3-Next).
SWA_MODELS = ("gpt-oss-20b", "gpt-oss-120b")
STATE_MODELS = ("qwen3-next-80b-a3b",)
HYBRID_GPUS = ("h100-sxm-80gb", "h200-141gb")
# Page sizes: gpt-oss's attention backends on these cards (triton, fa3) take any page size and
# trtllm_mha (its default on Blackwell) 16, 32, 64 or 128; Qwen3-Next's extra_buffer strategy
# (the radix cache on) needs a divisor of mamba_track_interval = 256
# (``validate_mamba_extra_buffer``). A page of one token is left out: every step's record of
# the SWA pool's owners walks every page, and one-token pages make each run many times longer.
SWA_PAGE_SIZES = (16, 64, 128)
STATE_PAGE_SIZES = (16, 64, 256)
# mem_fraction_static around the opening setting's (SGLang's default for it): one step down
# and one up; the windows view two steps down, where gpt-oss-120b's weights leave an H100 no
# pool (the view says so).
AROUND_DEFAULT = (-0.05, 0.0, 0.05)
AROUND_DEFAULT_WIDE = (-0.10, -0.05, 0.0, 0.05)


@dataclass(frozen=True)
class Catalog:
    """Selectable values: ``{preset name: label}`` for models and GPUs, named workloads.

    ``tp``: the tensor-parallel size of models served on more than one GPU (``{preset name:
    tp}``, 1 for the others).
    ``hybrid_models``: models only the chapters naming them (:attr:`Chapter.models`) offer
    (``{preset name: label}``)."""

    models: dict[str, str]
    gpus: dict[str, str]
    workloads: dict[str, Workload]
    defaults: Settings
    chapter_defaults: dict[str, Settings] = field(default_factory=dict)
    hybrid_models: dict[str, str] = field(default_factory=dict)
    tp: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Chapter:
    """A chapter's view of the visualizer: which panels and which controls it shows, the
    caption under it (what it shows, in words), whether its page views show the teaching
    pool (chapter 3) instead of the card run, and the values of its page size control.

    ``planes`` picks the settings the static book precomputes (:func:`grid_settings`): empty,
    every combination of the controls; else, for each plane (a tuple of controls), every
    combination of those controls with the others at the chapter's opening settings.
    ``workloads`` limits the workload control to those catalogue workloads (default: the
    running case's three at its full size; None: all);
    ``models`` and ``gpus`` give the model and GPU menus (None: the catalogue's ``models`` and
    ``gpus``); ``fractions``, offsets added to the opening ``mem_fraction_static`` (those off
    it rounded to hundredths), give the fraction slider (None: :data:`MEM_FRACTIONS`, or
    :data:`PAGE_FRACTIONS` for a card run with a page record).
    """

    title: str
    views: tuple[str, ...]
    controls: tuple[str, ...]
    caption: str
    teaching: bool = False
    page_sizes: tuple[int, ...] = PAGE_SIZES
    planes: tuple[tuple[str, ...], ...] = ()
    workloads: tuple[str, ...] | None = ("calm", "busy", "burst")
    models: tuple[str, ...] | None = None
    gpus: tuple[str, ...] | None = None
    fractions: tuple[float, ...] | None = None


def _first(text: str) -> str:
    """``text`` opening a sentence: its first letter upper case, the rest as written."""
    return text[0].upper() + text[1:]


_BAR = ("one GPU's memory as a bar (weights, the reserve that 1 - mem_fraction_static keeps, "
        "KV in use, cached by the radix cache, reserved by admission, free) at one step of a "
        "simulated run")
_TIMELINE = ("the run's timeline of running and waiting requests, pool use and "
             "new_token_ratio, with its admit, finish and retract events")
_TEACHING = ("the teaching pool's page table (a row per request, a cell per page holding its "
             "physical page id) and its physical pages coloured by owner")
_PAGES = ("the same run's page table (each running request's req_to_token row, a cell per "
          "page) and pool map (every physical page, coloured by owner: a request's own pages, "
          "the radix cache's pages locked by a running request, cached pages it may evict, "
          "free pages; in the overlap loop, the slots the batch in flight has allocated but "
          "not yet written are marked)")
_BAR_SWA = ("one GPU's memory as a bar (weights, the reserve that 1 - mem_fraction_static keeps, "
            "the FULL pool's KV in use, cached, reserved and free, and the SWA pool's KV held "
            "and free) at one step of a simulated run")
_SWA_PAGES = ("the same run's two pool maps, every physical page of the FULL pool (full-attention "
              "layers) and of the SWA pool (sliding-window layers) coloured by owner: a request's "
              "own pages, the radix cache's locked and evictable pages, free pages")
_BAR_STATES = ("one GPU's memory as a bar (weights, the reserve that 1 - mem_fraction_static "
               "keeps, the full-attention layers' KV pool in use, cached, reserved and free, and "
               "the state pool's slots held by running requests, their track slots, the radix "
               "cache's states and free slots) at one step of a simulated run")
_SLOTS = ("the state pool's slots over the run with the same step marked (a running request's "
          "state slot, its track slots, the states the radix cache keeps, free slots)")
_HYBRID_CONTROLS = ("model", "gpu", "workload", "mem_fraction_static", "page_size", "loop")
CHAPTERS = {
    "memory": Chapter("Where the card's memory goes", ("hbm", "timeline"),
                      ("model", "gpu", "mem_fraction_static"),
                      f"{_first(_BAR)}, and {_TIMELINE}; play or step through the run."),
    "paging": Chapter("Pages, page tables and the pool", ("pagetable", "pool"),
                      ("page_size", "mem_fraction_static"),
                      f"{_first(_TEACHING)}, at one step of a simulated run.", teaching=True),
    "admission": Chapter("Admission: in use, reserved, free", ("hbm", "timeline"),
                         ("workload", "mem_fraction_static"),
                         f"{_first(_BAR)}, and {_TIMELINE}."),
    "retraction": Chapter("Retraction when the pool runs out", VIEWS,
                          ("workload", "mem_fraction_static"),
                          f"{_first(_BAR)}, {_TIMELINE}, and {_PAGES}, all at the same step; a "
                          "retraction frees a whole row."),
    # Every combination of chapter 7's six controls is 540 card runs with a page record
    # (1-3 CPU-s each, 6 at page size 1): far over the book's build budget. The static page
    # holds four planes through the running case (31 distinct runs: the normal loop along
    # mem_fraction_static, where retraction comes and goes); the live widget runs any
    # combination.
    "full": Chapter("Play with the memory", VIEWS,
                    ("model", "gpu", "workload", "mem_fraction_static", "page_size", "loop"),
                    f"{_first(_BAR)}, {_TIMELINE}, and {_PAGES}, all at the same step of one "
                    "run, in pages of the chosen size, under the chosen scheduler loop.",
                    page_sizes=CARD_PAGE_SIZES,
                    planes=(("workload", "mem_fraction_static"), ("model", "gpu"),
                            ("workload", "page_size"), ("loop", "mem_fraction_static"))),
    # Chapter 9: a sliding-window hybrid's two pools in one run. A hybrid's decode steps are
    # not taken together (DecodeFastForward leaves sliding-window pools out), so every run is
    # simulated and recorded step by step: the calm rate's (about 211,000 steps, 110 CPU-s at
    # 120 requests) is left out, and the runs take the first HYBRID_REQUESTS of the workload's
    # requests (catalog.py). Every combination of the controls is 192 runs of 2-12 CPU-s; the
    # static page holds five planes through the opening setting (11 runs), the live widget any.
    "windows": Chapter("Two pools: full attention and sliding window", SWA_VIEWS, _HYBRID_CONTROLS,
                       f"{_first(_BAR_SWA)}, {_TIMELINE}, and {_SWA_PAGES}, all at the same "
                       "step; play the run and watch the SWA pool's pages go free as each "
                       "request's window slides while the FULL pool's keep every token.",
                       page_sizes=SWA_PAGE_SIZES, workloads=("busy-hybrid", "burst-hybrid"),
                       models=SWA_MODELS, gpus=HYBRID_GPUS, fractions=AROUND_DEFAULT_WIDE,
                       planes=(("model", "gpu"), ("workload",), ("mem_fraction_static",),
                               ("page_size",), ("loop",))),
    # Chapter 9: a linear-attention hybrid's KV pool and state slots in one run (one GPU's
    # share at the model's tensor-parallel size; the workloads of the windows chapter). Its
    # burst runs take 1-2 CPU-s, so the page holds fraction x page size whole (12 runs with
    # the other loop).
    "states": Chapter("Two pools: KV pages and state slots", STATE_VIEWS, _HYBRID_CONTROLS,
                      f"{_first(_BAR_STATES)}, {_TIMELINE}, the KV pool's map (every page of "
                      f"the full-attention layers coloured by owner), and {_SLOTS}, all at the "
                      "same step; play the run and watch each admitted request take a state "
                      "slot whatever its length, while its KV grows page by page.",
                      page_sizes=STATE_PAGE_SIZES, workloads=("busy-hybrid", "burst-hybrid"),
                      models=STATE_MODELS, gpus=HYBRID_GPUS, fractions=AROUND_DEFAULT,
                      planes=(("model", "gpu"), ("workload",),
                              ("mem_fraction_static", "page_size"), ("loop",))),
}


def chapter_config(catalog: Catalog, chapter: str, settings: Settings) -> dict[str, Any]:
    """The JSON config the renderer reads: title, views, controls, axes, initial settings.

    Axes of controls the chapter does not show hold only the current value, so the static
    grid (the product of all axes) stays small.
    """
    spec = CHAPTERS[chapter]
    labels = {**catalog.models, **catalog.hybrid_models}
    f = settings.mem_fraction_static
    every = {
        "model": [[k, labels[k]] for k in (catalog.models if spec.models is None else spec.models)],
        "gpu": [[k, catalog.gpus[k]] for k in (catalog.gpus if spec.gpus is None else spec.gpus)],
        "workload": [[k, v.label] for k, v in catalog.workloads.items()
                     if spec.workloads is None or k in spec.workloads],
        "mem_fraction_static": list(
            [round(f + d, 2) if d else f for d in spec.fractions] if spec.fractions is not None
            else PAGE_FRACTIONS if PAGE_VIEWS & set(spec.views) and not spec.teaching
            else MEM_FRACTIONS),
        "page_size": list(spec.page_sizes),
        "loop": [[k, LOOP_LABELS[k]] for k in LOOPS],
    }
    current = settings.as_dict()
    axes = {}
    for name, values in every.items():
        keys = [v[0] if isinstance(v, list) else v for v in values]
        if current[name] not in keys:
            if isinstance(values[0], list):
                raise bad_value(name, current[name], f"one of {keys}")
            values = sorted([*values, current[name]])
            keys = values
        axes[name] = values if name in spec.controls else [values[keys.index(current[name])]]
    return {"chapter": chapter, "title": spec.title, "caption": spec.caption,
            "views": list(spec.views), "teaching": spec.teaching,
            "controls": list(spec.controls), "axes": axes, "settings": current,
            "planes": [list(plane) for plane in spec.planes]}


def every_setting(config: dict[str, Any]) -> list[Settings]:
    """Every combination of the config's axes, planes or not."""
    return grid_settings({**config, "planes": []})


def grid_settings(config: dict[str, Any]) -> list[Settings]:
    """The settings the static page holds, each once, in order: every combination of the
    config's axes, or, where the config has ``planes``, the union of each plane's
    combinations (the plane's controls over their axes, the others at ``config["settings"]``).
    """
    axes = config["axes"]
    values = {k: [v[0] if isinstance(v, list) else v for v in vals] for k, vals in axes.items()}
    planes = config.get("planes") or [list(values)]
    out: dict[Settings, None] = {}
    for plane in planes:
        free = {k: values[k] if k in plane else [config["settings"][k]] for k in values}
        for m, g, w, f, p, lp in itertools.product(
                free["model"], free["gpu"], free["workload"], free["mem_fraction_static"],
                free["page_size"], free["loop"]):
            out[Settings(model=m, gpu=g, workload=w, mem_fraction_static=f, page_size=p,
                         loop=lp)] = None
    return list(out)


def resolve_settings(catalog: Catalog, chapter: str | None = None, **overrides: Any) -> Settings:
    """The chapter's defaults (``catalog.chapter_defaults``, else ``catalog.defaults``) with
    ``overrides`` applied (None means keep the default)."""
    base = catalog.chapter_defaults.get(chapter, catalog.defaults) if chapter else catalog.defaults
    return replace(base, **{k: v for k, v in overrides.items() if v is not None})
