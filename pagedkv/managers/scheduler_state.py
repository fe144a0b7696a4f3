"""The scheduler's state as its mixins see it.

:class:`~pagedkv.managers.scheduler.Scheduler` is split, as SGLang's is, into mixins by job
(prefill, decode, metrics, runtime checks). Each mixin reads the state ``Scheduler.__init__``
sets; declaring it once here, loosely typed, keeps the mixin modules free of imports of
``scheduler.py`` (no import circle) and of one another.
"""

from __future__ import annotations

from typing import Any

from pagedkv.managers.scheduler_components import NewTokenRatioTracker


class SchedulerState:
    """Attributes every scheduler mixin may read (set by ``Scheduler.__init__``)."""

    config: Any  # SchedulerConfig
    tree_cache: Any  # RadixCache or ChunkCache
    allocator: Any  # TokenToKVPoolAllocator or PagedTokenToKVPoolAllocator
    req_to_token_pool: Any  # ReqToTokenPool
    running: Any  # ScheduleBatch of the running requests
    waiting: Any  # list[Req], the waiting queue
    trace: Any  # Trace or SummaryTrace
    ratio_tracker: NewTokenRatioTracker

    @property
    def new_token_ratio(self) -> float:
        """SGLang's ``new_token_ratio``: the tracker's current value."""
        return self.ratio_tracker.current

    @new_token_ratio.setter
    def new_token_ratio(self, value: float) -> None:
        self.ratio_tracker.current = value
