"""A trace that keeps totals, not rows: what a million-request run can afford.

:class:`~pagedkv.managers.trace.Trace` keeps one row per step, one entry per event and every
log line, which is what the book's figures need and grows with the run (a million
ShareGPT-like requests take about a million steps and two million events). A
:class:`SummaryTrace` takes the same calls from the scheduler and keeps only the
:class:`StepTotals` that :class:`~pagedkv.metrics.metrics.Metrics` reads, so its memory does
not grow with the run. Events and log lines can be handed on as they happen (``on_event``,
``on_log``) to whoever streams them out, instead of being kept.

The scheduler's behaviour is the same under either trace: it writes to the trace and never
reads it back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from pagedkv.managers.trace import RETRACT_LINE, Event, StepRow, StepTotals, TraceMeta


class FinishedColumns(NamedTuple):
    """Requests that finished (or were aborted), as columns in finish order: the fields of
    their :class:`~pagedkv.managers.req.Req` that a per-request table reads, one entry per
    request. ``rid``, ``prompt_len``, ``generated``, ``cached_tokens``, ``num_retractions``,
    ``recomputed_tokens``: int64 arrays; ``arrival_s``, ``queue_s``, ``first_token_s``,
    ``finish_s``: float64 arrays (seconds); ``finish_reason``: a list of str."""

    rid: np.ndarray
    prompt_len: np.ndarray
    generated: np.ndarray
    cached_tokens: np.ndarray
    num_retractions: np.ndarray
    recomputed_tokens: np.ndarray
    arrival_s: np.ndarray
    queue_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    finish_reason: list[str]


class SummaryTrace:
    """Counts steps, events and log lines; keeps no rows.

    Args:
        meta: the run's setting (as :class:`~pagedkv.managers.trace.Trace` takes it).
        on_event: called with every :class:`~pagedkv.managers.trace.Event` as it
            happens (e.g. to write a finished request's metrics out at once).
        on_log: called with each SGLang-format log line as it is printed.
        event_kinds: the event kinds ``on_event`` takes (e.g. ``{"finish", "abort"}``);
            None: all of them.
        on_finished: a faster route for ``finish`` and ``abort`` events that the compiled
            core (:mod:`pagedkv.managers.compiled_core.runner`) takes when it is given: the
            requests finished since its last return, as :class:`FinishedColumns`, instead of
            one ``Event`` each to ``on_event`` (their ``Req`` objects are up to date first).
            The Python scheduler always calls ``on_event``; both must keep the same record.

    Attributes:
        records_steps: False: the scheduler may skip work done only for step rows (the
            ``tokens_reserved`` column).
        keeps_log: whether prefill and decode log lines are wanted (``on_log`` given).
        page_tables, page_events: always None (page tables and page events are kept only by
            ``Trace``).
    """

    records_steps = False
    page_tables = None
    page_events = None

    def __init__(self, meta: TraceMeta,
                 on_event: Callable[[Event], None] | None = None,
                 on_log: Callable[[str], None] | None = None,
                 event_kinds: frozenset[str] | None = None,
                 on_finished: Callable[[FinishedColumns], None] | None = None) -> None:
        self.meta = meta
        self.on_event = on_event
        self.on_finished = on_finished
        self.event_kinds = event_kinds
        self.on_log = on_log
        self._kinds = {"prefill": 0, "decode": 0, "idle": 0}
        self._chunks = self._retractions = 0
        self._peak_used = self._peak_in_use = self._busy_in_use = 0

    def __len__(self) -> int:
        return sum(self._kinds.values())

    @property
    def keeps_log(self) -> bool:
        """Whether log lines other than retraction lines (which are counted) are wanted:
        only when someone takes them (``on_log``); the scheduler skips building them otherwise."""
        return self.on_log is not None

    def record_step(self, row: StepRow) -> None:
        """Count one step."""
        kind, used = row.kind, row.tokens_used
        in_use = self.meta.max_total_num_tokens - row.tokens_free - row.tokens_evictable
        self._kinds[kind] += 1
        self._peak_used = max(self._peak_used, used)
        self._peak_in_use = max(self._peak_in_use, in_use)
        if kind != "idle":
            self._busy_in_use += in_use

    def record_event(self, event: Event) -> None:
        """Count a ``chunk`` event; hand every event (of ``event_kinds``) to ``on_event``."""
        if event.kind == "chunk":
            self._chunks += 1
        if self.on_event is not None and (self.event_kinds is None or event.kind in self.event_kinds):
            self.on_event(event)

    def add_log(self, step: int, line: str) -> None:
        """Count retraction lines; hand every line to ``on_log``."""
        if line.startswith(RETRACT_LINE):
            self._retractions += 1
        if self.on_log is not None:
            self.on_log(line)

    def record_totals(self, prefill: int, decode: int, idle: int, chunks: int, retractions: int,
                      peak_used: int, peak_in_use: int, busy_in_use: int) -> None:
        """Add totals counted elsewhere (the compiled step core counts its steps, chunk events
        and retraction lines itself and hands them over once): step counts by kind, chunk
        events, retraction lines, the peaks of ``tokens_used`` and of the pool's use, and the
        pool's use summed over busy steps (tokens)."""
        for kind, count in (("prefill", prefill), ("decode", decode), ("idle", idle)):
            self._kinds[kind] += count
        self._chunks += chunks
        self._retractions += retractions
        self._peak_used = max(self._peak_used, peak_used)
        self._peak_in_use = max(self._peak_in_use, peak_in_use)
        self._busy_in_use += busy_in_use

    def totals(self) -> StepTotals:
        """The counts so far."""
        k = self._kinds
        return StepTotals(len(self), k["prefill"], k["decode"], k["idle"], self._chunks,
                          self._retractions, self._peak_used, self._peak_in_use,
                          self._busy_in_use)
