"""A linear-attention hybrid's state slots after every step: the visualizer's slot series.

A state slot is not a page: every request holds one whatever its length, so the visualizer
needs no slot ids, only how many slots are held for what. :class:`StateSlotLog` keeps, after
each step whose counts changed, the slots of SGLang 0.5.23's state pool
(``HybridReqToTokenPool.mamba_allocator``, size ``max_mamba_cache_size``) in four parts that
sum to the pool:

- **live**: the state slot each request holding a row has (``mamba_pool_idx``), taken at
  admission and given back at finish or retraction;
- **track**: the ``extra_buffer`` strategy's ping-pong track slots of those requests
  (``mamba_ping_pong_track_buffer``: 2 each with the overlap loop, 1 without; none with the
  radix cache off), into which checkpoints are copied (:mod:`pagedkv.mem_cache.mamba_track`);
- **tree**: the states the mamba radix cache keeps at its nodes (``mamba_evictable_size``
  plus ``mamba_protected_size`` of ``MambaRadixCache``), tombstoned by their own LRU list;
- **free**: the allocator's free list (``available_size``).

Where we simplify: the four parts are read from the scheduler's state after a step, not from
SGLang's tensors; slots taken ahead for a prefill pass (``alloc_group_begin``) are back on the
free list by then (``alloc_group_end``), so the parts sum to the pool, which
:meth:`StateSlotLog.observe` checks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pagedkv.errors import bad_value
from pagedkv.mem_cache.mamba_pool import HybridReqToTokenPool

PARTS = ("live", "track", "tree", "free")


def state_slot_counts(pool: HybridReqToTokenPool, tree_cache: Any,
                      holders: Iterable[Any]) -> tuple[int, int, int, int]:
    """``(live, track, tree, free)`` state slots now (see the module docstring).

    Args:
        pool: the scheduler's request table with its state slots.
        tree_cache: its prefix cache (``MambaPrefixCache`` keeps states; any other none).
        holders: requests that may hold slots (the running batch's, the chunked request, the
            overlap loop's joining ones); each request is counted once.
    """
    live = track = 0
    seen: set[int] = set()
    for req in holders:
        if id(req) in seen or req.mamba_pool_idx < 0:
            continue
        seen.add(id(req))
        live += 1
        track += sum(1 for s in (req.mamba_ping_pong_track_buffer or []) if s >= 0)
    tree = (tree_cache.mamba_evictable_size() + tree_cache.mamba_protected_size()
            if hasattr(tree_cache, "mamba_evictable_size") else 0)
    return live, track, tree, pool.mamba_allocator.available_size()


class StateSlotLog:
    """The state slots' parts after every step whose counts changed, as int columns.

    Args:
        num_slots: the state pool's slots (``max_mamba_cache_size``; the padding slot not
            counted).

    Attributes:
        step, live, track, tree, free: ``list[int]`` of equal length, one entry per step
            whose counts differ from the step before (the first step always recorded).
    """

    def __init__(self, num_slots: int) -> None:
        self.num_slots = num_slots
        self.columns: dict[str, list[int]] = {k: [] for k in ("step", *PARTS)}
        self._last: tuple[int, int, int, int] | None = None

    def observe(self, step: int, counts: tuple[int, int, int, int]) -> None:
        """Record ``counts`` (``(live, track, tree, free)``) after ``step`` if they changed.

        Raises:
            ConfigError: the parts do not sum to the pool (a slot held by none of them).
        """
        if sum(counts) != self.num_slots:
            raise bad_value("counts", counts, f"parts summing to the pool's {self.num_slots} slots")
        if counts == self._last:
            return
        self._last = counts
        for k, v in zip(("step", *PARTS), (step, *counts), strict=True):
            self.columns[k].append(v)

    def to_dict(self) -> dict[str, Any]:
        """``{"slots": num_slots, "step", "live", "track", "tree", "free"}`` (lists of ints)."""
        return {"slots": self.num_slots, **{k: list(v) for k, v in self.columns.items()}}
