"""The free list of a linear-attention hybrid's state slots: one slot per request, not per token.

Follows SGLang 0.5.23 ``python/sglang/srt/mem_cache/allocator/mamba.py``
(``MambaSlotAllocator``; 0.5.9 keeps the same free list inside ``MambaPool``, with the same
order). Slot 0 is the padding slot (padded tokens of a CUDA-graph batch write their dummy
state there) and is never handed out; slots ``1 .. size`` are. ``alloc`` takes from the FRONT
of the free list and ``free`` appends at the BACK, so a freed slot waits behind every slot
never used yet (the opposite of 0.5.23's request rows, which reuse the row freed last).

Where we simplify: SGLang keeps the list as an int64 tensor; pagedkv keeps a Python list of
ints (same values, same order) plus a bool mark per slot so that a double free or a free of
the padding slot is an :class:`~pagedkv.errors.AllocatorError` (SGLang does not check).

Every prefill pass of SGLang 0.5.23's scheduler takes one slot ahead per waiting request
(``alloc_group_begin``, for the mamba radix cache's matches) and appends the unused ones to
the back when the pass ends (``alloc_group_end``), radix cache on or off; with it off none is
used, so each pass rotates the free list (the first ``len(waiting_queue)`` slots go to its
back, when that many are free), which decides the slot each admitted request gets.
"""

from __future__ import annotations

from collections.abc import Sequence

from pagedkv.errors import AllocatorError, bad_value, check_positive_int


class MambaSlotAllocator:
    """Free state slots ``1 .. size`` (slot 0 is the padding slot).

    Args:
        size: slots handed out (SGLang's ``max_mamba_cache_size``).

    Raises:
        ConfigError: ``size`` below 1.
    """

    def __init__(self, size: int) -> None:
        self.size = check_positive_int("size", size)
        self.free_slots: list[int] = []
        self._free = [False] * (size + 1)
        self._group: list[int] = []  # slots taken ahead for the pass (alloc_group_begin)
        self.clear()

    def available_size(self) -> int:
        """Free slots."""
        return len(self.free_slots)

    def is_allocated(self, slot: int) -> bool:
        """Whether ``slot`` (in ``1 .. size``) is handed out now."""
        return 1 <= slot <= self.size and not self._free[slot]

    def alloc_group_begin(self, num_reqs: int) -> None:
        """Take ``num_reqs`` slots ahead from the front of the free list for one prefill pass
        (none when fewer are free or ``num_reqs`` is 0); :meth:`alloc` of one slot hands
        them out first. SGLang 0.5.23 ``MambaSlotAllocator.alloc_group_begin``, called by
        ``Scheduler._get_new_batch_prefill_raw`` with ``len(self.waiting_queue)``.

        Raises:
            ConfigError: ``num_reqs`` below 0.
        """
        if isinstance(num_reqs, bool) or not isinstance(num_reqs, int) or num_reqs < 0:
            raise bad_value("num_reqs", num_reqs, "an integer >= 0")
        self._group = (self.alloc(num_reqs) or []) if num_reqs else []

    @property
    def taken_ahead(self) -> int:
        """Slots :meth:`alloc_group_begin` took that :meth:`alloc` has not handed out yet
        (free for the pass, though not on the free list)."""
        return len(self._group)

    def alloc_group_end(self) -> None:
        """Append the slots :meth:`alloc_group_begin` took and :meth:`alloc` did not hand
        out to the back of the free list, in order (``alloc_group_end``)."""
        group, self._group = self._group, []
        if group:
            self.free(group)

    def alloc(self, need_size: int) -> list[int] | None:
        """Take ``need_size`` slots from the front of the free list, or None (nothing taken)
        when fewer are free; one slot inside a group (:meth:`alloc_group_begin`) comes
        from the group while it lasts.

        Raises:
            ConfigError: ``need_size`` below 0.
        """
        if isinstance(need_size, bool) or not isinstance(need_size, int) or need_size < 0:
            raise bad_value("need_size", need_size, "an integer >= 0")
        if need_size == 1 and self._group:
            return [self._group.pop(0)]
        if need_size > len(self.free_slots):
            return None
        slots = self.free_slots[:need_size]
        del self.free_slots[:need_size]
        for slot in slots:
            self._free[slot] = False
        return slots

    def free(self, free_index: Sequence[int]) -> None:
        """Append ``free_index`` to the back of the free list, in its order.

        Raises:
            AllocatorError: the padding slot, a slot outside ``1 .. size``, a free slot, or
                the same slot twice (nothing is freed then).
        """
        seen: set[int] = set()
        for slot in free_index:
            if not 1 <= slot <= self.size:
                raise AllocatorError(f"cannot free state slot {slot}: outside [1, {self.size}]")
            if self._free[slot] or slot in seen:
                raise AllocatorError(f"cannot free state slot {slot}: it is already free")
            seen.add(slot)
        for slot in free_index:
            self._free[slot] = True
        self.free_slots.extend(free_index)

    def clear(self) -> None:
        """Every slot free again, in order ``1 .. size``."""
        self.free_slots = list(range(1, self.size + 1))
        self._free = [False] + [True] * self.size

    def check_invariants(self) -> None:
        """Free slots are unique, in ``1 .. size``, and exactly the marked ones."""
        if len(set(self.free_slots)) != len(self.free_slots):
            raise AllocatorError("a state slot is on the free list twice")
        if sorted(self.free_slots) != [s for s, free in enumerate(self._free) if free]:
            raise AllocatorError("the state-slot free list and the free marks disagree")
        if self._free[0]:
            raise AllocatorError("the padding state slot 0 is marked free")
