"""Numbers the chapters quote about the runs their visualizer plays, read from those runs.

A chapter's text around the visualizer ("Watch it", chapter 7's "Things to try") is written
at build time from :func:`chapter_run`, which reads the very run the visualizer shows (the
shared runner keeps each run it simulated), so the prose and the picture cannot disagree.
:func:`run_facts` gathers what the texts quote; :func:`retraction_facts` follows one
retraction page by page; :func:`loop_facts` counts what the overlap loop leaves half done.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pagedkv.errors import bad_value
from pagedkv.gpus import get_gpu
from pagedkv.sizing import default_mem_fraction_static
from pagedkv_widgets.catalog import CATALOG, make_runner
from pagedkv_widgets.chapters import CHAPTERS, chapter_config, resolve_settings
from pagedkv_widgets.encoding import decode_run
from pagedkv_widgets.in_flight_encoding import ahead_at
from pagedkv_widgets.page_decoding import owners_at, rows_at
from pagedkv_widgets.scenes import parts


def chapter_run(chapter: str, **overrides: Any) -> dict[str, Any]:
    """The decoded run (:func:`pagedkv_widgets.encoding.decode_run`) that
    ``visualizer(chapter, **overrides)`` opens on.

    Raises ``pagedkv.errors.ConfigError`` for an unknown chapter or setting, ``ValueError``
    if that setting cannot run (its reason in words).
    """
    if chapter not in CHAPTERS:
        raise bad_value("chapter", chapter, f"one of {sorted(CHAPTERS)}")
    settings = resolve_settings(CATALOG, chapter, **overrides)
    config = chapter_config(CATALOG, chapter, settings)
    (part, pages), = parts(config).items()
    run = make_runner().run(part, settings, pages)
    if "error" in run:
        raise ValueError(f"visualizer({chapter!r}, {overrides}) cannot run: {run['error']}")
    return decode_run(run)


def sglang_default_fraction(gpu: str, sglang_version: str) -> float:
    """SGLang's default ``mem_fraction_static`` for one ``gpu`` (a preset name) at tp 1."""
    return default_mem_fraction_static(get_gpu(gpu).memory_mib, sglang_version=sglang_version)


@dataclass(frozen=True)
class RunFacts:
    """What a chapter quotes about one run. Steps are scheduler steps (0-based); token
    counts are KV tokens; ``peak_usage`` is SGLang's token usage (requests' tokens and
    locked cached tokens over the pool, evictable ones left out) at its highest."""

    pool_tokens: int
    num_pages: int
    page_size: int
    cell_size: int
    sglang_version: str
    steps: int
    max_running: int
    max_waiting: int
    first_wait: int | None
    last_wait: int | None
    retract_steps: list[int]
    retract_ratio: tuple[float, float] | None
    ratio_start: float
    ratio_floor: float
    floor_step: int
    peak_usage: float
    decode_step_s: float  # mean seconds of a decode step (the run's modelled step times)
    request_s: float  # mean seconds from a request's first admission to its finish

    @property
    def retractions(self) -> int:
        return len(self.retract_steps)


def run_facts(run: dict[str, Any]) -> RunFacts:
    """:class:`RunFacts` of a decoded run."""
    meta, pool = run["meta"], run["meta"]["max_total_num_tokens"]
    waiting = np.asarray(run["num_waiting"])
    waits = np.flatnonzero(waiting)
    ratio = np.asarray(run["new_token_ratio"])
    retracts = [s for s, _ in run["events"].get("retract", [])]
    held = pool - np.asarray(run["tokens_free"]) - np.asarray(run["tokens_evictable"])
    t = np.asarray(run["time_s"], dtype=float)  # each step's end
    step_s = np.diff(t, prepend=0.0)
    admitted = {rid: s for s, rid in reversed(run["events"].get("admit", []))}  # the first
    finished = [(s, rid) for s, rid in run["events"].get("finish", []) if rid in admitted]
    return RunFacts(
        pool_tokens=pool, num_pages=meta["num_pages"], page_size=meta["page_size"],
        cell_size=meta["cell_size"], sglang_version=meta["sglang_version"],
        steps=len(run["step"]), max_running=int(max(run["num_running"])),
        max_waiting=int(waiting.max()),
        first_wait=int(waits[0]) if waits.size else None,
        last_wait=int(waits[-1]) if waits.size else None,
        retract_steps=retracts,
        retract_ratio=(float(ratio[retracts].min()), float(ratio[retracts].max())) if retracts else None,
        ratio_start=float(ratio[0]), ratio_floor=float(ratio.min()),
        floor_step=int(np.argmax(ratio <= ratio.min())),
        peak_usage=float(held.max() / pool),
        decode_step_s=float(step_s[np.asarray(run["kind"]) == "decode"].mean()),
        request_s=float(np.mean([t[s] - t[admitted[rid]] for s, rid in finished])),
    )


