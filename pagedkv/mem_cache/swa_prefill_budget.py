"""What one prefill pass may still admit on a sliding-window hybrid: the full pool's budget
and the SWA pool's, both net of what the pass has already promised.

Follows SGLang 0.5.23's ``python/sglang/srt/mem_cache/prefill_budget.py``
(``estimate_swa_kv_tokens``, ``PrefillBudget``, ``SWAPrefillBudget``), which its
``PrefillAdder`` asks on every offer (``allocator.create_prefill_budget``). The full side is
the plain budget over the full pool: free full slots plus the tree's evictable full slots,
less each admitted request's paged extend, one page and (total budget only) its
``max_new_tokens``. The SWA side charges a request only what its window can hold at once:
the part of its extend the window has left behind by the end of the pass, plus
``min(extend + max_new, window)``, plus a page (:func:`estimate_swa_kv_tokens`). A request too
large for the SWA pool as a whole is chunked to what it has room for; one that only has to
wait, waits.

Where we simplify: the hybrid layout gpt-oss and MiMo-V2 use (separate pools, no
per-request SWA ring, not all layers sliding-window), no host tier (``host_hit_length`` 0),
no mixed-decode offset.
"""

from __future__ import annotations

from typing import Protocol

from pagedkv.errors import check_positive_int
from pagedkv.mem_cache.allocator.swa import SWATokenToKVPoolAllocator


class SWATreeSizes(Protocol):
    """What the budget reads from the prefix cache (``SWARadixCache`` has it)."""

    sliding_window_size: int

    def full_evictable_size(self) -> int: ...
    def swa_evictable_size(self) -> int: ...


def estimate_swa_kv_tokens(extend_input_len: int, max_new_tokens: int, *,
                           sliding_window_size: int | None, page_size: int,
                           allocation_limit: int | None = None) -> int:
    """SWA slots to reserve for one request's prefill and decode: without a window
    ``extend + max_new + page``; with one, ``max(min(extend, allocation_limit) - window, 0)
    + min(extend + max_new, window) + page``. Source: ``estimate_swa_kv_tokens`` (0.5.23)."""
    if sliding_window_size is None or sliding_window_size <= 0:
        return extend_input_len + max_new_tokens + page_size
    allocated = extend_input_len if allocation_limit is None else min(extend_input_len, allocation_limit)
    return (max(allocated - sliding_window_size, 0)
            + min(extend_input_len + max_new_tokens, sliding_window_size) + page_size)


