"""The visualizer's teaching pool in numbers, for the prose around it.

The teaching pool's size comes from one place, :func:`pagedkv_widgets.scenes.teaching_tokens`
applied to a chapter's ``mem_fraction_static`` (``CATALOG``'s chapter defaults). This module
reads it from there, runs the teaching workload the way the visualizer does, and returns what
the chapters say about it, so that no chapter types a number the visualizer computes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from pagedkv.releases import SGLANG_VERSIONS
from pagedkv_widgets.catalog import CATALOG, make_runner
from pagedkv_widgets.chapters import PAGE_SIZES, resolve_settings
from pagedkv_widgets.scenes import TEACH_DECAY_STEPS, Settings, default_simulate, teaching_tokens


@dataclass(frozen=True)
class TeachingRun:
    """One page size of the teaching pool: its pages, the longest row of the page table
    (cells = pages of the longest request's KV), and the steps at which the run retracted,
    per SGLang release (a list per name in ``pagedkv.releases.RELEASES``)."""

    page_size: int
    pool_tokens: int
    pages: int
    longest_row: int
    retractions: dict[str, list[int]]


@dataclass(frozen=True)
class TeachingPool:
    """A chapter's teaching pool: its settings, requests and one :class:`TeachingRun` per
    page size the visualizer offers."""

    settings: Settings
    tokens: int
    requests: int
    prompt_range: tuple[int, int]
    output_range: tuple[int, int]
    decay_steps: int
    runs: list[TeachingRun]


def teaching_pool(chapter: str = "paging") -> TeachingPool:
    """The teaching pool of ``chapter``'s visualizer at its opening settings, run at every
    page size of :data:`~pagedkv_widgets.chapters.PAGE_SIZES` under each SGLang release
    (the same simulation as the visualizer's pool view, which follows pagedkv's default
    release). Raises ConfigError for an unknown chapter."""
    base = resolve_settings(CATALOG, chapter)
    runner, simulate = make_runner(), default_simulate()
    runs = []
    for p in PAGE_SIZES:
        s = replace(base, page_size=p)
        plan, reqs = runner.pool_setup(s)
        kv = max(r.prompt_len + r.output_len - 1 for r in reqs)  # the last token has no KV
        steps = {v: [e.step for e in simulate(
            reqs, model=runner.teaching_model, gpu=runner.teaching_gpu, page_size=p,
            mem_fraction_static=s.mem_fraction_static, sglang_version=v,
            max_total_tokens=teaching_tokens(s.mem_fraction_static),
            arrival_rate=runner.workloads[s.workload].teaching_rate,
            new_token_ratio_decay_steps=TEACH_DECAY_STEPS,
            disable_overlap_schedule=s.disable_overlap_schedule).trace.events_of("retract")]
            for v in SGLANG_VERSIONS}
        runs.append(TeachingRun(p, plan.max_total_num_tokens, plan.max_total_num_tokens // p,
                                math.ceil(kv / p), steps))
    prompts = [r.prompt_len for r in reqs]
    outputs = [r.output_len for r in reqs]
    return TeachingPool(base, teaching_tokens(base.mem_fraction_static), len(reqs),
                        (min(prompts), max(prompts)), (min(outputs), max(outputs)),
                        TEACH_DECAY_STEPS, runs)