@dataclass(frozen=True)
class RetractionFacts:
    """One retraction, page by page: at ``step`` request ``rid`` leaves; the step before,
    its row held ``tokens`` tokens in ``own`` pages of its own and ``shared`` pages of the
    radix cache (its prompt, locked); after it, it owns none, ``kept`` of those cached pages
    are still in the cache (evictable) and ``freed`` of its pages are free or another
    request's. ``back`` is the step it is prefilled again (None: never)."""

    step: int
    rid: int
    tokens: int
    own: int
    shared: int
    kept: int
    freed: int
    back: int | None


def retraction_facts(run: dict[str, Any], which: int = 0) -> RetractionFacts:
    """:class:`RetractionFacts` of the ``which``-th retraction of a decoded run with pages.

    Raises ``ValueError`` if the run has no page record or fewer retractions.
    """
    retracts = run["events"].get("retract", [])
    if run["pages"] is None or which >= len(retracts):
        raise ValueError(f"no retraction {which} with a page record in this run "
                         f"({len(retracts)} retractions)")
    step, rid = retracts[which]
    pages = run["pages"]
    tokens, row = rows_at(pages, step - 1)[rid]
    before, after = owners_at(pages, step - 1), owners_at(pages, step)
    own = [p for p in row if before[p] == rid]
    shared = [p for p in row if before[p] < -1]
    back = next((s for s, r in run["events"].get("reprefill", []) if r == rid and s > step), None)
    return RetractionFacts(step=step, rid=rid, tokens=tokens, own=len(own), shared=len(shared),
                           kept=sum(int(after[p]) < -1 for p in shared),
                           freed=sum(int(after[p]) != rid for p in own), back=back)


@dataclass(frozen=True)
class WorkloadFacts:
    """A card-scale workload: ``count`` requests, median prompt and output in tokens,
    arrivals at ``rate`` requests/s (None: all at once)."""

    count: int
    prompt_median: int
    output_median: int
    rate: float | None


def workload_facts(workload: str) -> WorkloadFacts:
    """:class:`WorkloadFacts` of a workload of the catalogue (``"busy"``, ...)."""
    load = CATALOG.workloads[workload]
    requests = load.card_requests()
    # rounded as the book prints a median (f"{m:.0f}", half to even): 2,137.5 is 2,138 on
    # every page, not 2,137 here and 2,138 in chapter 5
    return WorkloadFacts(len(requests), round(float(np.median([r.prompt_len for r in requests]))),
                         round(float(np.median([r.output_len for r in requests]))), load.rate)


@dataclass(frozen=True)
class FinishFacts:
    """Request ``rid`` finishes at ``step``: of the ``pages`` its row held the step before,
    ``cached`` stay in the radix cache, unlocked (evictable), the rest are free again.
    The radix cache next evicts at ``evict_step``, freeing ``evicted`` pages (None: never)."""

    step: int
    rid: int
    pages: int
    cached: int
    evict_step: int | None
    evicted: int