class SWAPrefillBudget:
    """The two budgets of one prefill pass.

    Args:
        allocator: the sliding-window allocator.
        tree_cache: the prefix cache (its evictable sizes and ``sliding_window_size``).

    Source: ``mem_cache/prefill_budget.py: SWAPrefillBudget`` and the ``PrefillBudget``
    methods it inherits (0.5.23).
    """

    def __init__(self, allocator: SWATokenToKVPoolAllocator, tree_cache: SWATreeSizes) -> None:
        self.allocator, self.tree_cache = allocator, tree_cache
        self.page_size = allocator.page_size
        self.total_offset = self.current_offset = self.swa_offset = 0

    def ceil_paged_tokens(self, tokens: int) -> int:
        return -(-tokens // self.page_size) * self.page_size

    def _full_room(self) -> int:
        return self.allocator.full_available_size() + self.tree_cache.full_evictable_size()

    @property
    def remaining_total(self) -> int:
        """Full slots left for everything admitted requests may still grow to."""
        return self._full_room() - self.total_offset

    @property
    def remaining_current(self) -> int:
        """Full slots left for this pass's allocations."""
        return self._full_room() - self.current_offset

    @property
    def remaining_swa(self) -> int:
        """SWA slots left: free plus evictable, less this pass's SWA charges."""
        return (self.allocator.swa_available_size() + self.tree_cache.swa_evictable_size()
                - self.swa_offset)

    def swa_tokens(self, extend_input_len: int, max_new_tokens: int, *,
                   chunk_limit: int | None = None) -> int:
        """:func:`estimate_swa_kv_tokens` with the tree's window."""
        return estimate_swa_kv_tokens(extend_input_len, max_new_tokens,
                                      sliding_window_size=self.tree_cache.sliding_window_size,
                                      page_size=self.page_size, allocation_limit=chunk_limit)

    def swa_never_fits(self, extend_input_len: int, max_new_tokens: int, *,
                       chunk_limit: int | None = None) -> bool:
        """Whether the request's SWA charge reaches the whole SWA pool."""
        return (self.swa_tokens(extend_input_len, max_new_tokens, chunk_limit=chunk_limit)
                >= self.allocator.size_swa)

    def _chunk_cap(self, max_new_tokens: int) -> int:
        """The largest page-aligned chunk the SWA room leaves after the decode headroom."""
        cap = int(self.remaining_swa) - self.swa_tokens(0, max_new_tokens)
        return max(0, cap // self.page_size * self.page_size)

    def check_prefill(self, *, extend_input_len: int, total_tokens: int, max_new_tokens: int,
                      chunk_limit: int | None) -> tuple[bool, int | None]:
        """Can a request be admitted, and how long may its chunk be?

        No if ``total_tokens`` (its full-side demand) is not below :attr:`remaining_total`;
        yes, with ``chunk_limit``, if its SWA charge (extend paged) is below
        :attr:`remaining_swa`; otherwise, only when the charge exceeds the whole SWA pool and
        chunking is on, yes with the chunk cut to :meth:`_chunk_cap` (no if that is 0).
        """
        if total_tokens >= self.remaining_total:
            return False, None
        extend = self.ceil_paged_tokens(extend_input_len)
        if self.swa_tokens(extend, max_new_tokens, chunk_limit=chunk_limit) < self.remaining_swa:
            return True, chunk_limit
        cap = 0
        if self.swa_never_fits(extend, max_new_tokens, chunk_limit=chunk_limit):
            cap = self._chunk_cap(max_new_tokens)
        if chunk_limit is None or cap <= 0:
            return False, None
        return True, min(chunk_limit, cap)

    def has_capacity(self) -> bool:
        """Room left on both sides."""
        return self.remaining_total > 0 and self.remaining_current > 0 and self.remaining_swa > 0

    def available_chunk_tokens(self, chunk_limit: int) -> int | None:
        """The chunk a carried (chunked) request may take: within ``chunk_limit``, the full
        budget and the SWA room less a page; None when that is not positive."""
        check_positive_int("chunk_limit", chunk_limit, minimum=0)
        available = min(chunk_limit, int(self.remaining_total), int(self.remaining_swa) - self.page_size)
        return available if available > 0 else None

    def can_allocate_prefill(self, *, paged_input: int, extend_input_len: int,
                             max_new_tokens: int, chunk_limit: int | None) -> bool:
        """Whether this pass can allocate the request's paged input (both full budgets) and
        its SWA charge."""
        return (paged_input <= min(self.remaining_current, self.remaining_total)
                and self.swa_tokens(extend_input_len, max_new_tokens, chunk_limit=chunk_limit)
                <= self.remaining_swa)

    def reserve(self, extend_input_len: int, max_new_tokens: int, *, extra_tokens: int = 0,
                chunk_limit: int | None = None) -> None:
        """Charge an admitted request: ``paged extend + page + extra_tokens`` to both full
        budgets, its ``max_new_tokens`` to the total one, its SWA charge to the SWA one."""
        extend = self.ceil_paged_tokens(extend_input_len)
        immediate = extend + self.page_size + extra_tokens
        self.total_offset += immediate + max_new_tokens
        self.current_offset += immediate
        self.swa_offset += self.swa_tokens(extend, max_new_tokens, chunk_limit=chunk_limit)
