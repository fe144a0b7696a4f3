"""Numbers chapter 9 quotes about the sliding-window hybrid its visualizer plays, read from
that run's page record (:func:`pagedkv_widgets.facts.chapter_run`), so the caption and the
picture cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pagedkv.errors import bad_value

FREE, SHARED = -1, -3  # pagedkv.managers.page_owners' owners


@dataclass(frozen=True)
class WindowFacts:
    """A sliding-window hybrid's run, pool by pool. Pages are pages of ``page_size`` tokens;
    "held" means held for running requests: a request's own page, or a cached page a running
    request locks (the radix cache's evictable pages are not counted)."""

    full_tokens: int
    full_pages: int
    swa_tokens: int
    swa_pages: int
    window: int
    page_size: int
    steps: int
    peak_step: int  # the step running requests hold most FULL pages
    full_peak: int  # FULL pages held then
    swa_at_peak: int  # SWA pages held at that step
    swa_peak: int  # SWA pages held at most, over the run
    swa_peak_step: int  # the first step they are held
    running_at_peak: int  # requests running at that step
    window_frees: int  # SWA pages freed while the request that held them still runs

    @property
    def full_over_swa(self) -> float:
        """FULL pages held per SWA page held at the FULL pool's peak."""
        return self.full_peak / max(1, self.swa_at_peak)

    def tokens_per_running(self, pages: int) -> int:
        """``pages`` held at the FULL pool's peak, in tokens per running request (rounded)."""
        return round(pages * self.page_size / max(1, self.running_at_peak))


def _held(owners: np.ndarray) -> np.ndarray:
    """1 where a page is held for a running request (its own, or locked in the tree)."""
    return ((owners >= 0) | (owners == SHARED)).astype(np.int64)


def held_per_step(changes: dict[str, list[int]], steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Pages held for running requests (owner a request id or :data:`SHARED`) after each
    step (int64 ``[steps]``) from a pool's owner changes (``step``-ordered), and for each
    change the owner it replaced (int64)."""
    step = np.asarray(changes["step"], dtype=np.int64)
    page = np.asarray(changes["page"], dtype=np.int64)
    owner = np.asarray(changes["owner"], dtype=np.int64)
    size = int(page.max()) + 1 if len(page) else 1
    current = np.full(size, FREE, dtype=np.int64)
    before = np.empty(len(page), dtype=np.int64)
    for i, (p, o) in enumerate(zip(page.tolist(), owner.tolist(), strict=True)):
        before[i] = current[p]
        current[p] = o
    delta = _held(owner) - _held(before)
    per_step = np.bincount(step, weights=delta, minlength=steps)[:steps]
    return np.cumsum(per_step).astype(np.int64), before


def window_facts(run: dict[str, Any]) -> WindowFacts:
    """:class:`WindowFacts` of a decoded run (:func:`pagedkv_widgets.encoding.decode_run`)
    with a page record of both pools.

    Raises:
        ConfigError: the run has no SWA pool's page record (one pool, or no page record).
    """
    pages, meta = run["pages"], run["meta"]
    if pages is None or "swa" not in pages:
        raise bad_value("run", meta.get("model"), "a sliding-window hybrid's run with its page record")
    n = len(run["step"])
    full, _ = held_per_step(pages["changes"], n)
    swa, before = held_per_step(pages["swa"], n)
    peak = int(np.argmax(full))
    running: dict[int, list[tuple[int, int]]] = {}
    for life in pages["lifetimes"]:
        running.setdefault(life.rid, []).append((life.start, n if life.end is None else life.end))
    sw = pages["swa"]
    frees = sum(1 for s, o, b in zip(sw["step"], sw["owner"], before.tolist(), strict=True)
                if o == FREE and b >= 0 and any(a <= s < e for a, e in running.get(b, [])))
    return WindowFacts(
        full_tokens=meta["max_total_num_tokens"], full_pages=meta["num_pages"],
        swa_tokens=meta["swa_max_total_num_tokens"], swa_pages=meta["swa_num_pages"],
        window=meta["sliding_window"], page_size=meta["page_size"], steps=n, peak_step=peak,
        full_peak=int(full[peak]), swa_at_peak=int(swa[peak]), swa_peak=int(swa.max()),
        swa_peak_step=int(np.argmax(swa)),
        running_at_peak=int(run["num_running"][peak]), window_frees=frees)