def finish_facts(run: dict[str, Any], which: int = 0) -> FinishFacts:
    """:class:`FinishFacts` of the ``which``-th finish of a decoded run with pages.

    Raises ``ValueError`` if the run has no page record or fewer finishes.
    """
    finishes = run["events"].get("finish", [])
    if run["pages"] is None or which >= len(finishes):
        raise ValueError(f"no finish {which} with a page record in this run ({len(finishes)} finishes)")
    step, rid = finishes[which]
    pages = run["pages"]
    _, row = rows_at(pages, step - 1)[rid]
    after = owners_at(pages, step)
    tree = np.asarray(run["tokens_evictable"]) + np.asarray(run["tokens_protected"])
    shrinks = np.flatnonzero(np.diff(tree) < 0) + 1
    later = shrinks[shrinks > step]
    evict_step = int(later[0]) if later.size else None
    evicted = 0
    if evict_step is not None:
        was, now = owners_at(pages, evict_step - 1), owners_at(pages, evict_step)
        evicted = int(((was == -2) & (now != -2) & (now != -3)).sum())
    return FinishFacts(step=step, rid=rid, pages=len(row), cached=sum(int(after[p]) == -2 for p in row),
                       evict_step=evict_step, evicted=evicted)


# The book chapter each visualizer view sits in (``visualizer(chapter=...)`` in that chapter's
# notebook; tests/book/test_book_words.py checks the notebooks against it).
BOOK_CHAPTER = {"memory": 1, "paging": 3, "admission": 4, "retraction": 5, "full": 7, "windows": 9,
                "states": 9}


def running_case_chapters() -> tuple[int, ...]:
    """The book's chapters whose visualizer opens on the running case
    (:data:`pagedkv.workloads.cases.LONG_ANSWERS`: its model, card and fraction), in order.
    Chapter 1's opens on another model and card at the case's fraction; its menus lead to
    the case. The one list every chapter quotes."""
    from pagedkv.workloads.cases import LONG_ANSWERS

    case = (LONG_ANSWERS.model, LONG_ANSWERS.gpu, LONG_ANSWERS.mem_fraction_static)
    opens = [BOOK_CHAPTER[name] for name, spec in CHAPTERS.items() if not spec.teaching
             and _case_of(resolve_settings(CATALOG, name)) == case]
    return tuple(sorted(opens))


def _case_of(settings: Any) -> tuple[str, str, float]:
    return settings.model, settings.gpu, settings.mem_fraction_static


def chapter_list(numbers: tuple[int, ...]) -> str:
    """``(4, 5, 7)`` -> ``"chapters 4, 5 and 7"`` (``"chapter 4"`` for one).

    Raises:
        pagedkv.errors.ConfigError: ``numbers`` is empty.
    """
    if not numbers:
        raise bad_value("numbers", numbers, "at least one chapter")
    if len(numbers) == 1:
        return f"chapter {numbers[0]}"
    return f"chapters {', '.join(map(str, numbers[:-1]))} and {numbers[-1]}"


@dataclass(frozen=True)
class LoopFacts:
    """What the scheduler loop leaves half done in a decoded run with pages, after ``step``
    (the step the visualizer opens on): ``ahead_slots`` slots of ``ahead_requests`` requests
    allocated ahead (the batch in flight has not written them); over the whole run,
    ``late`` of its ``finishes`` finishes were seen a step after the GPU sampled the last
    token (all of them in the overlap loop, none in the normal loop). ``first_retraction``:
    the step of the run's first retraction (None without one), which decides where the
    visualizer opens (:func:`pagedkv_widgets.encoding.opening_step`)."""

    loop: str
    step: int
    ahead_slots: int
    ahead_requests: int
    late: int
    finishes: int
    first_retraction: int | None

    @property
    def opens_where(self) -> str:
        """Where the visualizer opens this run, in words: two runs open at their own steps."""
        if self.first_retraction is None:
            return "where its KV in use plus reserved peaks"
        return f"{self.first_retraction - self.step} steps before its first retraction"


def loop_facts(run: dict[str, Any]) -> LoopFacts:
    """:class:`LoopFacts` of a decoded run with pages. Raises ``ValueError`` without a page
    record."""
    pages = run["pages"]
    if pages is None:
        raise ValueError("loop_facts needs a run with its page record")
    step = run["open"]
    ahead = ahead_at(pages, step)
    retracts = run["events"].get("retract", [])
    return LoopFacts(loop=pages["loop"], step=step, ahead_slots=sum(ahead.values()),
                     ahead_requests=len(ahead), late=len(pages["unseen"]),
                     finishes=len(run["events"].get("finish", [])),
                     first_retraction=min((s for s, _ in retracts), default=None))
